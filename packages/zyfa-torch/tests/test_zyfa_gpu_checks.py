"""On a GPU, the C++ op and the Python GPU path refuse what the CPU path refuses, with the same messages
(zyfa_core's checks, one copy for every path), before anything is launched; and a call on the edge of
the float32 range still launches and matches the ordinary call.

Skipped without a GPU or without zyfa_core.
"""

from __future__ import annotations

import re

import pytest
import torch
from zyfa_testutil import make_qkv, quantize3

import zyfa
from zyfa import _ops

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")

REFUSED = [
    ({"q_descale": 1e39}, r"q_descale = 1e\+39 overflows float32"),
    ({"k_descale": 1e-50}, r"k_descale = 1e-50 is 0 in float32"),
    ({"q_descale": 1e20, "k_descale": 1e20}, r"softmax_scale \* q_descale \* k_descale \* log2\(e\) = inf"),
    ({"softmax_scale": 1e39}, r"softmax_scale = 1e\+39 overflows float32"),
    ({"q_descale": torch.tensor(1.0, device="meta")}, r"q_descale is a tensor on meta"),
]


def _fp8_inputs(device: str):
    pytest.importorskip("zyfa_core")
    q, k, v = make_qkv(1, 128, 128, 2, 2, seed=21)
    q8, k8, v8, ds = quantize3(q, k, v)
    return (q8.to(device), k8.to(device), v8.to(device)), ds


def _message(call) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize(("kwargs", "match"), REFUSED)
def test_gpu_paths_refuse_as_the_cpu_path_does(kwargs, match):
    (q8, k8, v8), ds = _fp8_inputs("cuda")
    kw = {"q_descale": ds[0], "k_descale": ds[1], "v_descale": ds[2], **kwargs}
    on_gpu = _message(lambda: zyfa.flash_attn_func(q8, k8, v8, causal=True, **kw))
    cpu = tuple(x.cpu() for x in (q8, k8, v8))
    on_cpu = _message(lambda: zyfa.flash_attn_func(*cpu, causal=True, **kw))
    assert on_gpu.replace(f"({q8.device})", "(cpu)") == on_cpu  # a device named in the message
    assert re.search(match, on_gpu)
    if isinstance(kw["q_descale"], float) and "softmax_scale" not in kw:
        # The Python GPU path (the op's Python implementation), whatever path CUDA calls take.
        descales = (kw["q_descale"], kw["k_descale"], kw["v_descale"])
        scale = 128**-0.5
        python = _message(lambda: _ops._forward(q8, k8, v8, scale, True, descales, False, None))
        assert python == on_gpu


def test_representable_extremes_launch_and_match():
    """q_descale = 2**60, k_descale = 2**-60: each fits float32 and their product is exactly 1, so the
    kernel's one factor is the ordinary call's; the outputs are bitwise equal."""
    (q8, k8, v8), _ = _fp8_inputs("cuda")
    from zyfa_core.errors import KernelNotFoundError

    try:
        _ops.select_kernel(q8, k8, v8, True, None)
    except KernelNotFoundError as exc:
        pytest.skip(str(exc).splitlines()[0])
    plain = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=1.0, k_descale=1.0, v_descale=1.0)
    scaled = zyfa.flash_attn_func(
        q8, k8, v8, causal=True, q_descale=2.0**60, k_descale=2.0**-60, v_descale=1.0
    )
    torch.cuda.synchronize()
    assert torch.isfinite(plain.float()).all() and torch.equal(plain, scaled)
