"""Random packed (variable-length) batches and paged K/V caches for the varlen tests (CPU and GPU)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

import zyfa


@dataclass
class Packed:
    """One packed batch: q [total_q, hq, dqk], k and v [total_k, hkv, d], the offsets and the lengths."""

    q: Tensor
    k: Tensor
    v: Tensor
    cu_seqlens_q: Tensor
    cu_seqlens_k: Tensor
    lens_q: list[int]
    lens_k: list[int]

    @property
    def max_seqlen_q(self) -> int:
        return max(self.lens_q, default=0)

    @property
    def max_seqlen_k(self) -> int:
        return max(self.lens_k, default=0)


def offsets(lens: list[int], start: int = 0) -> Tensor:
    """int32 [len(lens) + 1] cumulative offsets starting at `start`."""
    cu = [start]
    for n in lens:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32)


def make_packed(
    lens_q: list[int],
    lens_k: list[int],
    heads_q: int,
    heads_kv: int,
    d_qk: int = 128,
    d_v: int = 128,
    *,
    seed: int,
    q_pad: tuple[int, int] = (0, 0),
    q_scale: float = 1.0,
) -> Packed:
    """Gaussian bf16 packed q, k, v; `q_pad` = (rows before the first sequence, rows after the last)."""
    g = torch.Generator().manual_seed(seed)
    total_q = sum(lens_q) + q_pad[0] + q_pad[1]
    total_k = sum(lens_k)
    q = (torch.randn(total_q, heads_q, d_qk, generator=g) * q_scale).bfloat16()
    k = torch.randn(total_k, heads_kv, d_qk, generator=g).bfloat16()
    v = torch.randn(total_k, heads_kv, d_v, generator=g).bfloat16()
    return Packed(q, k, v, offsets(lens_q, q_pad[0]), offsets(lens_k), list(lens_q), list(lens_k))


def page_cache(
    k: Tensor, v: Tensor, lens_k: list[int], page_size: int, *, seed: int, spare_pages: int = 3
) -> tuple[Tensor, Tensor, Tensor]:
    """The packed keys of each sequence scattered into randomly ordered pages of a cache.

    Returns (k_cache, v_cache [num_pages, page_size, hkv, d], page_table int32 [batch, max_pages]); unused
    cache slots and unused table entries hold garbage (random values, page index -1 past a row's pages)."""
    g = torch.Generator().manual_seed(seed)
    pages_of = [-(-n // page_size) for n in lens_k]
    num_pages = sum(pages_of) + spare_pages
    order = torch.randperm(num_pages, generator=g).tolist()
    shape_k, shape_v = (num_pages, page_size, *k.shape[1:]), (num_pages, page_size, *v.shape[1:])
    k_cache = torch.randn(shape_k, generator=g).to(k.dtype)
    v_cache = torch.randn(shape_v, generator=g).to(v.dtype)
    table = torch.full((len(lens_k), max(pages_of, default=0) + 1), -1, dtype=torch.int32)
    start, used = 0, 0
    for b, n in enumerate(lens_k):
        for p in range(pages_of[b]):
            page = order[used]
            used += 1
            rows = min(page_size, n - p * page_size)
            k_cache[page, :rows] = k[start + p * page_size : start + p * page_size + rows]
            v_cache[page, :rows] = v[start + p * page_size : start + p * page_size + rows]
            table[b, p] = page
        start += n
    return k_cache, v_cache, table


def call_packed(p: Packed, k: Tensor | None = None, v: Tensor | None = None, **kw: object) -> object:
    """`zyfa.flash_attn_varlen_func` on `p`'s q and offsets with its max lengths, over `k`, `v` (a paged
    cache) or p's packed ones; `cu_seqlens_k` (default p's) and the options come in `kw`."""
    cu_seqlens_k = kw.pop("cu_seqlens_k", p.cu_seqlens_k)
    k, v = (p.k, p.v) if k is None else (k, v)
    return zyfa.flash_attn_varlen_func(
        p.q, k, v, p.cu_seqlens_q, cu_seqlens_k, p.max_seqlen_q, p.max_seqlen_k, **kw
    )
