"""ctypes mirror of `kernels/abi/zyfa_abi.h`: the kernel argument struct, and the TMA maps parameter.

`ZyfaFwdArgs` has the header's fields, in the header's order, with the header's names, packed
(`_pack_ = 1`); `tests/test_abi.py` compiles the header with the host compiler and checks every
offset, the size, the version macro and the field names against this module. Changing the header
means changing this file and bumping ABI_VERSION in both.

Tensor layout (flash-attn's): q [batch, seqlen_q, heads_q, d_qk], k [batch, seqlen_k, heads_kv, d_qk],
v [batch, seqlen_k, heads_kv, d_v], out bf16 [batch, seqlen_q, heads_q, d_v]; strides in ELEMENTS;
lse float32 [batch, heads_q, seqlen_q] contiguous when flags has FLAG_LSE.

Kernels whose manifest row has "layout" "varlen" or "paged" take `ZyfaVarlenArgs` (80 bytes: the packed
batch's cu_seqlens, seqused_k, page table and descale table pointers, sizes, and the item counter that the
launcher sets for a grid "dynamic" kernel) as their second parameter, and args.flags has FLAG_VARLEN
(FLAG_PAGED, FLAG_DESCALE_TABLE): see zyfa_abi.h for the field meanings.

Kernels whose manifest row says "loads": "tma" take `zyfa_tma_maps` (448 bytes: three CUtensorMaps for
q, k, v and a valid flag) as their last parameter: the second of a dense kernel, the third of a "varlen"
one (ABI 6, after `ZyfaVarlenArgs`, its maps over the packed tensors); the launch plan
(`zyfa_core.launcher.tma_maps_bytes`) builds it as the header specifies.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

__all__ = [
    "ABI_VERSION",
    "ARGS_SIZE",
    "FIELD_NAMES",
    "FLAG_CAUSAL",
    "FLAG_DESCALE_TABLE",
    "FLAG_LSE",
    "FLAG_PAGED",
    "FLAG_VARLEN",
    "VARLEN_ARGS_SIZE",
    "VARLEN_FIELD_NAMES",
    "TENSOR_MAP_BYTES",
    "TMA_MAPS_BYTES",
    "ZyfaFwdArgs",
    "ZyfaVarlenArgs",
    "args_bytes",
    "make_fwd_args",
    "make_varlen_args",
]

# 1: first layout (2026-12-01). 2: adds zyfa_tma_maps, the second parameter of "loads": "tma" kernels.
# 3: adds the V pre-pass entry of "v_prep" kernels (zyfa_fwd_args unchanged; see zyfa_abi.h).
# 4: packed batches: FLAG_VARLEN / FLAG_PAGED / FLAG_DESCALE_TABLE and zyfa_varlen_args, the second
# parameter of "varlen" / "paged" kernels (zyfa_fwd_args unchanged).
# 5: zyfa_varlen_args.item_counter, the work counter of grid "dynamic" kernels (72 -> 80 bytes).
# 6: a "varlen" kernel takes zyfa_tma_maps third ("loads": "tma") and may name a "v_prep" entry, which
# writes the packed Vt layout; no struct changes.
# 7: a kernel with "loads": "tma" and a "v_prep" entry maps v over the pre-pass's Vt; no struct changes.
# Bump together with ZYFA_ABI_VERSION in zyfa_abi.h.
ABI_VERSION = 7

FLAG_CAUSAL = 0x1
"""Apply the bottom-right aligned causal mask (ZYFA_FLAG_CAUSAL)."""
FLAG_LSE = 0x2
"""Write the log-sum-exp to `lse` (ZYFA_FLAG_LSE)."""
FLAG_VARLEN = 0x4
"""A packed batch: rows and lengths from the ZyfaVarlenArgs parameter (ZYFA_FLAG_VARLEN)."""
FLAG_PAGED = 0x8
"""With FLAG_VARLEN: K/V rows through the page table (ZYFA_FLAG_PAGED)."""
FLAG_DESCALE_TABLE = 0x10
"""With FLAG_VARLEN, FP8: descales per (sequence, kv head) from the table (ZYFA_FLAG_DESCALE_TABLE)."""

ARGS_SIZE = 192
"""sizeof(zyfa_fwd_args) in bytes."""

_STRIDE_NAMES = [f"{t}_stride_{d}" for t in ("q", "k", "v", "out") for d in ("batch", "seq", "head")]

_FIELDS: list[tuple[str, Any]] = [
    ("q", ctypes.c_void_p),
    ("k", ctypes.c_void_p),
    ("v", ctypes.c_void_p),
    ("out", ctypes.c_void_p),
    ("lse", ctypes.c_void_p),  # float*; NULL unless FLAG_LSE
    *[(name, ctypes.c_int64) for name in _STRIDE_NAMES],
    ("batch", ctypes.c_int32),
    ("heads_q", ctypes.c_int32),
    ("heads_kv", ctypes.c_int32),
    ("seqlen_q", ctypes.c_int32),
    ("seqlen_k", ctypes.c_int32),
    ("d_qk", ctypes.c_int32),
    ("d_v", ctypes.c_int32),
    ("flags", ctypes.c_uint32),
    ("softmax_scale", ctypes.c_float),
    ("q_descale", ctypes.c_float),
    ("k_descale", ctypes.c_float),
    ("v_descale", ctypes.c_float),
    ("reserved", ctypes.c_uint64),
]

FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in _FIELDS)
"""The struct's field names in declaration order."""
_FIELD_TYPES: dict[str, Any] = dict(_FIELDS)


