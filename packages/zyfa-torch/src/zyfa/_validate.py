"""Input validation for `zyfa.flash_attn_func` and the op: every error names the problem and what is
supported.

The value checks of tensors, scalars and p_mode are zyfa_core's C++ (`zyfa_core.launcher.check_tensors`,
`check_scalars`, `check_p_mode`), the one copy that zyfa._C's C++ kernel of the op calls too: a call that
fails on a GPU fails the same way on the CPU reference path, and vice versa. This module turns Python
arguments into what those checks take, and checks the types and options only Python sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from zyfa_core import launcher

_KERNEL_DTYPES = {
    torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "e4m3fn",
    torch.int32: "int32",
    torch.float32: "float32",
}


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


@dataclass(frozen=True)
class VarlenDims:
    """Problem sizes of one packed (variable-length) call; page_size, num_pages, max_pages 0 unless paged."""

    batch: int
    total_q: int
    total_k: int
    heads_q: int
    heads_kv: int
    d_qk: int
    d_v: int
    page_size: int
    num_pages: int
    max_pages: int


def check_options(
    dropout_p: float,
    causal: bool,
    window_size: tuple[int, int] | list[int],
    softcap: float,
    alibi_slopes: Tensor | None,
    return_attn_probs: bool,
) -> None:
    """Reject the flash-attn options the engine does not implement (window_size None means (-1, -1))."""
    if dropout_p != 0.0:
        what = (
            "dropout_p != 0 (and return_attn_probs with dropout)" if return_attn_probs else "dropout_p != 0"
        )
        raise NotImplementedError(
            f"zyfa: {what} is not supported; ZYFA is an inference forward pass (dropout_p=0.0)"
        )
    window = _window(window_size)
    if window != (-1, -1):
        raise NotImplementedError(
            f"zyfa: window_size={window} is not supported; "
            "only window_size=(-1, -1) or None (no local window)"
        )
    if softcap != 0.0:
        raise NotImplementedError(f"zyfa: softcap={softcap} is not supported; only softcap=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError("zyfa: alibi_slopes is not supported; pass alibi_slopes=None")
    if not isinstance(causal, bool):
        raise TypeError(f"zyfa: causal must be a bool, got {type(causal).__name__}")


def _window(window_size: object) -> tuple:
    """window_size as a tuple: None is flash-attn's "no window", (-1, -1)."""
    if window_size is None:
        return (-1, -1)
    try:
        return tuple(window_size)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(
            "zyfa: window_size must be a pair of ints or None, got "
            f"{type(window_size).__name__} {window_size!r}"
        ) from None


def _size(n: object) -> int | None:
    """A size as an int; under torch.compile a symbolic size's example value (no guard), or None."""
    if isinstance(n, int):
        return n
    try:
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        return int(optimization_hint(n))
    except Exception:
        return None


def _address(x: Tensor) -> int | None:
    """The data pointer, or None where there is none yet (a FakeTensor while torch.compile traces)."""
    return None if is_fake(x) else x.data_ptr()


def _view(x: Tensor) -> tuple | None:
    """What zyfa_core's check_tensors takes of `x`; None when a traced size has no example value."""
    sizes = [_size(n) for n in x.shape]
    strides = [_size(n) for n in x.stride()]
    offset = _size(x.storage_offset())
    if None in sizes or None in strides or offset is None:
        return None
    kernel_dtype = _KERNEL_DTYPES.get(x.dtype, "")
    return (sizes, strides, x.element_size(), offset, kernel_dtype, str(x.dtype), str(x.device), _address(x))


