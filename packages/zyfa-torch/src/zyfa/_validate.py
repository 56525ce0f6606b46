"""Input validation for `zyfa.flash_attn_func`: every error names the problem and what is supported.

The same checks run for every device, so a call that fails on a GPU fails the same way on the CPU
reference path (and vice versa).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import torch
from torch import Tensor

from zyfa_core.manifest import P_MODES

SUPPORTED_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)
# (d_qk, d_v) pairs the kernels serve.
SUPPORTED_HEAD_DIMS = ((128, 128), (192, 128))
# P_MODES: the FP8 P modes, one list for the manifest and the op (zyfa.reference has the numerics of
# each; the C++ op's kPModes keeps this order).
# Kernels load q/k/v with 16-byte vector loads: pointers and the batch/seq/head strides must keep
# every row 16-byte aligned.
ALIGN_BYTES = 16
_INT32_MAX = 2**31 - 1
# heads_q and batch are the tile grid's y and z. A persistent kernel has no such limit, but the op keeps
# it for every kernel and device (the checks here do not depend on which kernel will run).
_GRID_YZ_MAX = 65535


@dataclass(frozen=True)
class Dims:
    """Problem sizes of one attention call (flash-attn layout)."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    d_qk: int
    d_v: int


def check_options(
    dropout_p: float,
    causal: bool,
    window_size: tuple[int, int] | list[int],
    softcap: float,
    alibi_slopes: Tensor | None,
    return_attn_probs: bool,
) -> None:
    """Reject the flash-attn options the engine does not implement."""
    if dropout_p != 0.0:
        what = (
            "dropout_p != 0 (and return_attn_probs with dropout)" if return_attn_probs else "dropout_p != 0"
        )
        raise NotImplementedError(
            f"zyfa: {what} is not supported; ZYFA is an inference forward pass (dropout_p=0.0)"
        )
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError(
            f"zyfa: window_size={tuple(window_size)} is not supported; "
            "only window_size=(-1, -1) (no local window)"
        )
    if softcap != 0.0:
        raise NotImplementedError(f"zyfa: softcap={softcap} is not supported; only softcap=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError("zyfa: alibi_slopes is not supported; pass alibi_slopes=None")
    if not causal:
        raise NotImplementedError(
            "zyfa: causal=False is not supported yet; the kernels serve causal=True only "
            "(zyfa.reference.attention computes non-causal attention on the CPU for experiments)"
        )


def check_tensors(q: Tensor, k: Tensor, v: Tensor) -> Dims:
    """Check dtype, rank, shapes, head dims, device, strides and alignment of q, k, v; return the sizes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"zyfa: {name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(
                f"zyfa: {name} must be 4-D [batch, seqlen, heads, head_dim], got shape {tuple(x.shape)}"
            )
    _check_dtypes(q, k, v)
    dims = _check_shapes(q, k, v)
    if not (q.device == k.device == v.device):
        raise ValueError(f"zyfa: q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_layout(name, x)
    return dims


def _check_dtypes(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"zyfa: q has dtype {q.dtype}; supported are torch.bfloat16 and torch.float8_e4m3fn")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"zyfa: q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")


def _check_shapes(q: Tensor, k: Tensor, v: Tensor) -> Dims:
    batch, seqlen_q, heads_q, d_qk = q.shape
    bk, seqlen_k, heads_kv, dk = k.shape
    bv, seqlen_v, heads_v, d_v = v.shape
    if not (batch == bk == bv):
        raise ValueError(f"zyfa: batch sizes differ: q {batch}, k {bk}, v {bv}")
    if seqlen_k != seqlen_v:
        raise ValueError(f"zyfa: k and v need the same seqlen_k; got {seqlen_k} and {seqlen_v}")
    if heads_kv != heads_v:
        raise ValueError(f"zyfa: k and v need the same number of heads; got {heads_kv} and {heads_v}")
    if heads_q < 1 or heads_kv < 1 or heads_q % heads_kv != 0:
        raise ValueError(
            f"zyfa: heads_q ({heads_q}) must be a positive multiple of heads_kv ({heads_kv}) "
            "(MHA, GQA or MQA)"
        )
    if dk != d_qk:
        raise ValueError(f"zyfa: q and k need the same head_dim; got {d_qk} and {dk}")
    if (d_qk, d_v) not in SUPPORTED_HEAD_DIMS:
        raise ValueError(
            f"zyfa: head dims (d_qk={d_qk}, d_v={d_v}) are not supported; supported (d_qk, d_v): "
            f"{', '.join(map(str, SUPPORTED_HEAD_DIMS))}"
        )
    if heads_q > _GRID_YZ_MAX or batch > _GRID_YZ_MAX:
        raise ValueError(f"zyfa: heads_q ({heads_q}) and batch ({batch}) must each be <= {_GRID_YZ_MAX}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if max(x.shape) > _INT32_MAX:
            raise ValueError(f"zyfa: {name} is too large: sizes must fit in int32, got {tuple(x.shape)}")
    return Dims(batch, seqlen_q, seqlen_k, heads_q, heads_kv, d_qk, d_v)


def _check_layout(name: str, x: Tensor) -> None:
    if x.numel() == 0:
        return  # nothing is read from an empty tensor
    if x.stride(-1) != 1:
        raise ValueError(
            f"zyfa: {name} must be contiguous in its last dim (head_dim), got strides {x.stride()}; "
            f"call {name}.contiguous()"
        )
    size = x.element_size()
    # A size-1 dim's stride is never used to step, so it may be anything.
    strides = [s for s, n in zip(x.stride()[:3], x.shape[:3], strict=True) if n > 1]
    misaligned = any((s * size) % ALIGN_BYTES for s in strides)
    # The data pointer cannot be read while torch.compile traces (FakeTensors); the op's own
    # implementation repeats this check on the real tensors at run time.
    if not torch.compiler.is_compiling():
        misaligned = misaligned or x.data_ptr() % ALIGN_BYTES
    if misaligned:
        raise ValueError(
            f"zyfa: {name} must be {ALIGN_BYTES}-byte aligned (data pointer and batch/seq/head strides), got "
            f"strides {x.stride()} and storage offset {x.storage_offset()}; call {name}.contiguous()"
        )


def check_scale(softmax_scale: float | None, d_qk: int) -> float:
    """The softmax scale as a float (default 1/sqrt(d_qk)); `check_scalars` checks it is finite."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(d_qk)
    if type(softmax_scale) is float:  # the common case, without the slower ABC check below
        return softmax_scale
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, Real):
        raise ValueError(f"zyfa: softmax_scale must be a finite float or None, got {softmax_scale!r}")
    # Under torch.compile a float argument may be symbolic: converting or comparing it here would
    # specialise the graph on its value (or break it); the op checks the value at run time instead.
    return softmax_scale if torch.compiler.is_compiling() else float(softmax_scale)