class ZyfaFwdArgs(ctypes.Structure):
    """`zyfa_fwd_args`: pointers, element strides, sizes, flags, scale and FP8 descales (192 bytes).

    Pointer fields (q, k, v, out, lse) hold device addresses as integers (None is NULL). Every
    assignment is range-checked as `make_fwd_args` checks it: a value that does not fit its C field
    (seqlen_q = 2**32 + 256, a scale that overflows float32) raises ValueError instead of wrapping.
    """

    _pack_ = 1
    _fields_ = _FIELDS

    def __setattr__(self, name: str, value: Any) -> None:
        ctype = _FIELD_TYPES.get(name)
        super().__setattr__(name, value if ctype is None else _checked(name, ctype, value))

    def __repr__(self) -> str:
        body = ", ".join(f"{name}={getattr(self, name)!r}" for name in FIELD_NAMES)
        return f"ZyfaFwdArgs({body})"


def args_bytes(args: ZyfaFwdArgs) -> bytes:
    """The struct's exact bytes, as the kernel receives them (little-endian, packed, 192 bytes)."""
    return bytes(args)


_INT_RANGES: dict[Any, tuple[int, int]] = {
    ctypes.c_void_p: (0, 2**64 - 1),
    ctypes.c_int64: (-(2**63), 2**63 - 1),
    ctypes.c_int32: (-(2**31), 2**31 - 1),
    ctypes.c_uint32: (0, 2**32 - 1),
    ctypes.c_uint64: (0, 2**64 - 1),
}


def _checked(name: str, ctype: Any, value: Any, struct: str = "zyfa_fwd_args") -> Any:
    """Return `value` if it fits `ctype` exactly; else raise ValueError naming the field."""
    if ctype is ctypes.c_float:
        number = float(value)
        # Round to float32 the way the struct will, so an overflow to inf is caught here.
        stored = ctypes.c_float(number).value
        if not math.isfinite(stored):
            raise ValueError(f"{struct}.{name} = {value!r} is not a finite float32")
        return number
    if isinstance(value, bool) or not isinstance(value, int):
        if ctype is ctypes.c_void_p and value is None:
            return 0
        raise ValueError(f"{struct}.{name} must be an int, got {type(value).__name__} {value!r}")
    low, high = _INT_RANGES[ctype]
    if not low <= value <= high:
        raise ValueError(f"{struct}.{name} = {value} does not fit its C type (range {low}..{high})")
    return value


def make_fwd_args(**fields: Any) -> ZyfaFwdArgs:
    """Build a `ZyfaFwdArgs`, checking that every value fits its C field.

    Every field may be given by keyword (see FIELD_NAMES). Defaults: lse=0 (NULL), flags=FLAG_CAUSAL,
    q_descale=k_descale=v_descale=1.0, reserved=0; all other fields are required. Pointers are
    integers (device addresses); None counts as NULL.

    Raises:
        TypeError: a name that is not a field.
        ValueError: a missing field, or a value that does not fit (e.g. seqlen_q >= 2**31).
    """
    unknown = sorted(set(fields) - set(FIELD_NAMES))
    if unknown:
        raise TypeError(f"make_fwd_args: unknown field(s) {unknown}; fields are {list(FIELD_NAMES)}")
    values: dict[str, Any] = {
        "lse": 0,
        "flags": FLAG_CAUSAL,
        "q_descale": 1.0,
        "k_descale": 1.0,
        "v_descale": 1.0,
        "reserved": 0,
    }
    values.update(fields)
    missing = [name for name in FIELD_NAMES if name not in values]
    if missing:
        raise ValueError(f"make_fwd_args: missing field(s) {missing}")
    return ZyfaFwdArgs(*(_checked(name, ctype, values[name]) for name, ctype in _FIELDS))


