"""Wrap a finalized Program into a complete gfx950 assembly file (code object v6).

The file has the kernel symbol and body, the `.amdhsa_kernel` descriptor (register counts,
accum_offset, LDS, kernarg size, user/system SGPR enables) and the `.amdgpu_metadata` YAML in the
form clang emits for a HIP kernel taking one by-value struct (see the oracle
`mfma_dump_kernel_gfx950.s` and clang's output for kernels/gfx950/fa_fwd_bf16.hip). All numbers
come from the Program and the ABI layout; none is typed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kernel import Program

TARGET = "amdgcn-amd-amdhsa--gfx950"
CODE_OBJECT_VERSION = 6
# gfx950 limits per lane: 256 architectural VGPRs + 256 AGPRs in one 512-entry file; LDS per workgroup.
MAX_ARCH_VGPRS = 256
MAX_AGPRS = 256
MAX_UNIFIED_VGPRS = 512
# 102 addressable SGPRs, less the 6 the descriptor reserves on top (see EXTRA_SGPRS_REPORTED).
MAX_SGPRS = 96
MAX_LDS_BYTES = 160 * 1024
# What clang reports as .sgpr_count beyond next_free_sgpr on gfx950 (VCC, flat scratch and XNACK
# mask reservations): 8 -> 14 and 49 -> 55 in two reference compiles.
EXTRA_SGPRS_REPORTED = 6


class ResourceError(ValueError):
    """The program needs more registers or LDS than gfx950 has."""


@dataclass(frozen=True)
class LaunchShape:
    """What the descriptor needs besides the Program: workgroup size and the kernarg segment."""

    threads: int
    kernarg_bytes: int
    kernarg_align: int = 8
    workgroup_ids: tuple[str, ...] = ("x", "y", "z")
    user_sgprs: int = 2  # s[0:1] = kernarg segment pointer
    # The by-value parameters as (name, offset, bytes); None: one, "args", of all kernarg_bytes.
    params: tuple[tuple[str, int, int], ...] | None = None

    def by_value(self) -> tuple[tuple[str, int, int], ...]:
        """The kernel's by-value parameters in kernarg order."""
        return self.params or (("args", 0, self.kernarg_bytes),)


@dataclass(frozen=True)
class Resources:
    """The numbers that go into the descriptor and the metadata."""

    vgprs: int
    agprs: int
    accum_offset: int
    next_free_vgpr: int
    next_free_sgpr: int
    lds_bytes: int

    @property
    def unified_vgprs(self) -> int:
        """VGPR + AGPR file entries per lane."""
        return self.next_free_vgpr


