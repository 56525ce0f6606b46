"""Per-tensor FP8 (e4m3fn) quantisation: a power-of-two scale from the amax, or a fixed calibrated one.

Every descale handed back or accepted is a finite float32 > 0: a NaN or Inf in x is refused (it would
make the computed descale NaN or inf, or saturate everything else), an amax too small for a float32
descale gets the smallest normal one, and a given descale is checked after narrowing to float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zyfa import rotation
from zyfa.reference import E4M3_MAX

__all__ = ["fp8_quantize"]


MIN_DESCALE_LOG2 = -126
"""Smallest computed descale, 2^-126 (the smallest normal float32): an amax below 448 * 2^-126 (about
5.3e-36) gets it, so the descale never underflows to 0 (nor to a subnormal a kernel may flush); such
values then quantise with fewer significant bits, and those below 2^-136 round to 0."""


def _pow2_descale(amax: Tensor) -> Tensor:
    """max(2^ceil(log2(amax / 448)), 2^-126) as float32, exactly (amax == 0 -> 1), without a host sync.

    log2 in floating point can land on the wrong side of an integer, so the exponent is corrected
    with exact comparisons against 448 * 2^e (multiplying by a power of two is exact).
    """
    a = amax.double()
    e = torch.ceil(torch.log2(a / E4M3_MAX))
    e = torch.where(a > E4M3_MAX * torch.exp2(e), e + 1, e)
    e = torch.where(a <= E4M3_MAX * torch.exp2(e - 1), e - 1, e)
    e = e.clamp(min=MIN_DESCALE_LOG2)
    return torch.where(a > 0, torch.exp2(e), 1.0).float()


_CPU = torch.device("cpu")


def _can_read_device() -> bool:
    """False while torch.compile traces or a CUDA graph captures: a host read would break either."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _refuse_non_finite(x: Tensor, amax: Tensor | None) -> None:
    """Raise ValueError when x holds a NaN or Inf (amax: x's |max| when already computed)."""
    finite = torch.isfinite(amax) if amax is not None else torch.isfinite(x).all()
    if not bool(finite):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(
            f"fp8_quantize: x holds {bad} NaN or Inf value(s) (after the float32 conversion); "
            "FP8 quantisation needs finite data: one non-finite value would set the whole tensor's "
            "descale. Find where they come from, or pass check_finite=False to skip this check"
        )


_FLOAT32_ROUNDS_TO_INF = 2.0**128 - 2.0**103  # from here up a float rounds to inf in float32
_FLOAT32_ROUNDS_TO_ZERO = 2.0**-150  # from here down (half the smallest subnormal) to 0


def _checked_descale(descale: float | Tensor, x: Tensor) -> float | Tensor:
    """A given descale, refused unless finite and > 0 as the float32 the division uses (decided in plain
    Python arithmetic, so torch.compile traces it as a constant).

    A tensor descale must hold one floating element on x's device or the CPU; its value is read (a host
    sync) only where a read is allowed (not while compiling or capturing).
    """
    if isinstance(descale, Tensor):
        if descale.numel() != 1 or not descale.is_floating_point() or descale.device not in (x.device, _CPU):
            raise ValueError(
                "fp8_quantize: a tensor descale must be a 1-element floating tensor on x's device "
                f"({x.device}) or the CPU; got {descale.numel()} element(s) of {descale.dtype} "
                f"on {descale.device}"
            )
        descale = descale.reshape(()).float()
        if not _can_read_device():
            return descale
        value = float(descale)
    elif isinstance(descale, bool) or not isinstance(descale, (int, float)):
        raise TypeError(
            f"fp8_quantize: descale must be a float or a 1-element tensor, got {type(descale).__name__}"
        )
    else:
        value = float(descale)
    if not (_FLOAT32_ROUNDS_TO_ZERO < value < _FLOAT32_ROUNDS_TO_INF):  # NaN fails too
        raise ValueError(f"fp8_quantize: descale must be finite and > 0 as a float32, got {value!r}")
    return descale


def fp8_quantize(
    x: Tensor,
    *,
    rotate: bool = False,
    seed: int = 0,
    descale: float | Tensor | None = None,
    as_float: bool = False,
    check_finite: bool = True,
) -> tuple[Tensor, Tensor | float]:
    """Quantise x to float8_e4m3fn with one scale per tensor.

    Args:
        x: a finite floating tensor of any shape (e.g. [batch, seqlen, heads, head_dim]).
        rotate: first rotate x along its last dim by the random Hadamard rotation of `zyfa.rotate`
            (spreads outlier channels; rotate q and k with the same seed, never v).
        seed: the rotation's sign seed.
        descale: a fixed (calibrated) descale, finite and > 0 as a float32 (a float, or a 1-element
            floating tensor on x's device or the CPU, checked the same way): x8 = e4m3(x / descale)
            with no amax pass, so the call can sit inside a CUDA graph; values beyond 448 * descale
            saturate.
            None (default): the power-of-two descale of x's own amax.
        as_float: return the computed descale as a Python float, read on the host once here (a device
            sync, outside any graph), so that `flash_attn_func` passes it to the kernel by value and
            can be captured in a CUDA graph. Not allowed inside torch.compile (it would break the graph).
        check_finite: refuse x holding a NaN or Inf (ValueError). On a GPU this reads one flag on the
            host (a sync); False skips it. The check is skipped while torch.compile traces or a CUDA
            graph captures (no host read is possible there): a NaN then quantises to e4m3fn's NaN code
            (attention makes the rows that see it NaN) and an Inf makes the computed descale inf.

    Returns:
        (x8, descale): x8 float8_e4m3fn of x's shape with x ≈ x8 * descale. descale is the given float
        when `descale` is set; else
        max(2^ceil(log2(amax / 448)), 2^-126) (1 for an all-zero x), as a 0-dim float32
        tensor on x's device, or a Python float with as_float=True. Values are divided by descale
        (exact for a power of two) and rounded to nearest even, saturating at +-448.
    """
    if not x.is_floating_point():
        raise TypeError(f"fp8_quantize needs a floating tensor, got {x.dtype}")
    xf = x.float()
    if rotate:
        xf = rotation.rotate(xf, seed=seed)
    check = check_finite and _can_read_device()
    if descale is not None:
        descale = _checked_descale(descale, x)
        if check:
            _refuse_non_finite(xf, None)
        return _with_descale(xf, descale), descale
    amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=x.device)
    if check:
        _refuse_non_finite(xf, amax)
    scale = _pow2_descale(amax)
    x8 = _with_descale(xf, scale)
    if not as_float:
        return x8, scale
    if torch.compiler.is_compiling():
        raise RuntimeError(
            "zyfa.fp8_quantize(as_float=True) reads the descale on the host, which would break the "
            "torch.compile graph; call it outside the compiled region, or keep the tensor descale"
        )
    return x8, float(scale.item())


def _with_descale(xf: Tensor, descale: float | Tensor) -> Tensor:
    """e4m3fn(x / descale), clamped first so that out-of-range values saturate instead of becoming NaN."""
    return (xf / descale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
