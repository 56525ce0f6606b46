"""The serving step's cuDNN peer against the real library, on the GPU (skipped without one, or without
nvidia-cudnn-frontend and a loadable cuDNN).

Packed batches with a single-token prompt, page-unaligned lengths and a prompt longer than several pages,
with and without a shared prefix read through the page table, GQA d=128 and 192/128, BF16 and FP8: the
output must match zyfa.reference's float64 truth within a stated tolerance, and repeat bitwise.  What cuDNN
declines here (`Unsupported`, e.g. FP8 over a prefix on Hopper) is skipped with its reason; through
`zyfa_bench.serving.measure` it is a skipped row, never a failed one.
"""

from __future__ import annotations

import pytest
import torch

import zyfa.reference as R
from zyfa_bench.accuracy import errors
from zyfa_bench.peers.base import Unsupported
from zyfa_bench.peers.cudnn import CudnnBF16, varlen_call
from zyfa_bench.serving import ServingStep, build_step, measure

pytestmark = pytest.mark.gpu

LENS = (1, 37, 200, 5, 129, 64)
SHAPES = {"gqa128": (4, 2, 128, 128), "mla192": (2, 2, 192, 128)}
# BF16 output rounding ~2e-3 (1e-2 leaves room for other accumulation orders); FP8: e4m3 P (~2-3%) and
# cuDNN's e4m3 OUTPUT (~3%) against the dequantised-input truth.
TOLERANCE = {"bf16": 1e-2, "fp8": 6e-2}


def _need_cudnn() -> None:
    ok, why = CudnnBF16().available()
    if not ok:
        pytest.skip(why)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize(("prefix", "page_size"), [(0, 16), (64, 16), (256, 64)])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_cudnn_varlen_matches_float64_on_gpu(shape, prefix, page_size, precision):
    _need_cudnn()
    step = ServingStep(LENS, prefix, page_size, *SHAPES[shape])
    x = build_step(step, device=torch.device("cuda"), precision=precision, seed=11)
    try:
        prepared = varlen_call(x, x.descales)
    except Unsupported as exc:
        pytest.skip(str(exc))
    first = prepared.call().clone()
    assert torch.equal(prepared.call().view(torch.uint8), first.view(torch.uint8))  # bitwise repeatable
    dq, dk, dv = x.descales or (1.0, 1.0, 1.0)
    cpu = [t.cpu() if t is not None else None for t in (x.q, x.k, x.v, x.cu_seqlens_q, x.seqused_k)]
    table = x.page_table.cpu() if x.page_table is not None else None
    cu_k = x.cu_seqlens_k.cpu() if table is None else None
    ref, _ = R.attention_varlen_dense_f64(
        *cpu[:4], cu_k, seqused_k=cpu[4], page_table=table, q_descale=dq, k_descale=dk, v_descale=dv
    )
    assert errors(prepared.result(first).cpu(), ref)["rel_l2"] < TOLERANCE[precision]


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_cudnn_serving_rows_on_gpu(precision):
    """Through the serving harness every cuDNN row is measured or skipped with a reason, never failed."""
    _need_cudnn()
    rows = []
    for prefix in (0, 64):
        step = ServingStep(LENS, prefix, 16, *SHAPES["gqa128"])
        rows += measure(step, ["cudnn-varlen"], device=torch.device("cuda"), precision=precision, repeats=2)
    assert all(row["status"] in ("ok", "skipped") for row in rows), rows
    assert all(row["tflops"] > 0 for row in rows if row["status"] == "ok")
    if precision == "bf16":
        assert [row["status"] for row in rows] == ["ok", "ok"], rows
