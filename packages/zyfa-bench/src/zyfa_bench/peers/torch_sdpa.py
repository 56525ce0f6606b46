"""torch.nn.functional.scaled_dot_product_attention, one peer per backend: flash, cuDNN, efficient, math.

Each call runs under `torch.nn.attention.sdpa_kernel([backend])`, so torch cannot silently fall back to
another backend.  Facts seen on the H200 (torch 2.11, 2026-12-01) that the adapters handle:
- the flash backend rejects d_qk != d_v (the 192/128 MLA shape): `supports` says so up front (skip);
- the efficient backend rejects `enable_gqa=True`: for GQA its k and v heads are expanded with
  `repeat_interleave` once in `prepare` (not timed), and the row says so;
- other backends get `enable_gqa=True` first; if torch refuses, they fall back to expanded heads too.
Causal masks: `is_causal=True` is top-left aligned in torch, which equals flash-attn's bottom-right
alignment only when seqlen_q == seqlen_k; otherwise `torch.nn.attention.bias.causal_lower_right` is
passed as the mask.  With seqlen_q > seqlen_k torch documents NaN for the rows that see no key; those
rows are set to 0 (flash-attn's convention) in the untimed post-processing.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import Peer, Prepared, Unsupported, validate_once
from zyfa_bench.spec import Spec

__all__ = ["SDPA_BACKENDS", "TorchSDPA"]

# peer suffix -> torch.nn.attention.SDPBackend member name
SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}
# The math backend materialises the [batch, heads, seqlen_q, seqlen_k] scores: cap it.
MATH_MAX_SCORES = 2**31


class TorchSDPA(Peer):
    """One backend of torch's scaled_dot_product_attention on BF16 inputs."""

    family = "torch-sdpa"
    precision = "bf16"
    vendor = "any"

    def __init__(self, backend: str) -> None:
        if backend not in SDPA_BACKENDS:
            raise ValueError(f"backend must be one of {sorted(SDPA_BACKENDS)}, got {backend!r}")
        self.backend = backend
        self.name = f"sdpa-{backend}"
        self.note = "kv heads expanded before the call (not timed)" if backend == "efficient" else ""

    def available(self) -> tuple[bool, str]:
        try:
            from torch.nn.attention import SDPBackend  # noqa: F401
        except ImportError as exc:
            return False, f"torch {torch.__version__} has no torch.nn.attention.SDPBackend ({exc})"
        if self.backend != "math" and not torch.cuda.is_available():
            return False, f"the {self.backend} backend needs a GPU (none visible)"
        return True, f"torch {torch.__version__}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        if self.backend == "math":
            scores = spec.batch * spec.heads_q * spec.seqlen_q * spec.seqlen_k
            if scores > MATH_MAX_SCORES:
                gib = scores * 4 / 2**30
                return (
                    False,
                    f"math backend would materialise {gib:.0f} GiB of fp32 scores (cap 2^31 elements)",
                )
            return True, ""
        if self.backend == "flash" and spec.d_qk != spec.d_v:
            return False, f"torch's flash backend needs d_qk == d_v (got {spec.d_qk}/{spec.d_v})"
        return super().supports(spec, device)

    def _prepare(self, inputs: Inputs) -> Prepared:
        spec = inputs.spec
        gqa = spec.heads_q != spec.heads_kv
        if self.backend == "efficient" and gqa:
            return self._build(
                inputs, expand=True, notes=["kv heads expanded (efficient rejects enable_gqa)"]
            )
        try:
            return self._build(inputs, expand=False, notes=[])
        except Unsupported:
            if not gqa:
                raise
        return self._build(inputs, expand=True, notes=["enable_gqa refused: kv heads expanded (not timed)"])

    def _build(self, inputs: Inputs, *, expand: bool, notes: list[str]) -> Prepared:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        spec = inputs.spec
        group = spec.heads_q // spec.heads_kv
        q = inputs.q.transpose(1, 2)
        k, v = inputs.k.transpose(1, 2), inputs.v.transpose(1, 2)
        if expand and group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        kwargs: dict[str, object] = {"scale": inputs.softmax_scale}
        if group > 1 and not expand:
            kwargs["enable_gqa"] = True
        if spec.causal and spec.seqlen_q == spec.seqlen_k:
            kwargs["is_causal"] = True
        elif spec.causal:
            from torch.nn.attention.bias import causal_lower_right

            kwargs["attn_mask"] = causal_lower_right(spec.seqlen_q, spec.seqlen_k)
        backend = getattr(SDPBackend, SDPA_BACKENDS[self.backend])

        def call() -> Tensor:
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, **kwargs)

        empty = max(spec.seqlen_q - spec.seqlen_k, 0) if spec.causal else 0
        prepared = Prepared(call, lambda out: _to_bshd(out, empty), notes)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return validate_once(prepared, inputs.device)
            except RuntimeError as exc:
                reasons = "; ".join(str(w.message).strip().splitlines()[0] for w in caught)
                raise Unsupported(f"{self.name}: {str(exc).splitlines()[0]} {reasons}".strip()) from exc


def _to_bshd(out: Tensor, empty_rows: int) -> Tensor:
    out = out.transpose(1, 2).float()
    if empty_rows:
        out[:, :empty_rows] = 0.0
    return out
