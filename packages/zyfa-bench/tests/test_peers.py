"""Peers: availability reasons, selection, and every adapter driven through a mocked library.

No GPU and none of the peer libraries are here: the mocks (fake_peers.py) follow the documented APIs and
compute real attention from what they are handed, so a wrong layout, scale or argument fails numerically.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from fake_peers import aiter_modules, cudnn_module, fa3_module, fa4_modules, flashinfer_module

from zyfa_bench.accuracy import attention_f64, errors
from zyfa_bench.inputs import make_inputs
from zyfa_bench.peers import aiter as aiter_peer
from zyfa_bench.peers import all_peers, select
from zyfa_bench.peers import cudnn as cudnn_peer
from zyfa_bench.peers import fa3 as fa3_peer
from zyfa_bench.peers import fa4 as fa4_peer
from zyfa_bench.peers import flashinfer as flashinfer_peer
from zyfa_bench.peers import triton_amd as triton_peer
from zyfa_bench.peers.base import Unsupported
from zyfa_bench.spec import Spec
from zyfa_bench.workloads import Gaussian

CPU = torch.device("cpu")
GQA = Spec(2, 24, 24, 4, 2, 32, 32)
MLA = Spec(1, 20, 20, 2, 2, 48, 32)


def _inputs(spec, fp8=False, seed=0):
    return make_inputs(spec, Gaussian(), device=CPU, seed=seed, fp8=fp8)


def _ref(inputs, fp8=False):
    q, k, v = inputs.dequantized() if fp8 else (inputs.q, inputs.k, inputs.v)
    return attention_f64(q, k, v, softmax_scale=inputs.softmax_scale, causal=inputs.spec.causal)


# ------------------------------------------------------------------ availability and selection
@pytest.mark.parametrize(
    ("peer_name", "module", "hint"),
    [
        ("cudnn-bf16", "cudnn", "nvidia-cudnn-frontend"),
        ("cudnn-fp8", "cudnn", "nvidia-cudnn-frontend"),
        ("fa3-bf16", "fa3_fwd_interface", "fa3-fwd"),
        ("fa3-fp8", "fa3_fwd_interface", "fa3-fwd"),
        ("fa4-bf16", "flash_attn.cute", "flash-attn-4"),
        ("flashinfer-bf16", "flashinfer", "flashinfer-python"),
        ("aiter-bf16", "aiter", "amd-aiter"),
        ("aiter-fp8", "aiter", "amd-aiter"),
        ("triton-amd-bf16", "aiter.ops.triton.mha", "amd-aiter"),
        ("zyfa-bf16", "zyfa", "import zyfa failed"),
    ],
)
def test_available_names_the_missing_import(monkeypatch, peer_name, module, hint):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    (peer,) = select([peer_name])
    ok, why = peer.available()
    assert not ok
    assert f"import {module} failed" in why and hint in why


def test_available_without_a_gpu(monkeypatch, fake_zyfa_mod):
    monkeypatch.setitem(sys.modules, "cudnn", cudnn_module())
    for name, mod in fa4_modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", fa3_module())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert select(["cudnn-bf16"])[0].available() == (False, "cuDNN SDPA needs an NVIDIA GPU (none visible)")
    assert "NVIDIA GPU" in select(["fa4-bf16"])[0].available()[1]
    assert all("NVIDIA GPU" in p.available()[1] for p in select(["fa3"]))
    assert not select(["sdpa-flash"])[0].available()[0]
    assert select(["sdpa-math"])[0].available()[0]
    ok, why = select(["zyfa-bf16"])[0].available()
    assert ok and "CPU reference" in why
    assert select(["flashinfer-fp8"])[0].available() == (
        False,
        flashinfer_peer.FlashInferFP8().available()[1],
    )


def test_select():
    names = [p.name for p in select(["zyfa"])]
    assert names == ["zyfa-bf16", "zyfa-fp8-exact", "zyfa-fp8-lean", "zyfa-fp8-f16"]
    assert [p.name for p in select(["torch-sdpa"], precisions=("bf16",))] == [
        "sdpa-flash",
        "sdpa-cudnn",
        "sdpa-efficient",
        "sdpa-math",
    ]
    assert len(select(["all"])) == len(all_peers())
    assert all(p.precision == "fp8" for p in select(["all"], precisions=("fp8",)))
    with pytest.raises(ValueError, match="unknown implementation"):
        select(["nope"])
    assert len({p.name for p in all_peers()}) == len(all_peers())


def test_select_with_baseline_kernels_follows_each_zyfa_impl(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    chosen = select(["zyfa-bf16", "zyfa-fp8-lean", "sdpa-math"], baseline_kernels=str(tmp_path))
    assert [p.name for p in chosen] == [
        "zyfa-bf16", "zyfa-bf16-baseline", "zyfa-fp8-lean", "zyfa-fp8-lean-baseline", "sdpa-math"
    ]  # fmt: skip
    assert [p.precision for p in chosen[:4]] == ["bf16", "bf16", "fp8", "fp8"]
    assert chosen[1].available()[0] and str(tmp_path) in chosen[1].note
    assert not select(["zyfa-bf16"], baseline_kernels=str(tmp_path / "none"))[1].available()[0]


def test_baseline_runs_on_its_kernel_dir_and_restores_the_environment(monkeypatch, tmp_path, fake_zyfa_mod):
    (tmp_path / "manifest.json").write_text("{}")
    monkeypatch.setenv("ZYFA_KERNEL_DIR", "/the/installed/kernels")
    plain, baseline = select(["zyfa-fp8-lean"], baseline_kernels=str(tmp_path))
    inputs = _inputs(GQA, fp8=True)
    prepared = baseline.prepare(inputs)
    assert fake_zyfa_mod.calls[-1]["kernel_dir"] == str(tmp_path.resolve())  # the validating call
    out = prepared.output()
    assert fake_zyfa_mod.calls[-1]["kernel_dir"] == str(tmp_path.resolve())
    assert fake_zyfa_mod.calls[-1]["p_mode"] == "lean"
    assert os.environ["ZYFA_KERNEL_DIR"] == "/the/installed/kernels"
    assert errors(out, _ref(inputs, fp8=True))["rel_l2"] < 1e-2
    plain.prepare(inputs).output()
    assert fake_zyfa_mod.calls[-1]["kernel_dir"] == "/the/installed/kernels"
    monkeypatch.delenv("ZYFA_KERNEL_DIR")
    baseline.prepare(inputs).output()
    assert "ZYFA_KERNEL_DIR" not in os.environ


def test_gpu_only_peers_refuse_cpu():
    for p in all_peers():
        if p.family in ("zyfa", "zyfa-varlen") or p.name == "sdpa-math":
            assert p.supports(GQA, CPU)[0]
        else:
            assert not p.supports(GQA, CPU)[0]


def test_sdpa_math_caps_its_score_matrix():
    ok, why = select(["sdpa-math"])[0].supports(Spec(1, 65536, 65536, 32, 8, 128, 128), CPU)
    assert not ok and "GiB" in why


# ------------------------------------------------------------------ adapters that run on CPU
@pytest.mark.parametrize("spec", [GQA, MLA, Spec(1, 8, 20, 2, 1, 16, 16), Spec(1, 20, 8, 2, 1, 16, 16)])
def test_sdpa_math_matches_reference(spec):
    inputs = _inputs(spec)
    prepared = select(["sdpa-math"])[0].prepare(inputs)
    assert errors(prepared.output(), _ref(inputs))["rel_l2"] < 1e-2


def test_zyfa_uniform_run(fake_zyfa_mod):
    inputs = _inputs(GQA, fp8=True)
    peer = select(["zyfa-fp8-lean"])[0]
    out = peer.run(
        inputs.q8,
        inputs.k8,
        inputs.v8,
        q_descale=inputs.q_descale,
        k_descale=inputs.k_descale,
        v_descale=inputs.v_descale,
    )
    assert out.dtype == torch.float32 and out.shape == (2, 24, 4, 32)
    assert errors(out, _ref(inputs, fp8=True))["rel_l2"] < 1e-2
    assert fake_zyfa_mod.calls[-1]["p_mode"] == "lean"
    with pytest.raises(ValueError, match="needs FP8 inputs"):
        peer.prepare(_inputs(GQA))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("spec", [GQA, MLA, Spec(3, 10, 16, 2, 1, 16, 16)])
def test_zyfa_varlen_packs_the_batch_at_uniform_lengths(fake_zyfa_mod, spec, precision):
    fp8 = precision == "fp8"
    inputs = _inputs(spec, fp8=fp8)
    out = select([f"zyfa-varlen-{precision}"])[0].prepare(inputs).output()
    assert out.dtype == torch.float32
    assert out.shape == (spec.batch, spec.seqlen_q, spec.heads_q, spec.d_v)
    assert errors(out, _ref(inputs, fp8=fp8))["rel_l2"] < 1e-2
    call = fake_zyfa_mod.varlen_calls[-1]
    assert call["cu_q"] == [b * spec.seqlen_q for b in range(spec.batch + 1)]
    assert call["cu_k"] == [b * spec.seqlen_k for b in range(spec.batch + 1)]
    assert call["max"] == (spec.seqlen_q, spec.seqlen_k)
    assert call["p_mode"] == ("lean" if fp8 else None)


def test_zyfa_varlen_follows_baseline_kernels(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    chosen = select(["zyfa-varlen-bf16", "zyfa-bf16"], baseline_kernels=str(tmp_path))
    assert [p.name for p in chosen] == [
        "zyfa-bf16", "zyfa-bf16-baseline", "zyfa-varlen-bf16", "zyfa-varlen-bf16-baseline"
    ]  # fmt: skip
    assert [p.name for p in select(["zyfa-varlen"])] == ["zyfa-varlen-bf16", "zyfa-varlen-fp8"]


# ------------------------------------------------------------------ NVIDIA adapters, mocked
@pytest.mark.parametrize("spec", [GQA, MLA, Spec(1, 10, 16, 2, 1, 16, 16)])
def test_cudnn_bf16_layout_and_numerics(monkeypatch, no_cuda_stream, spec):
    fake = cudnn_module()
    monkeypatch.setitem(sys.modules, "cudnn", fake)
    inputs = _inputs(spec)
    prepared = cudnn_peer.CudnnBF16().prepare(inputs)
    assert errors(prepared.output(), _ref(inputs))["rel_l2"] < 1e-2
    assert ("pygraph", "bf16", "f32", "f32") in fake.calls
    assert ("set_stream", "handle", 0) in fake.calls  # bound to torch's stream on every call


def test_cudnn_fp8_scales_and_fp8_output(monkeypatch, no_cuda_stream, fake_zyfa_mod):
    monkeypatch.setitem(sys.modules, "cudnn", cudnn_module())
    inputs = _inputs(GQA, fp8=True)
    peer = cudnn_peer.CudnnFP8()
    prepared = peer.prepare(inputs)
    raw = prepared.call()
    assert raw.dtype == torch.float8_e4m3fn  # FP8 out: cuDNN's only FP8 contract on Hopper
    # Dequantised output vs the dequantised-input reference: e4m3 output rounding (~2-3% rel L2).
    err = errors(prepared.result(raw), _ref(inputs, fp8=True))["rel_l2"]
    assert 1e-3 < err < 6e-2
    assert "FP8 output" in peer.note and any("dequantised" in n for n in prepared.notes)


def test_cudnn_falls_back_to_expanded_heads(monkeypatch, no_cuda_stream):
    monkeypatch.setitem(sys.modules, "cudnn", cudnn_module(refuse="gqa"))
    inputs = _inputs(GQA)
    prepared = cudnn_peer.CudnnBF16().prepare(inputs)
    assert any("expanded" in n for n in prepared.notes)
    assert errors(prepared.output(), _ref(inputs))["rel_l2"] < 1e-2


@pytest.mark.parametrize("spec", [GQA, MLA])
def test_cudnn_refusal_is_unsupported(monkeypatch, no_cuda_stream, spec):
    monkeypatch.setitem(sys.modules, "cudnn", cudnn_module(refuse="all"))
    with pytest.raises(Unsupported, match="cuDNN cannot build this graph"):
        cudnn_peer.CudnnBF16().prepare(_inputs(spec))


def test_fa4_adapter(monkeypatch):
    for name, mod in fa4_modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(fa4_peer, "cuda_capability", lambda: (9, 0))
    ok, why = fa4_peer.FA4BF16().available()
    assert ok and "sm90" in why
    inputs = _inputs(GQA)
    prepared = fa4_peer.FA4BF16().prepare(inputs)
    assert errors(prepared.output(), _ref(inputs))["rel_l2"] < 1e-2  # (out, lse) tuple unpacked
    call = sys.modules["flash_attn.cute"].calls[-1]
    assert call == {"softmax_scale": inputs.softmax_scale, "causal": True, "dtype": torch.bfloat16}
    monkeypatch.setattr(fa4_peer, "cuda_capability", lambda: (8, 0))
    assert "sm80" in fa4_peer.FA4BF16().available()[1]


def test_fa4_head_dims(monkeypatch):
    # flash-attn-4 4.0.0b36 _validate_head_dims: sm90 takes 8..256 (192/128 too), sm100 d<=128 or 192/128.
    assert fa4_peer.fa4_head_dims_supported(192, 128, 9)[0]
    assert fa4_peer.fa4_head_dims_supported(128, 128, 10)[0]
    assert not fa4_peer.fa4_head_dims_supported(192, 192, 10)[0]
    assert "8..256" in fa4_peer.fa4_head_dims_supported(512, 512, 9)[1]
    monkeypatch.setattr(fa4_peer, "cuda_capability", lambda: (9, 0))
    assert fa4_peer.FA4BF16().supports(MLA, torch.device("cuda"))[0]
    assert not fa4_peer.FA4BF16().supports(Spec(1, 8, 8, 2, 2, 320, 320), torch.device("cuda"))[0]


# Batch 3 against 2 kv heads: a descale handed over as (heads_kv, batch) fails the fake's shape check.
FA3_SPECS = [Spec(3, 24, 24, 4, 2, 32, 32), Spec(1, 20, 20, 2, 2, 192, 128)]


@pytest.mark.parametrize("spec", FA3_SPECS)
def test_fa3_adapters(monkeypatch, fake_zyfa_mod, spec):
    fake = fa3_module()
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", fake)
    monkeypatch.setattr(fa3_peer, "cuda_capability", lambda: (9, 0))
    assert [p.name for p in select(["fa3"])] == ["fa3-bf16", "fa3-fp8"]
    ok, why = fa3_peer.FA3BF16().available()
    assert ok and "sm90" in why
    inputs = _inputs(spec, fp8=True)
    out = fa3_peer.FA3BF16().prepare(inputs).output()
    assert out.dtype == torch.float32 and errors(out, _ref(inputs))["rel_l2"] < 1e-2
    assert fake.calls[-1] == dict(
        softmax_scale=inputs.softmax_scale, causal=True, dtype=torch.bfloat16, fp8=False
    )
    out8 = fa3_peer.FA3FP8().prepare(inputs).output()
    # The fake dequantises exactly what it is given; the BF16 output rounding (~4e-3) is the only error.
    assert errors(out8, _ref(inputs, fp8=True))["rel_l2"] < 1e-2
    assert fake.calls[-1]["fp8"] and fake.calls[-1]["causal"]
    assert fake.calls[-1]["softmax_scale"] == inputs.softmax_scale


def test_fa3_fp8_descales_reach_the_call(monkeypatch, fake_zyfa_mod):
    """A descale of 2 where the inputs say 1 doubles V's contribution: the output must follow the descales."""
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", fa3_module())
    inputs = _inputs(FA3_SPECS[0], fp8=True)
    base = fa3_peer.FA3FP8().prepare(inputs).output()
    inputs.v_descale *= 2.0
    doubled = fa3_peer.FA3FP8().prepare(inputs).output()
    assert errors(doubled, 2.0 * base.double())["rel_l2"] < 1e-2


