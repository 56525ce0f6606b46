"""FlashAttention-4 (PyPI `flash-attn-4`, CuTe-DSL kernels): `from flash_attn.cute import flash_attn_func`.

Its interface (flash_attn/cute/interface.py) is `flash_attn_func(q, k, v, softmax_scale=None,
causal=False, ...)` in flash-attn layout, returning `(out, lse)`; causal is bottom-right aligned.  It
runs BF16 on sm90 (Hopper) and sm100; it has no FP8 path on sm90, so there is no FP8 peer for it.
Kernels are JIT-compiled by the CuTe DSL on the first call of a configuration: that happens in
`prepare` (the validation call), outside the timed region.
"""

from __future__ import annotations

import torch

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import Peer, Prepared, bshd_float, cuda_capability, import_status, validate_once
from zyfa_bench.spec import Spec

__all__ = ["FA4BF16"]


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
        return True, f"flash_attn.cute {getattr(mod, '__version__', '?')} on sm{cap[0]}{cap[1]}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        return super().supports(spec, device)

    def _prepare(self, inputs: Inputs) -> Prepared:
        from flash_attn.cute import flash_attn_func

        q, k, v, scale, causal = inputs.q, inputs.k, inputs.v, inputs.softmax_scale, inputs.spec.causal
        prepared = Prepared(lambda: flash_attn_func(q, k, v, softmax_scale=scale, causal=causal), bshd_float)
        return validate_once(prepared, q.device)
