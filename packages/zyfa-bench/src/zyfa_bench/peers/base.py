"""What every implementation adapter ("peer") offers the harness.

A peer wraps one attention implementation behind one interface:
- `available() -> (bool, reason)`: is its package importable and a suitable device present?  The reason
  says what is missing (or what was found).
- `supports(spec, device) -> (bool, reason)`: can it run this shape here?  Only definite, documented
  limits live here; anything else is tried, and its error is reported for the row.
- `prepare(inputs) -> Prepared`: one-time work (layout views, graph builds, plans) outside the timed
  region; returns the zero-argument call that is timed, and how to turn its result into the output.
- `run(q, k, v, ...)`: the uniform convenience call (prepare, call once, return the output), used for
  accuracy and by users.

Outputs are always returned as float32 in flash-attn layout [batch, seqlen_q, heads_q, d_v],
dequantised where an implementation returns FP8 (cuDNN on Hopper).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from zyfa_bench.inputs import Inputs
from zyfa_bench.spec import Spec

__all__ = [
    "PackedBatch",
    "Peer",
    "Prepared",
    "Unsupported",
    "bshd_float",
    "cuda_capability",
    "import_status",
    "is_rocm",
    "validate_once",
]


@dataclass(frozen=True)
class PackedBatch:
    """One packed causal call as the FlashAttention varlen APIs take it (the serving peers' input).

    q [total_q, heads_q, d_qk]; k, v packed [total_k, heads_kv, d] by cu_seqlens_k, or, with `page_table`
    ([batch, pages] int32), a paged cache [num_pages, page_size, heads_kv, d] holding seqused_k keys per
    sequence; max_seqlens = (max_seqlen_q, max_seqlen_k).
    """

    q: Tensor
    k: Tensor
    v: Tensor
    cu_seqlens_q: Tensor
    cu_seqlens_k: Tensor
    seqused_k: Tensor
    page_table: Tensor | None
    max_seqlens: tuple[int, int]


class Unsupported(RuntimeError):
    """This implementation cannot run this problem (the message says why)."""


@dataclass
class Prepared:
    """A ready-to-time call and the post-processing of its result (not timed)."""

    call: Callable[[], Any]
    result: Callable[[Any], Tensor]
    notes: list[str] = field(default_factory=list)

    def output(self) -> Tensor:
        """Call once and return the float32 output in flash-attn layout."""
        return self.result(self.call())


def import_status(module: str) -> tuple[Any | None, str]:
    """(module, "") if importable, else (None, a one-line reason naming the import error)."""
    try:
        return importlib.import_module(module), ""
    except Exception as exc:  # ImportError, but also broken installs raising at import time
        first = (str(exc).strip().splitlines() or [""])[0]
        return None, f"import {module} failed: {type(exc).__name__}: {first[:200]}"


def is_rocm() -> bool:
    """True for a ROCm (HIP) build of torch."""
    return getattr(torch.version, "hip", None) is not None


def cuda_capability() -> tuple[int, int] | None:
    """Compute capability of the current CUDA device, None without one (or on ROCm)."""
    if is_rocm() or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()


def bshd_float(out: Any) -> Tensor:
    """First element of a tuple result (flash-attn style APIs), as float32."""
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out.float()


class Peer:
    """Base class of the adapters; subclasses set the class attributes and implement `_prepare`."""

    name: str = ""  # stable identifier used on the command line and in results, e.g. "cudnn-fp8"
    family: str = ""  # "zyfa", "torch-sdpa", "cudnn", "fa3", "fa4", "flashinfer", "aiter", "triton-amd"
    precision: str = "bf16"  # input precision: "bf16" or "fp8" (e4m3fn)
    vendor: str = "any"  # "nvidia", "amd" or "any"
    note: str = ""  # caveat printed with every row, e.g. "FP8 output (dequantised by v_descale)"

    def available(self) -> tuple[bool, str]:
        """(True, what was found) or (False, what is missing)."""
        raise NotImplementedError

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        """Definite limits only; the default accepts any causal or non-causal shape on a GPU."""
        if device.type != "cuda":
            return False, f"{self.name} runs on GPUs only (device is {device.type})"
        return True, ""

    def prepare(self, inputs: Inputs) -> Prepared:
        """Everything outside the timed call; raises Unsupported when the problem cannot run."""
        if self.precision == "fp8" and not inputs.has_fp8:
            raise ValueError(f"{self.name} needs FP8 inputs: quantise them first (inputs.quantize_inputs)")
        return self._prepare(inputs)

    def _prepare(self, inputs: Inputs) -> Prepared:
        raise NotImplementedError

    def run(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        softmax_scale: float | None = None,
        causal: bool = True,
        q_descale: float = 1.0,
        k_descale: float = 1.0,
        v_descale: float = 1.0,
    ) -> Tensor:
        """Uniform call: flash-attn layout in (bf16, or e4m3fn with descales for FP8 peers), float32 out."""
        spec = Spec(
            q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3], causal
        )
        scale = spec.softmax_scale if softmax_scale is None else softmax_scale
        if self.precision == "fp8":
            fp8 = dict(q8=q, k8=k, v8=v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
            # The BF16 fields are only used by BF16 peers: hand the dequantised values for completeness.
            inputs = Inputs(
                spec, q.float() * q_descale, k.float() * k_descale, v.float() * v_descale, scale, **fp8
            )
        else:
            inputs = Inputs(spec, q, k, v, scale)
        return self.prepare(inputs).output()

    def describe(self) -> dict[str, str]:
        """Static facts for result files and `zyfa-bench peers`."""
        return {
            "name": self.name,
            "family": self.family,
            "precision": self.precision,
            "vendor": self.vendor,
            "note": self.note,
        }


def validate_once(prepared: Prepared, device: torch.device) -> Prepared:
    """Make one call and synchronise, so that a failing configuration fails in `prepare`, not in timing."""
    prepared.call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return prepared
