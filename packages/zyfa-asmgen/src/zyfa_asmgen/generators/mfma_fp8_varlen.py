"""mfma_fp8's packed builds (layouts "varlen", "paged"): a sequence of a packed batch as a dense batch of one.

kernels/abi/zyfa_abi.h (ABI 5) passes zyfa_varlen_args after zyfa_fwd_args, at the kernarg offset the header
implies (192). The grid is "batch_tiles", (ceil(max_seqlen_q / tile_m), heads_q, batch): the workgroup's query
tile and head come from the dense tile order over the launch's bounds, and its batch index is its sequence b.

enter_sequence reads sequence b's rows and counts with scalar loads and clamps them as kernels/gfx950/varlen.h
(sequence_of) does, so a bad cu_seqlens tensor reads and writes only inside q, k, v, out and lse:
    q_start = clamp(cu_seqlens_q[b], 0, total_q), q_end = clamp(cu_seqlens_q[b + 1], q_start, total_q)
    len_q   = clamp(q_end - q_start, 0, seqlen_q)              (seqlen_q, seqlen_k: the launch's bounds)
    k_start = clamp(cu_seqlens_k[b], 0, total_k), or 0 with a page table ("paged")
    len_k   = clamp(seqused_k[b] if seqused_k else cu_seqlens_k[b + 1] - cu_seqlens_k[b],
                    0, min(k_rows, seqlen_k)), k_rows = total_k - k_start, or max_pages * page_size
                    (0 unless page_size > 0) with a page table
It exits when the tile starts at or past len_q, and otherwise rewrites the kernel-argument SGPRs into the
sequence's dense view (sequence_view): q, out, k, v and lse moved to the sequence's first rows, seqlen_q /
seqlen_k its counts. table_descales (ZYFA_FLAG_DESCALE_TABLE) replaces q/k/v_descale by the sequence's and kv
head's, descales[(t * batch + b) * heads_kv + kv_head], t = 0, 1, 2, and makes the batch index 0. The rest is
the dense program: causal masking is bottom-right per sequence, and lse [heads_q, total_q] is the dense lse
with total_q rows per head (Gen.lse_rows). A paged build keeps k and v at the cache and gathers each block
through the sequence's row of the page table (mfma_fp8_paged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..abi import AbiLayout, Field
from ..regs import R
from .common import s_load_bytes, s_mad64

if TYPE_CHECKING:
    from .mfma_fp8 import Gen

LAYOUTS = ("dense", "varlen", "paged")


def kernarg_params(abi: AbiLayout, layout: str) -> tuple[tuple[str, int, int], ...]:
    """The by-value parameters (name, offset, bytes): zyfa_fwd_args, and zyfa_varlen_args when packed."""
    params = (("args", 0, abi.size),)
    if layout == "dense":
        return params
    assert abi.varlen is not None  # varlen_offset raises AbiError first
    return (*params, ("varlen", abi.varlen_offset(), abi.varlen.size))


def _field(abi: AbiLayout, name: str) -> Field:
    assert abi.varlen is not None
    return next(f for f in abi.varlen.fields if f.name == name)


def _load_field(g: Gen, name: str, align: int = 1) -> R:
    """A zyfa_varlen_args field in fresh SGPRs (not waited for)."""
    f = _field(g.abi, name)
    dst = g.sv(f"vl_{name}", f.size // 4, align)
    s_load_bytes(g.k, dst, "s[0:1]", g.abi.varlen_offset() + f.offset, f.size, f"zyfa_varlen_args.{name}")
    return dst


def enter_sequence(g: Gen) -> None:
    """Sequence b = the batch index: exit past its queries, else make its dense view (module docstring).

    Runs once the tile's first row (g.row0) is known and before anything reads seqlen_q, seqlen_k or the
    tensor pointers. Leaves g.lse_rows = total_q, which the lse base reads (freed after it)."""
    k, a = g.k, g.karg
    k.comment("packed batch: sequence b = the batch index; its rows and counts (kernels/gfx950/varlen.h)")
    paged = g.layout == "paged"
    cu_q, cu_k, used = (_load_field(g, n, 2) for n in ("cu_seqlens_q", "cu_seqlens_k", "seqused_k"))
    g.lse_rows, total_k = _load_field(g, "total_q"), _load_field(g, "total_k")
    at, cq, ck, len_k = g.sv("vl_at"), g.sv("vl_cq", 2, 2), g.sv("vl_ck", 2, 2), g.sv("vl_len_k")
    g.e(f"s_lshl_b32 {at}, {g.batch}, 2", "4 b: sequence b's entries")
    g.e("s_waitcnt lgkmcnt(0)")
    g.e(f"s_load_dwordx2 {cq}, {cu_q}, {at}", "cu_seqlens_q[b], [b + 1]")
    if not paged:
        g.e(f"s_load_dwordx2 {ck}, {cu_k}, {at}", "cu_seqlens_k[b], [b + 1]")
    g.e(f"s_cmp_eq_u64 {used}, 0")
    g.e("s_cbranch_scc1 .Lvl_cu_k")
    g.e(f"s_load_dword {len_k}, {used}, {at}", "seqused_k[b]")
    g.e("s_waitcnt lgkmcnt(0)")
    g.e(f"s_max_i32 {len_k}, {len_k}, 0")
    g.e("s_branch .Lvl_k_rows")
    k.label(".Lvl_cu_k")
    if paged:  # cu_seqlens_k may be NULL with a page table and seqused_k: read only here
        g.e(f"s_load_dwordx2 {ck}, {cu_k}, {at}", "cu_seqlens_k[b], [b + 1]")
    g.e("s_waitcnt lgkmcnt(0)")
    g.e(f"s_sub_u32 {len_k}, {ck[1]}, {ck[0]}", "keys from cu_seqlens_k, as unsigned (no overflow)")
    g.e(f"s_cmp_lt_i32 {ck[1]}, {ck[0]}")
    g.e(f"s_cselect_b32 {len_k}, 0, {len_k}", "a decreasing pair: no key")
    k.label(".Lvl_k_rows")
    if paged:
        _page_rows(g, ck[1])
    else:
        g.e(f"s_max_i32 {ck[0]}, {ck[0]}, 0")
        g.e(f"s_min_i32 {ck[0]}, {ck[0]}, {total_k}", "k_start")
        g.e(f"s_sub_u32 {ck[1]}, {total_k}, {ck[0]}", "k rows after k_start")
    g.e(f"s_min_i32 {ck[1]}, {ck[1]}, {a.reg('seqlen_k')}")
    g.e(f"s_max_i32 {ck[1]}, {ck[1]}, 0")
    g.e(f"s_min_u32 {len_k}, {len_k}, {ck[1]}", "len_k")
    g.e(f"s_max_i32 {cq[0]}, {cq[0]}, 0")
    g.e(f"s_min_i32 {cq[0]}, {cq[0]}, {g.lse_rows}", "q_start")
    g.e(f"s_max_i32 {cq[1]}, {cq[1]}, {cq[0]}")
    g.e(f"s_min_i32 {cq[1]}, {cq[1]}, {g.lse_rows}", "q_end")
    g.e(f"s_sub_u32 {cq[1]}, {cq[1]}, {cq[0]}")
    g.e(f"s_min_i32 {cq[1]}, {cq[1]}, {a.reg('seqlen_q')}")
    g.e(f"s_max_i32 {cq[1]}, {cq[1]}, 0", "len_q")
    g.e(f"s_cmp_ge_u32 {g.row0}, {cq[1]}")
    g.e("s_cbranch_scc1 .Lend", "the tile starts past the sequence's queries: nothing to compute")
    k.comment("the sequence's dense view: its counts, q / out / k / v / lse at its first rows")
    g.e(f"s_mov_b32 {a.reg('seqlen_q')}, {cq[1]}")
    g.e(f"s_mov_b32 {a.reg('seqlen_k')}, {len_k}")
    _move_bases(g, cq[0], None if paged else ck[0])
    for r in (cu_q, cu_k, used, total_k, at, cq, ck, len_k):
        g.s.free(r)


def _page_rows(g: Gen, k_rows: R) -> None:
    """k_rows = max_pages * page_size (0 unless both are positive; saturating), and what the gather keeps:
    g.pg_size = page_size, g.pg_last = num_pages - 1, g.pg_row = the sequence's row of the page table."""
    g.pg_size, g.pg_last = _load_field(g, "page_size"), _load_field(g, "num_pages")
    table, stride = _load_field(g, "page_table", 2), _load_field(g, "page_table_stride", 2)
    pages = _load_field(g, "max_pages")
    g.pg_row, t = g.sv("pg_row", 2, 2), g.sv("vl_pages_hi")
    g.e("s_waitcnt lgkmcnt(0)")
    g.e(f"s_max_i32 {g.pg_size}, {g.pg_size}, 0")
    g.e(f"s_max_i32 {pages}, {pages}, 0")
    g.e(f"s_mul_i32 {k_rows}, {pages}, {g.pg_size}")
    g.e(f"s_mul_hi_u32 {t}, {pages}, {g.pg_size}")
    g.e(f"s_cmp_eq_u32 {t}, 0")
    g.e(f"s_cselect_b32 {k_rows}, {k_rows}, -1")
    g.e(f"s_min_u32 {k_rows}, {k_rows}, 0x7fffffff", "keys the table row addresses (saturated)")
    g.e(f"s_add_i32 {g.pg_last}, {g.pg_last}, -1", "the last page of the cache")
    g.e(f"s_mov_b64 {g.pg_row}, {table}")
    g.e(f"s_lshl_b64 {stride}, {stride}, 2", "bytes between table rows")
    tmp = g.sv("vl_row_mad", 3)
    s_mad64(g.k, g.pg_row, g.batch, stride, tmp)
    for r in (table, stride, pages, t, tmp):
        g.s.free(r)


