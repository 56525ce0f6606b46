"""FlashAttention-3 (PyPI `fa3-fwd`: FA3's `hopper/` forward kernels): `from fa3_fwd_interface import
flash_attn_func`.

Checked against fa3-fwd 0.0.3 (fa3_fwd_interface.py and the messages of fa3_fwd/_C.abi3.so):
`flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
v_descale=None, window_size=(-1, -1), ..., num_splits=1, pack_gqa=None, ...)` takes flash-attn layout
[batch, seqlen, heads, dim] (GQA: heads_q a multiple of heads_kv) and returns the output
[batch, seqlen_q, heads_q, d_v]; causal is bottom-right aligned.
- BF16 in, BF16 out.
- FP8: e4m3fn q, k, v (V row-major, as every peer gets it: FA3 transposes it in the kernel) with
  float32 descales of shape (batch, heads_kv) each, x ≈ x8 · descale; the output is BF16.  The shared
  inputs have one descale per tensor, so each is broadcast to that shape once, in `prepare`.
- Head dims: at most 256 with d_qk == d_v, or d_qk in (128, 192] with d_v in (96, 128] (DeepSeek's
  192/128; "Only Hopper supports different V headdim"), or d_qk <= 64 with d_v <= 512 (BF16 only:
  "HeaddimV > 256 requires fp16 and bf16").  So d=128 and 192/128 both run, in BF16 and FP8.
Packed batches (`varlen_call`, for `zyfa_bench.serving`): `flash_attn_varlen_func(q, k, v, cu_seqlens_q,
cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None, seqused_k=None, softmax_scale=None, causal=False,
qv=None, q_descale=None, k_descale=None, v_descale=None, ...)` (no page table), and for a paged cache
`flash_attn_with_kvcache(q, k_cache, v_cache, ..., cache_seqlens=None, ..., page_table=None,
cu_seqlens_q=None, ..., max_seqlen_q=None, ..., causal=False, ...)` with k_cache [num_pages, page_size,
heads_kv, d], as serving engines call FA3 for chunked prefill over a prefix cache.
The wheel is one abi3 extension built against torch 2.10's stable C ABI (`torch/csrc/stable`: no C++
torch symbols, so newer torch releases load it) and the CUDA 13 runtime (libcudart.so.13); its kernels
are sm_90 cubins (plus a few sm_80 ones), no PTX: this is the Hopper peer, sm90 only.  The kernels are
ahead-of-time compiled: there is no JIT step in the first call.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable

import torch

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import (
    PackedBatch,
    Peer,
    Prepared,
    bshd_float,
    cuda_capability,
    import_status,
    validate_once,
)
from zyfa_bench.spec import Spec

__all__ = ["FA3BF16", "FA3FP8", "fa3_head_dims_supported", "varlen_call"]

MODULE = "fa3_fwd_interface"
MAX_HEAD_DIM = 256


def fa3_head_dims_supported(d_qk: int, d_v: int, precision: str) -> tuple[bool, str]:
    """FA3's forward head-dim rule on Hopper for `precision` ("bf16" or "fp8")."""
    if d_qk == d_v:
        if d_qk <= MAX_HEAD_DIM:
            return True, ""
        return False, f"FlashAttention-3 takes head dims up to {MAX_HEAD_DIM}, got {d_qk}/{d_v}"
    if 128 < d_qk <= 192 and 96 < d_v <= 128:
        return True, ""
    if d_qk <= 64 and d_v <= 512 and (precision == "bf16" or d_v <= MAX_HEAD_DIM):
        return True, ""
    return False, (
        f"FlashAttention-3 takes d_qk != d_v only as d_qk in (128, 192] with d_v in (96, 128], or d_qk <= 64 "
        f"with d_v <= 512 (<= 256 for FP8); got {d_qk}/{d_v} ({precision})"
    )


def _fa3_version() -> str:
    try:
        return importlib.metadata.version("fa3-fwd")
    except importlib.metadata.PackageNotFoundError:
        return "?"


