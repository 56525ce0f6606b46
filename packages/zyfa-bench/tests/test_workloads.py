"""Workloads: reproducible draws; the real-model-like structure is really there (outliers, sinks, RoPE)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from zyfa_bench.spec import Spec
from zyfa_bench.workloads import (
    Captured,
    Gaussian,
    ModelLike,
    _slow_channels,
    apply_rope,
    load_captured,
    parse_workload,
)

CPU = torch.device("cpu")
SPEC = Spec(batch=2, seqlen_q=512, seqlen_k=512, heads_q=4, heads_kv=2, d_qk=64, d_v=64)


def test_gaussian_shapes_dtype_stats_and_seeds():
    q, k, v = Gaussian().generate(SPEC, device=CPU, seed=3)
    assert q.shape == (2, 512, 4, 64) and k.shape == (2, 512, 2, 64) and v.shape == (2, 512, 2, 64)
    assert q.dtype == k.dtype == v.dtype == torch.bfloat16
    assert abs(float(q.float().mean())) < 0.02 and abs(float(q.float().std()) - 1) < 0.02
    q2, _, _ = Gaussian().generate(SPEC, device=CPU, seed=3)
    q3, _, _ = Gaussian().generate(SPEC, device=CPU, seed=4)
    assert torch.equal(q, q2) and not torch.equal(q, q3)


def test_model_like_k_has_outlier_channels():
    w = ModelLike()
    _, k, _ = w.generate(SPEC, device=CPU, seed=0)
    slow = _slow_channels(64, 64)
    outl = slow[w.massive_channels : w.massive_channels + w.k_outlier_channels]
    normal = [c for c in range(64) if c not in slow[: w.massive_channels + w.k_outlier_channels]]
    body = k[:, w.sink_tokens :].float()  # leave the sink tokens out
    mean_abs = body.mean(dim=(0, 1)).abs()  # [heads, d]: per-channel offset over tokens
    # Outlier channels carry the ~12-std offset (slow RoPE barely turns it at these positions).
    assert float(mean_abs[:, outl].min()) > 8.0
    assert float(mean_abs[:, normal].max()) < 0.5


def test_model_like_sinks_take_the_mass_and_are_massive():
    w = ModelLike()
    q, k, v = w.generate(SPEC, device=CPU, seed=1)
    # Dense causal softmax of kv head 0's first q head, batch 0.
    s = (q[0, :, 0].double() @ k[0, :, 0].double().T) * SPEC.softmax_scale
    s = s.masked_fill(torch.ones(512, 512, dtype=torch.bool).triu(1), -math.inf)
    p = torch.softmax(s, dim=-1)
    sink_mass = p[100:, 0].mean()  # rows that see >100 keys: uniform attention would give <1%
    assert sink_mass > 0.3
    # The sink key's norm sits in few channels and sets amax(K): the massive activation.
    assert float(k[:, 0].float().abs().amax()) == pytest.approx(float(k.float().abs().amax()))
    assert float(k[:, 0].float().abs().amax()) > 1.5 * float(k[:, 1:].float().abs().amax())
    # Sink values are small.
    assert float(v[:, 0].float().abs().mean()) < 0.2 * float(v[:, 1:].float().abs().mean())


def test_model_like_gqa_and_mla_shapes():
    spec = Spec(1, 128, 128, 16, 16, 192, 128)
    q, k, v = ModelLike().generate(spec, device=CPU, seed=0)
    assert q.shape == (1, 128, 16, 192) and v.shape == (1, 128, 16, 128)
    # MLA layout: only the last 64 dims rotate; ModelLike.rope_dims defaults to that for d_qk 192.
    assert ModelLike()._rope_dims(192) == 64 and ModelLike()._rope_dims(128) == 128


def test_rope_preserves_pair_norms_and_is_relative():
    torch.manual_seed(0)
    x = torch.randn(1, 6, 2, 16)
    pos = torch.arange(6)
    r = apply_rope(x, pos, 100.0, 16)
    assert torch.allclose(r[:, 0], x[:, 0])  # position 0: angle 0
    a, b = x[..., :8], x[..., 8:]
    ra, rb = r[..., :8], r[..., 8:]
    assert torch.allclose(a**2 + b**2, ra**2 + rb**2, atol=1e-5)
    # Scores depend on relative position only: shifting both positions leaves q·k unchanged.
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    s1 = (apply_rope(q, torch.tensor([5]), 100.0, 16) * apply_rope(k, torch.tensor([2]), 100.0, 16)).sum()
    s2 = (apply_rope(q, torch.tensor([45]), 100.0, 16) * apply_rope(k, torch.tensor([42]), 100.0, 16)).sum()
    assert float(s1) == pytest.approx(float(s2), rel=1e-4)
    # Partial rotary: leading dims untouched.
    r2 = apply_rope(x, pos, 100.0, 8)
    assert torch.equal(r2[..., :8], x[..., :8])


def test_parse_workload():
    assert isinstance(parse_workload("gaussian")[0], Gaussian)
    assert isinstance(parse_workload("model-like")[0], ModelLike)
    with pytest.raises(ValueError, match="unknown workload"):
        parse_workload("nope")


def _write_capture(path, q, k, v, scale):
    from safetensors.torch import save_file

    shapes = {"3": {"q": list(q.shape), "k": list(k.shape), "v": list(v.shape)}}
    meta = {
        "layers": json.dumps([3]),
        "shapes": json.dumps(shapes),
        "softmax_scales": json.dumps({"3": scale}),
    }
    save_file({"layers.3.q": q, "layers.3.k": k, "layers.3.v": v}, str(path), metadata=meta)


def test_captured_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    from zyfa_bench.inputs import make_inputs

    q = torch.randn(1, 16, 4, 32).bfloat16()
    k = torch.randn(1, 16, 2, 32).bfloat16()
    v = torch.randn(1, 16, 2, 24).bfloat16()
    path = tmp_path / "cap.safetensors"
    _write_capture(path, q, k, v, 0.125)
    (w,) = load_captured(path)
    assert w.layer == 3 and w.name.endswith(":L3")
    spec = w.spec()
    assert (spec.batch, spec.seqlen_q, spec.heads_q, spec.heads_kv, spec.d_qk, spec.d_v) == (
        1,
        16,
        4,
        2,
        32,
        24,
    )
    inputs = make_inputs(spec, w, device=CPU, seed=0)
    assert torch.equal(inputs.q, q) and torch.equal(inputs.v, v)
    assert inputs.softmax_scale == 0.125
    with pytest.raises(KeyError, match="layers.7"):
        Captured(str(path), 7).load(device=CPU)
