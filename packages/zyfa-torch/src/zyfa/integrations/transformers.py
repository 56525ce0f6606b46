"""Hugging Face transformers backend: ``attn_implementation="zyfa"`` runs a causal LM's attention on ZYFA.

    import torch
    from transformers import AutoModelForCausalLM
    import zyfa.integrations.transformers as zyfa_hf

    zyfa_hf.register()                                  # "zyfa": BF16
    zyfa_hf.register("zyfa_fp8", fp8=True, rotate=True)  # FP8, quantised per call (q, k rotated)
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, attn_implementation="zyfa")

What it serves: plain causal self-attention without padding, as a prefill or a decode step with a
dynamic KV cache (the mask is bottom-right aligned, so queries are the last positions of the keys).
Everything else raises, naming what was asked, instead of silently computing something else: a padding
mask (an attention_mask with zeros), a custom 4D mask, sliding-window / chunked / packed-sequence /
bidirectional mask patterns, static (fixed-size) caches, softcapping, dropout, non-causal layers, and
(BF16 mode) a model whose activations are not bfloat16. Use ``attn_implementation="sdpa"`` for those.

To see every such case, the registration also installs a mask function under the same name in
transformers' AttentionMaskInterface: without one, transformers would pass no mask at all to an
unknown implementation, and padding would be ignored without a word.

FP8 mode quantises q, k, v per tensor at every call (`zyfa.fp8_quantize`, power-of-two descales); the
descales are tensors, so each call reads them on the host (one device sync per layer) and the model
cannot be captured in a CUDA graph in that mode (see docs/usage.md for static-descale recipes).

Written against transformers 5.17 - 5.24 (the ``hf`` extra of zyfa-torch): the attention function
signature ``fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs)`` with
query [batch, heads, seq, head_dim], returning (out [batch, seq, heads, head_dim], None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

import zyfa

__all__ = ["ZyfaAttentionOptions", "attention_forward", "causal_only_mask", "register"]


@dataclass(frozen=True)
class ZyfaAttentionOptions:
    """How a registered name runs attention: BF16, or FP8 with per-call quantisation."""

    fp8: bool = False
    p_mode: str | None = None  # FP8 only: "exact", "lean", "f16" or None (the default kernel)
    rotate: bool = False  # FP8 only: rotate q and k (random Hadamard, `seed`) before quantising
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.fp8 and (self.p_mode is not None or self.rotate):
            raise ValueError("zyfa: p_mode and rotate apply to FP8 only; pass fp8=True")


def _interfaces() -> tuple[Any, Any]:
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as exc:
        raise ImportError(
            "zyfa.integrations.transformers needs transformers 5.x with AttentionInterface and "
            f"AttentionMaskInterface (pip install 'zyfa-torch[hf]'): {exc}"
        ) from exc
    return AttentionInterface, AttentionMaskInterface


def register(
    name: str = "zyfa", *, fp8: bool = False, p_mode: str | None = None, rotate: bool = False, seed: int = 0
) -> str:
    """Register ZYFA as transformers attention implementation `name`; returns `name`.

    Then ``from_pretrained(..., attn_implementation=name)`` (or ``model.set_attn_implementation(name)``)
    runs every attention layer through `zyfa.flash_attn_func`. Registering again under the same name
    replaces the options. Register several names for several modes, e.g. "zyfa" and "zyfa_fp8".

    Args:
        name: the attn_implementation string.
        fp8: quantise q, k, v to float8_e4m3fn per tensor at every call (any floating model dtype;
            the output is cast back to the query's dtype). False: BF16, the model must run in bfloat16.
        p_mode: FP8 probability mode, "exact", "lean", "f16" (P.V in f16, sm90a) or None (the default
            kernel: lean on sm90a, exact elsewhere).
        rotate: FP8 only: rotate q and k by the same random Hadamard rotation before quantising.
        seed: the rotation's sign seed.
    """
    options = ZyfaAttentionOptions(fp8=fp8, p_mode=p_mode, rotate=rotate, seed=seed)
    attention_interface, mask_interface = _interfaces()

    def zyfa_attention(
        module: torch.nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        **kw: Any,
    ) -> tuple[Tensor, None]:
        return attention_forward(module, query, key, value, attention_mask, options=options, **kw)

    attention_interface.register(name, zyfa_attention)
    mask_interface.register(name, causal_only_mask)
    return name


def attention_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    *,
    options: ZyfaAttentionOptions = ZyfaAttentionOptions(),  # noqa: B008 (frozen, immutable)
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """One attention layer: query [batch, heads_q, seq_q, d], key/value [batch, heads_kv, seq_k, d]
    (transformers' layout) -> (out [batch, seq_q, heads_q, d_v], None)."""
    _check_supported(module, query, key, attention_mask, dropout, sliding_window, softcap, is_causal, kwargs)
    # flash-attn layout by views: [b, h, s, d] -> [b, s, h, d] keeps head_dim contiguous, so no copy.
    q, k, v = (_flash_layout(x) for x in (query, key, value))
    if not options.fp8:
        if query.dtype != torch.bfloat16:
            raise TypeError(
                f"zyfa attention (BF16 mode) needs bfloat16 activations, got {query.dtype}: load the model "
                "with dtype=torch.bfloat16, or register(fp8=True), which quantises any float dtype"
            )
        return zyfa.flash_attn_func(q, k, v, softmax_scale=scaling, causal=True), None
    (q8, dq), (k8, dk) = (zyfa.fp8_quantize(x, rotate=options.rotate, seed=options.seed) for x in (q, k))
    v8, dv = zyfa.fp8_quantize(v)
    out = zyfa.flash_attn_func(
        q8,
        k8,
        v8,
        softmax_scale=scaling,
        causal=True,
        q_descale=dq,
        k_descale=dk,
        v_descale=dv,
        p_mode=options.p_mode,
    )
    return out.to(query.dtype), None


def _flash_layout(x: Tensor) -> Tensor:
    x = x.transpose(1, 2)
    return x if x.stride(-1) == 1 else x.contiguous()


def _check_supported(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    attention_mask: Tensor | None,
    dropout: float,
    sliding_window: int | None,
    softcap: float | None,
    is_causal: bool | None,
    kwargs: dict[str, Any],
) -> None:
    """Raise for every request ZYFA cannot serve exactly (nothing falls back silently)."""
    where = f"zyfa attention ({type(module).__name__})"
    if attention_mask is not None:
        raise ValueError(
            f"{where}: got an attention mask of shape {tuple(attention_mask.shape)}; ZYFA serves plain "
            "causal attention without padding. Run unpadded batches (sequences of equal length, "
            "attention_mask all ones or None) or use attn_implementation='sdpa'"
        )
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if not causal:
        raise NotImplementedError(f"{where}: non-causal attention is not supported (the kernels are causal)")
    if dropout:
        raise NotImplementedError(
            f"{where}: dropout={dropout} is not supported (inference only; call model.eval())"
        )
    if softcap:
        raise NotImplementedError(f"{where}: softcap={softcap} is not supported")
    # A window that covers every key changes nothing: row i sees keys j > i - window, and the farthest
    # key a row sees is seqlen_k - 1 positions back.
    if sliding_window is not None and key.shape[2] > sliding_window:
        raise NotImplementedError(
            f"{where}: sliding_window={sliding_window} with {key.shape[2]} keys is not supported "
            "(no local windows; only sequences no longer than the window)"
        )
    if any(kwargs.get(name) is not None for name in ("cu_seq_lens_q", "cu_seq_lens_k")):
        raise NotImplementedError(f"{where}: packed (variable-length) sequences are not supported")


def causal_only_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int | Tensor = 0,
    kv_offset: int = 0,
    mask_function: Any = None,
    attention_mask: Tensor | None = None,
    **kwargs: Any,
) -> None:
    """transformers mask function for ZYFA: returns None (plain causal) or raises.

    Accepts the plain causal pattern with the queries at the end of the keys (no cache, or a dynamic
    cache) and a padding mask of all ones; raises for padding, other mask patterns and static caches.
    Checking the padding mask reads it on the host (as transformers' own flash-attention mask does).
    """
    from transformers.masking_utils import causal_mask_function

    if mask_function is not None and mask_function is not causal_mask_function:
        raise NotImplementedError(
            "zyfa attention serves the plain causal mask only; this model asks for another pattern "
            f"({getattr(mask_function, '__qualname__', mask_function)}: a sliding window, chunked attention, "
            "packed sequences, bidirectional blocks or an overlay). For a sliding window longer than every "
            "sequence you run, set config.sliding_window = None; otherwise use attn_implementation='sdpa'"
        )
    if isinstance(q_offset, Tensor) or q_offset + q_length != kv_offset + kv_length:
        raise NotImplementedError(
            "zyfa attention needs the queries to be the last positions of the keys; got "
            f"q_length={q_length}, kv_length={kv_length} (a static or fixed-size KV cache holds unfilled "
            "slots): use the default dynamic cache"
        )
    if attention_mask is None:
        return None
    mask = attention_mask[:, -kv_length:]
    if mask.shape[-1] != kv_length or not bool(mask.all()):
        raise ValueError(
            "zyfa attention serves plain causal attention without padding, but the attention_mask has "
            "padded positions. Run unpadded batches (sequences of equal length) or use "
            "attn_implementation='sdpa'"
        )
    return None
