"""`flash_attn_func` (flash-attn's forward signature) and `flash_attn_varlen_func` (FlashAttention-3's packed
one), served by ZYFA kernels (GPU) or the reference (CPU)."""

from __future__ import annotations

import torch
from torch import Tensor

from zyfa import _ops, _ops_varlen, _validate

__all__ = ["flash_attn_func", "flash_attn_varlen_func"]


def flash_attn_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] | None = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    q_descale: float | Tensor | None = None,
    k_descale: float | Tensor | None = None,
    v_descale: float | Tensor | None = None,
    p_mode: str | None = None,
) -> Tensor | tuple[Tensor, Tensor, None]:
    """Causal attention forward with flash-attn's interface, BF16 or FP8 (e4m3fn) inputs, BF16 output.

    Args:
        q: [batch, seqlen_q, heads_q, d_qk], torch.bfloat16 or torch.float8_e4m3fn.
        k: [batch, seqlen_k, heads_kv, d_qk], same dtype and device; heads_q % heads_kv == 0 (GQA/MQA).
        v: [batch, seqlen_k, heads_kv, d_v], same dtype and device.
            Supported (d_qk, d_v): (128, 128) and (192, 128). The last dim of q, k, v must be
            contiguous (stride 1) and rows 16-byte aligned, as flash-attn requires.
        dropout_p: must be 0.0 (inference only).
        softmax_scale: scale of q.k before the softmax; default 1/sqrt(d_qk). Finite and non-zero in float32.
        causal: the bottom-right aligned causal mask (query i sees key j iff j <= i + seqlen_k - seqlen_q;
            rows that see no key, when seqlen_q > seqlen_k, output 0 with lse = +inf), or False for full
            attention (encoders, cross-attention). flash-attn's default is False; causal prefill passes True.
        window_size: must be (-1, -1) or None (no local window); softcap: must be 0.0; alibi_slopes: must
            be None.
        deterministic: accepted and ignored: the forward pass is always bitwise deterministic.
        return_attn_probs: also return the log-sum-exp, as flash-attn does: (out, lse, None).
        q_descale, k_descale, v_descale: FP8 only and then required: x ~= x8 * descale, finite and > 0
            in float32, with softmax_scale * q_descale * k_descale finite and non-zero in float32 (the
            kernels' one factor); tensors must be on q's device or the CPU.
            Python floats (e.g. `zyfa.fp8_quantize(x, as_float=True)`) go to the kernel by value: no
            host sync, capturable in CUDA graphs. 1-element float tensors (e.g. `zyfa.fp8_quantize(x)`)
            are read on the host inside the op, which waits for the device: fine eagerly and under
            torch.compile (no graph break), refused inside a CUDA graph capture.
        p_mode: FP8 only: "exact" (P = e4m3(exp2(.))), "lean" (P's e4m3 code from one FMA), "f16"
            (P.V in f16: P = f16(exp2(.)), 6-12x less error than "exact" on the H200; sm90a kernels only)
            or None (the default kernel: "lean" on sm90a, measured fastest on the H200, and on gfx950,
            modelled fastest; "exact" on CPU). Must be None for bf16.

    Returns:
        out: torch.bfloat16 [batch, seqlen_q, heads_q, d_v]; with return_attn_probs=True the tuple
        (out, lse, None), lse float32 [batch, heads_q, seqlen_q] (natural log of the scaled scores).
        In FP8 mode lse comes from the sum of the e4m3-rounded P (the kernels' row sum), so it is
        within about ln(1 + 2^-4) (exact P) or 0.1 (lean P) of the exact log-sum-exp.

    CPU tensors run `zyfa.reference.attention` (block_n 64); CUDA/ROCm tensors run the zyfa_core kernel
    selected for (device arch, dtype, d_qk, d_v, causal, p_mode). The op is forward-only.
    """
    _validate.check_options(dropout_p, causal, window_size, softcap, alibi_slopes, return_attn_probs)
    # The op checks the tensors and p_mode with zyfa_core's checks; they run here first for the CPU and
    # the Python GPU path, so that a bad call fails before anything else. On CUDA with zyfa._C loaded its
    # kernel runs them; while torch.compile traces, the op's fake implementation does (dynamo does not
    # trace into zyfa_core's C++).
    if not torch.compiler.is_compiling() and not _ops.checked_natively(q, k, v):
        _validate.check_tensors(q, k, v)
        _validate.check_p_mode(q.dtype, p_mode)
    scale = _validate.check_scale(softmax_scale, q.shape[3])
    descales = _validate.check_descales(q.dtype, q_descale, k_descale, v_descale)
    _validate.check_descale_devices(q, descales)
    if any(isinstance(d, Tensor) for d in descales):
        # The kernel ABI takes descales by value: a tensor's value must reach the host, so tensors go
        # to the op that reads them (one sync per call; refused inside CUDA graph capture).
        tensors = [d if isinstance(d, Tensor) else torch.tensor(d, dtype=torch.float32) for d in descales]
        out, lse = _ops.fwd_tensor_descales(q, k, v, scale, causal, *tensors, return_attn_probs, p_mode)
    else:
        out, lse = _ops.fwd(q, k, v, scale, causal, *descales, return_attn_probs, p_mode)
    if return_attn_probs:
        return out, lse, None
    return out


