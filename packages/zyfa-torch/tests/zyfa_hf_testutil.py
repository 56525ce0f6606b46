"""Tiny randomly initialised transformers causal LMs for the zyfa backend tests (CPU and GPU).

Each model has 2 layers, hidden 256, 2 query heads of head_dim 128 and 1 KV head (GQA), so every
attention call is a ZYFA-supported shape. The float32 reference holds the SAME bf16-rounded weights,
so it differs from the bf16 runs only by activation precision and the attention implementation.
"""

from __future__ import annotations

import copy

import torch

TINY = {
    "vocab_size": 128,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "max_position_embeddings": 512,
}
# (config class, extra config): Mistral's default sliding_window (4096) is switched off here, as
# docs/usage.md tells users to do for windows longer than every sequence they run.
ARCHS = {
    "llama": ("LlamaConfig", {}),
    "qwen3": ("Qwen3Config", {}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
}


def tiny_causal_lm(arch: str, device: str, seed: int = 0, **overrides: object) -> tuple[object, object]:
    """(bf16 model, float32 reference model with the same weights), both in eval mode on `device`."""
    import transformers

    config_class, extra = ARCHS[arch]
    config = getattr(transformers, config_class)(**{**TINY, **extra, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.to(device=device, dtype=torch.bfloat16).eval()
    reference = copy.deepcopy(model).float()
    return model, reference


@torch.no_grad()
def logits(model: object, ids: torch.Tensor, impl: str, **kw: object) -> torch.Tensor:
    """The model's logits for `ids` with attention implementation `impl` (set on the model first)."""
    model.set_attn_implementation(impl)
    return model(ids, **kw).logits


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((x.double() - ref).norm() / ref.norm()).item()
