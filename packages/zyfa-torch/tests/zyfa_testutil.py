"""Shared helpers of the zyfa tests: fresh random inputs, FP8 triples, relative errors."""

from __future__ import annotations

import torch
from torch import Tensor

import zyfa


def make_qkv(
    batch: int,
    seqlen_q: int,
    seqlen_k: int,
    heads_q: int,
    heads_kv: int,
    d_qk: int = 128,
    d_v: int = 128,
    *,
    seed: int,
    dtype: torch.dtype = torch.bfloat16,
    device: str = "cpu",
    q_scale: float = 1.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gaussian q, k, v in flash-attn layout; q_scale > 1 sharpens the softmax."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seqlen_q, heads_q, d_qk, generator=g) * q_scale
    k = torch.randn(batch, seqlen_k, heads_kv, d_qk, generator=g)
    v = torch.randn(batch, seqlen_k, heads_kv, d_v, generator=g)
    return (
        q.to(device=device, dtype=dtype),
        k.to(device=device, dtype=dtype),
        v.to(device=device, dtype=dtype),
    )


def quantize3(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor, tuple[float, float, float]]:
    """fp8_quantize each of q, k, v; return the three e4m3 tensors and the descales as floats."""
    (q8, dq), (k8, dk), (v8, dv) = (zyfa.fp8_quantize(x) for x in (q, k, v))
    return q8, k8, v8, (dq.item(), dk.item(), dv.item())


def rel_err(x: Tensor, ref: Tensor) -> float:
    """‖x − ref‖ / ‖ref‖ in float64 (ref non-zero)."""
    ref = ref.double().cpu()
    return ((x.double().cpu() - ref).norm() / ref.norm()).item()


def lse_err(lse: Tensor, ref: Tensor) -> float:
    """Max |lse − ref| over rows with a finite reference; rows with ref = +inf must be +inf too."""
    lse, ref = lse.double().cpu(), ref.double().cpu()
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isinf(lse) & (lse > 0), ~finite), (
        "lse must be +inf exactly on rows that see no key"
    )
    return (lse[finite] - ref[finite]).abs().max().item() if finite.any() else 0.0
