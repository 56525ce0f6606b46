"""cuDNN's serving peer (`zyfa_bench.peers.cudnn.varlen_call`) on the CPU, through the mocked frontend.

The mock (fake_peers.cudnn_module) reads every sequence through the ragged offsets, sequence lengths,
strides and page tables it is handed, exactly as cuDNN defines them, so a wrong offset unit, length,
page-table shape or mask alignment fails against the float64 reference of zyfa.reference.
"""

from __future__ import annotations

import sys

import pytest
import torch
from fake_peers import cudnn_module

import zyfa.reference as R
from zyfa_bench.accuracy import errors
from zyfa_bench.peers import cudnn as cudnn_peer
from zyfa_bench.peers.base import Unsupported
from zyfa_bench.serving import ServingStep, build_step, measure

CPU = torch.device("cpu")
# Lengths with a single-token prompt, one longer than a page, and page-unaligned ends.
LENS = (5, 17, 1, 33)
# BF16 output rounding (~2e-3 rel L2); e4m3 output rounding (~3%) on top of FP8 inputs.
TOLERANCE = {"bf16": 1e-2, "fp8": 6e-2}


def test_lengths_and_ragged_offsets_from_cu_seqlens():
    cu = torch.tensor([0, 5, 22, 23, 56], dtype=torch.int32)
    lens = cudnn_peer.seq_lens(cu)
    assert lens.dtype == torch.int32 and lens.shape == (4, 1, 1, 1)
    assert lens.reshape(-1).tolist() == [5, 17, 1, 33]
    new = cudnn_peer.ragged_offsets(cu, 4, 128, backend=91000)
    old = cudnn_peer.ragged_offsets(cu, 4, 128, backend=90500)
    assert (new.dtype, old.dtype) == (torch.int64, torch.int32) and new.shape == (5, 1, 1, 1)
    # Counted in elements of the packed [total, heads, dim] buffer: row r starts at r * heads * dim.
    assert new.reshape(-1).tolist() == [0, 5 * 512, 22 * 512, 23 * 512, 56 * 512] == old.reshape(-1).tolist()
    assert cudnn_peer.thd_layout(4, 33, 8, 64) == ([4, 8, 33, 64], [33 * 8 * 64, 64, 8 * 64, 1])


def _run(monkeypatch, step, precision, seed=0, backend=91000, capability=None):
    fake = cudnn_module()
    fake.backend_version = lambda: backend
    monkeypatch.setitem(sys.modules, "cudnn", fake)
    # the GPU the peer sees is the test's choice (None: none), never the machine's
    monkeypatch.setattr(cudnn_peer, "cuda_capability", lambda: capability)
    x = build_step(step, device=CPU, precision=precision, seed=seed)
    prepared = cudnn_peer.varlen_call(x, x.descales)
    cu_k = None if x.page_table is not None else x.cu_seqlens_k
    dq, dk, dv = x.descales or (1.0, 1.0, 1.0)
    ref, _ = R.attention_varlen_dense_f64(
        x.q,
        x.k,
        x.v,
        x.cu_seqlens_q,
        cu_k,
        seqused_k=x.seqused_k,
        page_table=x.page_table,
        q_descale=dq,
        k_descale=dk,
        v_descale=dv,
    )
    return prepared, ref, fake


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("prefix", [0, 32])
@pytest.mark.parametrize(("heads", "dims"), [((4, 2), (64, 64)), ((2, 2), (48, 32))])
def test_varlen_call_matches_float64(monkeypatch, no_cuda_stream, precision, prefix, heads, dims):
    step = ServingStep(LENS, prefix, 16, *heads, *dims)
    prepared, ref, fake = _run(monkeypatch, step, precision, seed=prefix + dims[0])
    raw = prepared.call()
    assert raw.shape == (sum(LENS), heads[0], dims[1])
    assert raw.dtype == (torch.float8_e4m3fn if precision == "fp8" else torch.bfloat16)
    err = errors(prepared.result(raw), ref)["rel_l2"]
    assert err < TOLERANCE[precision]
    if precision == "fp8":  # the output really is e4m3: its rounding shows
        assert err > 1e-3 and any("dequantised" in n for n in prepared.notes)
    io = "e4m3" if precision == "fp8" else "bf16"
    assert ("pygraph", io, "f32", "f32") in fake.calls and ("set_stream", "handle", 0) in fake.calls


