"""A seeded random-shape fuzz of every default kernel on a GPU against float64.

Both head shapes (d 128 and d_qk 192 / d_v 128), BF16 and FP8 (e4m3fn) with each p_mode, 40 random
problems each (320 in all): batch 1-3, seqlen_q and seqlen_k drawn independently and log-uniformly
from 1..4096 (so seqlen_q != seqlen_k almost always, including seqlen_q > seqlen_k where leading rows
see no key), heads_kv 1-8 and GQA ratios 1-40. The seed is fixed (FUZZ_SEED), so a failure names a
case that reproduces. Skipped without a GPU or zyfa_core, and per mode where this GPU's manifest has
no kernel.

Truth is attention_dense_f64 on the GPU (float64 einsum; TF32 plays no part in float64) on the exact
inputs the kernel saw (FP8: the dequantised e4m3 values). Tolerances are test_zyfa_gpu.py's: relative
L2 of out <= 5e-3 (BF16; f16 P) / 0.04 (exact P) / 0.06 (lean P), derived in test_zyfa_reference.py;
lse within 1e-3 for BF16. FP8 lse: test_zyfa_gpu.py allows 8e-2 against the same-numerics reference
(Hopper's FP8 tensor cores truncate S); against float64 P's rounding adds up to ln(1 + 2^-4) = 0.061
(one e4m3 step of the dominant term of a sharp row), so 0.15 here. Rows without keys: out 0 and
lse +inf exactly.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

import zyfa
from zyfa import _ops
from zyfa import reference as R

NEEDS_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")

FUZZ_SEED = 20261206
CASES_PER_MODE = 40
MAX_SEQLEN = 4096
GQA_RATIOS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 32, 40)
MAX_SCORES = 1 << 29  # batch * heads_q * seqlen_q * seqlen_k: float64 scores of at most 4 GiB
MAX_ROWS = 1 << 18  # batch * heads * seqlen of q and of k/v: float64 copies of at most 384 MiB
OUT_TOL = {None: 5e-3, "exact": 0.04, "lean": 0.06, "f16": 5e-3}
LSE_TOL = {None: 1e-3, "exact": 0.15, "lean": 0.15, "f16": 0.15}
MODES = [None, "exact", "lean", "f16"]


def _log_uniform(rng: random.Random, hi: int) -> int:
    return max(1, min(hi, round(math.exp(rng.uniform(0.0, math.log(hi))))))


def fuzz_shapes(seed: int, count: int) -> list[tuple[int, int, int, int, int]]:
    """(batch, seqlen_q, seqlen_k, heads_q, heads_kv) drawn from `seed`; scores capped at MAX_SCORES."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        sq, sk = _log_uniform(rng, MAX_SEQLEN), _log_uniform(rng, MAX_SEQLEN)
        heads_kv, ratio = rng.choice((1, 2, 4, 8)), rng.choice(GQA_RATIOS)
        batch = rng.randint(1, 3)
        while batch > 1 and (
            batch * heads_kv * ratio * sq * sk > MAX_SCORES
            or batch * heads_kv * ratio * max(sq, sk) > MAX_ROWS
        ):
            batch -= 1
        while heads_kv > 1 and heads_kv * ratio * sq * sk > MAX_SCORES:
            heads_kv //= 2
        while heads_kv * ratio * sq * sk > MAX_SCORES or heads_kv * ratio * sq > MAX_ROWS:
            sq = max(1, sq // 2)  # MQA at ratio 40 and 4K x 4K: a shorter q
        shapes.append((batch, sq, sk, heads_kv * ratio, heads_kv))
    return shapes


def _inputs(shape, d_qk: int, seed: int):
    b, sq, sk, hq, hkv = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, hq, d_qk, generator=g, device="cuda") * 2.0
    k = torch.randn(b, sk, hkv, d_qk, generator=g, device="cuda")
    v = torch.randn(b, sk, hkv, 128, generator=g, device="cuda")
    return q.bfloat16(), k.bfloat16(), v.bfloat16()


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """‖x − ref‖ / ‖ref‖ in float64, on the device (the outputs can be large)."""
    return ((x.double() - ref).norm() / ref.norm()).item()