# ------------------------------------------------------------------------------------------------
# zyfa_varlen_args: the second parameter of "varlen" / "paged" kernels

VARLEN_ARGS_SIZE = 80
"""sizeof(zyfa_varlen_args) in bytes."""

_VARLEN_FIELDS: list[tuple[str, Any]] = [
    ("cu_seqlens_q", ctypes.c_void_p),  # int32 [batch + 1]
    ("cu_seqlens_k", ctypes.c_void_p),  # int32 [batch + 1]; NULL only with FLAG_PAGED and seqused_k
    ("seqused_k", ctypes.c_void_p),  # int32 [batch] or NULL
    ("page_table", ctypes.c_void_p),  # int32 [batch][page_table_stride], FLAG_PAGED only
    ("descales", ctypes.c_void_p),  # float32 [3][batch][heads_kv], FLAG_DESCALE_TABLE only
    ("page_table_stride", ctypes.c_int64),
    ("page_size", ctypes.c_int32),
    ("num_pages", ctypes.c_int32),
    ("max_pages", ctypes.c_int32),
    ("total_q", ctypes.c_int32),
    ("total_k", ctypes.c_int32),
    ("reserved", ctypes.c_uint32),
    ("item_counter", ctypes.c_void_p),  # NULL: the launcher sets a grid "dynamic" kernel's (ABI 5)
]

VARLEN_FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in _VARLEN_FIELDS)
"""zyfa_varlen_args's field names in declaration order."""
_VARLEN_TYPES: dict[str, Any] = dict(_VARLEN_FIELDS)


class ZyfaVarlenArgs(ctypes.Structure):
    """`zyfa_varlen_args`: a packed batch's index pointers and sizes (80 bytes), checked on assignment."""

    _fields_ = _VARLEN_FIELDS

    def __setattr__(self, name: str, value: Any) -> None:
        ctype = _VARLEN_TYPES.get(name)
        super().__setattr__(
            name, value if ctype is None else _checked(name, ctype, value, "zyfa_varlen_args")
        )

    def __repr__(self) -> str:
        body = ", ".join(f"{name}={getattr(self, name)!r}" for name in VARLEN_FIELD_NAMES)
        return f"ZyfaVarlenArgs({body})"


def make_varlen_args(**fields: Any) -> ZyfaVarlenArgs:
    """Build a `ZyfaVarlenArgs`; every field defaults to 0 (NULL pointers), each value checked as it is set.

    Raises:
        TypeError: a name that is not a field.
        ValueError: a value that does not fit its C field.
    """
    unknown = sorted(set(fields) - set(VARLEN_FIELD_NAMES))
    if unknown:
        raise TypeError(
            f"make_varlen_args: unknown field(s) {unknown}; fields are {list(VARLEN_FIELD_NAMES)}"
        )
    args = ZyfaVarlenArgs()
    for name, value in fields.items():
        setattr(args, name, value)
    return args


# ------------------------------------------------------------------------------------------------
# zyfa_tma_maps: the last parameter of "loads": "tma" kernels (a dense kernel's second, a varlen one's third)

TMA_MAPS_BYTES = 448
"""sizeof(zyfa_tma_maps): maps q, k, v (128 bytes each) at 0, 128, 256; int32 valid at 384; zero."""
TENSOR_MAP_BYTES = 128
"""sizeof(CUtensorMap)."""


if ctypes.sizeof(ZyfaFwdArgs) != ARGS_SIZE:  # pragma: no cover - guards edits of _FIELDS
    raise ImportError(f"ZyfaFwdArgs is {ctypes.sizeof(ZyfaFwdArgs)} bytes, the ABI says {ARGS_SIZE}")
if ctypes.sizeof(ZyfaVarlenArgs) != VARLEN_ARGS_SIZE:  # pragma: no cover - guards edits of _VARLEN_FIELDS
    raise ImportError(
        f"ZyfaVarlenArgs is {ctypes.sizeof(ZyfaVarlenArgs)} bytes, the ABI says {VARLEN_ARGS_SIZE}"
    )
