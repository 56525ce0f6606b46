"""Every NVIDIA/AMD adapter against the real library, on the GPU (skipped without one or without the library).

Each available peer computes a small GQA (d=128) and MLA (192/128) problem; its output must match the
float64 reference within a tolerance that states why it is what it is.  A peer that declines a shape
(Unsupported, e.g. torch's flash backend at d_qk != d_v) is skipped with its reason, not failed.
"""

from __future__ import annotations

import pytest
import torch

from zyfa_bench.accuracy import attention_f64, errors
from zyfa_bench.inputs import make_inputs
from zyfa_bench.peers import all_peers
from zyfa_bench.peers.base import Unsupported
from zyfa_bench.spec import Spec
from zyfa_bench.timing import host_overhead
from zyfa_bench.workloads import Gaussian

pytestmark = pytest.mark.gpu

SPECS = {"gqa128": Spec(2, 256, 256, 4, 2, 128, 128), "mla192": Spec(1, 192, 192, 2, 2, 192, 128)}
# BF16 inputs: P (and the output) rounded to bf16 -> ~2e-3; 1e-2 leaves room for other accumulation orders.
# FP8 inputs vs the dequantised reference: e4m3 P (~2-3%); cuDNN's FP8 OUTPUT adds e4m3 rounding (~3%).
TOLERANCE = {"bf16": 1e-2, "fp8": 6e-2}
NAMES = [p.name for p in all_peers() if p.name != "sdpa-math"]


@pytest.mark.parametrize("shape", sorted(SPECS))
@pytest.mark.parametrize("name", NAMES)
def test_peer_matches_float64_on_gpu(name, shape):
    peer = next(p for p in all_peers() if p.name == name)
    ok, why = peer.available()
    if not ok:
        pytest.skip(why)
    device = torch.device("cuda")
    spec = SPECS[shape]
    inputs = make_inputs(spec, Gaussian(), device=device, seed=7, fp8=peer.precision == "fp8")
    try:
        prepared = peer.prepare(inputs)
    except Unsupported as exc:
        pytest.skip(str(exc))
    out = prepared.output()
    q, k, v = inputs.dequantized() if peer.precision == "fp8" else (inputs.q, inputs.k, inputs.v)
    ref = attention_f64(q, k, v, softmax_scale=inputs.softmax_scale, causal=True)
    assert errors(out, ref)["rel_l2"] < TOLERANCE[peer.precision]
    # Host overhead must be measurable; graph capture may be refused, but then with a reason.
    h = host_overhead(prepared.call, device=device, calls=3)
    assert h.eager_us > 0 and (h.graph_us is not None or h.graph_error)


def test_gemm_ceilings_on_gpu():
    from zyfa_bench.ceilings import ceilings

    c = ceilings(torch.device("cuda"), n=2048, repeats=3, sustain_s=0.2)
    for key in ("bf16_gemm_tflops", "bf16_gemm_burst_tflops"):
        assert isinstance(c[key], float) and c[key] > 1, key
    assert isinstance(c["fp8_gemm_tflops"], (float, str))
