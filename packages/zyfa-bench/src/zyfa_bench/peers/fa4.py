"""FlashAttention-4 (PyPI `flash-attn-4`, CuTe-DSL kernels): `from flash_attn.cute import flash_attn_func`.

Checked against flash-attn-4 4.0.0b36 (flash_attn/cute/interface.py): `flash_attn_func(q, k, v, qv=None,
gather_kv_indices=None, softmax_scale=None, causal=False, ..., return_lse=False, ...)` takes flash-attn
layout [batch, seqlen, heads, dim] (GQA: heads_q a multiple of heads_kv), returns `(out, lse)` with `out`
[batch, seqlen_q, heads_q, d_v] in the input dtype (lse is None unless return_lse); causal is bottom-right
aligned.  Head dims (`_validate_head_dims`): on sm90 any d_qk, d_v in 8..256 that are multiples of 8
(so 128/128 and DeepSeek's 192/128 both run); on sm100/sm110 d <= 128, 192/128 or 256/256.  FP8 inputs
are accepted on sm100 only ("FP8 is only supported on SM100"), so there is no FP8 peer (the H200 is
sm90).  It needs `nvidia-cutlass-dsl` (4.8.x) importable, including its `dsl_packages` folder, which the
wheel puts on sys.path through a .pth file (tools/device/h200_run.sh adds it to PYTHONPATH).  Kernels are
JIT-compiled by the CuTe DSL on the first call of a configuration: that happens in `prepare` (the
validation call), outside the timed region.
Packed batches (`varlen_call`, for `zyfa_bench.serving`): `flash_attn_varlen_func(q, k, v, qv=None,
cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, ..., seqused_k=None, ...,
page_table=None, ..., causal=False, ...)` returns `(out, lse)`; with a page table cu_seqlens_k must be None
(the key counts come from seqused_k).
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

__all__ = ["FA4BF16", "fa4_head_dims_supported", "varlen_call"]


def fa4_head_dims_supported(d_qk: int, d_v: int, major: int) -> tuple[bool, str]:
    """FA4's head-dim rule for compute capability `major` (interface.py `_validate_head_dims`, BF16)."""
    if d_qk % 8 or d_v % 8:
        return False, f"FlashAttention-4 needs head dims that are multiples of 8, got {d_qk}/{d_v}"
    if major == 9:
        if 8 <= d_qk <= 256 and 8 <= d_v <= 256:
            return True, ""
        return False, f"FlashAttention-4 on sm90 takes head dims 8..256, got {d_qk}/{d_v}"
    if major in (10, 11):
        if (d_qk <= 128 and d_v <= 128) or (d_qk, d_v) in ((192, 128), (256, 256), (64, 512), (512, 512)):
            return True, ""
        return False, f"FlashAttention-4 on sm{major}x takes d <= 128, 192/128 or 256/256, got {d_qk}/{d_v}"
    return False, f"FlashAttention-4 does not run on sm{major}x"


def _fa4_version(mod: object) -> str:
    # flash_attn.cute.__version__ asks for a distribution named "fa4" and says 0.0.0 for the PyPI wheel.
    try:
        return importlib.metadata.version("flash-attn-4")
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(mod, "__version__", "?"))


class FA4BF16(Peer):
    """flash_attn.cute.flash_attn_func on BF16 inputs (Hopper/Blackwell)."""

    name = "fa4-bf16"
    family = "fa4"
    precision = "bf16"
    vendor = "nvidia"

    def available(self) -> tuple[bool, str]:
        mod, why = import_status("flash_attn.cute")
        if mod is None:
            return False, f"{why} (pip packages flash-attn-4 and nvidia-cutlass-dsl)"
        cap = cuda_capability()
        if cap is None:
            return False, "FlashAttention-4 needs an NVIDIA GPU (none visible)"
        if cap[0] not in (9, 10, 11):
            return False, f"FlashAttention-4 runs on sm90/sm100/sm110, this GPU is sm{cap[0]}{cap[1]}"
        return True, f"flash_attn.cute {_fa4_version(mod)} on sm{cap[0]}{cap[1]}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        ok, why = super().supports(spec, device)
        if not ok:
            return ok, why
        cap = cuda_capability()
        if cap is not None:
            ok, why = fa4_head_dims_supported(spec.d_qk, spec.d_v, cap[0])
        return ok, why

    def _prepare(self, inputs: Inputs) -> Prepared:
        from flash_attn.cute import flash_attn_func

        q, k, v, scale, causal = inputs.q, inputs.k, inputs.v, inputs.softmax_scale, inputs.spec.causal
        prepared = Prepared(lambda: flash_attn_func(q, k, v, softmax_scale=scale, causal=causal), bshd_float)
        return validate_once(prepared, q.device)


def varlen_call(batch: PackedBatch) -> Callable[[], object]:
    """FA4's causal packed call on BF16: cu_seqlens over packed k, v, or the page table with seqused_k over
    a paged cache."""
    from flash_attn.cute import flash_attn_varlen_func

    b = batch
    max_q, max_k = b.max_seqlens
    keys: dict[str, object] = (
        {"cu_seqlens_k": b.cu_seqlens_k}
        if b.page_table is None
        else {"seqused_k": b.seqused_k, "page_table": b.page_table}
    )
    return lambda: flash_attn_varlen_func(
        b.q,
        b.k,
        b.v,
        cu_seqlens_q=b.cu_seqlens_q,
        max_seqlen_q=max_q,
        max_seqlen_k=max_k,
        causal=True,
        **keys,
    )