def _descale_table(
    q: Tensor, batch: int, heads_kv: int, descales: tuple[float | Tensor, float | Tensor, float | Tensor]
) -> tuple[tuple[float, float, float], Tensor | None]:
    """(float descales, None) when all three are floats; else (1.0s, the float32 table [3, batch, heads_kv] on
    q's device), built on the device from 1-element or (batch, heads_kv) tensors: no host read."""
    if not any(isinstance(d, Tensor) for d in descales):
        return descales, None  # type: ignore[return-value]
    rows = []
    for name, d in zip(("q_descale", "k_descale", "v_descale"), descales, strict=True):
        if not isinstance(d, Tensor):
            rows.append(torch.full((batch, heads_kv), float(d), dtype=torch.float32, device=q.device))
        elif d.numel() == 1:
            rows.append(d.to(device=q.device, dtype=torch.float32).reshape(1, 1).expand(batch, heads_kv))
        elif tuple(d.shape) == (batch, heads_kv):
            rows.append(d.to(device=q.device, dtype=torch.float32))
        else:
            raise ValueError(
                f"zyfa: {name} must be a float, a 1-element tensor or a tensor of shape (batch, heads_kv) = "
                f"({batch}, {heads_kv}), got shape {tuple(d.shape)}"
            )
    return (1.0, 1.0, 1.0), torch.stack(rows).contiguous()


def _check_varlen_options(
    seqused_q: Tensor | None, qv: Tensor | None, window_size: object, attention_chunk: int, softcap: float
) -> None:
    """Refuse the FlashAttention-3 options ZYFA does not serve."""
    if seqused_q is not None:
        raise NotImplementedError(
            "zyfa: seqused_q is not supported; cu_seqlens_q gives each sequence's queries"
        )
    if qv is not None:
        raise NotImplementedError("zyfa: qv is not supported; pass qv=None")
    if attention_chunk != 0:
        raise NotImplementedError(f"zyfa: attention_chunk={attention_chunk} is not supported; only 0")
    _validate.check_options(0.0, True, window_size, softcap, None, False)  # type: ignore[arg-type]


