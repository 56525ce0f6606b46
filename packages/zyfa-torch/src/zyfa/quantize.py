"""Per-tensor FP8 (e4m3fn) quantisation: a power-of-two scale from the amax, or a fixed calibrated one."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zyfa import rotation
from zyfa.reference import E4M3_MAX

__all__ = ["fp8_quantize"]


def _pow2_descale(amax: Tensor) -> Tensor:
    """2^ceil(log2(amax / 448)) as float32, exactly (amax == 0 -> 1), computed without a host sync.

    log2 in floating point can land on the wrong side of an integer, so the exponent is corrected
    with exact comparisons against 448 * 2^e (multiplying by a power of two is exact).
    """
    a = amax.double()
    e = torch.ceil(torch.log2(a / E4M3_MAX))
    e = torch.where(a > E4M3_MAX * torch.exp2(e), e + 1, e)
    e = torch.where(a <= E4M3_MAX * torch.exp2(e - 1), e - 1, e)
    return torch.where(a > 0, torch.exp2(e), 1.0).float()


def fp8_quantize(
    x: Tensor, *, rotate: bool = False, seed: int = 0, descale: float | None = None, as_float: bool = False
) -> tuple[Tensor, Tensor | float]:
    """Quantise x to float8_e4m3fn with one scale per tensor.

    Args:
        x: a finite floating tensor of any shape (e.g. [batch, seqlen, heads, head_dim]).
        rotate: first rotate x along its last dim by the random Hadamard rotation of `zyfa.rotate`
            (spreads outlier channels; rotate q and k with the same seed, never v).
        seed: the rotation's sign seed.
        descale: a fixed (calibrated) descale, a finite float > 0: x8 = e4m3(x / descale) with no amax
            pass and no host sync, so the call can sit inside a CUDA graph; values beyond 448 * descale
            saturate. None (default): the power-of-two descale of x's own amax.
        as_float: return the computed descale as a Python float, read on the host once here (a device
            sync, outside any graph), so that `flash_attn_func` passes it to the kernel by value and
            can be captured in a CUDA graph. Not allowed inside torch.compile (it would break the graph).

    Returns:
        (x8, descale): x8 float8_e4m3fn of x's shape with x ≈ x8 * descale. descale is the given float
        when `descale` is set; else 2^ceil(log2(amax / 448)) (1 for an all-zero x), as a 0-dim float32
        tensor on x's device, or a Python float with as_float=True. Values are divided by descale
        (exact for a power of two) and rounded to nearest even, saturating at +-448.
    """
    if not x.is_floating_point():
        raise TypeError(f"fp8_quantize needs a floating tensor, got {x.dtype}")
    xf = x.float()
    if rotate:
        xf = rotation.rotate(xf, seed=seed)
    if descale is not None:
        return _with_descale(xf, descale), descale
    amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=x.device)
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
    if isinstance(descale, (int, float)) and not (math.isfinite(descale) and descale > 0.0):
        raise ValueError(f"fp8_quantize: descale must be finite and > 0, got {descale}")
    return (xf / descale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
