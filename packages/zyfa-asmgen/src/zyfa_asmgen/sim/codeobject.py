"""Load a gfx950 HSA code object (ELF `.co`/`.hsaco`, code object v5 or v6) for the simulator.

    from zyfa_asmgen.sim.codeobject import load_code_object
    co = load_code_object("fwd_hd128_bf16.co")
    co.kernels            -> {name: KernelInfo(descriptor=..., metadata=..., entry=...)}
    sim = Simulator(co.program, name)

The kernel descriptors (`NAME.kd`, see kdescriptor.py) give the register and LDS set-up, the
AMDGPU metadata note (MessagePack) gives the kernarg layout with its hidden arguments, and `.text`
is decoded (decode.py) into an assembly listing that the simulator's own parser (asm.py) turns into
its Instruction objects: a loaded kernel and one parsed from its `.s` are the same Program.

(The writer side, which makes a code object's assembly from a generated Program, is
zyfa_asmgen.codeobject.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .asm import KernelInfo, Program, parse_asm
from .decode import DecodedInstruction, decode_text, listing
from .elf import (
    ABI_VERSION_TO_CODE_OBJECT,
    EF_AMDGPU_MACH_GFX950,
    EF_AMDGPU_MACH_MASK,
    ELFOSABI_AMDGPU_HSA,
    EM_AMDGPU,
    STT_FUNC,
    ElfFile,
    parse_elf,
)
from .errors import SimError
from .kdescriptor import KD_SIZE, parse_descriptor
from .msgpack import unpackb

SUPPORTED_CODE_OBJECT_VERSIONS = (5, 6)
NT_AMDGPU_METADATA = 32


class CodeObjectError(SimError, ValueError):
    """The file is not a gfx950 code object of a supported version, or its tables disagree."""


@dataclass
class CodeObject:
    """A loaded code object: its kernels, the decoded program and the listing it was parsed from.

    program.kernels holds one KernelInfo per kernel (descriptor fields as in `.amdhsa_kernel`,
    metadata as in `.amdgpu_metadata`); an Instruction's `line` is its line in `disassembly`, and
    `offsets[i]` the .text byte offset of program.instructions[i].
    """

    path: Path
    code_object_version: int
    target: str
    program: Program
    disassembly: str
    offsets: list[int]
    decoded: list[DecodedInstruction]

    @property
    def kernels(self) -> dict[str, KernelInfo]:
        """Kernels by metadata name."""
        return self.program.kernels

    def kernel(self, name: str | None = None) -> KernelInfo:
        """The named kernel (or the only one)."""
        return self.program.kernel(name)


def _check_header(elf: ElfFile, path: Path) -> int:
    if elf.machine != EM_AMDGPU:
        raise CodeObjectError(f"{path}: ELF machine {elf.machine}, not AMDGPU ({EM_AMDGPU})")
    if elf.data[7] != ELFOSABI_AMDGPU_HSA:
        raise CodeObjectError(f"{path}: OS ABI {elf.data[7]}, not AMDGPU HSA ({ELFOSABI_AMDGPU_HSA})")
    version = ABI_VERSION_TO_CODE_OBJECT.get(elf.abi_version)
    if version not in SUPPORTED_CODE_OBJECT_VERSIONS:
        raise CodeObjectError(
            f"{path}: code object version {version or f'(ABI version {elf.abi_version})'}; "
            f"supported: {', '.join(map(str, SUPPORTED_CODE_OBJECT_VERSIONS))}"
        )
    mach = elf.flags & EF_AMDGPU_MACH_MASK
    if mach != EF_AMDGPU_MACH_GFX950:
        want = EF_AMDGPU_MACH_GFX950
        raise CodeObjectError(f"{path}: processor {mach:#05x} in e_flags, not gfx950 ({want:#05x})")
    return version


def _metadata(elf: ElfFile, path: Path) -> dict[str, Any]:
    notes = [n for n in elf.notes() if n.name == "AMDGPU" and n.type == NT_AMDGPU_METADATA]
    if len(notes) != 1:
        raise CodeObjectError(f"{path}: {len(notes)} AMDGPU metadata notes (NT_AMDGPU_METADATA), need 1")
    meta = unpackb(notes[0].desc)
    if not isinstance(meta, dict) or not isinstance(meta.get("amdhsa.kernels"), list):
        raise CodeObjectError(f"{path}: the metadata note has no amdhsa.kernels list")
    return meta


def _kernel_entries(elf: ElfFile, meta: dict[str, Any], text_addr: int, path: Path) -> dict[str, tuple]:
    """name -> (descriptor fields, metadata entry, .text offset of the entry point)."""
    syms = {s.name: s for s in elf.symbols if s.name}
    out = {}
    for entry in meta["amdhsa.kernels"]:
        name, kd_name = entry.get(".name"), entry.get(".symbol")
        if kd_name not in syms:
            raise CodeObjectError(f"{path}: kernel {name!r}: no descriptor symbol {kd_name!r}")
        kd_sym = syms[kd_name]
        desc = parse_descriptor(elf.bytes_at(kd_sym.value, KD_SIZE))
        code = kd_sym.value + desc.pop("kernel_code_entry_byte_offset")
        out[name] = (desc, entry, code - text_addr)
    return out


def load_code_object(path: Path | str) -> CodeObject:
    """Read a gfx950 code object (v5/v6) and decode it for the simulator.

    Raises CodeObjectError (wrong machine, version or tables) or DecodeError (an encoding the decoder
    does not know, with its offset and bytes)."""
    path = Path(path)
    elf = parse_elf(path.read_bytes())
    version = _check_header(elf, path)
    meta = _metadata(elf, path)
    text = elf.section(".text")
    entries = _kernel_entries(elf, meta, text.addr, path)
    decoded = decode_text(elf.section_bytes(text), base=text.offset)
    names = {off: _label_for(elf, name, text.addr + off) for name, (_, _, off) in entries.items()}
    asm = listing(decoded, names)
    program = parse_asm(asm)
    for name, (desc, entry, off) in entries.items():
        program.kernels[name] = KernelInfo(name, program.labels[names[off]], desc, entry)
    program.metadata = meta
    program.target = str(meta.get("amdhsa.target", ""))
    return CodeObject(path, version, program.target, program, asm, [d.offset for d in decoded], decoded)


def _label_for(elf: ElfFile, name: str, addr: int) -> str:
    """The function symbol at `addr` (the kernel's code label), else the kernel name."""
    for s in elf.symbols:
        if s.type == STT_FUNC and s.value == addr and s.name:
            return s.name
    return name
