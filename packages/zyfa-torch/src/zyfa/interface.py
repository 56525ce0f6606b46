"""`flash_attn_func`: flash-attn's forward signature, served by ZYFA kernels (GPU) or the reference (CPU)."""

from __future__ import annotations

import torch
from torch import Tensor

from zyfa import _ops, _validate

__all__ = ["flash_attn_func"]


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
        causal: must be True for now (the kernels are causal; non-causal raises NotImplementedError).
            The mask is bottom-right aligned: query i sees key j iff j <= i + seqlen_k - seqlen_q;
            rows that see no key (seqlen_q > seqlen_k) output 0 with lse = +inf.
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
