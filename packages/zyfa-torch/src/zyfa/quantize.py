"""Per-tensor FP8 (e4m3fn) quantisation with a power-of-two scale."""

from __future__ import annotations

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


def fp8_quantize(x: Tensor, *, rotate: bool = False, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Quantise x to float8_e4m3fn with one power-of-two scale per tensor.

    Args:
        x: a finite floating tensor of any shape (e.g. [batch, seqlen, heads, head_dim]).
        rotate: first rotate x along its last dim by the random Hadamard rotation of `zyfa.rotate`
            (spreads outlier channels; rotate q and k with the same seed, never v).
        seed: the rotation's sign seed.

    Returns:
        (x8, descale): x8 float8_e4m3fn of x's shape with x ≈ x8 * descale; descale a 0-dim float32
        tensor on x's device, 2^ceil(log2(amax / 448)) (1 for an all-zero x). Values are divided by
        descale (exact: a power of two) and rounded to nearest even, saturating at +-448.
    """
    if not x.is_floating_point():
        raise TypeError(f"fp8_quantize needs a floating tensor, got {x.dtype}")
    xf = x.float()
    if rotate:
        xf = rotation.rotate(xf, seed=seed)
    amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=x.device)
    descale = _pow2_descale(amax)
    x8 = (xf / descale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, descale