def test_fa3_needs_hopper(monkeypatch):
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", fa3_module())
    for cap in ((8, 0), (10, 0)):
        monkeypatch.setattr(fa3_peer, "cuda_capability", lambda cap=cap: cap)
        ok, why = fa3_peer.FA3FP8().available()
        assert not ok and f"sm{cap[0]}{cap[1]}" in why and "Hopper" in why


def test_fa3_head_dims():
    # fa3-fwd 0.0.3 (its messages): d <= 256 with d_qk == d_v; d_qk (128, 192] with d_v (96, 128];
    # d_qk <= 64 with d_v <= 512, d_v > 256 for BF16 only.
    rule = fa3_peer.fa3_head_dims_supported
    for precision in ("bf16", "fp8"):
        assert rule(128, 128, precision)[0] and rule(192, 128, precision)[0] and rule(256, 256, precision)[0]
        assert not rule(192, 192 + 128, precision)[0]
        assert "up to 256" in rule(320, 320, precision)[1]
        assert not rule(128, 64, precision)[0] and "(128, 192]" in rule(128, 64, precision)[1]
    assert rule(64, 512, "bf16")[0] and not rule(64, 512, "fp8")[0]
    cuda = torch.device("cuda")
    assert fa3_peer.FA3FP8().supports(MLA, cuda) == (True, "")
    assert not fa3_peer.FA3BF16().supports(Spec(1, 8, 8, 2, 2, 320, 320), cuda)[0]
    assert not fa3_peer.FA3BF16().supports(MLA, CPU)[0]