def resources(prog: Program) -> Resources:
    """Descriptor resource fields from the program; raises ResourceError when they do not fit."""
    if prog.vgprs > MAX_ARCH_VGPRS or prog.agprs > MAX_AGPRS:
        raise ResourceError(f"{prog.name}: {prog.vgprs} VGPRs / {prog.agprs} AGPRs exceed 256 each")
    if prog.sgprs > MAX_SGPRS:
        raise ResourceError(f"{prog.name}: {prog.sgprs} SGPRs exceed {MAX_SGPRS}")
    if prog.lds_bytes > MAX_LDS_BYTES:
        raise ResourceError(f"{prog.name}: {prog.lds_bytes} bytes of LDS exceed {MAX_LDS_BYTES}")
    # AGPRs start at accum_offset (a multiple of 4) in the unified file; with none, next_free is the VGPRs.
    accum = max(4, -(-prog.vgprs // 4) * 4)
    next_free = accum + prog.agprs if prog.agprs else prog.vgprs
    if next_free > MAX_UNIFIED_VGPRS:
        raise ResourceError(f"{prog.name}: {next_free} unified VGPRs exceed {MAX_UNIFIED_VGPRS}")
    return Resources(prog.vgprs, prog.agprs, accum, next_free, max(prog.sgprs, 1), prog.lds_bytes)


def _descriptor(prog: Program, shape: LaunchShape, res: Resources) -> str:
    ids = set(shape.workgroup_ids)
    rows = [
        ("group_segment_fixed_size", res.lds_bytes),
        ("private_segment_fixed_size", 0),
        ("kernarg_size", shape.kernarg_bytes),
        ("user_sgpr_count", shape.user_sgprs),
        ("user_sgpr_dispatch_ptr", 0),
        ("user_sgpr_queue_ptr", 0),
        ("user_sgpr_kernarg_segment_ptr", 1),
        ("user_sgpr_dispatch_id", 0),
        ("user_sgpr_kernarg_preload_length", 0),
        ("user_sgpr_kernarg_preload_offset", 0),
        ("user_sgpr_private_segment_size", 0),
        ("uses_dynamic_stack", 0),
        ("enable_private_segment", 0),
        ("system_sgpr_workgroup_id_x", int("x" in ids)),
        ("system_sgpr_workgroup_id_y", int("y" in ids)),
        ("system_sgpr_workgroup_id_z", int("z" in ids)),
        ("system_sgpr_workgroup_info", 0),
        ("system_vgpr_workitem_id", 0),
        ("next_free_vgpr", res.next_free_vgpr),
        ("next_free_sgpr", res.next_free_sgpr),
        ("accum_offset", res.accum_offset),
        ("reserve_vcc", int(prog.uses_vcc)),
        ("float_round_mode_32", 0),
        ("float_round_mode_16_64", 0),
        ("float_denorm_mode_32", 3),
        ("float_denorm_mode_16_64", 3),
        ("dx10_clamp", 1),
        ("ieee_mode", 1),
        ("fp16_overflow", 0),
        ("tg_split", 0),
    ]
    body = "\n".join(f"  .amdhsa_{k} {v}" for k, v in rows)
    return f".rodata\n.p2align 6\n.amdhsa_kernel {prog.name}\n{body}\n.end_amdhsa_kernel\n"


def _metadata(prog: Program, shape: LaunchShape, res: Resources) -> str:
    """Code object v5/v6 metadata, block YAML with keys sorted as clang prints them."""
    sgpr_count = res.next_free_sgpr + EXTRA_SGPRS_REPORTED
    return "\n".join(
        [
            ".amdgpu_metadata",
            "---",
            "amdhsa.kernels:",
            f"  - .agpr_count:     {res.agprs}",
            "    .args:",
            *(
                line
                for name, offset, size in shape.by_value()
                for line in (
                    f"      - .name:           {name}",
                    f"        .offset:         {offset}",
                    f"        .size:           {size}",
                    "        .value_kind:     by_value",
                )
            ),
            f"    .group_segment_fixed_size: {res.lds_bytes}",
            f"    .kernarg_segment_align: {shape.kernarg_align}",
            f"    .kernarg_segment_size: {shape.kernarg_bytes}",
            f"    .max_flat_workgroup_size: {shape.threads}",
            f"    .name:           {prog.name}",
            "    .private_segment_fixed_size: 0",
            f"    .sgpr_count:     {sgpr_count}",
            "    .sgpr_spill_count: 0",
            f"    .symbol:         {prog.name}.kd",
            "    .uniform_work_group_size: 1",
            "    .uses_dynamic_stack: false",
            f"    .vgpr_count:     {res.next_free_vgpr}",
            "    .vgpr_spill_count: 0",
            "    .wavefront_size: 64",
            f"amdhsa.target:   {TARGET}",
            "amdhsa.version:",
            "  - 1",
            "  - 2",
            "...",
            "",
            ".end_amdgpu_metadata",
        ]
    )


def assembly_file(prog: Program, shape: LaunchShape, header_comment: str) -> str:
    """The complete .s text: header comment, code, descriptor, metadata."""
    res = resources(prog)
    comment = "\n".join(f"// {ln}".rstrip() for ln in header_comment.strip("\n").splitlines())
    return "\n".join(
        [
            comment,
            f'.amdgcn_target "{TARGET}"',
            f".amdhsa_code_object_version {CODE_OBJECT_VERSION}",
            ".text",
            f".protected {prog.name}",
            f".globl {prog.name}",
            ".p2align 8",
            f".type {prog.name},@function",
            f"{prog.name}:",
            prog.body_text().rstrip("\n"),
            ".Lfunc_end0:",
            f"  .size {prog.name}, .Lfunc_end0-{prog.name}",
            "",
            _descriptor(prog, shape, res),
            _metadata(prog, shape, res),
            "",
        ]
    )