def _move_bases(g: Gen, q_start: R, k_start: R | None) -> None:
    """q, out and lse to row q_start, k and v to row k_start (e4m3 q / k / v, bf16 out, fp32 lse; a paged
    cache stays where it is)."""
    a = g.karg
    tmp, st = g.sv("vl_mad", 3), g.sv("vl_stride", 2, 2)
    moves = [("q", q_start, 0), ("out", q_start, 1)]
    if k_start is not None:
        moves += [("k", k_start, 0), ("v", k_start, 0)]
    for name, start, shift in moves:
        stride = a.pair(f"{name}_stride_seq")
        if shift:
            g.e(f"s_lshl_b64 {st}, {stride}, {shift}")
            stride = st
        s_mad64(g.k, a.pair(name), start, stride, tmp)
    lse = a.pair("lse")
    g.e(f"s_lshl_b32 {tmp[0]}, {q_start}, 2")
    g.e(f"s_lshr_b32 {tmp[1]}, {q_start}, 30")
    g.e(f"s_add_u32 {lse[0]}, {lse[0]}, {tmp[0]}")
    g.e(f"s_addc_u32 {lse[1]}, {lse[1]}, {tmp[1]}", "lse + 4 q_start bytes: row q_start of every head")
    g.s.free(tmp)
    g.s.free(st)