def test_flashinfer_missing_jit_module_is_unsupported(monkeypatch):
    class MissingJITCacheError(RuntimeError):
        pass

    fake = flashinfer_module()

    class Refusing(fake.BatchPrefillWithRaggedKVCacheWrapper):
        def plan(self, *args, **kwargs):
            raise MissingJITCacheError("JIT compilation is disabled via FLASHINFER_DISABLE_JIT")

    fake.BatchPrefillWithRaggedKVCacheWrapper = Refusing
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    monkeypatch.delenv("FLASHINFER_DISABLE_JIT", raising=False)
    monkeypatch.delenv("ZYFA_FLASHINFER_JIT", raising=False)
    with pytest.raises(Unsupported, match="not precompiled"):
        flashinfer_peer.FlashInferBF16().prepare(_inputs(GQA))
    assert os.environ["FLASHINFER_DISABLE_JIT"] == "1"


def test_flashinfer_adapter(monkeypatch):
    fake = flashinfer_module()
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    inputs = _inputs(GQA)
    prepared = flashinfer_peer.FlashInferBF16().prepare(inputs)
    assert errors(prepared.output(), _ref(inputs))["rel_l2"] < 1e-2
    plan = fake.calls[-1]
    assert plan["qo"] == [0, 24, 48] and plan["kv"] == [0, 24, 48]
    assert (plan["hq"], plan["hkv"], plan["dqk"], plan["dv"], plan["causal"]) == (4, 2, 32, 32, True)
    assert not flashinfer_peer.FlashInferBF16().supports(Spec(1, 8, 16, 2, 2, 16, 16), torch.device("cuda"))[
        0
    ]


