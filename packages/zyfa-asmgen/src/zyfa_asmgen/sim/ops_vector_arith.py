"""Vector ALU arithmetic (VOP1/VOP2/VOP3): f32 and integer ops, carries, 64-bit ops, bitop3, cndmask.

Each table entry is a function of numpy lane vectors. f32 arithmetic is IEEE binary32 with round
to nearest even (numpy float32), fused ops round once (fp.fma_f32). Transcendentals (v_exp_f32,
v_log_f32, v_rcp_f32, v_rsq_f32, v_sqrt_f32, v_sin/cos) are computed in float64 and rounded once:
the chip's versions are approximations within about 1 ulp, so results may differ in the last bit
(documented in docs/simulator.md; tests compare kernels against references with a tolerance).
Compares and lane access are in ops_vector_lanes.py, packed f32 and conversions in ops_vector.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .asm import Instruction, Operand
from .core import (
    LANES,
    MASK32,
    VCC,
    Ctx,
    Op,
    Wave,
    handler,
    vdst_ref,
)
from .errors import UnsupportedOperand
from .fp import (
    bf16_bits_to_f32,
    f16_bits_to_f32,
    f32_to_f16_bits,
    fma_f32,
)
from .valu import ValuBuilder, dst_writer, f32_out, src_regs

U32 = np.uint32
F32 = np.float32
_ERR = {"invalid": "ignore", "divide": "ignore", "over": "ignore", "under": "ignore"}


def _wrap(x: np.ndarray) -> np.ndarray:
    """int64/uint64 lane values -> low 32 bits as uint32."""
    return (np.asarray(x).astype(np.int64) & MASK32).astype(U32)


# ---- IEEE helpers ------------------------------------------------------------------------------


def fmax_ieee(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """v_max_f32 (IEEE mode): NaN operand -> the other (sNaN quieted); max(+0, -0) = +0."""
    with np.errstate(**_ERR):
        r = np.where(a >= b, a, b)
        r = np.where(np.isnan(a), b, np.where(np.isnan(b), a, r))
        both_zero = (a == 0) & (b == 0)
        r = np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), a, np.abs(a)), r)
        return _quiet(r.astype(F32))


def fmin_ieee(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """v_min_f32 (IEEE mode): NaN operand -> the other; min(+0, -0) = -0."""
    with np.errstate(**_ERR):
        r = np.where(a < b, a, b)
        r = np.where(np.isnan(a), b, np.where(np.isnan(b), a, r))
        both_zero = (a == 0) & (b == 0)
        r = np.where(both_zero, np.where(np.signbit(a) | np.signbit(b), -np.abs(a), a), r)
        return _quiet(r.astype(F32))


def _quiet(x: np.ndarray) -> np.ndarray:
    bits = x.view(U32)
    nan = np.isnan(x)
    return np.where(nan, bits | U32(0x00400000), bits).view(F32)


def med3_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """v_med3_f32 per the ISA: with a NaN operand, min3; else the middle value."""
    anynan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    mx = fmax_ieee(fmax_ieee(a, b), c)
    r = np.where(mx == a, fmax_ieee(b, c), np.where(mx == b, fmax_ieee(a, c), fmax_ieee(a, b)))
    return np.where(anynan, fmin_ieee(fmin_ieee(a, b), c), r).astype(F32)


def _f64_round(x: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        return np.asarray(x, dtype=np.float64).astype(F32)


def _exp2(a: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        return _f64_round(np.exp2(a.astype(np.float64)))


def _log2(a: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        a64 = a.astype(np.float64)
        r = np.log2(np.where(a64 < 0, np.nan, a64))
        return _f64_round(np.where(a64 == 0, -np.inf, r))  # log2(-0) = -inf as well


def _rcp(a: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        return _f64_round(1.0 / a.astype(np.float64))


def _rsq(a: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        return _f64_round(1.0 / np.sqrt(a.astype(np.float64)))


def _sqrt(a: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        return _f64_round(np.sqrt(a.astype(np.float64)))


def _frexp_mant(a: np.ndarray) -> np.ndarray:
    m, _ = np.frexp(a)
    return np.where(np.isfinite(a), m, a).astype(F32)


def _frexp_exp(a: np.ndarray) -> np.ndarray:
    _, e = np.frexp(a)
    return _wrap(np.where(np.isfinite(a), e, 0))


def _ldexp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        e = np.clip(b.view(np.int32).astype(np.int64), -400, 400)
        return _f64_round(np.ldexp(a.astype(np.float64), e))


def _fract(a: np.ndarray) -> np.ndarray:
    # CDNA4 pseudocode: S0 + -floor(S0) in f32 (no clamp below 1.0: a tiny negative input gives 1.0).
    with np.errstate(**_ERR):
        return (a + (-np.floor(a))).astype(F32)


def _f2i(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """f32 -> integer, truncating, saturating, NaN -> 0 (the ISA's f32_to_i32/u32)."""
    with np.errstate(**_ERR):
        t = np.trunc(a.astype(np.float64))
        t = np.where(np.isnan(t), 0, np.clip(t, lo, hi))
        return _wrap(t.astype(np.int64))


def _mul_legacy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(**_ERR):
        return np.where((a == 0) | (b == 0), F32(0), a * b).astype(F32)


def _div_fixup(q: np.ndarray, d: np.ndarray, n: np.ndarray) -> np.ndarray:
    """v_div_fixup_f32(S0 = quotient, S1 = denominator, S2 = numerator), ISA special cases."""
    with np.errstate(**_ERR):
        sign = np.signbit(d) ^ np.signbit(n)
        inf = np.where(sign, F32(-np.inf), F32(np.inf))
        zero = np.where(sign, F32(-0.0), F32(0.0))
        r = np.where(sign, -np.abs(q), np.abs(q)).astype(F32)
        exp_d = (d.view(U32) >> U32(23)) & U32(0xFF)
        exp_n = (n.view(U32) >> U32(23)) & U32(0xFF)
        r = np.where(exp_d == 255, np.where(sign, F32(-np.inf), F32(np.inf)), r)  # overflow
        under = exp_n.astype(np.int64) - exp_d.astype(np.int64) < -150
        r = np.where(under, zero, r)
        r = np.where(np.isinf(d) | (n == 0), zero, r)
        r = np.where((d == 0) | np.isinf(n), inf, r)
        r = np.where(np.isinf(d) & np.isinf(n), np.uint32(0xFFC00000).view(F32), r)
        r = np.where((d == 0) & (n == 0), np.uint32(0xFFC00000).view(F32), r)
        r = np.where(np.isnan(d), _quiet(d), r)
        r = np.where(np.isnan(n), _quiet(n), r)
        return r.astype(F32)


def _exponent(x: np.ndarray) -> np.ndarray:
    return ((x.view(U32) >> U32(23)) & U32(0xFF)).astype(np.int64)


def div_scale(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """v_div_scale_f32 per the CDNA4 pseudocode: (D, VCC lanes). S1 = denominator, S2 = numerator."""
    with np.errstate(**_ERR):
        d = s0.copy()
        vcc = np.zeros(LANES, dtype=bool)
        done = np.zeros(LANES, dtype=bool)
        e1, e2 = _exponent(s1), _exponent(s2)
        tiny = np.float64(np.finfo(np.float64).tiny)
        f32tiny = np.float32(np.finfo(np.float32).tiny)
        rcp64 = 1.0 / s1.astype(np.float64)
        q32 = (s2 / s1).astype(F32)
        denorm1 = (s1 != 0) & (np.abs(s1) < f32tiny)
        rcp_den = (np.abs(rcp64) < tiny) & (rcp64 != 0)
        q_den = (np.abs(q32) < f32tiny) & (q32 != 0)

        def case(cond: np.ndarray, val: np.ndarray | None, set_vcc: bool) -> None:
            nonlocal d
            c = cond & ~done
            if set_vcc:
                vcc[c] = True
            if val is not None:
                d = np.where(c, val, d)
            done[c] = True

        up = np.ldexp(s0.astype(np.float64), 64).astype(F32)
        down = np.ldexp(s0.astype(np.float64), -64).astype(F32)
        case((s2 == 0) | (s1 == 0), np.full(LANES, np.nan, dtype=F32), False)
        case(e2 - e1 >= 96, np.where(s0 == s1, up, d), True)
        case(denorm1, up, False)
        case(rcp_den & q_den, np.where(s0 == s1, up, d), True)
        case(rcp_den, down, False)
        case(q_den, np.where(s0 == s2, up, d), True)
        case(e2 <= 23, up, False)
        return d.astype(F32), vcc


# name -> (source types, result kind, function). Result kind 'f32' (float32 array, goes through
# omod/clamp) or 'u32' (uint32 bits).
UNARY_F32: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "v_exp_f32": _exp2,
    "v_log_f32": _log2,
    "v_rcp_f32": _rcp,
    "v_rcp_iflag_f32": _rcp,
    "v_rsq_f32": _rsq,
    "v_sqrt_f32": _sqrt,
    "v_sin_f32": lambda a: _f64_round(np.sin(a.astype(np.float64) * 2 * np.pi)),
    "v_cos_f32": lambda a: _f64_round(np.cos(a.astype(np.float64) * 2 * np.pi)),
    "v_floor_f32": lambda a: np.floor(a).astype(F32),
    "v_ceil_f32": lambda a: np.ceil(a).astype(F32),
    "v_trunc_f32": lambda a: np.trunc(a).astype(F32),
    "v_rndne_f32": lambda a: np.rint(a).astype(F32),
    "v_fract_f32": _fract,
    "v_frexp_mant_f32": _frexp_mant,
}
TRANS = {
    "v_exp_f32",
    "v_log_f32",
    "v_rcp_f32",
    "v_rcp_iflag_f32",
    "v_rsq_f32",
    "v_sqrt_f32",
    "v_sin_f32",
    "v_cos_f32",
}

BINARY_F32: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "v_add_f32": lambda a, b: (a + b).astype(F32),
    "v_sub_f32": lambda a, b: (a - b).astype(F32),
    "v_subrev_f32": lambda a, b: (b - a).astype(F32),
    "v_mul_f32": lambda a, b: (a * b).astype(F32),
    "v_mul_legacy_f32": _mul_legacy,
    "v_max_f32": fmax_ieee,
    "v_min_f32": fmin_ieee,
}