def _lse_err(lse: torch.Tensor, ref: torch.Tensor) -> float:
    """Max |lse − ref| over the rows with a finite reference (0 when there are none)."""
    finite = torch.isfinite(ref)
    return (lse.double()[finite] - ref[finite]).abs().max().item() if finite.any() else 0.0


def _run_case(shape, d_qk: int, p_mode: str | None, seed: int) -> str | None:
    """One problem: None when it passes, else a line saying what failed (with the case)."""
    q, k, v = _inputs(shape, d_qk, seed)
    kw, descales = {}, (1.0, 1.0, 1.0)
    if p_mode is not None:
        (q, dq), (k, dk), (v, dv) = (zyfa.fp8_quantize(x, as_float=True) for x in (q, k, v))
        descales = (dq, dk, dv)
        kw = {"q_descale": dq, "k_descale": dk, "v_descale": dv, "p_mode": p_mode}
    out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, **kw)
    truth, truth_lse = R.attention_dense_f64(q, k, v, None, True, *descales)
    case = f"shape {shape} d_qk {d_qk} p_mode {p_mode} seed {seed}"
    if torch.isnan(out.float()).any() or torch.isnan(lse).any():
        return f"{case}: NaN in out or lse"
    if truth.abs().max() == 0:  # every row without keys: out must be 0 exactly
        return None if torch.all(out == 0) else f"{case}: rows without keys are not 0"
    if not torch.equal(torch.isinf(lse), torch.isinf(truth_lse)):
        return f"{case}: lse is not +inf exactly on the rows without keys"
    err = _rel_err(out, truth)
    if err > OUT_TOL[p_mode]:
        return f"{case}: out relative L2 {err:.3g} > {OUT_TOL[p_mode]}"
    lerr = _lse_err(lse, truth_lse)
    if lerr > LSE_TOL[p_mode]:
        return f"{case}: lse error {lerr:.3g} > {LSE_TOL[p_mode]}"
    return None


@pytest.mark.gpu
@pytest.mark.gpu_stress
@NEEDS_GPU
@pytest.mark.parametrize("p_mode", MODES, ids=["bf16", "exact", "lean", "f16"])
@pytest.mark.parametrize("d_qk", [128, 192])
def test_fuzz_against_float64(d_qk, p_mode):
    pytest.importorskip("zyfa_core")
    probe = _inputs((1, 1, 1, 1, 1), d_qk, 0)
    if p_mode is not None:
        probe = tuple(zyfa.fp8_quantize(x)[0] for x in probe)
    try:
        _ops.select_kernel(*probe, True, p_mode)
    except Exception as exc:  # KernelNotFoundError: no such kernel on this GPU's manifest
        pytest.skip(str(exc).splitlines()[0])
    seed = FUZZ_SEED + d_qk + MODES.index(p_mode)
    failures = []
    for i, shape in enumerate(fuzz_shapes(seed, CASES_PER_MODE)):
        failure = _run_case(shape, d_qk, p_mode, seed + i)
        if failure:
            failures.append(failure)
    assert not failures, f"{len(failures)} of {CASES_PER_MODE} cases failed:\n" + "\n".join(failures)


def test_fuzz_shapes_cover_the_ranges():
    """The drawn shapes span what the fuzz promises (checked on any machine: no GPU needed)."""
    shapes = [s for i in range(8) for s in fuzz_shapes(FUZZ_SEED + i, CASES_PER_MODE)]
    assert all(1 <= s[1] <= MAX_SEQLEN and 1 <= s[2] <= MAX_SEQLEN for s in shapes)
    assert sum(s[1] != s[2] for s in shapes) > 0.9 * len(shapes)
    assert any(s[1] > s[2] for s in shapes) and any(s[1] < s[2] for s in shapes)
    assert max(max(s[1], s[2]) for s in shapes) > 2048 and min(min(s[1], s[2]) for s in shapes) < 8
    ratios = {s[3] // s[4] for s in shapes}
    assert 1 in ratios and max(ratios) >= 32
    assert all(s[3] % s[4] == 0 and s[0] * s[3] * s[1] * s[2] <= MAX_SCORES for s in shapes)
    assert all(s[0] * s[3] * s[1] <= MAX_ROWS and s[0] * s[4] * s[2] <= MAX_ROWS for s in shapes)