# ------------------------------------------------------------------ AMD adapters, mocked
@pytest.fixture
def fake_aiter(monkeypatch):
    mods = aiter_modules()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    for module in (aiter_peer, triton_peer):
        monkeypatch.setattr(module, "rocm_arch", lambda: "gfx950")
    return mods


def test_aiter_available_and_arch_rules(fake_aiter, monkeypatch):
    assert aiter_peer.AiterBF16().available() == (True, "aiter on gfx950")
    assert triton_peer.TritonAmdBF16().available()[0]
    monkeypatch.setattr(aiter_peer, "rocm_arch", lambda: "gfx942")
    ok, why = aiter_peer.AiterFP8().supports(GQA, torch.device("cuda"))
    assert not ok and "e4m3fnuz" in why
    monkeypatch.setattr(aiter_peer, "rocm_arch", lambda: None)
    assert "AMD GPU" in aiter_peer.AiterBF16().available()[1]


@pytest.mark.parametrize("spec", [GQA, MLA])
def test_aiter_bf16_and_fp8_calls(fake_aiter, fake_zyfa_mod, spec):
    inputs = _inputs(spec, fp8=True)
    out = aiter_peer.AiterBF16().prepare(inputs).output()
    assert errors(out, _ref(inputs))["rel_l2"] < 1e-2
    call = fake_aiter["aiter"].calls[-1]
    assert call == {
        "fn": "flash_attn_func",
        "dtype": torch.bfloat16,
        "dropout_p": 0.0,
        "causal": True,
        "softmax_scale": inputs.softmax_scale,
    }
    out8 = aiter_peer.AiterFP8().prepare(inputs).output()
    assert errors(out8, _ref(inputs, fp8=True))["rel_l2"] < 1e-2
    call = fake_aiter["aiter"].calls[-1]
    assert call["fn"] == "fp8" and call["descales"] == [inputs.q_descale, inputs.k_descale, inputs.v_descale]