def check_descale(name: str, x: float | Tensor) -> float | Tensor:
    """A descale's type: a float, or a 0-dim / 1-element floating tensor (its value is read by the op)."""
    if type(x) is float:  # the common case, without the slower ABC check below
        return x
    if isinstance(x, Tensor):
        if x.numel() != 1 or not x.is_floating_point():
            raise ValueError(
                f"zyfa: {name} must be a float or a 1-element floating tensor, got a {x.dtype} tensor of "
                f"shape {tuple(x.shape)} (per-tensor descales only)"
            )
        return x
    if isinstance(x, Real) and not isinstance(x, bool):
        return x if torch.compiler.is_compiling() else float(x)
    raise TypeError(f"zyfa: {name} must be a float or a 1-element floating tensor, got {type(x).__name__}")


def check_descales(
    dtype: torch.dtype,
    q_descale: float | Tensor | None,
    k_descale: float | Tensor | None,
    v_descale: float | Tensor | None,
) -> tuple[float | Tensor, float | Tensor, float | Tensor]:
    """Descales are required for float8_e4m3fn inputs and rejected for bf16 (where they are 1.0).

    Returns the three descales as given (floats stay floats, tensors stay tensors: the op reads their
    values; see `zyfa._ops`). Their values are checked by `check_scalars` inside the op.
    """
    given = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    if dtype != torch.float8_e4m3fn:
        passed = [n for n, x in given.items() if x is not None]
        if passed:
            raise ValueError(
                f"zyfa: {', '.join(passed)} apply to float8_e4m3fn inputs only; bf16 inputs take none"
            )
        return 1.0, 1.0, 1.0
    missing = [n for n, x in given.items() if x is None]
    if missing:
        raise ValueError(
            f"zyfa: float8_e4m3fn inputs need q_descale, k_descale and v_descale (x ~= x8 * descale, see "
            f"zyfa.fp8_quantize); missing: {', '.join(missing)}"
        )
    q, k, v = (check_descale(n, x) for n, x in given.items())
    return q, k, v


def check_scalars(dtype: torch.dtype, softmax_scale: float, descales: tuple[float, float, float]) -> None:
    """Run-time value checks of the op's scalars: a finite scale; descales finite and > 0 (1.0 for bf16)."""
    if not math.isfinite(softmax_scale):
        raise ValueError(f"zyfa: softmax_scale must be a finite float or None, got {softmax_scale!r}")
    if dtype != torch.float8_e4m3fn and tuple(descales) != (1.0, 1.0, 1.0):
        raise ValueError("zyfa::fwd: descales apply to float8_e4m3fn inputs only; pass 1.0 for bf16")
    for name, value in zip(("q_descale", "k_descale", "v_descale"), descales, strict=True):
        if not (math.isfinite(value) and value > 0.0):
            raise ValueError(f"zyfa: {name} must be finite and > 0, got {value}")


def check_p_mode(dtype: torch.dtype, p_mode: str | None) -> None:
    """p_mode selects the FP8 P path: "exact", "lean", "f16" or None (the default kernel); bf16 takes None."""
    if p_mode is None:
        return
    if dtype != torch.float8_e4m3fn:
        raise ValueError(
            f"zyfa: p_mode={p_mode!r} applies to float8_e4m3fn inputs only; bf16 takes p_mode=None"
        )
    if p_mode not in P_MODES:
        raise ValueError(
            f"zyfa: p_mode={p_mode!r} is not supported; supported: 'exact', 'lean', 'f16' or None"
        )