def check_tensors(q: Tensor, k: Tensor, v: Tensor) -> Dims:
    """Check dtype, rank, shapes, head dims, device, strides and alignment of q, k, v; return the sizes.

    On FakeTensors (the op's fake implementation, while torch.compile traces) the checks run on the
    example sizes without guarding on them, and the data pointers are checked when the op runs."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"zyfa: {name} must be a torch.Tensor, got {type(x).__name__}")
    views = [_view(x) for x in (q, k, v)]
    if None in views:
        return Dims(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3])
    return Dims(*launcher.check_tensors(*views))


def check_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    index: tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None, Tensor | None],
    max_seqlen_q: int,
    max_seqlen_k: int,
) -> VarlenDims | None:
    """zyfa_core's checks of a packed call (`zyfa_core.launcher.check_varlen`): q, k, v and the index tensors
    (cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, descale table; None where absent). The values of CPU
    index tensors are checked too (host memory); device ones are read only by the kernel (no host sync).
    Returns the sizes, or None while torch.compile traces sizes without example values."""
    for name, x in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", index[0])):
        if not isinstance(x, Tensor):
            raise TypeError(f"zyfa: {name} must be a torch.Tensor, got {type(x).__name__}")
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(n, bool) or _size(n) is None:
            raise TypeError(f"zyfa: {name} must be an int, got {type(n).__name__}")
    views = [_view(x) for x in (q, k, v)]
    optional = [None if x is None else _view(x) for x in index]
    if None in views or any(x is not None and o is None for x, o in zip(index, optional, strict=True)):
        return None
    readable = index[0].device.type == "cpu" and not is_fake(index[0])
    dims = launcher.check_varlen(
        *views,
        *optional,
        _size(max_seqlen_q),
        _size(max_seqlen_k),
        readable,  # type: ignore[arg-type]
    )
    return VarlenDims(*dims)


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


def check_descale_devices(q: Tensor, descales: tuple[object, object, object]) -> None:
    """Tensor descales must be on q's device or the CPU: the op reads their values on the host, and a
    descale elsewhere (another GPU, `meta`) would be dispatched to another device's kernel."""
    for name, x in zip(("q_descale", "k_descale", "v_descale"), descales, strict=True):
        if isinstance(x, Tensor) and x.device != q.device and x.device.type != "cpu":
            raise ValueError(
                f"zyfa: {name} is a tensor on {x.device}; tensor descales must be on q's device ({q.device}) "
                "or the CPU"
            )


def check_scalars(
    dtype: torch.dtype, softmax_scale: float, descales: tuple[float, float, float]
) -> tuple[float, float, float, float]:
    """Run-time value checks of the op's scalars, as the kernels take them (float32): a finite, non-zero
    scale; descales finite and > 0 (1.0 for bf16); and their product with log2(e), the kernels' one
    factor, finite and non-zero (zyfa_core.launcher.check_scalars). Returns the float32 values."""
    return launcher.check_scalars("zyfa", dtype == torch.float8_e4m3fn, softmax_scale, descales)


def check_descale_table(
    dtype: torch.dtype, softmax_scale: float, floats: tuple[float, float, float], table: Tensor
) -> None:
    """A descale table [3, batch, heads_kv] replaces the per-tensor descales, which must then be 1.0; on the
    CPU every (sequence, kv head) triple is checked as `check_scalars` checks floats (device values are read
    by the kernel only: no host sync)."""
    if dtype != torch.float8_e4m3fn:
        raise ValueError("zyfa: descale tensors apply to float8_e4m3fn inputs only; bf16 inputs take none")
    if floats != (1.0, 1.0, 1.0):
        raise ValueError(f"zyfa: with a descale table the float descales must be 1.0, got {floats}")
    if table.device.type != "cpu" or is_fake(table):
        return
    triples = table.reshape(3, -1).t().tolist()
    for triple in dict.fromkeys(map(tuple, triples)):  # each distinct triple once
        check_scalars(dtype, softmax_scale, triple)


def check_p_mode(dtype: torch.dtype, p_mode: str | None) -> None:
    """p_mode selects the FP8 P path: "exact", "lean", "f16" or None (the default kernel); bf16 takes None."""
    launcher.check_p_mode(dtype == torch.float8_e4m3fn, p_mode)