def test_triton_amd_calls(fake_aiter, fake_zyfa_mod):
    inputs = _inputs(GQA, fp8=True)
    out = triton_peer.TritonAmdBF16().prepare(inputs).output()
    assert errors(out, _ref(inputs))["rel_l2"] < 1e-2
    prepared = triton_peer.TritonAmdFP8().prepare(inputs)
    # Handed the dequantised shared FP8 values (exact in bf16): its output matches their reference.
    assert errors(prepared.output(), _ref(inputs, fp8=True))["rel_l2"] < 1e-2
    # validation call + output call of each adapter
    fns = [c["fn"] for c in fake_aiter["aiter.ops.triton.mha"].calls]
    assert fns == ["flash_attn_func"] * 2 + ["flash_attn_fp8_func"] * 2
    assert all(
        c["causal"] and c["softmax_scale"] == inputs.softmax_scale
        for c in fake_aiter["aiter.ops.triton.mha"].calls
    )
    assert prepared.notes and "re-quantises" in prepared.notes[0]


def test_sdpa_flash_skips_mla_with_reason():
    """torch's flash backend rejects d_qk != d_v: the adapter says so up front (a skip, not an error)."""
    flash = select(["sdpa-flash"])[0]
    ok, why = flash.supports(MLA, torch.device("cpu"))
    assert not ok and "d_qk == d_v" in why and "48/32" in why
    assert "d_qk" not in flash.supports(GQA, torch.device("cpu"))[1]  # equal head dims: the usual checks