TERNARY_F32: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "v_fma_f32": fma_f32,
    "v_max3_f32": lambda a, b, c: fmax_ieee(fmax_ieee(a, b), c),
    "v_min3_f32": lambda a, b, c: fmin_ieee(fmin_ieee(a, b), c),
    "v_med3_f32": med3_f32,
    "v_div_fixup_f32": _div_fixup,
}


def _i(x: np.ndarray) -> np.ndarray:
    return x.view(np.int32).astype(np.int64)


def _s24(x: np.ndarray) -> np.ndarray:
    v = (x & U32(0xFFFFFF)).astype(np.int64)
    return np.where(v >= 1 << 23, v - (1 << 24), v)


def _bfe_u(a, b, c):
    w = c & U32(31)
    return np.where(w == 0, U32(0), (a >> (b & U32(31))) & ((U32(1) << w) - U32(1))).astype(U32)


def _bfe_i(a, b, c):
    # Arithmetic shift first (ISA pseudocode: S0.i32 >> offset), so a field past bit 31 fills
    # with the sign.
    w = (c & U32(31)).astype(np.int64)
    v = (a.view(np.int32).astype(np.int64) >> (b & U32(31)).astype(np.int64)) & ((1 << w) - 1)
    sign = (v >> np.maximum(w - 1, 0)) & 1
    v = np.where((sign == 1) & (w > 0), v - (1 << w), v)
    return _wrap(np.where(w == 0, 0, v))


