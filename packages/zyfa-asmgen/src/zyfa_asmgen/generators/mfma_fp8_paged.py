"""mfma_fp8's paged builds (layout "paged"): K and V blocks gathered from a paged cache into LDS.

The cache is k, v [num_pages, page_size, heads_kv, d] (kernels/abi/zyfa_abi.h, ABI 4): key j of the sequence
is slot j % page_size of page page_table[b][j / page_size], the page index clamped to [0, num_pages - 1]
(kernels/gfx950/varlen.h). A block's 64 keys may span pages (any page size), and a cache may pass 4 GiB, so
the dense build's raw buffer resources (32-bit offsets from one base) do not reach it: each lane instead
gathers its 16-byte pieces with global_load_lds_dwordx4 from 64-bit addresses, into the same LDS bytes as the
dense DMA (Gen._dma_offsets' layout; here each lane keeps its piece's row and column, row * 256 + column).

Per requested block, in two passes over the block's pieces (the scratch VGPRs are the S^T accumulators, dead
between a block's softmax and the next S): (1) key = min(key0 + row, seqlen_k - 1), page slot by a reciprocal
(generators/common.s_reciprocals, one Newton step, two corrections: exact), the page index loaded from the
sequence's table row; (2) after the loads, address = head base + page * page stride + slot * slot stride +
column, and the LDS-DMA. Keys at or past seqlen_k read the sequence's last key instead of zeros: they are
masked (S = -inf, P = 0) like causal keys, and a finite row keeps 0 * V = 0. Keys past the sequence never
reach the table (seqlen_k is clamped to the table row's max_pages * page_size).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..regs import R
from .common import s_mad64, s_reciprocals, s_refine_reciprocal

if TYPE_CHECKING:
    from .mfma_fp8 import Gen

TILE_N = 64  # keys per block (mfma_fp8.TILE_N)
# Pieces gathered per pass pair: their pages and slots (2 each) and 3 temporaries stay below the 28 scratch
# registers before the two address pairs (the S^T accumulators hold 32). A block has 8 (d 128) or 10
# (192/128) pieces per lane with two or more DMA waves, 16 or 20 with one (two groups then).
GATHER_GROUP = 12


def dma_pieces(g: Gen, name: str, width: int, t: R) -> R:
    """Each lane's piece of each 1 KiB LDS-DMA of a block as row * 256 + column (the dense layout: LDS byte
    x = 1024 dma_waves i + 16 v0 holds row x / width, column x % width; width <= 256)."""
    n = TILE_N * width // 1024 // g.sh.dma_waves
    out = g.vv(f"{name}_piece", n)
    for i in range(n):
        row, c = g.dma_row_col(i, width, t)
        g.e(f"v_lshl_or_b32 {out[i]}, {row}, 8, {c}", "row * 256 + column")
    return out


def paged_bases(g: Gen) -> None:
    """The K and V cache bases at the kv head, key0 = 0 (the first key of the next requested block) and the
    reciprocal of page_size; g.pg_row, g.pg_size and g.pg_last come from enter_sequence."""
    a = g.karg
    g.k.comment("paged K / V: the cache at the kv head; keys from the sequence's row of the page table")
    tmp = g.sv("pg_mad", 3)
    g.pg_head = {}
    for name in ("k", "v"):
        head = g.sv(f"pg_head_{name}", 2, 2)
        g.e(f"s_mov_b64 {head}, {a.pair(name)}")
        s_mad64(g.k, head, g.kvh, a.pair(f"{name}_stride_head"), tmp)
        g.pg_head[name] = head
    g.pg_key0, g.pg_rcp = g.sv("pg_key0"), g.sv("pg_rcp")
    g.e(f"s_mov_b32 {g.pg_key0}, 0")
    vt = g.vv("pg_rcp_v")
    s_reciprocals(g.k, [(g.pg_rcp, g.pg_size, vt)])
    g.v.free(vt)
    s_refine_reciprocal(g.k, g.pg_rcp, g.pg_size, tmp[0])
    g.s.free(tmp)


def paged_advance(g: Gen) -> None:
    """The next requested block starts 64 keys later."""
    g.e(f"s_add_u32 {g.pg_key0}, {g.pg_key0}, {TILE_N}")


def paged_request(g: Gen, lds_off: str) -> None:
    """Gather block key0 .. key0 + 63 of K and V into the LDS buffer at `lds_off` (module docstring)."""
    sh, a = g.sh, g.karg
    step = 1024 * sh.dma_waves
    jobs = [("k", g.k_dma, 0), ("v", g.v_dma, sh.k_bytes)]
    pieces = [(name, dma[i], first + step * i) for name, dma, first in jobs for i in range(dma.count)]
    skip = f".Lno_dma_{g._uid()}"
    if sh.waves > sh.dma_waves:
        g.e(f"s_cmp_lt_u32 {g.wave}, {sh.dma_waves}")
        g.e(f"s_cbranch_scc0 {skip}", "the second wave group moves no K/V")
    last, base = g.sv("pg_last_key"), g.sv("dma_base")
    g.e(f"s_add_i32 {last}, {a.reg('seqlen_k')}, -1", "keys past the sequence read its last one")
    g.e(f"s_lshl_b32 {base}, {g.wave}, 10")
    g.e(f"s_add_u32 {base}, {base}, {lds_off}", "buffer + 1 KiB x wave")
    for at in range(0, len(pieces), GATHER_GROUP):
        _gather(g, pieces[at : at + GATHER_GROUP], last, base)
    g.s.free(last)
    g.s.free(base)
    if sh.waves > sh.dma_waves:
        g.k.label(skip)


def _gather(g: Gen, pieces: list[tuple[str, R, int]], last: R, base: R) -> None:
    """The two passes over up to GATHER_GROUP pieces (name, piece register, LDS offset)."""
    scratch = [r for acc in g.sacc for r in (acc[i] for i in range(16))]  # dead until this block's S
    n = len(pieces)
    pages, slots, (key, quo, t) = scratch[:n], scratch[n : 2 * n], scratch[2 * n : 2 * n + 3]
    pairs = [g.sacc[1].sub(12, 2), g.sacc[1].sub(14, 2)]  # scratch[28:32], after the 2 n + 3 above
    g.k.comment("paged gather, pass 1: each piece's page slot, and its page from the table")
    for (_name, piece, _off), page, slot in zip(pieces, pages, slots, strict=True):
        _page_slot(g, piece, last, key, quo, t, slot)
        g.e(f"v_lshlrev_b32_e32 {quo}, 2, {quo}")
        g.e(f"global_load_dword {page}, {quo}, {g.pg_row}", "page_table[b][key / page_size]")
    g.e("s_waitcnt vmcnt(0)", "the page indices")
    g.k.comment("pass 2: address = head + page * page stride + slot * slot stride + column; LDS-DMA")
    for i, ((name, piece, off), page, slot) in enumerate(zip(pieces, pages, slots, strict=True)):
        addr = pairs[i % 2]
        _address(g, name, piece, page, slot, addr, t)
        g.e(f"s_add_u32 m0, {base}, {off}", f"{name.upper()} rows -> LDS")
        g.e(f"global_load_lds_dwordx4 {addr}, off")


def _page_slot(g: Gen, piece: R, last: R, key: R, quo: R, t: R, slot: R) -> None:
    """quo = key / page_size, slot = key % page_size for key = min(key0 + the piece's row, last)."""
    size = g.pg_size
    g.e(f"v_lshrrev_b32_e32 {key}, 8, {piece}", "the piece's row")
    g.e(f"v_add_u32_e32 {key}, {g.pg_key0}, {key}")
    g.e(f"v_min_i32_e32 {key}, {last}, {key}")
    g.e(f"v_mul_hi_u32 {quo}, {key}, {g.pg_rcp}", "key / page_size or at most two below")
    g.e(f"v_mul_lo_u32 {t}, {quo}, {size}")
    g.e(f"v_sub_u32_e32 {slot}, {key}, {t}")
    for _ in range(2):
        g.e(f"v_cmp_le_u32_e32 vcc, {size}, {slot}")
        g.e(f"v_subrev_u32_e32 {t}, {size}, {slot}")
        g.e(f"v_cndmask_b32_e32 {slot}, {slot}, {t}, vcc")
        g.e(f"v_add_u32_e32 {t}, 1, {quo}")
        g.e(f"v_cndmask_b32_e32 {quo}, {quo}, {t}, vcc")


def _address(g: Gen, name: str, piece: R, page: R, slot: R, addr: R, t: R) -> None:
    """addr (pair) = the cache byte of the piece: page clamped to the cache, 64-bit strides."""
    a, head = g.karg, g.pg_head[name]
    page_stride, slot_stride = a.pair(f"{name}_stride_batch"), a.pair(f"{name}_stride_seq")
    g.e(f"v_med3_i32 {page}, {page}, 0, {g.pg_last}", "page index clamped to the cache")
    g.e(f"v_and_b32_e32 {t}, 0xff, {piece}", "column")
    g.e(f"v_mov_b32_e32 {addr[1]}, {head[1]}")
    g.e(f"v_add_co_u32_e32 {addr[0]}, vcc, {head[0]}, {t}")
    g.e(f"v_addc_co_u32_e32 {addr[1]}, vcc, 0, {addr[1]}, vcc")
    for x, stride in ((page, page_stride), (slot, slot_stride)):
        g.e(f"v_mad_u64_u32 {addr}, vcc, {x}, {stride[0]}, {addr}")
        g.e(f"v_mul_lo_u32 {t}, {x}, {stride[1]}")
        g.e(f"v_add_u32_e32 {addr[1]}, {addr[1]}, {t}")
