"""Capture on tiny randomly initialised Mistral, Qwen3 and DeepSeek-V2 models (needs transformers)."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="transformers not installed: pip install 'zyfa-bench[capture]'"
)
pytest.importorskip("safetensors")

from safetensors import safe_open  # noqa: E402

from zyfa_bench.capture import FORMAT, capture, capture_model  # noqa: E402
from zyfa_bench.workloads import load_captured  # noqa: E402

pytestmark = pytest.mark.capture


def _configs():
    common = dict(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3, max_position_embeddings=256
    )
    return {
        "mistral": transformers.MistralConfig(
            **common, num_attention_heads=4, num_key_value_heads=2, head_dim=16
        ),
        "qwen3": transformers.Qwen3Config(
            **common, num_attention_heads=4, num_key_value_heads=2, head_dim=16
        ),
        "deepseek_v2": transformers.DeepseekV2Config(
            **common,
            num_attention_heads=4,
            num_key_value_heads=4,
            q_lora_rank=None,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            moe_intermediate_size=32,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
        ),
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    paths = {}
    for name, cfg in _configs().items():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        paths[name] = root / name
        model.save_pretrained(paths[name])
    return paths


def _sdpa(q, k, v, scale):
    """Causal attention of captured [b, s, h, d] tensors (GQA by repetition), float64."""
    group = q.shape[2] // k.shape[2]
    q, k, v = (x.double().transpose(1, 2) for x in (q, k, v))
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return out.transpose(1, 2)


@pytest.mark.parametrize(
    ("arch", "q_shape", "kv_heads", "d_v"),
    [
        ("mistral", (1, 24, 4, 16), 2, 16),
        ("qwen3", (1, 24, 4, 16), 2, 16),
        ("deepseek_v2", (1, 24, 4, 24), 4, 16),
    ],
)
def test_capture_writes_what_attention_saw(models, tmp_path, arch, q_shape, kv_heads, d_v):
    out = tmp_path / f"{arch}.safetensors"
    res = capture(models[arch], out, layers=[0, -1], n_tokens=24, dtype=torch.float32, seed=5)
    assert res.layers == [0, 2]
    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in list(f.keys())}
    assert meta["format"] == FORMAT and meta["model_type"] == arch and json.loads(meta["layers"]) == [0, 2]
    assert meta["post_rope"] == "true" and "random token ids, seed 5" in meta["tokens"]
    for layer in (0, 2):
        q, k, v, o = (tensors[f"layers.{layer}.{n}"] for n in "qkvo")
        assert tuple(q.shape) == q_shape and k.shape[2] == kv_heads and v.shape[-1] == d_v
        # The captured tensors ARE attention's inputs: attention over them reproduces its output.
        scale = res.scales[str(layer)]
        assert torch.allclose(_sdpa(q, k, v, scale), o.double(), atol=1e-5)


def test_captured_q_is_post_rope(models):
    """Mistral: the captured q equals q_proj's output with transformers' RoPE applied (not before)."""
    from transformers.models.mistral.modeling_mistral import apply_rotary_pos_emb

    model = transformers.AutoModelForCausalLM.from_pretrained(models["mistral"], dtype=torch.float32).eval()
    attn = model.model.layers[1].self_attn
    seen = {}

    def grab_q(module, args, out):
        seen["q_pre"] = out

    def grab_pe(module, args, kwargs):
        seen["pe"] = kwargs["position_embeddings"]

    h1 = attn.q_proj.register_forward_hook(grab_q)
    h2 = attn.register_forward_pre_hook(grab_pe, with_kwargs=True)
    ids = torch.randint(0, 97, (1, 16), generator=torch.Generator().manual_seed(0))
    store, logits = capture_model(model, ids, [1])
    h1.remove()
    h2.remove()
    q_pre = seen["q_pre"].view(1, 16, -1, 16).transpose(1, 2)
    cos, sin = seen["pe"]
    q_rot, _ = apply_rotary_pos_emb(q_pre, q_pre, cos, sin)
    captured = store[1]["q"].transpose(1, 2)
    assert torch.allclose(captured, q_rot, atol=1e-5)
    assert not torch.allclose(captured[:, :, 1:], q_pre[:, :, 1:], atol=1e-3)  # RoPE really changed it
    # The model still computes what it computes with sdpa (the capture only observes).
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, logits, atol=1e-5)


def test_capture_rejects_bad_requests(models, tmp_path):
    with pytest.raises(ValueError, match="out of range"):
        model = transformers.AutoModelForCausalLM.from_pretrained(models["qwen3"], dtype=torch.float32)
        capture_model(model, torch.zeros(1, 4, dtype=torch.long), [7])
    llama = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    path = tmp_path / "llama"
    transformers.AutoModelForCausalLM.from_config(llama).save_pretrained(path)
    with pytest.raises(ValueError, match="not supported"):
        capture(path, tmp_path / "x.safetensors", layers=[0], n_tokens=4)


def test_captured_file_is_a_workload(models, tmp_path, fake_zyfa_mod):
    from zyfa_bench.accuracy import run_accuracy
    from zyfa_bench.peers import select

    out = tmp_path / "ds.safetensors"
    capture(models["deepseek_v2"], out, layers=[1], n_tokens=20, dtype=torch.float32)
    (wl,) = load_captured(out)
    spec = wl.spec()
    assert (spec.d_qk, spec.d_v, spec.heads_q, spec.heads_kv, spec.seqlen_q) == (24, 16, 4, 4, 20)
    rows = run_accuracy(select(["zyfa-bf16"]), [wl], [], device=torch.device("cpu"), seeds=[0])
    assert rows[0]["status"] == "ok" and rows[0]["rel_l2_vs_bf16"] < 1e-2
