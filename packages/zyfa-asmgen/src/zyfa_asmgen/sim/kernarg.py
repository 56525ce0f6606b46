"""The kernarg segment of ZYFA kernels, packed from the fields of kernels/abi/zyfa_abi.h (zyfa_asmgen.abi)."""

from __future__ import annotations

import struct

from ..abi import AbiLayout, Field

_PACK = {"ptr": "<Q", "u64": "<Q", "i64": "<q", "i32": "<i", "u32": "<I", "f32": "<f", "f64": "<d"}


def pack_struct(fields: tuple[Field, ...], size: int, values: dict[str, float | int]) -> bytes:
    """A header struct's bytes: every field packed at its offset (missing fields are 0)."""
    buf = bytearray(size)
    for f in fields:
        struct.pack_into(_PACK[f.kind], buf, f.offset, values.get(f.name, 0))
    return bytes(buf)


def pack_kernarg(
    layout: AbiLayout, values: dict[str, float | int], varlen: dict[str, float | int] | None = None
) -> bytes:
    """The kernarg bytes: zyfa_fwd_args, and with `varlen` (a packed-batch kernel's second parameter)
    zyfa_varlen_args after it at the header's offset for it (zero bytes between)."""
    out = pack_struct(layout.fields, layout.size, values)
    if varlen is None:
        return out
    at = layout.varlen_offset()  # AbiError for a header without zyfa_varlen_args
    return out + bytes(at - layout.size) + pack_struct(layout.varlen.fields, layout.varlen.size, varlen)
