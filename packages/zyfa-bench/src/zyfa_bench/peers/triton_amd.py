"""Triton flash attention for AMD GPUs, as AITER ships it: `aiter.ops.triton.mha`.

- `triton-amd-bf16`: `flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, ...)`
  (flash-attn layout, bottom-right causal).
- `triton-amd-fp8`: `flash_attn_fp8_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, ...)`
  takes high-precision q, k, v and quantises them itself (its own per-(batch, head) scales), so it is
  handed the dequantised shared FP8 inputs (x8 · descale, exact in BF16): it sees the same values as the
  other FP8 peers, then rounds them again with its own scales; the row says so.
Tested here with the module mocked (no AMD GPU is reachable).
"""

from __future__ import annotations

import torch

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.aiter import rocm_arch
from zyfa_bench.peers.base import Peer, Prepared, bshd_float, import_status, validate_once
from zyfa_bench.spec import Spec

__all__ = ["TritonAmdBF16", "TritonAmdFP8"]


class _TritonAmd(Peer):
    family = "triton-amd"
    vendor = "amd"

    def available(self) -> tuple[bool, str]:
        mod, why = import_status("aiter.ops.triton.mha")
        if mod is None:
            return False, f"{why} (Triton attention ships in amd-aiter)"
        arch = rocm_arch()
        if arch is None:
            return False, "Triton AMD attention needs an AMD GPU with a ROCm build of torch (none visible)"
        return True, f"aiter.ops.triton.mha on {arch}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        return super().supports(spec, device)


class TritonAmdBF16(_TritonAmd):
    """aiter.ops.triton.mha.flash_attn_func on BF16 inputs."""

    name = "triton-amd-bf16"
    precision = "bf16"

    def _prepare(self, inputs: Inputs) -> Prepared:
        from aiter.ops.triton.mha import flash_attn_func

        q, k, v = inputs.q, inputs.k, inputs.v
        kw = dict(dropout_p=0.0, softmax_scale=inputs.softmax_scale, causal=inputs.spec.causal)
        return validate_once(Prepared(lambda: flash_attn_func(q, k, v, **kw), bshd_float), q.device)


class TritonAmdFP8(_TritonAmd):
    """aiter.ops.triton.mha.flash_attn_fp8_func (quantises internally) on the dequantised FP8 inputs."""

    name = "triton-amd-fp8"
    precision = "fp8"
    note = "re-quantises the shared FP8 values with its own per-head scales"

    def _prepare(self, inputs: Inputs) -> Prepared:
        from aiter.ops.triton.mha import flash_attn_fp8_func

        # x8 · descale is exact in bf16 (3 mantissa bits times a power of two), computed once, untimed.
        q, k, v = (
            (x.float() * d).bfloat16()
            for x, d in zip(
                (inputs.q8, inputs.k8, inputs.v8),
                (inputs.q_descale, inputs.k_descale, inputs.v_descale),
                strict=True,
            )
        )
        kw = dict(dropout_p=0.0, softmax_scale=inputs.softmax_scale, causal=inputs.spec.causal)
        prepared = Prepared(lambda: flash_attn_fp8_func(q, k, v, **kw), bshd_float, [self.note])
        return validate_once(prepared, q.device)
