"""AMD AITER (PyPI `amd-aiter` or a ROCm/aiter source install) for MI300/MI355X users.

- `aiter-bf16`: `aiter.flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
  window_size=(-1, -1, 0), ...)` (aiter/ops/mha.py), flash-attn layout and bottom-right causal mask; it
  dispatches to AITER's assembly fmha_v3 kernels where they apply and to composable_kernel (CK) tile
  kernels otherwise, so this peer also covers "composable_kernel through AITER".
- `aiter-fp8`: `aiter.flash_attn_fp8_pertensor_func(q, k, v, q_descale, k_descale, v_descale,
  causal=False, window_size=(-1, -1, 0), softmax_scale=None)`: e4m3 inputs, per-tensor descales as
  1-element float32 tensors, BF16 output.
No AMD GPU is reachable here: these adapters follow the documented signatures and are tested with the
module mocked.  On gfx942 (MI300) AITER's FP8 type is e4m3fnuz; the shared inputs are OCP e4m3fn
(gfx950's), so on gfx942 the FP8 peer refuses rather than reinterpret bits.
"""

from __future__ import annotations

import torch

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import Peer, Prepared, bshd_float, import_status, is_rocm, validate_once
from zyfa_bench.spec import Spec

__all__ = ["AiterBF16", "AiterFP8", "rocm_arch"]


def rocm_arch() -> str | None:
    """gfx name of the current ROCm device (e.g. 'gfx950'), None without one."""
    if not is_rocm() or not torch.cuda.is_available():
        return None
    name = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "gcnArchName", "")
    return name.split(":")[0] or None


class _Aiter(Peer):
    family = "aiter"
    vendor = "amd"

    def available(self) -> tuple[bool, str]:
        mod, why = import_status("aiter")
        if mod is None:
            return False, f"{why} (pip package amd-aiter, or a ROCm/aiter source install)"
        arch = rocm_arch()
        if arch is None:
            return False, "AITER needs an AMD GPU with a ROCm build of torch (none visible)"
        return True, f"aiter on {arch}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        return super().supports(spec, device)


class AiterBF16(_Aiter):
    """aiter.flash_attn_func (asm fmha_v3 or CK) on BF16 inputs."""

    name = "aiter-bf16"
    precision = "bf16"

    def _prepare(self, inputs: Inputs) -> Prepared:
        import aiter

        q, k, v = inputs.q, inputs.k, inputs.v
        kw = dict(dropout_p=0.0, softmax_scale=inputs.softmax_scale, causal=inputs.spec.causal)
        return validate_once(Prepared(lambda: aiter.flash_attn_func(q, k, v, **kw), bshd_float), q.device)


class AiterFP8(_Aiter):
    """aiter.flash_attn_fp8_pertensor_func: e4m3 inputs, per-tensor descales, BF16 output."""

    name = "aiter-fp8"
    precision = "fp8"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        arch = rocm_arch()
        if arch is not None and arch.startswith("gfx94"):
            return False, f"{arch} uses e4m3fnuz FP8; the shared inputs are OCP e4m3fn (gfx950)"
        return super().supports(spec, device)

    def _prepare(self, inputs: Inputs) -> Prepared:
        import aiter

        dev = inputs.device
        q8, k8, v8 = inputs.q8, inputs.k8, inputs.v8
        dq, dk, dv = (
            torch.tensor([x], dtype=torch.float32, device=dev)
            for x in (inputs.q_descale, inputs.k_descale, inputs.v_descale)
        )
        scale, causal = inputs.softmax_scale, inputs.spec.causal

        def call() -> torch.Tensor:
            return aiter.flash_attn_fp8_pertensor_func(
                q8, k8, v8, dq, dk, dv, causal=causal, softmax_scale=scale
            )

        return validate_once(Prepared(call, bshd_float), dev)
