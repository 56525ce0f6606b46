"""The 64-byte AMDHSA kernel descriptor (`NAME.kd`) of a gfx950 code object, as `.amdhsa_*` fields.

The layout is LLVM's AMDGPUUsage "Kernel Descriptor" table (code object v3 and later) with the
gfx90a+ COMPUTE_PGM_RSRC3 (accum_offset, tg_split). The fields come back under the names of the
`.amdhsa_kernel` directives (without the prefix), so a kernel loaded from a binary and one parsed
from assembly give the simulator the same descriptor dictionary.

Two fields are stored in granules and cannot be recovered exactly: the descriptor holds the
*allocated* VGPRs (unified VGPR+AGPR file, granule 8) and SGPRs (granule 16, counting VCC, flat
scratch and the XNACK mask, which gfx9 places above the kernel's own SGPRs). `next_free_vgpr` and
`next_free_sgpr` are therefore the allocation, which bounds what the kernel may touch.
"""

from __future__ import annotations

import struct
from typing import Any

KD_SIZE = 64
VGPR_GRANULE = 8  # gfx90a+: unified register file, allocated in blocks of 8
SGPR_GRANULE = 16
SGPRS_RESERVED = 6  # VCC, FLAT_SCRATCH and XNACK_MASK sit at the top of the allocation on gfx9
MAX_SGPRS = 102


class DescriptorError(ValueError):
    """The kernel descriptor bytes are malformed or ask for something gfx950 does not have."""


def _bits(word: int, lo: int, hi: int) -> int:
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


# (field, word, lo bit, hi bit) of COMPUTE_PGM_RSRC1/2/3, kernel_code_properties, kernarg_preload.
_FIELDS = [
    ("float_round_mode_32", "rsrc1", 12, 13),
    ("float_round_mode_16_64", "rsrc1", 14, 15),
    ("float_denorm_mode_32", "rsrc1", 16, 17),
    ("float_denorm_mode_16_64", "rsrc1", 18, 19),
    ("dx10_clamp", "rsrc1", 21, 21),
    ("ieee_mode", "rsrc1", 23, 23),
    ("fp16_overflow", "rsrc1", 26, 26),
    ("enable_private_segment", "rsrc2", 0, 0),
    ("user_sgpr_count", "rsrc2", 1, 5),
    ("system_sgpr_workgroup_id_x", "rsrc2", 7, 7),
    ("system_sgpr_workgroup_id_y", "rsrc2", 8, 8),
    ("system_sgpr_workgroup_id_z", "rsrc2", 9, 9),
    ("system_sgpr_workgroup_info", "rsrc2", 10, 10),
    ("system_vgpr_workitem_id", "rsrc2", 11, 12),
    ("tg_split", "rsrc3", 16, 16),
    ("user_sgpr_private_segment_buffer", "props", 0, 0),
    ("user_sgpr_dispatch_ptr", "props", 1, 1),
    ("user_sgpr_queue_ptr", "props", 2, 2),
    ("user_sgpr_kernarg_segment_ptr", "props", 3, 3),
    ("user_sgpr_dispatch_id", "props", 4, 4),
    ("user_sgpr_flat_scratch_init", "props", 5, 5),
    ("user_sgpr_private_segment_size", "props", 6, 6),
    ("wavefront_size32", "props", 10, 10),
    ("uses_dynamic_stack", "props", 11, 11),
    ("user_sgpr_kernarg_preload_length", "preload", 0, 6),
    ("user_sgpr_kernarg_preload_offset", "preload", 7, 15),
]


def parse_descriptor(kd: bytes) -> dict[str, Any]:
    """The `.amdhsa_*` fields (prefix dropped) of a 64-byte kernel descriptor, plus
    `kernel_code_entry_byte_offset` (the code's address relative to the descriptor's)."""
    if len(kd) != KD_SIZE:
        raise DescriptorError(f"a kernel descriptor is {KD_SIZE} bytes, got {len(kd)}")
    group, private, kernarg = struct.unpack_from("<III", kd, 0)
    (entry,) = struct.unpack_from("<q", kd, 16)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", kd, 44)
    props, preload = struct.unpack_from("<HH", kd, 56)
    words = {"rsrc1": rsrc1, "rsrc2": rsrc2, "rsrc3": rsrc3, "props": props, "preload": preload}
    out: dict[str, Any] = {
        "group_segment_fixed_size": group,
        "private_segment_fixed_size": private,
        "kernarg_size": kernarg,
        "kernel_code_entry_byte_offset": entry,
        "next_free_vgpr": (_bits(rsrc1, 0, 5) + 1) * VGPR_GRANULE,
        "next_free_sgpr": min(MAX_SGPRS, (_bits(rsrc1, 6, 9) + 1) * SGPR_GRANULE - SGPRS_RESERVED),
        "accum_offset": (_bits(rsrc3, 0, 5) + 1) * 4,
    }
    for name, word, lo, hi in _FIELDS:
        out[name] = _bits(words[word], lo, hi)
    if out["wavefront_size32"]:
        raise DescriptorError("the descriptor asks for wave32; gfx950 runs wave64 only")
    return out
