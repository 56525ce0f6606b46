"""The sm90 kernel's form of lean P's code (f16 subnormals) against the contract's, in exact arithmetic.

The contract (zyfa.reference.lean_p_codes; code_default below is its float form, max(t, 0) + 1.5 * 2^23):
    code = clamp(rint(fma(S, A, B)), 0, 126)        (fma rounds once to float32, rint to nearest even)
The kernel (kernels/sm90/fa_fwd_wgmma/softmax.cuh, lean_f16_word), the code as an f16 subnormal:
    x = fma(S, A 2^-24, B 2^-24);  h = relu(f16(x));  code = bits of h = h 2^24
where f16() is cvt.rn.f16x2.f32 (nearest even) and relu is its .relu (negatives and -inf to +0). The
power-of-two scales make x exactly 2^-24 fma(S, A, B) and f16's subnormal spacing is 2^-24, so the kernel
claims the contract's code everywhere: no tolerance. These tests check that with every rounding done exactly
(fractions), on the softmax's inputs, at the code boundaries and at masked and negative scores; and that a
form which rounds twice (x = S A + B + 1024 in f16's [1024, 2048)) does differ, so
the boundary test can fail.
"""

from __future__ import annotations

import math
from fractions import Fraction

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
    """The literal code float: max(fma(S, A, B), 0) + 1.5 * 2^23, rounded by the add (RNE)."""
    t = fma_f32(s, a, b)
    t = 0.0 if math.isnan(t) else max(t, 0.0)  # fmaxf(NaN, 0) = 0
    return round_f32(Fraction(t) + Fraction(MAGIC))


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


def round_f16(x: float) -> float:
    """cvt.rn.f16.f32 of a float32 value: nearest even at f16's spacing, +-inf from 65520 on."""
    if math.isinf(x) or x == 0:
        return x
    a = Fraction(abs(x))
    e = max(math.floor(math.log2(abs(x))), -14)
    while Fraction(2) ** e > a and e > -14:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    ulp = Fraction(2) ** (e - 10)
    q, r = divmod(a, ulp)
    if r > ulp / 2 or (r == ulp / 2 and q % 2 == 1):
        q += 1
    value = q * ulp
    if value >= 65520:
        return math.copysign(math.inf, x)
    return math.copysign(float(value), x)


def code_rounded_twice(s: float, a: float, b: float) -> int:
    """A double-rounding form: x = fma(S, A, fl32(B + 1024)), code = max(f16(x), 1024) - 1024."""
    x = fma_f32(s, a, round_f32(Fraction(b) + 1024))
    return int(max(round_f16(x), 1024.0)) - 1024


def code_f16_subnormal(s: float, a: float, b: float) -> int:
    scale = Fraction(1, 2**24)
    x = fma_f32(s, round_f32(Fraction(a) * scale), round_f32(Fraction(b) * scale))
    h = round_f16(x)
    h = 0.0 if h < 0 else h  # .relu: -0, negatives and -inf land on +0, code 0
    bits = Fraction(h) * 2**24
    assert bits.denominator == 1 and bits < 1024, (s, a, b, h)  # a subnormal (or zero): its bits are the code
    return int(bits)


def contract_code(s: float, a: float, b: float) -> int:
    return int(code_default(s, a, b) - MAGIC)


@settings(max_examples=3000, deadline=None)
@given(softmax_inputs())
def test_subnormal_form_is_the_contract(sab: tuple[float, float, float]) -> None:
    s, a, b = sab
    assert code_f16_subnormal(s, a, b) == contract_code(s, a, b), sab


@settings(max_examples=2000, deadline=None)
@given(st.integers(min_value=0, max_value=125), st.integers(min_value=-40, max_value=40))
def test_subnormal_form_at_code_boundaries(k: int, steps: int) -> None:
    """t at the half-integer k + 1/2 and 2^-16 steps around it (S = 1, so t = A + B)."""
    b = round_f32(Fraction(2 * k + 1, 2) + steps * Fraction(1, 2**16) - 1)
    assert code_f16_subnormal(1.0, 1.0, b) == contract_code(1.0, 1.0, b), (k, steps)


def test_subnormal_form_masked_and_negative() -> None:
    a = round_f32(Fraction(8 * 0.127))
    for b in (120.0, -5.0, 0.0):
        assert code_f16_subnormal(-math.inf, a, b) == 0  # masked key
    for t in (-1e30, -70000.0, -1025.0, -1.0, -0.5, -1e-30, 0.0, 1e-30, 0.5, 1.5, 2.5, 119.5, 120.0, 120.49):
        b = round_f32(Fraction(t))
        assert code_f16_subnormal(0.0, 1.0, b) == contract_code(0.0, 1.0, b), t


def test_rounding_twice_does_differ() -> None:
    """Just above a tie, rounding at 2^-13 first lands on the tie and ties-to-even goes down: the boundary
    test above would catch a form that rounds twice."""
    b = round_f32(Fraction(5, 2) + Fraction(1, 2**15))  # t = 2.5 + 2^-15, contract code 3
    assert contract_code(0.0, 1.0, b) == 3
    assert code_rounded_twice(0.0, 1.0, b) == 2
    assert code_f16_subnormal(0.0, 1.0, b) == 3
