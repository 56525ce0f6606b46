"""The GPU kernels past 2^31 elements and under concurrency (two streams, two threads).

Skipped without a GPU or zyfa_core, and per case where this GPU's manifest has no such kernel.

- More than 2^31 elements: every offset a kernel forms must be 64-bit. Two layouts reach it: a large
  batch of short sequences (q, k, v and out each 2^31 + 2^18 elements: batch 8193 x seqlen 2048 x
  1 head x 128), and one long K/V (seqlen_k 2^21 + 128 with 8 KV heads: k and v past 2^31, a few
  query rows that each see about two million keys). Rows at both ends (the first and last batch,
  the first and last query rows) are checked against float64, with test_zyfa_gpu.py's tolerances:
  relative L2 5e-3 (BF16) and 0.06 (FP8, the largest p_mode bound), lse 1e-3 (BF16) / 0.15 (FP8,
  derived in test_zyfa_gpu_fuzz.py). About 24 GiB of GPU memory at the peak.
- Concurrency: results computed alone first; then the same calls on two side streams at once, and
  from two Python threads at once (each on its own stream, after the kernel cache was cleared so
  both race to load kernels) must give those results bitwise (the kernels are deterministic: no
  atomics, a fixed reduction order).
"""

from __future__ import annotations

import threading

import pytest
import torch
from zyfa_testutil import rel_err

import zyfa
from zyfa import _ops
from zyfa import reference as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.gpu_stress,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU"),
]

TWO_31 = 1 << 31
OUT_TOL = {None: 5e-3, "fp8": 0.06}
LSE_TOL = {None: 1e-3, "fp8": 0.15}


@pytest.fixture(autouse=True)
def _need_core():
    pytest.importorskip("zyfa_core")
    yield
    torch.cuda.empty_cache()


def _skip_without_kernel(q, k, v, p_mode):
    from zyfa_core.errors import KernelNotFoundError

    try:
        return _ops.select_kernel(q, k, v, True, p_mode)
    except KernelNotFoundError as exc:
        pytest.skip(str(exc).splitlines()[0])


def _randn(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.bfloat16) * scale).bfloat16()


def _maybe_fp8(q, k, v, fp8: bool):
    if not fp8:
        return (q, k, v), {}, (1.0, 1.0, 1.0)
    (q8, dq), (k8, dk), (v8, dv) = (zyfa.fp8_quantize(x, as_float=True) for x in (q, k, v))
    return (q8, k8, v8), {"q_descale": dq, "k_descale": dk, "v_descale": dv}, (dq, dk, dv)


def _check_slice(out, lse, q, k, v, descales, key: str | None, what: str) -> None:
    truth, truth_lse = R.attention_dense_f64(q, k, v, None, True, *descales)
    assert not torch.isnan(out.float()).any(), what
    assert rel_err(out, truth) <= OUT_TOL[key], what
    assert (lse.double() - truth_lse).abs().max().item() <= LSE_TOL[key], what


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_batch_past_2_31_elements(fp8):
    batch, seqlen, d = 8193, 2048, 128
    q = _randn(batch, seqlen, 1, d, seed=1, scale=2.0)
    k = _randn(batch, seqlen, 1, d, seed=2)
    v = _randn(batch, seqlen, 1, d, seed=3)
    assert q.numel() > TWO_31
    (q, k, v), kw, ds = _maybe_fp8(q, k, v, fp8)
    _skip_without_kernel(q, k, v, None)
    out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, **kw)
    assert out.numel() > TWO_31
    key = "fp8" if fp8 else None
    for b in (0, 1, batch - 2, batch - 1):  # both ends: the last batch starts past element 2^31
        sl = slice(b, b + 1)
        _check_slice(out[sl], lse[sl], q[sl], k[sl], v[sl], ds, key, f"batch {b}")


def _row_truth(q_row, k, v, visible: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (out [heads_q, d_v], lse [heads_q]) of one query row that sees keys 0..visible-1, one KV
    head at a time (the whole K/V in float64 would not fit: 2 GiB per head each)."""
    heads_q, heads_kv, d = q_row.shape[0], k.shape[2], q_row.shape[1]
    group = heads_q // heads_kv
    outs, lses = [], []
    for h in range(heads_kv):
        kh, vh = k[0, :visible, h].double(), v[0, :visible, h].double()
        s = q_row[h * group : (h + 1) * group].double() @ kh.T / d**0.5
        lse = torch.logsumexp(s, dim=-1)
        outs.append(torch.exp(s - lse[:, None]) @ vh)
        lses.append(lse)
        del kh, vh, s
    return torch.cat(outs), torch.cat(lses)


def test_long_kv_past_2_31_elements():
    seqlen_q, seqlen_k, heads_q, heads_kv, d = 128, (1 << 21) + 128, 16, 8, 128
    q = _randn(1, seqlen_q, heads_q, d, seed=4, scale=2.0)
    k = _randn(1, seqlen_k, heads_kv, d, seed=5)
    v = _randn(1, seqlen_k, heads_kv, d, seed=6)
    assert k.numel() > TWO_31 and v.numel() > TWO_31
    _skip_without_kernel(q, k, v, None)
    out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    for row in (0, seqlen_q - 1):  # the first and last query rows, every head
        visible = seqlen_k - seqlen_q + row + 1  # bottom-right causal: row i sees keys 0..i + sk - sq
        truth, truth_lse = _row_truth(q[0, row], k, v, visible)
        assert not torch.isnan(out[0, row].float()).any(), row
        assert rel_err(out[0, row], truth) <= OUT_TOL[None], row
        assert (lse[0, :, row].double() - truth_lse).abs().max().item() <= LSE_TOL[None], row


def _workloads():
    """(inputs, kwargs) of a BF16 and an FP8 problem (GQA, ragged), big enough to overlap on a GPU."""
    q = _randn(2, 1900, 16, 128, seed=7, scale=2.0)
    k, v = _randn(2, 1900, 4, 128, seed=8), _randn(2, 1900, 4, 128, seed=9)
    fp8_inputs, fp8_kw, _ = _maybe_fp8(q, k, v, True)
    work = [((q, k, v), {}), (fp8_inputs, fp8_kw)]
    for inputs, _ in work:
        _skip_without_kernel(*inputs, None)
    return work


def _call(inputs, kw) -> torch.Tensor:
    return zyfa.flash_attn_func(*inputs, causal=True, **kw)


def test_two_streams_at_once():
    work = _workloads()
    alone = [_call(*w) for w in work]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in work]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(3):
        outs = []
        for s, w in zip(streams, work, strict=True):
            with torch.cuda.stream(s):
                outs.append(_call(*w))
        for s in streams:
            s.synchronize()
        for got, want in zip(outs, alone, strict=True):
            assert torch.equal(got, want)


def test_two_threads_at_once():
    work = _workloads()
    alone = [_call(*w) for w in work]
    torch.cuda.synchronize()
    _ops.clear_kernel_cache()  # both threads then select and load their kernels at the same moment
    start = threading.Barrier(len(work))
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            stream = torch.cuda.Stream()
            start.wait()
            with torch.cuda.stream(stream):
                for n in range(20):
                    got = _call(*work[i])
                    stream.synchronize()
                    if not torch.equal(got, alone[i]):
                        errors.append(f"thread {i}, call {n}: differs from the result computed alone")
        except Exception as exc:  # reported below, with the thread it came from
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, "\n".join(errors)
