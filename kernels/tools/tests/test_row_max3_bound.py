"""The sm90 kernel's integer row max with its lower-bound fallback (row_max3).

kernels/sm90/fa_fwd_wgmma/softmax.cuh's `row_max3` takes a thread's max of one row's values as the
signed-int max of their float bits (VIMNMX3). Non-negative floats order as their bits do, so a non-negative
int max is the float max. When every value is negative (-0 and -inf included) the int max is instead the
most negative value, a lower bound of the max. row_max3 keeps that bound when the row's running max m_run
is already >= 0, and otherwise takes the int MIN, which among negative floats is the one nearest zero:
the float max. The quad's four threads then combine their results with fmaxf and the kernel forms
m_new = fmaxf(m_run, mx * C) (C > 0), kept unless it exceeds m_run by more than tau (the stale max;
BF16 tau 8, FP8 0).

The claim: m_new equals the one from the exact float max of all the row's values (as numbers: a zero's sign
cannot change exp2(t - m) or alpha). Checked here in float32 arithmetic on random rows, on rows whose values
are mostly negative (the attention-sink case), and on masked (-inf) and signed-zero values.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

THREADS = 4  # a row's values are spread over a quad
VALUES = 32  # per thread at tile_n 128 (48 at 192: the same logic)


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.int32)


def as_float(i: np.int32) -> np.float32:
    return np.array([i], dtype=np.int32).view(np.float32)[0]


def thread_max_lb(values: np.ndarray, m_run: np.float32) -> np.float32:
    """row_max3 for one thread's values."""
    m = bits(values).max()
    if m < 0 and not (m_run >= 0):
        return as_float(bits(values).min())
    return as_float(m)


def m_new_of(mx: np.float32, m_run: np.float32, scale: np.float32, tau: float) -> np.float32:
    """The kernel's update of the running max from the row's block max mx (fast softmax path)."""
    m_new = np.fmax(m_run, np.float32(mx * scale))
    if tau > 0 and not (m_new > np.float32(m_run + np.float32(tau))):
        m_new = m_run
    return m_new


def check_row(row: np.ndarray, m_run: float, scale: float, tau: float) -> None:
    row = row.astype(np.float32).reshape(THREADS, -1)
    m_run, scale = np.float32(m_run), np.float32(scale)
    exact = m_new_of(np.max(row), m_run, scale, tau)
    quad = np.float32(-np.inf)
    for t in range(THREADS):
        quad = np.fmax(quad, thread_max_lb(row[t], m_run))
    got = m_new_of(quad, m_run, scale, tau)
    assert got == exact, (got, exact, m_run, row)


def test_int_order_facts() -> None:
    """The two orderings the kernel relies on, on a sweep of float32 values."""
    x = np.float32(np.linspace(-1e4, 1e4, 20001))
    pos, neg = x[x >= 0], x[x < 0]
    assert as_float(bits(pos).max()) == pos.max()
    assert as_float(bits(neg).min()) == neg.max()  # negative floats: int order reversed
    assert as_float(bits(neg).max()) == neg.min()  # ... so the int max is the lower bound
    masked = np.float32([-np.inf, -3.0, -0.5])
    assert as_float(bits(masked).min()) == np.float32(-0.5)
    assert as_float(bits(np.float32([-np.inf] * 3)).min()) == -np.inf


finite = st.floats(-200, 200, width=32, allow_nan=False)
special = st.sampled_from([-np.inf, -0.0, 0.0, -1e-45, 1e-45, -3.4e38])
values = st.lists(st.one_of(finite, special), min_size=THREADS * VALUES, max_size=THREADS * VALUES)
m_runs = st.one_of(finite, st.sampled_from([-np.inf, -0.0, 0.0]))
scales = st.sampled_from([0.1275, 0.0901, 1.0, 2.0**-10])  # log2(e) / sqrt(d) for d = 128, 192; others


@settings(max_examples=400, deadline=None)
@given(values, m_runs, scales, st.sampled_from([0.0, 8.0]))
def test_random_rows(row: list[float], m_run: float, scale: float, tau: float) -> None:
    check_row(np.array(row), m_run, scale, tau)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.floats(0, 60),
    st.booleans(),
    st.integers(0, THREADS * VALUES),
    m_runs,
    st.sampled_from([0.0, 8.0]),
)
def test_shifted_rows(seed: int, shift: float, sink: bool, masked: int, m_run: float, tau: float) -> None:
    """Scores shifted down (most of a row negative), an optional sink value, masked keys at the end."""
    rng = np.random.default_rng(seed)
    row = rng.normal(0.0, 11.3, THREADS * VALUES) - shift
    if sink:
        row[rng.integers(0, row.size)] = shift
    row[row.size - masked :] = -np.inf
    check_row(row, m_run, 0.1275, tau)