class _FA3(Peer):
    family = "fa3"
    vendor = "nvidia"

    def available(self) -> tuple[bool, str]:
        mod, why = import_status(MODULE)
        if mod is None:
            return False, f"{why} (pip package fa3-fwd; it needs torch >= 2.10 built for CUDA 13)"
        cap = cuda_capability()
        if cap is None:
            return False, "FlashAttention-3 needs an NVIDIA GPU (none visible)"
        if cap[0] != 9:
            return (
                False,
                f"FlashAttention-3 (fa3-fwd) holds Hopper (sm90) kernels, this GPU is sm{cap[0]}{cap[1]}",
            )
        return True, f"fa3-fwd {_fa3_version()} on sm{cap[0]}{cap[1]}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        ok, why = super().supports(spec, device)
        if not ok:
            return ok, why
        return fa3_head_dims_supported(spec.d_qk, spec.d_v, self.precision)


class FA3BF16(_FA3):
    """fa3_fwd_interface.flash_attn_func on BF16 inputs (Hopper)."""

    name = "fa3-bf16"
    precision = "bf16"

    def _prepare(self, inputs: Inputs) -> Prepared:
        from fa3_fwd_interface import flash_attn_func

        q, k, v, scale, causal = inputs.q, inputs.k, inputs.v, inputs.softmax_scale, inputs.spec.causal
        prepared = Prepared(lambda: flash_attn_func(q, k, v, softmax_scale=scale, causal=causal), bshd_float)
        return validate_once(prepared, q.device)


class FA3FP8(_FA3):
    """fa3_fwd_interface.flash_attn_func on e4m3fn inputs with (batch, heads_kv) descales, BF16 output."""

    name = "fa3-fp8"
    precision = "fp8"

    def _prepare(self, inputs: Inputs) -> Prepared:
        from fa3_fwd_interface import flash_attn_func

        s, dev = inputs.spec, inputs.device
        q8, k8, v8 = inputs.q8, inputs.k8, inputs.v8
        dq, dk, dv = (
            torch.full((s.batch, s.heads_kv), x, dtype=torch.float32, device=dev)
            for x in (inputs.q_descale, inputs.k_descale, inputs.v_descale)
        )
        scale, causal = inputs.softmax_scale, s.causal

        def call() -> torch.Tensor:
            return flash_attn_func(
                q8, k8, v8, softmax_scale=scale, causal=causal, q_descale=dq, k_descale=dk, v_descale=dv
            )

        return validate_once(Prepared(call, bshd_float), dev)


def varlen_call(
    batch: PackedBatch, descales: tuple[float, float, float] | None, heads_kv: int
) -> Callable[[], object]:
    """FA3's causal packed call: `flash_attn_varlen_func` over packed k, v, or `flash_attn_with_kvcache`
    over a paged cache (page_table, cache_seqlens = seqused_k, cu_seqlens_q). FP8 per-tensor descales are
    broadcast to float32 (batch, heads_kv), FA3's shape, here (not timed)."""
    import fa3_fwd_interface as fa3

    b = batch
    kw: dict[str, object] = {"causal": True}
    if descales is not None:
        shape = (b.cu_seqlens_q.shape[0] - 1, heads_kv)
        dq, dk, dv = (torch.full(shape, d, dtype=torch.float32, device=b.q.device) for d in descales)
        kw.update(q_descale=dq, k_descale=dk, v_descale=dv)
    max_q, max_k = b.max_seqlens
    if b.page_table is None:
        return lambda: fa3.flash_attn_varlen_func(
            b.q, b.k, b.v, b.cu_seqlens_q, b.cu_seqlens_k, max_q, max_k, **kw
        )
    return lambda: fa3.flash_attn_with_kvcache(
        b.q,
        b.k,
        b.v,
        cache_seqlens=b.seqused_k,
        page_table=b.page_table,
        cu_seqlens_q=b.cu_seqlens_q,
        max_seqlen_q=max_q,
        **kw,
    )
