"""A stand-in for the `zyfa` package (zyfa-torch) with its public signatures, for harness tests.

The harness is tested on its own: these functions follow zyfa's contract (flash-attn layout, per-tensor
power-of-two FP8 scales, bottom-right causal) with plain float32 math, so a harness bug cannot hide behind
a kernel bug or the other way round.  `calls` records every flash_attn_func call for assertions.
"""

from __future__ import annotations

import math
import os
import sys
import types

import torch
from torch import Tensor

E4M3_MAX = 448.0


def _rotation(d: int, seed: int) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    m, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    return m.float()


def dense(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Tensor:
    """Softmax attention in q's dtype, flash-attn layout, GQA, bottom-right causal; empty rows give 0."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + sk - sq, -math.inf)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhij,bjhd->bihd", p, v)


def build() -> types.ModuleType:
    """A fresh fake `zyfa` module (with a `zyfa.reference` submodule)."""
    mod = types.ModuleType("zyfa")
    ref = types.ModuleType("zyfa.reference")
    mod.__version__ = "0.0.0-fake"
    mod.calls = []
    mod.varlen_calls = []

    def rotate(x: Tensor, *, seed: int = 0) -> Tensor:
        return (x.float() @ _rotation(x.shape[-1], seed).to(x.device)).to(x.dtype)

    def rotate_qk(q: Tensor, k: Tensor, *, seed: int = 0) -> tuple[Tensor, Tensor]:
        return rotate(q, seed=seed), rotate(k, seed=seed)

    def fp8_quantize(x: Tensor, *, rotate: bool = False, seed: int = 0) -> tuple[Tensor, Tensor]:
        xf = x.float()
        if rotate:
            xf = xf @ _rotation(x.shape[-1], seed).to(x.device)
        amax = float(xf.abs().amax()) if xf.numel() else 0.0
        descale = 2.0 ** math.ceil(math.log2(amax / E4M3_MAX)) if amax > 0 else 1.0
        x8 = (xf / descale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return x8, torch.tensor(descale, dtype=torch.float32, device=x.device)

    def flash_attn_func(
        q,
        k,
        v,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        alibi_slopes=None,
        deterministic=False,
        return_attn_probs=False,
        *,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        p_mode=None,
    ):
        mod.calls.append(
            {
                "dtype": q.dtype,
                "p_mode": p_mode,
                "causal": causal,
                "descales": (q_descale, k_descale, v_descale),
                "kernel_dir": os.environ.get("ZYFA_KERNEL_DIR"),
            }
        )
        scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else softmax_scale
        if q.dtype == torch.float8_e4m3fn:
            if None in (q_descale, k_descale, v_descale):
                raise ValueError("FP8 inputs need q_descale, k_descale and v_descale")
            if p_mode not in (None, "exact", "lean", "f16"):
                raise ValueError(f"bad p_mode {p_mode}")
            qf, kf, vf = (
                q.float() * float(q_descale),
                k.float() * float(k_descale),
                v.float() * float(v_descale),
            )
        else:
            if p_mode is not None:
                raise ValueError("p_mode is FP8 only")
            qf, kf, vf = q.float(), k.float(), v.float()
        return dense(qf, kf, vf, scale, causal).bfloat16()

    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        seqused_q=None,
        seqused_k=None,
        softmax_scale=None,
        causal=False,
        *,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        p_mode=None,
    ):
        """Each sequence of the packed batch through flash_attn_func; `varlen_calls` records the packing."""
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        mod.varlen_calls.append(
            {"cu_q": cq, "cu_k": ck, "max": (max_seqlen_q, max_seqlen_k), "p_mode": p_mode}
        )
        kw = dict(softmax_scale=softmax_scale, causal=causal, p_mode=p_mode)
        kw.update(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
        spans = [(slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])) for i in range(len(cq) - 1)]
        outs = [flash_attn_func(q[None, sq], k[None, sk], v[None, sk], **kw)[0] for sq, sk in spans]
        return torch.cat(outs)

    def attention_dense_f64(
        q, k, v, softmax_scale=None, causal=True, q_descale=1.0, k_descale=1.0, v_descale=1.0
    ):
        scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else softmax_scale
        out = dense(q.double() * q_descale, k.double() * k_descale, v.double() * v_descale, scale, causal)
        return out, None

    mod.flash_attn_func = flash_attn_func
    mod.flash_attn_varlen_func = flash_attn_varlen_func
    mod.fp8_quantize = fp8_quantize
    mod.rotate_qk = rotate_qk
    mod.rotate = rotate
    ref.attention_dense_f64 = attention_dense_f64
    mod.reference = ref
    return mod


def install(monkeypatch) -> types.ModuleType:
    """Put a fresh fake into sys.modules for one test (monkeypatch restores the real state after)."""
    mod = build()
    monkeypatch.setitem(sys.modules, "zyfa", mod)
    monkeypatch.setitem(sys.modules, "zyfa.reference", mod.reference)
    return mod
