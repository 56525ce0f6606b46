"""`codeobject FILE`: load a gfx950 code object for the simulator and report what it holds.

    zyfa-asmgen codeobject fwd_hd128_bf16.co                 kernels, descriptor, kernarg layout,
                                                             instructions the simulator lacks
    zyfa-asmgen codeobject FILE --disassemble [-o out.s]     the decoded listing (LLVM syntax)
    zyfa-asmgen codeobject FILE --roundtrip                  decode -> clang -> same bytes, or exit 1

Running a loaded kernel needs its buffers and kernel arguments: that is the Python API
(`zyfa_asmgen.sim.codeobject.load_code_object`, then `Simulator(co.program, name).launch(...)`),
described in docs/simulator.md.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ..sim.asm import KernelInfo
from ..sim.codeobject import CodeObject, load_code_object
from ..sim.machine import Simulator

_DESCRIPTOR_KEYS = (
    "next_free_vgpr", "accum_offset", "next_free_sgpr", "group_segment_fixed_size",
    "private_segment_fixed_size", "kernarg_size", "user_sgpr_count", "user_sgpr_kernarg_segment_ptr",
    "system_sgpr_workgroup_id_x", "system_sgpr_workgroup_id_y", "system_sgpr_workgroup_id_z",
    "system_vgpr_workitem_id",
)  # fmt: skip


def missing_instructions(co: CodeObject, kernel: str | None = None) -> Counter[str]:
    """Mnemonic -> count of the instructions the simulator has no semantics for."""
    sim = Simulator(co.program, kernel if kernel is not None else next(iter(co.kernels)), check=False)
    return Counter(op.inst.op for op in sim.ops if op.kind == "unsupported")


def _kernel_lines(name: str, k: KernelInfo) -> list[str]:
    d, m = k.descriptor, k.metadata
    wg, wave = m.get(".max_flat_workgroup_size", "?"), m.get(".wavefront_size", 64)
    lines = [f"kernel {name}: entry instruction {k.entry}, workgroup size up to {wg}, wavefront {wave}"]
    lines += [f"  descriptor {key} = {d[key]}" for key in _DESCRIPTOR_KEYS if key in d]
    lines.append(f"  kernarg segment: {m.get('.kernarg_segment_size', '?')} bytes, "
                 f"alignment {m.get('.kernarg_segment_align', '?')}")  # fmt: skip
    for a in m.get(".args", []) or []:
        lines.append(f"    {a.get('.offset', '?'):>5}  {a.get('.size', '?'):>3}  "
                     f"{a.get('.value_kind', '?'):<16} {a.get('.name', '')}")  # fmt: skip
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the summary, the listing or the round-trip result."""
    if args.roundtrip:
        from ..sim.roundtrip import roundtrip_file

        result = roundtrip_file(args.file)
        print(f"{args.file}: {result.instructions} instructions, {result.bytes} bytes: decoded, "
              "reassembled by the pinned clang, identical")  # fmt: skip
        return 0
    co = load_code_object(args.file)
    if args.disassemble:
        if args.output:
            args.output.write_text(co.disassembly)
        else:
            print(co.disassembly, end="")
        return 0
    names = [args.kernel] if args.kernel else list(co.kernels)
    print(f"{args.file}: code object v{co.code_object_version}, target {co.target or '(not in metadata)'}, "
          f"{len(co.program.instructions)} instructions")  # fmt: skip
    for name in names:
        k = co.kernel(name)
        print("\n".join(_kernel_lines(name, k)))
        missing = missing_instructions(co, name)
        lacks = ", ".join(f"{op} x{n}" for op, n in missing.most_common())
        print(f"  simulator lacks: {lacks or 'nothing'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `codeobject` subcommand."""
    p = sub.add_parser("codeobject", help="load a gfx950 code object: kernels, listing, round trip")
    p.add_argument("file", type=Path, help="HSA code object, code object v5 or v6, gfx950")
    p.add_argument("--kernel", help="report this kernel only (metadata .name)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--disassemble", action="store_true", help="print the decoded listing (LLVM syntax)")
    mode.add_argument("--roundtrip", action="store_true",
                      help="decode, reassemble with the pinned clang, require identical bytes")  # fmt: skip
    p.add_argument("-o", "--output", type=Path, help="with --disassemble: write the listing here")
    p.set_defaults(func=run)
