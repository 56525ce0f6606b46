"""Capture the q, k, v that attention sees (post-RoPE) from a Hugging Face causal LM, into .safetensors.

Supported architectures (config.model_type): "mistral", "qwen3", "deepseek_v2" (MLA: q and k are
192 = 128 + 64 rotary dims wide, v 128, one kv head per q head after the latent expansion).  Weights are
read from a local directory only (`local_files_only=True`): nothing is downloaded at run time.

How: in transformers 5 every attention module of these architectures calls its attention function
through `AttentionInterface` with the final (post-RoPE, pre-repeat) q, k, v in [batch, heads, seqlen,
dim] layout.  The capture registers a function "zyfa_capture" there that records those tensors and then
runs transformers' own SDPA attention, so the model computes exactly what it computes with
attn_implementation="sdpa".  Forward hooks on the chosen layers' attention modules mark which module is
running (pre-hook) and check afterwards that each produced exactly one capture (hook), so an
architecture whose attention bypasses the interface fails loudly instead of saving nothing.

File layout (flash-attn layout, [batch, seqlen, heads, dim], the model's dtype):
    layers.{i}.q  [b, s, heads_q, d_qk]     layers.{i}.k  [b, s, heads_kv, d_qk]
    layers.{i}.v  [b, s, heads_kv, d_v]     layers.{i}.o  [b, s, heads_q, d_v]  (the attention output)
metadata (strings): format, model_type, model_path, layers (JSON list), shapes (JSON), softmax_scales
(JSON: the `scaling` each layer passed), tokens (where the token ids came from), seqlen, batch, dtype,
transformers version, layout, post_rope.

transformers is an optional dependency: `pip install zyfa-bench[capture]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["FORMAT", "SUPPORTED", "CaptureResult", "capture", "capture_model"]

FORMAT = "zyfa-bench-capture/1"
SUPPORTED = ("mistral", "qwen3", "deepseek_v2")
IMPL_NAME = "zyfa_capture"


@dataclass
class CaptureResult:
    """What a capture produced: the file, and per layer the tensors' shapes and the softmax scale."""

    path: Path
    layers: list[int]
    shapes: dict[str, dict[str, list[int]]]
    scales: dict[str, float]
    metadata: dict[str, str] = field(default_factory=dict)


class _Recorder:
    """State shared by the registered attention function and the forward hooks."""

    def __init__(self, modules: dict[int, torch.nn.Module]) -> None:
        self.modules = modules
        self.active: int | None = None
        self.store: dict[int, dict[str, Any]] = {}

    def attention(
        self, module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, *args: Any, **kw: Any
    ):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        out, weights = sdpa_attention_forward(module, query, key, value, *args, **kw)
        layer = self.active
        if layer is not None and module is self.modules[layer]:
            if layer in self.store:
                raise RuntimeError(f"layer {layer}: attention ran twice in one forward")
            self.store[layer] = {
                # [b, h, s, d] -> flash-attn [b, s, h, d]
                "q": query.detach().transpose(1, 2).contiguous().cpu(),
                "k": key.detach().transpose(1, 2).contiguous().cpu(),
                "v": value.detach().transpose(1, 2).contiguous().cpu(),
                "o": out.detach().contiguous().cpu(),  # sdpa_attention_forward returns [b, s, h, d]
                "scale": float(
                    kw.get("scaling") if kw.get("scaling") is not None else query.shape[-1] ** -0.5
                ),
            }
        return out, weights

    def hooks(self) -> list[Any]:
        handles = []
        for layer, mod in self.modules.items():
            handles.append(mod.register_forward_pre_hook(self._pre(layer)))
            handles.append(mod.register_forward_hook(self._post(layer)))
        return handles

    def _pre(self, layer: int):
        def hook(module: torch.nn.Module, args: Any) -> None:
            self.active = layer

        return hook

    def _post(self, layer: int):
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            self.active = None
            if layer not in self.store:
                raise RuntimeError(
                    f"layer {layer}: its attention did not go through transformers' AttentionInterface, "
                    "so q/k/v could not be captured"
                )

        return hook


