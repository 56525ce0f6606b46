"""Random orthogonal Hadamard rotations of q and k along head_dim.

For an orthogonal R, ``(q R)(k R)ᵀ = q R Rᵀ kᵀ = q kᵀ``: attention scores are unchanged, but the
rotation spreads outlier channels over all channels before FP8 quantisation, which shrinks the
per-tensor amax and with it the quantisation step of every other value.

R = D H / sqrt(n): H a Hadamard matrix of order n = head_dim (entries +-1, H Hᵀ = n I), D a diagonal of
random signs drawn from ``seed`` (a CPU generator, so R is the same on every device). H is
* Sylvester's construction for n a power of two (H_2n = [[H, H], [H, -H]]);
* the Kronecker product H_12 ⊗ H_{n/12} for n = 12 * 2^a (e.g. 192 = 12 * 16), with H_12 from
  Paley's construction I over GF(11). This is a full Hadamard matrix of order n, so every output
  channel mixes all n input channels (a block-diagonal of three H_64 would only mix within 64).

Two paths compute x R. The fast path (the default) is one matmul with R cached per (order, seed, dtype,
device): no matrix is built or copied to the device per call, and under torch.compile R is a graph
constant, so `fp8_quantize(x, rotate=True)` becomes matmul + amax + scale + cast, which inductor fuses
after the matmul. The plain path (``fast=False``) builds R afresh and multiplies in float64: the
reference the fast path is tested against.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

__all__ = ["hadamard_matrix", "rotate", "rotate_qk", "rotation_matrix"]

_PALEY_Q = 11  # prime, 11 % 4 == 3: Paley I gives a Hadamard matrix of order 12


def _sylvester(n: int) -> Tensor:
    """Unnormalised Sylvester Hadamard matrix of order n (a power of two), float64."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], dim=1), torch.cat([h, -h], dim=1)], dim=0)
    return h


def _paley12() -> Tensor:
    """Unnormalised Hadamard matrix of order 12 (Paley I): H = I + S, S skew with S Sᵀ = 11 I."""
    q = _PALEY_Q
    squares = {(x * x) % q for x in range(1, q)}
    chi = [0] + [1 if x in squares else -1 for x in range(1, q)]  # Legendre symbol
    jacobsthal = torch.tensor([[chi[(j - i) % q] for j in range(q)] for i in range(q)], dtype=torch.float64)
    s = torch.zeros(q + 1, q + 1, dtype=torch.float64)
    s[0, 1:] = 1.0
    s[1:, 0] = -1.0
    s[1:, 1:] = jacobsthal
    return torch.eye(q + 1, dtype=torch.float64) + s


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def hadamard_matrix(
    n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> Tensor:
    """Normalised Hadamard matrix H / sqrt(n) (orthogonal) of order n.

    Supported orders: powers of two (Sylvester) and 12 * 2^a (Paley-12 ⊗ Sylvester), which covers
    head dims 64, 128, 192, 256. Other orders raise ValueError.
    """
    if _is_pow2(n):
        h = _sylvester(n)
    elif n % 12 == 0 and _is_pow2(n // 12):
        h = torch.kron(_paley12(), _sylvester(n // 12))
    else:
        raise ValueError(
            f"no Hadamard construction for order {n}: supported are 2^a and 12*2^a (e.g. 128, 192)"
        )
    return (h / math.sqrt(n)).to(dtype=dtype, device=device)


def rotation_matrix(
    n: int, *, seed: int = 0, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> Tensor:
    """The orthogonal [n, n] matrix R = diag(signs) @ hadamard_matrix(n), signs drawn from ``seed``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=gen, dtype=torch.int64).to(torch.float64) * 2.0 - 1.0
    r = signs[:, None] * hadamard_matrix(n, dtype=torch.float64)
    return r.to(dtype=dtype, device=device)


@functools.lru_cache(maxsize=64)
def _cached_rotation(n: int, seed: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    return rotation_matrix(n, seed=seed, dtype=dtype, device=device)


@torch.compiler.assume_constant_result
def _rotation_constant(n: int, seed: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The cached R; torch.compile calls this once while tracing and keeps R as a graph constant."""
    return _cached_rotation(n, seed, dtype, device)


def rotate(x: Tensor, *, seed: int = 0, fast: bool = True) -> Tensor:
    """x @ R along the last dim; returns x's dtype.

    fast=True: one matmul with R cached per (head_dim, seed, dtype, device), in fp32 (float64 for float64
    x; on a GPU, fp32 matmuls use TF32 only if the caller enabled it). fast=False: the plain path, R
    built afresh and the product computed in float64. Rotate q and k with the SAME seed (see
    `rotate_qk`); never rotate v.
    """
    if not fast:
        r = rotation_matrix(x.shape[-1], seed=seed, dtype=torch.float64, device=x.device)
        return (x.double() @ r).to(x.dtype)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    r = _rotation_constant(x.shape[-1], seed, work, x.device)
    return (x.to(work) @ r).to(x.dtype)


def rotate_qk(q: Tensor, k: Tensor, *, seed: int = 0, fast: bool = True) -> tuple[Tensor, Tensor]:
    """Rotate q [..., d] and k [..., d] by the same random Hadamard rotation: (qR)(kR)ᵀ = q kᵀ.

    Returns tensors of the input dtypes; `fast` as in `rotate`. For FP8, prefer
    ``fp8_quantize(x, rotate=True, seed=...)``, which rotates in fp32 and quantises without an
    intermediate bf16 rounding.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share head_dim; got {q.shape[-1]} and {k.shape[-1]}")
    return rotate(q, seed=seed, fast=fast), rotate(k, seed=seed, fast=fast)
