"""Accuracy: the chunked float64 reference, the error metrics, and the accuracy run's rows."""

from __future__ import annotations

import math
import re

import pytest
import torch

from zyfa_bench.accuracy import INPUT_FLOOR, attention_f64, errors, run_accuracy
from zyfa_bench.peers import select
from zyfa_bench.spec import Spec
from zyfa_bench.workloads import Gaussian, ModelLike

CPU = torch.device("cpu")


def _naive(q, k, v, scale):
    """Row-by-row float64 attention with a bottom-right mask: an independent oracle."""
    b, sq, hq, _ = q.shape
    sk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    out = torch.zeros(b, sq, hq, dv, dtype=torch.float64)
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hkv)
            for i in range(sq):
                n = min(max(i + sk - sq + 1, 0), sk)
                if n == 0:
                    continue
                s = (k[bi, :n, kh].double() @ q[bi, i, h].double()) * scale
                p = torch.softmax(s, dim=0)
                out[bi, i, h] = p @ v[bi, :n, kh].double()
    return out


@pytest.mark.parametrize(("sq", "sk"), [(9, 9), (5, 12), (12, 5)])
def test_reference_matches_naive_oracle(sq, sk):
    torch.manual_seed(sq * 100 + sk)
    q, k, v = torch.randn(2, sq, 4, 8), torch.randn(2, sk, 2, 8), torch.randn(2, sk, 2, 6)
    ref = attention_f64(q, k, v, softmax_scale=0.3, causal=True, block_rows=4)
    assert torch.allclose(ref, _naive(q, k, v, 0.3), atol=1e-12)
    if sq > sk:  # rows that see nothing are exactly zero
        assert torch.count_nonzero(ref[:, : sq - sk]) == 0


def test_reference_slice_equals_rows_of_the_full_problem():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 20, 4, 8), torch.randn(1, 20, 1, 8), torch.randn(1, 20, 1, 8)
    full = attention_f64(q, k, v, softmax_scale=0.35)
    part = attention_f64(q[:, 13:], k, v, softmax_scale=0.35, q_row0=13, seqlen_q_total=20)
    assert torch.allclose(part, full[:, 13:], atol=1e-12)


def test_reference_agrees_with_zyfa_dense_reference():
    try:
        from zyfa.reference import attention_dense_f64
    except Exception as exc:  # not installed, or installed without its compiled parts
        pytest.skip(f"the real zyfa (zyfa-torch) is not importable: {exc}")

    torch.manual_seed(1)
    q, k, v = torch.randn(1, 33, 4, 16), torch.randn(1, 40, 2, 16), torch.randn(1, 40, 2, 16)
    ours = attention_f64(q, k, v, softmax_scale=0.25)
    theirs = attention_dense_f64(q, k, v, softmax_scale=0.25, causal=True)[0]
    assert torch.allclose(ours, theirs, atol=1e-12)


def test_errors():
    ref = torch.tensor([3.0, 4.0])
    e = errors(ref * 1.1, ref)
    assert e["rel_l2"] == pytest.approx(0.1) and e["max_abs"] == pytest.approx(0.4)
    assert math.isnan(errors(torch.tensor([float("nan"), 0.0]), ref)["rel_l2"])


def test_run_accuracy_rows(fake_zyfa_mod):
    peers = select(["zyfa", "sdpa-math", "cudnn-fp8"])
    spec = Spec(1, 48, 48, 4, 2, 32, 32)
    rows = run_accuracy(
        peers, [Gaussian(), ModelLike()], [spec], device=CPU, seeds=[0], rotations=(False, True)
    )
    by = {(r["workload"], r["impl"], r["rotate"]): r for r in rows}
    # BF16 peers once per problem; FP8 peers and the floor once per rotation setting.
    assert len(rows) == 2 * (
        2 + 2 * 4 + 2 * 1
    )  # 2 workloads x (2 bf16 + 2 rot x (3 fp8 zyfa + cudnn) + floors)
    for wl in ("gaussian", "model-like"):
        assert by[(wl, "cudnn-fp8", False)]["status"] == "skipped"
        # Skipped for lack of the package, or (where it is installed) for lack of a GPU.
        assert re.search("nvidia-cudnn-frontend|GPUs only", by[(wl, "cudnn-fp8", False)]["reason"])
        bf16 = by[(wl, "zyfa-bf16", None)]
        assert bf16["status"] == "ok" and bf16["rel_l2_vs_bf16"] < 1e-2  # bf16 output rounding only
        assert bf16["rel_l2_vs_dequant"] == bf16["rel_l2_vs_bf16"]
        for rot in (False, True):
            floor = by[(wl, INPUT_FLOOR, rot)]["rel_l2_vs_bf16"]
            fp8 = by[(wl, "zyfa-fp8-exact", rot)]
            # The fake computes exactly on the dequantised inputs: its own error is bf16 output rounding,
            # and against the BF16 truth it sits at the input-quantisation floor.
            assert fp8["rel_l2_vs_dequant"] < 1e-2
            assert fp8["rel_l2_vs_bf16"] == pytest.approx(floor, rel=0.2)
            assert 1e-3 < floor < 0.5
    # The fake saw the right calls: FP8 with float descales and every p_mode.
    fp8_calls = [c for c in fake_zyfa_mod.calls if c["dtype"] == torch.float8_e4m3fn]
    assert {c["p_mode"] for c in fp8_calls} == {"exact", "lean", "f16"}
    assert all(isinstance(d, float) for c in fp8_calls for d in c["descales"])
    assert all(c["causal"] is True for c in fake_zyfa_mod.calls)


def test_run_accuracy_reports_a_failing_peer(fake_zyfa_mod):
    def boom(*a, **kw):
        raise RuntimeError("kernel exploded")

    fake_zyfa_mod.flash_attn_func = boom
    rows = run_accuracy(
        select(["zyfa-bf16"]), [Gaussian()], [Spec(1, 16, 16, 2, 2, 16, 16)], device=CPU, seeds=[0]
    )
    assert rows[0]["status"] == "error" and "kernel exploded" in rows[0]["reason"]