def _perm(a: np.ndarray, b: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """v_perm_b32: each selector byte picks a byte of {S0, S1} (S1 is the low dword) or a constant."""
    data = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
    out = np.zeros(LANES, dtype=U32)
    for k in range(4):
        s = ((sel >> U32(8 * k)) & U32(0xFF)).astype(np.uint64)
        byte = (data >> (np.minimum(s, 7) * np.uint64(8))) & np.uint64(0xFF)
        signs = [(data >> np.uint64(8 * i + 7)) & np.uint64(1) for i in (1, 3, 5, 7)]
        val = np.where(s >= 13, 0xFF, np.where(s == 12, 0, byte))
        for j, sv in enumerate((8, 9, 10, 11)):
            val = np.where(s == sv, signs[j] * np.uint64(0xFF), val)
        out |= val.astype(U32) << U32(8 * k)
    return out


def _bitop3(table: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    def f(a, b, c):
        out = np.zeros_like(a)
        for i in range(8):
            if table >> i & 1:
                ta = a if i & 4 else ~a
                tb = b if i & 2 else ~b
                tc = c if i & 1 else ~c
                out |= ta & tb & tc
        return out

    return f


def _ffbh(a):
    r = np.full(a.shape, MASK32, dtype=np.int64)
    nz = a != 0
    r[nz] = 31 - np.floor(np.log2(a[nz].astype(np.float64))).astype(np.int64)
    return _wrap(r)


def _ffbl(a):
    r = np.full(a.shape, MASK32, dtype=np.int64)
    nz = a != 0
    low = (a & (~a + U32(1)))[nz]
    r[nz] = np.log2(low.astype(np.float64)).astype(np.int64)
    return _wrap(r)


def _popcount32(a: np.ndarray) -> np.ndarray:
    x = a.astype(U32)
    x = x - ((x >> U32(1)) & U32(0x55555555))
    x = (x & U32(0x33333333)) + ((x >> U32(2)) & U32(0x33333333))
    x = (x + (x >> U32(4))) & U32(0x0F0F0F0F)
    return ((x * U32(0x01010101)) >> U32(24)).astype(U32)


INT_OPS: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "v_mov_b32": (1, lambda a: a),
    "v_not_b32": (1, lambda a: ~a),
    "v_bfrev_b32": (1, lambda a: _brev32(a)),
    "v_ffbh_u32": (1, _ffbh),
    "v_ffbl_b32": (1, _ffbl),
    "v_cvt_f32_i32": (1, lambda a: _i(a).astype(F32).view(U32)),
    "v_cvt_f32_u32": (1, lambda a: a.astype(F32).view(U32)),
    "v_cvt_f32_ubyte0": (1, lambda a: (a & U32(0xFF)).astype(F32).view(U32)),
    "v_cvt_f32_ubyte1": (1, lambda a: ((a >> U32(8)) & U32(0xFF)).astype(F32).view(U32)),
    "v_cvt_f32_ubyte2": (1, lambda a: ((a >> U32(16)) & U32(0xFF)).astype(F32).view(U32)),
    "v_cvt_f32_ubyte3": (1, lambda a: (a >> U32(24)).astype(F32).view(U32)),
    "v_cvt_f32_bf16": (1, lambda a: bf16_bits_to_f32(a).view(U32)),
    "v_cvt_f32_f16": (1, lambda a: f16_bits_to_f32(a).view(U32)),
    "v_add_u32": (2, lambda a, b: a + b),
    "v_sub_u32": (2, lambda a, b: a - b),
    "v_subrev_u32": (2, lambda a, b: b - a),
    "v_add_i32": (2, lambda a, b: a + b),
    "v_sub_i32": (2, lambda a, b: a - b),
    "v_mul_lo_u32": (2, lambda a, b: _wrap(a.astype(np.uint64) * b.astype(np.uint64))),
    "v_mul_hi_u32": (
        2,
        lambda a, b: ((a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(32)).astype(U32),
    ),
    "v_mul_hi_i32": (2, lambda a, b: _wrap((_i(a) * _i(b)) >> 32)),
    "v_mul_u32_u24": (2, lambda a, b: _wrap((a & U32(0xFFFFFF)).astype(np.uint64) * (b & U32(0xFFFFFF)))),
    "v_mul_hi_u32_u24": (
        2,
        lambda a, b: (((a & U32(0xFFFFFF)).astype(np.uint64) * (b & U32(0xFFFFFF))) >> np.uint64(32)).astype(
            U32
        ),
    ),
    "v_mul_i32_i24": (2, lambda a, b: _wrap(_s24(a) * _s24(b))),
    "v_mul_hi_i32_i24": (2, lambda a, b: _wrap((_s24(a) * _s24(b)) >> 32)),
    "v_lshlrev_b32": (2, lambda a, b: b << (a & U32(31))),
    "v_lshrrev_b32": (2, lambda a, b: b >> (a & U32(31))),
    "v_ashrrev_i32": (2, lambda a, b: (b.view(np.int32) >> (a & U32(31)).astype(np.int32)).view(U32)),
    "v_and_b32": (2, lambda a, b: a & b),
    "v_or_b32": (2, lambda a, b: a | b),
    "v_xor_b32": (2, lambda a, b: a ^ b),
    "v_xnor_b32": (2, lambda a, b: ~(a ^ b)),
    "v_min_u32": (2, np.minimum),
    "v_max_u32": (2, np.maximum),
    "v_min_i32": (2, lambda a, b: np.minimum(a.view(np.int32), b.view(np.int32)).view(U32)),
    "v_max_i32": (2, lambda a, b: np.maximum(a.view(np.int32), b.view(np.int32)).view(U32)),
    "v_bcnt_u32_b32": (2, lambda a, b: _popcount32(a) + b),
    "v_bfm_b32": (2, lambda a, b: ((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31))),
    "v_mbcnt_lo_u32_b32": (2, None),  # needs the lane id: handled below
    "v_mbcnt_hi_u32_b32": (2, None),
    "v_cvt_pkrtz_f16_f32": (2, None),
    "v_mad_u32_u24": (
        3,
        lambda a, b, c: _wrap((a & U32(0xFFFFFF)).astype(np.uint64) * (b & U32(0xFFFFFF)) + c),
    ),
    "v_mad_i32_i24": (3, lambda a, b, c: _wrap(_s24(a) * _s24(b) + _i(c))),
    "v_bfe_u32": (3, _bfe_u),
    "v_bfe_i32": (3, _bfe_i),
    "v_bfi_b32": (3, lambda a, b, c: (a & b) | (~a & c)),
    "v_alignbit_b32": (
        3,
        lambda a, b, c: (
            ((a.astype(np.uint64) << np.uint64(32)) | b) >> (c & U32(31)).astype(np.uint64)
        ).astype(U32),
    ),
    "v_alignbyte_b32": (
        3,
        lambda a, b, c: (
            ((a.astype(np.uint64) << np.uint64(32)) | b) >> ((c & U32(3)).astype(np.uint64) * np.uint64(8))
        ).astype(U32),
    ),
    "v_lshl_add_u32": (3, lambda a, b, c: (a << (b & U32(31))) + c),
    "v_add_lshl_u32": (3, lambda a, b, c: (a + b) << (c & U32(31))),
    "v_lshl_or_b32": (3, lambda a, b, c: (a << (b & U32(31))) | c),
    "v_and_or_b32": (3, lambda a, b, c: (a & b) | c),
    "v_or3_b32": (3, lambda a, b, c: a | b | c),
    "v_xad_u32": (3, lambda a, b, c: (a ^ b) + c),
    "v_add3_u32": (3, lambda a, b, c: a + b + c),
    "v_min3_u32": (3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u32": (3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_i32": (3, lambda a, b, c: np.minimum(np.minimum(_i(a), _i(b)), _i(c)).astype(np.int32).view(U32)),
    "v_max3_i32": (3, lambda a, b, c: np.maximum(np.maximum(_i(a), _i(b)), _i(c)).astype(np.int32).view(U32)),
    "v_med3_u32": (3, lambda a, b, c: np.median(np.stack([a, b, c]).astype(np.int64), axis=0).astype(U32)),
    "v_med3_i32": (
        3,
        lambda a, b, c: _wrap(np.median(np.stack([_i(a), _i(b), _i(c)]), axis=0).astype(np.int64)),
    ),
    "v_perm_b32": (3, _perm),
    "v_sad_u32": (3, lambda a, b, c: _wrap(np.abs(a.astype(np.int64) - b.astype(np.int64)) + c)),
}


def _brev32(a: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(a.astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    return np.packbits(bits[:, ::-1], axis=1, bitorder="little").view("<u4").reshape(-1).astype(U32)


F32_TO_INT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "v_cvt_i32_f32": lambda a: _f2i(a, -(2**31), 2**31 - 1),
    "v_cvt_u32_f32": lambda a: _f2i(a, 0, 2**32 - 1),
    "v_cvt_rpi_i32_f32": lambda a: _f2i(np.floor(a.astype(np.float64) + 0.5), -(2**31), 2**31 - 1),
    "v_cvt_flr_i32_f32": lambda a: _f2i(np.floor(a), -(2**31), 2**31 - 1),
    "v_frexp_exp_i32_f32": _frexp_exp,
    "v_cvt_f16_f32": lambda a: f32_to_f16_bits(a),
}


def _operands(inst: Instruction, n_src: int) -> tuple[Operand, list[Operand]]:
    ops = inst.operands
    if len(ops) != n_src + 1:
        raise UnsupportedOperand(f"{inst.op} expects {n_src} sources, got {len(ops) - 1}")
    return ops[0], ops[1:]


def _is_trans(name: str) -> bool:
    return name in TRANS


@handler(*UNARY_F32, *BINARY_F32, *TERNARY_F32, "v_fmac_f32", "v_ldexp_f32", "v_div_fmas_f32")
def _float_op(inst: Instruction, ctx: Ctx) -> Op:
    name = inst.op
    if name in UNARY_F32:
        n, f = 1, UNARY_F32[name]
    elif name in BINARY_F32:
        n, f = 2, BINARY_F32[name]
    elif name == "v_fmac_f32" or name == "v_ldexp_f32":
        n, f = 2, None
    elif name == "v_div_fmas_f32":
        n, f = 3, None
    else:
        n, f = 3, TERNARY_F32[name]
    dst, srcs = _operands(inst, n)
    types = ["f32"] * n
    if name == "v_ldexp_f32":
        types = ["f32", "u32"]
    vb = ValuBuilder(inst, srcs, types, {"clamp", "mul", "div"})
    out = f32_out(inst)
    wr = dst_writer(inst, dst)
    file, didx, _ = vdst_ref(dst)
    reads = src_regs(srcs, types)
    if name == "v_fmac_f32":
        reads += ((file, didx, 1),)

        def fn(w: Wave) -> None:
            (a, b), m = vb.sources(w)
            c = w.vfile(file)[didx].view(F32)
            wr(w, out(fma_f32(a, b, c)), m)

    elif name == "v_ldexp_f32":

        def fn(w: Wave) -> None:
            (a, b), m = vb.sources(w)
            wr(w, out(_ldexp(a, b)), m)

    elif name == "v_div_fmas_f32":
        reads += (("s", VCC, 2),)

        def fn(w: Wave) -> None:
            (a, b, c), m = vb.sources(w)
            r = fma_f32(a, b, c)
            vcc = w.lane_mask_get(VCC)
            with np.errstate(**_ERR):
                scaled = np.ldexp(r.astype(np.float64), 32).astype(F32)
            wr(w, out(np.where(vcc, scaled, r)), m)

    else:

        def fn(w: Wave) -> None:
            vals, m = vb.sources(w)
            with np.errstate(**_ERR):
                wr(w, out(f(*vals)), m)

    kind = "trans" if _is_trans(name) else "valu"
    return Op(fn, kind, inst, reads, ((file, didx, 1),))


@handler("v_div_scale_f32")
def _div_scale(inst: Instruction, ctx: Ctx) -> Op:
    dst, sdst, *srcs = inst.operands
    vb = ValuBuilder(inst, srcs, ["f32"] * 3, set())
    wr = dst_writer(inst, dst)
    sidx = sdst.reg.index
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        (a, b, c), m = vb.sources(w)
        d, vcc = div_scale(a, b, c)
        wr(w, d.view(U32), m)
        w.lane_mask_set(sidx, vcc)

    return Op(fn, "valu", inst, src_regs(srcs, ["f32"] * 3), ((file, didx, 1), ("s", sidx, 2)))


@handler(*INT_OPS)
def _int_op(inst: Instruction, ctx: Ctx) -> Op:
    n, f = INT_OPS[inst.op]
    dst, srcs = _operands(inst, n)
    types = ["u32"] * n
    clamp = bool(inst.mods.get("clamp"))
    vb = ValuBuilder(inst, srcs, types, {"clamp"} if inst.op in ("v_add_u32", "v_sub_u32") else set())
    wr = dst_writer(inst, dst)
    file, didx, _ = vdst_ref(dst)
    name = inst.op
    if name.startswith("v_mbcnt"):
        hi = name == "v_mbcnt_hi_u32_b32"
        lane = np.arange(LANES, dtype=np.uint64)
        below = ((np.uint64(1) << lane) - np.uint64(1)).astype(np.uint64)
        part = ((below >> np.uint64(32)) if hi else (below & np.uint64(MASK32))).astype(U32)

        def fn(w: Wave) -> None:
            (a, b), m = vb.sources(w)
            wr(w, _popcount32(a & part) + b, m)

    elif name == "v_cvt_pkrtz_f16_f32":

        def fn(w: Wave) -> None:
            (a, b), m = vb.sources(w)
            wr(w, _f16_rtz(a.view(F32)) | (_f16_rtz(b.view(F32)) << U32(16)), m)

    elif clamp:
        sub = name == "v_sub_u32"

        def fn(w: Wave) -> None:
            (a, b), m = vb.sources(w)
            r = a.astype(np.int64) - b if sub else a.astype(np.int64) + b
            wr(w, np.clip(r, 0, MASK32).astype(U32), m)

    else:

        def fn(w: Wave) -> None:
            vals, m = vb.sources(w)
            with np.errstate(over="ignore"):
                wr(w, np.asarray(f(*vals)).astype(U32), m)

    return Op(fn, "valu", inst, src_regs(srcs, types), ((file, didx, 1),))


def _f16_rtz(x: np.ndarray) -> np.ndarray:
    """f32 -> f16 bits rounding toward zero (v_cvt_pkrtz_f16_f32)."""
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)  # RNE
    back = h.astype(F32)
    with np.errstate(**_ERR):
        too_big = np.abs(back) > np.abs(x)
    h = np.where(too_big & np.isfinite(x), np.nextafter(h, np.float16(0)), h).astype(np.float16)
    return h.view(np.uint16).astype(U32)


@handler(*F32_TO_INT)
def _f2i_op(inst: Instruction, ctx: Ctx) -> Op:
    dst, srcs = _operands(inst, 1)
    vb = ValuBuilder(inst, srcs, ["f32"], {"clamp"} if inst.op == "v_cvt_f16_f32" else set())
    f = F32_TO_INT[inst.op]
    wr = dst_writer(inst, dst)
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        (a,), m = vb.sources(w)
        with np.errstate(**_ERR):
            wr(w, f(a), m)

    return Op(fn, "valu", inst, src_regs(srcs, ["f32"]), ((file, didx, 1),))


# ---- carry ops ---------------------------------------------------------------------------------


@handler(
    "v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32"
)
def _carry(inst: Instruction, ctx: Ctx) -> Op:
    name = inst.op
    with_cin = name in ("v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32")
    ops = inst.operands
    dst, sdst = ops[0], ops[1]
    srcs = ops[2:4]
    cin_idx = ops[4].reg.index if with_cin else None
    vb = ValuBuilder(inst, srcs, ["u32", "u32"], {"clamp"})
    wr = dst_writer(inst, dst)
    sidx = sdst.reg.index
    file, didx, _ = vdst_ref(dst)
    clamp = bool(inst.mods.get("clamp"))

    def fn(w: Wave) -> None:
        (a, b), m = vb.sources(w)
        a64, b64 = a.astype(np.int64), b.astype(np.int64)
        cin = w.lane_mask_get(cin_idx).astype(np.int64) if with_cin else 0
        if name.startswith("v_add"):
            t = a64 + b64 + cin
            cout = t > MASK32
        elif name in ("v_sub_co_u32", "v_subb_co_u32"):
            t = a64 - b64 - cin
            cout = t < 0
        else:
            t = b64 - a64 - cin
            cout = t < 0
        res = (t & MASK32).astype(U32)
        if clamp:
            res = np.where(cout, U32(MASK32) if name.startswith("v_add") else U32(0), res)
        wr(w, res, m)
        w.lane_mask_set(sidx, cout)

    reads = src_regs(srcs, ["u32", "u32"]) + ((("s", cin_idx, 2),) if with_cin else ())
    return Op(fn, "valu", inst, reads, ((file, didx, 1), ("s", sidx, 2)))


@handler("v_mad_u64_u32", "v_mad_i64_i32")
def _mad64(inst: Instruction, ctx: Ctx) -> Op:
    dst, sdst, s0, s1, s2 = inst.operands
    signed = inst.op == "v_mad_i64_i32"
    vb = ValuBuilder(inst, [s0, s1, s2], ["u32", "u32", "u64"], {"clamp"} if False else set())
    file, didx, _ = vdst_ref(dst)
    sidx = sdst.reg.index

    def fn(w: Wave) -> None:
        (a, b, c), m = vb.sources(w)
        av = [int(x) for x in (a.view(np.int32) if signed else a)]
        bv = [int(x) for x in (b.view(np.int32) if signed else b)]
        cv = [int(x) for x in (c.view(np.int64) if signed else c)]
        full = [x * y + z for x, y, z in zip(av, bv, cv, strict=True)]
        res = np.array([v & ((1 << 64) - 1) for v in full], dtype=np.uint64)
        if signed:
            carry = np.array([not (-(1 << 63) <= v < (1 << 63)) for v in full])
        else:
            carry = np.array([v >> 64 != 0 for v in full])
        arr = w.vfile(file)
        w.vwrite(arr, didx, (res & np.uint64(MASK32)).astype(U32))
        w.vwrite(arr, didx + 1, (res >> np.uint64(32)).astype(U32))
        w.lane_mask_set(sidx, carry)

    reads = src_regs([s0, s1, s2], ["u32", "u32", "u64"])
    return Op(fn, "valu", inst, reads, ((file, didx, 2), ("s", sidx, 2)))


# ---- 64-bit integer ops --------------------------------------------------------------------------


@handler("v_lshl_add_u64", "v_lshlrev_b64", "v_lshrrev_b64", "v_ashrrev_i64", "v_mov_b64")
def _int64(inst: Instruction, ctx: Ctx) -> Op:
    name = inst.op
    if name == "v_lshl_add_u64":
        dst, srcs = _operands(inst, 3)
        types = ["u64", "u32", "u64"]
    elif name == "v_mov_b64":
        dst, srcs = _operands(inst, 1)
        types = ["u64"]
    else:
        dst, srcs = _operands(inst, 2)
        types = ["u32", "u64"]
    vb = ValuBuilder(inst, srcs, types, set())
    file, didx, _ = vdst_ref(dst)
    u64 = np.uint64

    def fn(w: Wave) -> None:
        vals, m = vb.sources(w)
        with np.errstate(over="ignore"):
            if name == "v_lshl_add_u64":
                r = (vals[0] << (vals[1] & U32(7)).astype(u64)) + vals[2]
            elif name == "v_mov_b64":
                r = vals[0]
            elif name == "v_lshlrev_b64":
                r = vals[1] << (vals[0] & U32(63)).astype(u64)
            elif name == "v_lshrrev_b64":
                r = vals[1] >> (vals[0] & U32(63)).astype(u64)
            else:
                r = (vals[1].view(np.int64) >> (vals[0] & U32(63)).astype(np.int64)).view(u64)
        arr = w.vfile(file)
        w.vwrite(arr, didx, (r & u64(MASK32)).astype(U32))
        w.vwrite(arr, didx + 1, (r >> u64(32)).astype(U32))

    return Op(fn, "valu", inst, src_regs(srcs, types), ((file, didx, 2),))


# ---- bitop3, cndmask ----------------------------------------------------------------------------


@handler("v_bitop3_b32")
def _bitop3_op(inst: Instruction, ctx: Ctx) -> Op:
    dst, srcs = _operands(inst, 3)
    vb = ValuBuilder(inst, srcs, ["u32"] * 3, {"bitop3"})
    f = _bitop3(inst.mods.get("bitop3", 0))
    wr = dst_writer(inst, dst)
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        vals, m = vb.sources(w)
        wr(w, f(*vals), m)

    return Op(fn, "valu", inst, src_regs(srcs, ["u32"] * 3), ((file, didx, 1),))


@handler("v_cndmask_b32")
def _cndmask(inst: Instruction, ctx: Ctx) -> Op:
    dst, s0, s1, cond = inst.operands
    # VOP3 form allows abs/neg on the sources, interpreted as f32 modifiers.
    fmod = s0.abs or s0.neg or s1.abs or s1.neg
    vb = ValuBuilder(inst, [s0, s1], ["f32", "f32"] if fmod else ["u32", "u32"], set())
    wr = dst_writer(inst, dst)
    cidx = cond.reg.index
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        (a, b), m = vb.sources(w)
        c = w.lane_mask_get(cidx)
        r = np.where(c, b, a)
        wr(w, r.view(U32) if r.dtype == F32 else r, m)

    reads = src_regs([s0, s1], ["u32", "u32"]) + (("s", cidx, 2),)
    return Op(fn, "valu", inst, reads, ((file, didx, 1),))