def test_int32_offsets_before_cudnn_9_6(monkeypatch, no_cuda_stream):
    step = ServingStep(LENS, 0, 16, 2, 1, 32, 32)
    prepared, ref, _ = _run(monkeypatch, step, "bf16", backend=90500)
    assert errors(prepared.output(), ref)["rel_l2"] < TOLERANCE["bf16"]


def test_wrong_alignment_would_be_caught(monkeypatch, no_cuda_stream):
    """With a prefix, the top-left mask gives other numbers: the float64 comparison above can fail."""
    step = ServingStep(LENS, 32, 16, 2, 1, 32, 32)
    monkeypatch.setattr(cudnn_peer, "causal_kwargs", lambda causal, same: {"use_causal_mask": True})
    prepared, ref, _ = _run(monkeypatch, step, "bf16")
    assert errors(prepared.output(), ref)["rel_l2"] > 0.1


def test_fp8_over_a_prefix_is_unsupported_on_hopper(monkeypatch, no_cuda_stream):
    step = ServingStep(LENS, 32, 16, 2, 1, 32, 32)
    with pytest.raises(
        Unsupported, match="bottom-right causal mask .* sm100 and newer only .*; this GPU is sm90"
    ):
        _run(monkeypatch, step, "fp8", capability=(9, 0))
    no_prefix = ServingStep(LENS, 0, 16, 2, 1, 32, 32)
    prepared, ref, _ = _run(monkeypatch, no_prefix, "fp8", capability=(9, 0))  # no prefix: runs
    assert errors(prepared.output(), ref)["rel_l2"] < TOLERANCE["fp8"]


def test_cudnn_rows_through_measure(monkeypatch, no_cuda_stream):
    """The serving harness times the cuDNN call (FP8 rows say their output is FP8) and turns its
    documented limit (FP8 over a prefix on Hopper) into a skipped row with the reason."""
    import zyfa_bench.serving as serving

    monkeypatch.setitem(sys.modules, "cudnn", cudnn_module())
    monkeypatch.setattr(serving, "_available", lambda impl, device, precision: "")
    monkeypatch.setattr(cudnn_peer, "cuda_capability", lambda: (9, 0))
    rows = []
    for prefix in (0, 16):
        step = ServingStep((3, 9), prefix, 16, 2, 1, 32, 32)
        rows += measure(step, ["cudnn-varlen"], device=CPU, precision="fp8", warmup=1, repeats=1)
    assert [row["status"] for row in rows] == ["ok", "skipped"]
    assert rows[0]["tflops"] > 0 and "FP8 output" in rows[0]["note"]
    assert "sm100 and newer only" in rows[1]["reason"]
    table = serving.format_table(rows)
    assert "FP8 output" in table and "skipped: cudnn-varlen: cuDNN's FP8 SDPA" in table


def test_refused_graph_is_a_skipped_row(monkeypatch, no_cuda_stream):
    """What cuDNN refuses is a skipped row with cuDNN's reason, never a failed row or a number."""
    import zyfa_bench.serving as serving

    monkeypatch.setitem(sys.modules, "cudnn", cudnn_module(refuse="all"))
    monkeypatch.setattr(serving, "_available", lambda impl, device, precision: "")
    step = ServingStep((3, 9), 16, 16, 2, 1, 32, 32)
    (row,) = measure(step, ["cudnn-varlen"], device=CPU, precision="bf16", warmup=1, repeats=1)
    assert row["status"] == "skipped" and "cuDNN cannot build this graph" in row["reason"]


def test_cudnn_row_without_a_gpu_is_skipped():
    step = ServingStep((3, 9), 0, 16, 2, 1, 32, 32)
    (row,) = measure(step, ["cudnn-varlen"], device=CPU, precision="bf16", warmup=1, repeats=1)
    assert row["status"] == "skipped" and "needs an NVIDIA GPU" in row["reason"]