def _attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers' attention modules, in layer order (model.model.layers[i].self_attn)."""
    body = getattr(model, "model", model)
    layers = getattr(body, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no .model.layers; not a supported decoder architecture")
    return [layer.self_attn for layer in layers]


def _register() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    # The function is a dispatcher to the recorder of the capture in progress (set in capture_model).
    AttentionInterface.register(IMPL_NAME, _dispatch)
    AttentionMaskInterface.register(IMPL_NAME, sdpa_mask)


_CURRENT: list[_Recorder] = []


def _dispatch(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, *args: Any, **kw: Any):
    if not _CURRENT:
        raise RuntimeError(f"attention implementation {IMPL_NAME!r} used outside zyfa_bench.capture")
    return _CURRENT[-1].attention(module, query, key, value, *args, **kw)


def capture_model(
    model: torch.nn.Module, input_ids: Tensor, layers: list[int]
) -> tuple[dict[int, dict[str, Any]], Tensor]:
    """Run `model` on `input_ids` and return ({layer: {q, k, v, o, scale}}, logits).

    The model's attention implementation is switched to the capturing one for this call and restored.
    """
    model_type = getattr(model.config, "model_type", "?")
    if model_type not in SUPPORTED:
        raise ValueError(f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED)}")
    modules = _attention_modules(model)
    bad = [i for i in layers if not 0 <= i < len(modules)]
    if bad:
        raise ValueError(f"layers {bad} out of range: the model has {len(modules)} layers")
    _register()
    recorder = _Recorder({i: modules[i] for i in layers})
    previous = model.config._attn_implementation
    handles = recorder.hooks()
    _CURRENT.append(recorder)
    try:
        model.set_attn_implementation(IMPL_NAME)
        with torch.no_grad():
            logits = model(input_ids=input_ids, use_cache=False).logits
    finally:
        _CURRENT.pop()
        for h in handles:
            h.remove()
        model.set_attn_implementation(previous)
    return recorder.store, logits


def _token_ids(
    model_path: Path, text: str | None, n_tokens: int, batch: int, vocab: int, seed: int
) -> tuple[Tensor, str]:
    """Token ids from `text` (the local tokenizer, repeated/truncated to n_tokens) or random ids."""
    if text is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        ids = tok(text, return_tensors="pt").input_ids[0]
        if ids.numel() == 0:
            raise ValueError("the text tokenised to no tokens")
        reps = -(-n_tokens // ids.numel())
        ids = ids.repeat(reps)[:n_tokens]
        return ids.expand(batch, -1).clone(), f"text ({len(text)} chars) via the model's tokenizer"
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, n_tokens), generator=gen), f"random token ids, seed {seed}"


def capture(
    model_path: str | Path,
    out: str | Path,
    *,
    layers: list[int],
    n_tokens: int = 2048,
    batch: int = 1,
    text: str | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
) -> CaptureResult:
    """Load a local model, run it on n_tokens tokens, write layers' q/k/v/o to `out` (.safetensors).

    Args:
        model_path: a local directory with config.json and weights (save_pretrained layout).
        out: the .safetensors file to write.
        layers: decoder layer indices to capture (negative indices count from the end).
        n_tokens, batch: the input is [batch, n_tokens] token ids.
        text: tokenised with the model's own tokenizer (from model_path) when given; otherwise random
            token ids from `seed` (real activations of the model, but of meaningless text).
        device, dtype: where and in which precision the model runs.
    """
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers import __version__ as tf_version

    model_path = Path(model_path)
    config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    if config.model_type not in SUPPORTED:
        raise ValueError(
            f"{model_path}: model_type {config.model_type!r} not supported ({', '.join(SUPPORTED)})"
        )
    model = (
        AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True, dtype=dtype).to(device).eval()
    )
    n_layers = len(_attention_modules(model))
    chosen = sorted({i % n_layers for i in layers})
    ids, source = _token_ids(model_path, text, n_tokens, batch, config.vocab_size, seed)
    store, _ = capture_model(model, ids.to(device), chosen)
    tensors = {f"layers.{i}.{n}": store[i][n] for i in chosen for n in ("q", "k", "v", "o")}
    shapes = {str(i): {n: list(store[i][n].shape) for n in ("q", "k", "v", "o")} for i in chosen}
    scales = {str(i): store[i]["scale"] for i in chosen}
    meta = {
        "format": FORMAT,
        "model_type": config.model_type,
        "model_path": str(model_path),
        "layers": json.dumps(chosen),
        "shapes": json.dumps(shapes),
        "softmax_scales": json.dumps(scales),
        "tokens": source,
        "seqlen": str(n_tokens),
        "batch": str(batch),
        "dtype": str(dtype).replace("torch.", ""),
        "transformers": tf_version,
        "layout": "bshd (flash-attn: batch, seqlen, heads, head_dim)",
        "post_rope": "true",
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata=meta)
    return CaptureResult(out, chosen, shapes, scales, meta)