def flash_attn_varlen_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    seqused_q: Tensor | None = None,
    seqused_k: Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    qv: Tensor | None = None,
    q_descale: float | Tensor | None = None,
    k_descale: float | Tensor | None = None,
    v_descale: float | Tensor | None = None,
    window_size: tuple[int, int] | None = (-1, -1),
    attention_chunk: int = 0,
    softcap: float = 0.0,
    num_splits: int = 1,
    pack_gqa: bool | None = None,
    deterministic: bool = False,
    sm_margin: int = 0,
    return_attn_probs: bool = False,
    *,
    page_table: Tensor | None = None,
    p_mode: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attention over a packed batch of sequences, FlashAttention-3's `flash_attn_varlen_func` signature.

    Sequence b owns query rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 of q and out. Its keys are rows
    cu_seqlens_k[b] .. of k and v (packed), or, with `page_table`, key j is slot j % page_size of page
    page_table[b, j // page_size] of the cache k, v; `seqused_k[b]`, when given, is its key count (else
    cu_seqlens_k[b+1] - cu_seqlens_k[b]). Causal masking is bottom-right aligned per sequence: with len_q <=
    len_k (chunked prefill over a cached prefix) query i sees keys j <= i + len_k - len_q.

    Args:
        q: [total_q, heads_q, d_qk], torch.bfloat16 or torch.float8_e4m3fn.
        k, v: [total_k, heads_kv, d] packed, or [num_pages, page_size, heads_kv, d] with `page_table`; same
            dtype and device; heads_q % heads_kv == 0. (d_qk, d_v) in (128, 128), (192, 128); head_dim
            contiguous, other strides 16-byte multiples.
        cu_seqlens_q: int32 [batch + 1] on q's device, non-decreasing (need not start at 0).
        cu_seqlens_k: int32 [batch + 1] on q's device; may be None with `page_table` and `seqused_k`.
        max_seqlen_q, max_seqlen_k: Python ints >= every sequence's query / key count: they size the grid
            (no host sync). Checked against the values on the CPU only; on a GPU a larger sequence is
            clamped to them.
        seqused_q: must be None. seqused_k: int32 [batch] key counts, or None.
        softmax_scale: default 1/sqrt(d_qk).
        causal: as above; False (flash-attn's default) for full attention.
        qv: must be None. window_size: (-1, -1) or None; attention_chunk: 0; softcap: 0.0.
        q_descale, k_descale, v_descale: FP8 only and then required: floats (by value), 1-element tensors or
            float32 tensors of shape (batch, heads_kv) (FlashAttention-3's; query head h takes its kv head's
            q_descale). Tensors go to the kernel as one device table (no host sync).
        num_splits, pack_gqa, deterministic, sm_margin: accepted and ignored (one split, bitwise
            deterministic).
        return_attn_probs: also return the log-sum-exp: (out, lse).
        page_table: int32 [batch, max_pages] on q's device: the pages of each sequence's keys, in order.
        p_mode: FP8 P mode as in `zyfa.flash_attn_func`.

    Returns:
        out: torch.bfloat16 [total_q, heads_q, d_v]; with return_attn_probs=True (out, lse), lse float32
        [heads_q, total_q]. Rows that see no key give 0 and +inf. Rows of q outside every sequence are 0
        (lse +inf) on the CPU and not written on a GPU.

    CPU tensors run `zyfa.reference.attention_varlen` (block_n 64); CUDA tensors the zyfa_core kernel of
    layout "varlen" or "paged" for (arch, dtype, d_qk, d_v, p_mode); the call is capturable in a CUDA graph.
    """
    del num_splits, pack_gqa, deterministic, sm_margin
    _check_varlen_options(seqused_q, qv, window_size, attention_chunk, softcap)
    _validate.check_options(0.0, causal, (-1, -1), 0.0, None, return_attn_probs)
    for name, x in (("q", q), ("k", k), ("cu_seqlens_q", cu_seqlens_q)):
        if not isinstance(x, Tensor) or x.dim() < 1:
            raise TypeError(f"zyfa: {name} must be a torch.Tensor, got {type(x).__name__}")
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(n, bool) or not isinstance(n, (int, torch.SymInt)):
            raise TypeError(f"zyfa: {name} must be an int, got {type(n).__name__} {n!r}")
    scale = _validate.check_scale(softmax_scale, q.shape[-1])
    given = (q_descale, k_descale, v_descale)
    checked = _validate.check_descales(q.dtype, *_loose(*given))
    descales = tuple(g if isinstance(g, Tensor) else c for g, c in zip(given, checked, strict=True))
    batch, heads_kv = cu_seqlens_q.shape[0] - 1, k.shape[-2]
    floats, table = _descale_table(q, batch, heads_kv, descales)  # type: ignore[arg-type]
    out, lse = _ops_varlen.fwd_varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        seqused_k,
        page_table,
        max_seqlen_q,
        max_seqlen_k,
        scale,
        causal,
        *floats,
        table,
        return_attn_probs,
        p_mode,
    )
    return (out, lse) if return_attn_probs else out


def _loose(*descales: float | Tensor | None) -> tuple[float | Tensor | None, ...]:
    """Descales as `check_descales` takes them: a (batch, heads_kv) tensor passes as its first element's
    stand-in (its shape is checked when the table is built)."""
    return tuple(d.reshape(-1)[:1] if isinstance(d, Tensor) and d.numel() > 1 else d for d in descales)
