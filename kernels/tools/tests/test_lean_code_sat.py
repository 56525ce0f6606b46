"""The sm90 kernel's ZYFA_WS_LEAN_SAT form of lean P's code against its default form, in exact arithmetic.

fa_fwd_wgmma.cu's `lean_code` computes the e4m3 code of P in the low byte of a float. Default:
    t = fma(S, A, B);  code = max(t, 0) + 1.5 * 2^23
LEAN_SAT (two FMA-pipe instructions instead of three):
    u = fma.sat(S, A / 128, B / 128);  code = fma(u, 128, 1.5 * 2^23)
where fma rounds once to float32 (round to nearest even) and .sat clamps to [0, 1] (NaN to 0). The
kernel claims both give the same float bits whenever t <= 128 (its fast softmax keeps t <= 120 plus
rounding). This test checks the claim with every rounding done exactly (fractions), on random and on
adversarial inputs: t near the code boundaries (half-integers, where a second rounding would bite),
tiny and negative t, and masked (-inf) scores.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

MAGIC = 12582912.0  # 1.5 * 2^23: adding it rounds a value in [0, 2^22) to an integer (RNE)


def round_f32(x: Fraction) -> float:
    """x rounded to the nearest float32 (ties to even), subnormals included; returned as a float."""
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    a = abs(x)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    while Fraction(2) ** e > a:  # fix log2's floating-point error at powers of two
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, -126)  # below 2^-126: the subnormal spacing 2^-149
    ulp = Fraction(2) ** (e - 23)
    q, r = divmod(a, ulp)
    if r > ulp / 2 or (r == ulp / 2 and q % 2 == 1):
        q += 1
    value = q * ulp
    if value >= Fraction(2) ** 128:
        return sign * math.inf
    return sign * float(value)


def fma_f32(a: float, b: float, c: float) -> float:
    """fma.rn.f32: a * b + c rounded once (finite inputs; infinities as IEEE 754 gives them)."""
    if math.isinf(a) or math.isinf(b) or math.isinf(c):
        return a * b + c
    return round_f32(Fraction(a) * Fraction(b) + Fraction(c))


def code_default(s: float, a: float, b: float) -> float:
    t = fma_f32(s, a, b)
    t = 0.0 if math.isnan(t) else max(t, 0.0)  # fmaxf(NaN, 0) = 0
    return round_f32(Fraction(t) + Fraction(MAGIC))


def code_sat(s: float, a: float, b: float) -> float:
    a128, b128 = round_f32(Fraction(a) / 128), round_f32(Fraction(b) / 128)
    u = fma_f32(s, a128, b128)
    u = 0.0 if math.isnan(u) else min(max(u, 0.0), 1.0)  # .sat: [0, 1], NaN -> 0
    return fma_f32(u, 128.0, MAGIC)


f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def softmax_inputs(draw: st.DrawFn) -> tuple[float, float, float]:
    """(S, A, B) as the fast softmax makes them: A = 8 C, B = 120 - 8 m with m >= S C, so t <= ~120."""
    # qk_scale C: softmax scale * descales * log2 e
    c = draw(st.floats(min_value=2.0**-10, max_value=4.0, width=32))
    s = draw(st.floats(min_value=-3000.0, max_value=3000.0, width=32))
    slack = draw(st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=40.0, width=32)))
    m = round_f32(Fraction(s) * Fraction(c)) + slack  # the row max: at least this score's S C
    a = round_f32(Fraction(8) * Fraction(c))
    b = round_f32(Fraction(120) - Fraction(8) * Fraction(m))
    return s, a, b


@settings(max_examples=3000, deadline=None)
@given(softmax_inputs())
def test_sat_form_equals_default_in_the_softmax_domain(sab: tuple[float, float, float]) -> None:
    s, a, b = sab
    assert code_sat(s, a, b) == code_default(s, a, b)


@settings(max_examples=3000, deadline=None)
@given(st.integers(min_value=-8, max_value=260), st.integers(min_value=-3, max_value=3), f32)
def test_sat_form_at_code_boundaries(k: int, nudge: int, a_raw: float) -> None:
    """t within a few float32 ulps of a half-integer k / 2 (where double rounding would differ) and of 0."""
    a = abs(a_raw) % 64.0 + 0.125
    a = round_f32(Fraction(a))
    target = Fraction(k, 2)
    s = 1.0  # S = 1: t = A + B, so B puts t at the target, then `nudge` float32 steps away from it
    b = np.float32(round_f32(target - Fraction(a)))
    for _ in range(abs(nudge)):
        b = np.nextafter(b, np.float32(math.inf if nudge > 0 else -math.inf))
    b = float(b)
    if fma_f32(s, a, b) > 128.0:
        return  # outside the claimed domain (t <= 128)
    assert code_sat(s, a, b) == code_default(s, a, b)


def test_masked_and_tiny_scores() -> None:
    a = round_f32(Fraction(8 * 0.127))
    for b in (120.0, -5.0, 0.0, 1e-30):
        assert code_sat(-math.inf, a, b) == code_default(-math.inf, a, b) == MAGIC  # masked key: code 0
    for t in (1e-40, 1e-38, 2.0**-126, 0.49999997, 0.5, 0.50000006, 1.5, 2.5, 127.5, 128.0):
        b = round_f32(Fraction(t))
        assert code_sat(0.0, 1.0, b) == code_default(0.0, 1.0, b), t


def test_the_sat_form_differs_above_the_domain() -> None:
    """Past t = 128 the clamp at 1.0 cuts the code: the domain condition is real (the test can fail)."""
    assert code_sat(0.0, 1.0, 130.0) != code_default(0.0, 1.0, 130.0)
