"""The inputs of one problem, shared by every implementation: BF16 q, k, v and their FP8 quantisation.

Every FP8 implementation gets the SAME quantised tensors (`zyfa.fp8_quantize`: one power-of-two scale
per tensor, e4m3fn, round to nearest even); every BF16 implementation gets the same BF16 tensors.  With
`rotate=True`, q and k are rotated by the same random Hadamard matrix before quantisation
(`fp8_quantize(x, rotate=True, seed=...)`), which leaves q·kᵀ unchanged and spreads outlier channels;
v is never rotated.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import torch
from torch import Tensor

from zyfa_bench.spec import Spec
from zyfa_bench.workloads import Captured, Workload

__all__ = ["Inputs", "as_float", "make_inputs", "quantize_inputs"]


@dataclass
class Inputs:
    """BF16 and (optionally) FP8 inputs of one problem, flash-attn layout [batch, seqlen, heads, dim].

    q8/k8/v8 are float8_e4m3fn with x ≈ x8 · descale; descales are Python floats (powers of two).
    """

    spec: Spec
    q: Tensor
    k: Tensor
    v: Tensor
    softmax_scale: float
    q8: Tensor | None = None
    k8: Tensor | None = None
    v8: Tensor | None = None
    q_descale: float = 1.0
    k_descale: float = 1.0
    v_descale: float = 1.0
    rotate: bool = False
    seed: int = 0
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        """Device of the tensors."""
        return self.q.device

    @property
    def has_fp8(self) -> bool:
        """True once `quantize_inputs` has filled q8/k8/v8."""
        return self.q8 is not None

    def nbytes(self, precision: str) -> int:
        """Bytes of q, k, v (and a BF16 output) one call reads and writes, for L2 rotation decisions."""
        src = (self.q8, self.k8, self.v8) if precision == "fp8" and self.has_fp8 else (self.q, self.k, self.v)
        out = self.spec.batch * self.spec.seqlen_q * self.spec.heads_q * self.spec.d_v * 2
        return sum(t.numel() * t.element_size() for t in src) + out

    def dequantized(self) -> tuple[Tensor, Tensor, Tensor]:
        """float64 x8 · descale: the inputs an FP8 kernel actually computes with."""
        if not self.has_fp8:
            raise ValueError("these inputs were not quantised")
        return (
            self.q8.double() * self.q_descale,
            self.k8.double() * self.k_descale,
            self.v8.double() * self.v_descale,
        )


def as_float(descale: float | Tensor) -> float:
    """A descale as a Python float (reads a device tensor once, here, not in a timed call)."""
    return float(descale.item()) if isinstance(descale, Tensor) else float(descale)


def quantize_inputs(inputs: Inputs, *, rotate: bool = False, seed: int = 0) -> Inputs:
    """Fill inputs.q8/k8/v8 and descales with `zyfa.fp8_quantize` (q, k rotated first when `rotate`)."""
    zyfa = importlib.import_module("zyfa")
    q8, dq = zyfa.fp8_quantize(inputs.q, rotate=rotate, seed=seed)
    k8, dk = zyfa.fp8_quantize(inputs.k, rotate=rotate, seed=seed)
    v8, dv = zyfa.fp8_quantize(inputs.v)
    inputs.q8, inputs.k8, inputs.v8 = q8, k8, v8
    inputs.q_descale, inputs.k_descale, inputs.v_descale = as_float(dq), as_float(dk), as_float(dv)
    inputs.rotate, inputs.seed = rotate, seed
    return inputs


def make_inputs(
    spec: Spec,
    workload: Workload,
    *,
    device: torch.device,
    seed: int,
    fp8: bool = False,
    rotate: bool = False,
) -> Inputs:
    """Draw (or load) q, k, v for `spec` from `workload`; quantise them too when `fp8`."""
    meta: dict[str, object] = {"workload": workload.name}
    scale = spec.softmax_scale
    if isinstance(workload, Captured):
        q, k, v, file_meta = workload.load(device=device)
        scale = float(_layer_scale(file_meta, workload.layer, spec.softmax_scale))
        meta.update({"source": workload.path, "layer": workload.layer})
    else:
        q, k, v = workload.generate(spec, device=device, seed=seed)
    inputs = Inputs(spec=spec, q=q, k=k, v=v, softmax_scale=scale, seed=seed, meta=meta)
    if fp8:
        quantize_inputs(inputs, rotate=rotate, seed=seed)
    return inputs


def _layer_scale(meta: dict[str, str], layer: int, default: float) -> float:
    import json

    scales = json.loads(meta.get("softmax_scales", "{}"))
    return float(scales.get(str(layer), default))