def table_descales(g: Gen) -> None:
    """With ZYFA_FLAG_DESCALE_TABLE, q/k/v_descale = the table's entries of (sequence b, kv head); then the
    batch index becomes 0 (the view is batch 0 of itself). Runs once g.kvh is known, before anything reads
    the descales. Byte offsets stay below 2^32: the table holds 3 x batch x heads_kv floats."""
    k, a = g.k, g.karg
    bit = g.abi.flags["ZYFA_FLAG_DESCALE_TABLE"].bit_length() - 1
    k.comment("descales of (sequence b, kv head) from the table: [3][batch][heads_kv] floats")
    g.e(f"s_bitcmp1_b32 {a.reg('flags')}, {bit}")
    g.e("s_cbranch_scc0 .Lvl_tensor_descales")
    table = _load_field(g, "descales", 2)
    offs, plane = g.sv("vl_descale_at", 3), g.sv("vl_plane")
    g.e(f"s_mul_i32 {plane}, {a.reg('batch')}, {a.reg('heads_kv')}")
    g.e(f"s_lshl_b32 {plane}, {plane}, 2", "bytes of one table (q, k or v)")
    g.e(f"s_mul_i32 {offs[0]}, {g.batch}, {a.reg('heads_kv')}")
    g.e(f"s_add_u32 {offs[0]}, {offs[0]}, {g.kvh}")
    g.e(f"s_lshl_b32 {offs[0]}, {offs[0]}, 2", "(b heads_kv + kv_head) floats")
    g.e(f"s_add_u32 {offs[1]}, {offs[0]}, {plane}")
    g.e(f"s_add_u32 {offs[2]}, {offs[1]}, {plane}")
    g.e("s_waitcnt lgkmcnt(0)")
    for i, name in enumerate(("q_descale", "k_descale", "v_descale")):
        g.e(f"s_load_dword {a.reg(name)}, {table}, {offs[i]}")
    g.e("s_waitcnt lgkmcnt(0)")
    for r in (table, offs, plane):
        g.s.free(r)
    k.label(".Lvl_tensor_descales")
    g.e(f"s_mov_b32 {g.batch}, 0", "the sequence is batch 0 of its view")
