"""Floating-point helpers on lane vectors (numpy), bit-exact where the ISA defines the result.

Conventions: register contents are uint32 arrays; helpers take and return uint32 bit patterns or
float32 views. f32 add/mul/sub come straight from numpy (IEEE binary32, round to nearest even,
denormals kept: the kernels run with FP_DENORM mode 3 = keep f32 denormals). A fused multiply-add
needs one rounding: `fma_f32` gets it exactly with the round-to-odd trick in float64.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

F32_NAN = np.uint32(0x7FC00000)


def as_f32(bits: np.ndarray) -> np.ndarray:
    """View uint32 bits as float32 (no copy)."""
    return bits.view(np.float32)


def as_u32(x: np.ndarray) -> np.ndarray:
    """Bits of a float32 array as uint32 (no copy)."""
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def round_f64_to_f32(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Round the exact value s + err (s = RN64(x), err = x - s) once to float32.

    Rounding s to odd (the odd float64 neighbour of x when inexact) keeps the information a second
    rounding to float32 needs: float64 has more than 24 + 2 significand bits, so RN32(RO64(x)) ==
    RN32(x). This avoids the double-rounding error of float32(float64(a*b + c)).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        bits = s.view(np.uint64)
        need = (err != 0) & ((bits & np.uint64(1)) == 0) & np.isfinite(s) & np.isfinite(err)
        if need.any():
            toward = np.where(err > 0, np.inf, -np.inf)
            s = np.where(need, np.nextafter(s, toward), s)
        return s.astype(np.float32)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused a*b + c on float32 arrays with a single rounding (IEEE fusedMultiplyAdd)."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)  # exact: 24+24 bits < 53
        c64 = np.broadcast_to(c, p.shape).astype(np.float64)
        s = p + c64
        # Two-sum: the exact error of s = p + c (valid when no overflow occurred).
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        return round_f64_to_f32(s, err)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16 values in a uint32 array), round to nearest even; NaN stays NaN."""
    bits = as_u32(x).astype(np.uint32)
    nan = np.isnan(x)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = (bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)
    quiet = (bits >> np.uint32(16)) | np.uint32(0x40)
    return np.where(nan, quiet, rounded).astype(np.uint32) & np.uint32(0xFFFF)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    """bf16 bits (low 16 bits of uint32 lanes) -> float32."""
    return ((b.astype(np.uint32) & np.uint32(0xFFFF)) << np.uint32(16)).view(np.float32)


def f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits, round to nearest even (numpy's conversion is correctly rounded)."""
    with np.errstate(over="ignore"):
        return x.astype(np.float16).view(np.uint16).astype(np.uint32)


def f16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    """IEEE half bits (low 16 bits) -> float32."""
    return (b.astype(np.uint32) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32)


# ---- FP8 (OCP formats on gfx950) ---------------------------------------------------------------

_FP8_DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,  # OCP E4M3FN: max 448, NaN 0x7f/0xff, no inf
    "e5m2": ml_dtypes.float8_e5m2,  # OCP E5M2: max 57344, has inf
}
_FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
FP8_DECODE = {
    name: np.arange(256, dtype=np.uint8).view(dt).astype(np.float32) for name, dt in _FP8_DTYPES.items()
}


def fp8_decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    """FP8 codes (any integer array) -> float32 values, through the exact code table."""
    return FP8_DECODE[fmt][codes.astype(np.uint32) & np.uint32(0xFF)]


def f32_to_fp8(x: np.ndarray, fmt: str, saturate: bool) -> np.ndarray:
    """float32 -> FP8 code (uint32), round to nearest even.

    saturate=False: OCP conversion, a value that rounds past the largest finite becomes NaN (e4m3)
    or inf (e5m2). saturate=True: finite values clamp to +-max first; NaN stays NaN; inf clamps.
    """
    x = np.asarray(x, dtype=np.float32)
    if saturate:
        m = _FP8_MAX[fmt]
        x = np.where(np.isnan(x), x, np.clip(x, -m, m)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(_FP8_DTYPES[fmt]).view(np.uint8).astype(np.uint32)


# ---- integer helpers -------------------------------------------------------------------------


def sext(v: int, bits: int) -> int:
    """Sign-extend the low `bits` of a Python int."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v
