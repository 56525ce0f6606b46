"""The program of mfma_fp8 after its setup: the key-block loops and the epilogue.

One iteration (block kb), in issue order:
  1. wait for block kb's LDS-DMA (and, with two waves, s_barrier); K operand reads (ds_read_b128)
     into AGPRs from LDS buffer kb % 2 (the loops are unrolled by two, so the buffer is an offset);
  2. prefetch: point the K/V resources at block kb+1 and LDS-DMA it into the other buffer;
  3. S^T = K Q^T on the matrix cores (pipelined: and O^T += V^T P^T of block kb-1);
  4. [diagonal/tail blocks only] keys past the row's limit -> S = -inf;
  5. row max (a max3 chain from the row's running max of S + one half-wave swap), then the V^T
     operand reads (ds_read_b64_tr_b8), m_ref = C max S, alpha; with stale_tau, m_ref = m unless
     C max S passes m + tau, and alpha and the rescale of step 8 run here, behind one branch taken
     where no row's m moved;
  6. P codes (lean: one packed FMA per two scores, scaled by 2^-24 and clamped, a packed f16
     conversion per two and a byte permute per four; exact: exp2 and the e4m3 pack), written
     straight into the P^T operand;
  7. [VALU row sums] row sum of the rounded P (decode pairs, packed adds, one half-wave swap);
     l = l * alpha + sum;
  8. acc *= alpha (packed multiplies, skipped when alpha = 1 in every lane); O^T += V^T P^T (and
     the row-sum MFMA) unless pipelined.
MFMAs issue at s_setprio 1 when Options.setprio is on.
See docs/gfx950-fp8-kernel.md for the annotated listing of one iteration.
"""

from __future__ import annotations

import math

from ..regs import R
from .common import f32_hex
from .mfma_fp8 import LEAN_MAX_CODE, LEAN_SCALE, MFMA, ROW_SUM_MFMA, SHIFT, Gen


def emit_kernel(g: Gen) -> None:
    """Setup, the unmasked and masked block loops, the epilogue."""
    k = g.k
    g.setup()
    k.comment("---- prologue: request key block 0 into LDS buffer 0")
    g.e(f"s_cmp_eq_u32 {g.nblocks}, 0")
    g.e("s_cbranch_scc1 .Lepilogue", "no visible key: out 0, lse +inf")
    g.request_block("0")
    if g.opts.pipelined(g.sh.p_mode, g.sh.d_qk):
        k.comment("P and V^T of 'block -1': zeros, so the first iteration's P.V adds exactly 0")
        for i in range(8):
            g.e(f"v_mov_b32_e32 {g.p[i]}, 0")
        for op in g.vop:
            for i in range(8):
                g.e(f"v_accvgpr_write_b32 {op[i]}, 0")
    if g.sh.waves == 8 and g.opts.pingpong:
        _group_barrier(g, "lead", first_group=False, why="the second group starts half an iteration late")
    k.comment("block kb sits in LDS buffer kb % 2: both loops are unrolled by two (even, odd blocks)")
    g.e(f"s_mov_b32 {g.kb}, 0")
    g.e(f"s_cmp_eq_u32 {g.nfull}, 0")
    g.e("s_cbranch_scc1 .Lmasked_entry0")
    k.label(".Lfull0")
    k.comment("==== block loop, every row sees every key of the block: no mask")
    _block(g, masked=False, tag="full0", par=0)
    g.e(f"s_cmp_ge_u32 {g.kb}, {g.nfull}")
    g.e("s_cbranch_scc1 .Lmasked_entry1")
    _block(g, masked=False, tag="full1", par=1)
    g.e(f"s_cmp_lt_u32 {g.kb}, {g.nfull}")
    g.e("s_cbranch_scc1 .Lfull0")
    k.label(".Lmasked_entry0")
    g.e(f"s_cmp_lt_u32 {g.kb}, {g.nblocks}")
    g.e("s_cbranch_scc0 .Lloops_done")
    k.label(".Lmasked0")
    k.comment("==== block loop, diagonal and tail blocks: keys past a row's limit are masked")
    _block(g, masked=True, tag="masked0", par=0)
    g.e(f"s_cmp_ge_u32 {g.kb}, {g.nblocks}")
    g.e("s_cbranch_scc1 .Lloops_done")
    k.label(".Lmasked1")
    _block(g, masked=True, tag="masked1", par=1)
    g.e(f"s_cmp_lt_u32 {g.kb}, {g.nblocks}")
    g.e("s_cbranch_scc1 .Lmasked0")
    g.e("s_branch .Lloops_done")
    k.label(".Lmasked_entry1")
    g.e(f"s_cmp_lt_u32 {g.kb}, {g.nblocks}")
    g.e("s_cbranch_scc1 .Lmasked1")
    k.label(".Lloops_done")
    if g.sh.waves == 8 and g.opts.pingpong:
        _group_barrier(g, "tail", first_group=True, why="the first group matches the second's extra barrier")
    if g.opts.pipelined(g.sh.p_mode, g.sh.d_qk):
        k.comment("---- the last block's P.V")
        g.e("s_waitcnt lgkmcnt(0)", "V^T operand")
        _pv(g)
    k.label(".Lepilogue")
    _epilogue(g)
    k.label(".Lend")
    g.e("s_endpgm")
    for block in g.out_of_line:
        block()


def _block(g: Gen, masked: bool, tag: str, par: int) -> None:
    """One block kb with kb % 2 = par: its K and V in LDS buffer par, m before it in (m_even, m_odd)[par]."""
    k, sh = g.k, g.sh
    g.buf_off = par * sh.buf
    g.m_old, g.m_new = (g.m_even, g.m_odd) if par == 0 else (g.m_odd, g.m_even)
    k.comment(f"-- 1. block kb is in LDS buffer {par} (kb % 2): read the K operand (A of S^T = K Q^T)")
    g.e("s_waitcnt vmcnt(0)", "block kb's LDS-DMA (and Q) landed")
    if g.opts.pipelined(g.sh.p_mode, g.sh.d_qk):
        g.e("s_waitcnt lgkmcnt(0)", "this wave's V^T reads of block kb-1 are done before anyone's prefetch")
    if sh.waves > 1:
        g.e("s_barrier", "every wave's share of block kb landed; every wave is done with block kb-1")
    share = g.opts.shares_k_operand(sh.p_mode, sh.d_qk)
    for mb in range(1 if share else 2):
        _read_k(g, mb)
    _prefetch(g, tag)
    k.comment("-- 3. S^T = K Q^T (fp32) on the matrix cores")
    g.e("s_waitcnt lgkmcnt(0)")
    _prio(g, 1)
    pingpong = sh.waves == 8
    if pingpong and g.opts.pipelined(g.sh.p_mode, g.sh.d_qk):
        k.comment("O^T += V^T P^T of block kb-1 first: done by the time S is, before the softmax phase")
        _pv(g, prio=False)
    _s_half(g, 0)
    if share:
        k.comment("the second half's K operand into the same AGPRs (the first half's MFMAs have read them)")
        _read_k(g, 1)
    if g.opts.pipelined(g.sh.p_mode, g.sh.d_qk) and not pingpong:
        k.comment("O^T += V^T P^T of block kb-1 (its V^T operand and P are still in the registers)")
        _pv(g, prio=False)
    if share:
        g.e("s_waitcnt lgkmcnt(0)")
    _s_half(g, 1)
    _prio(g, 0)
    if masked:
        _mask(g)
    _softmax(g, tag)
    what = "O and the row-sum tile" if g.opts.row_sum_on_mfma(sh.p_mode, sh.d_qk) else "O"
    then = (
        "this block's P.V runs next iteration"
        if g.opts.pipelined(g.sh.p_mode, g.sh.d_qk)
        else "then O^T += V^T P^T"
    )
    if g.tau > 0:
        k.comment(f"-- 8. rescale {what}: done in 5. where some row's max moved (stale_tau); {then}")
    else:
        k.comment(f"-- 8. rescale {what} unless no row's max moved (alpha = 1 exactly); {then}")
        g.e(f"v_cmp_neq_f32_e32 vcc, 1.0, {g.alpha2[0]}")
        g.e(f"s_cbranch_vccz .Lno_rescale_{tag}")
        _rescale(g)
        k.label(f".Lno_rescale_{tag}")
    if not g.opts.pipelined(g.sh.p_mode, g.sh.d_qk):
        g.e("s_waitcnt lgkmcnt(0)", "V^T operand")
        _pv(g)
    g.e(f"s_add_u32 {g.kb}, {g.kb}, 1")


def _rescale(g: Gen) -> None:
    """acc *= alpha (packed), and the row-sum tile's register the epilogue reads."""
    for acc in g.acc:
        for j in range(0, 16, 2):
            g.e(f"v_pk_mul_f32 {acc.sub(j, 2)}, {acc.sub(j, 2)}, {g.alpha2} op_sel_hi:[1,0]")
    if g.opts.row_sum_on_mfma(g.sh.p_mode, g.sh.d_qk):
        g.e(f"v_mul_f32_e32 {g.lacc[0]}, {g.lacc[0]}, {g.alpha2[0]}",
            "only the row-sum register the epilogue reads (the other 3 are never read)")  # fmt: skip


def _prefetch(g: Gen, tag: str) -> None:
    """LDS-DMA of block kb+1 into the other buffer (its last reader finished a block ago)."""
    g.k.comment("-- 2. prefetch block kb+1 into the other buffer (its last reader finished a block ago)")
    nxt = g.sv(f"next_{tag}")
    g.e(f"s_add_u32 {nxt}, {g.kb}, 1")
    g.e(f"s_cmp_lt_u32 {nxt}, {g.nblocks}")
    g.e(f"s_cbranch_scc0 .Lno_prefetch_{tag}")
    g.advance_kv()
    g.request_block(str(g.sh.buf - g.buf_off))
    g.k.label(f".Lno_prefetch_{tag}")
    g.s.free(nxt)


def _read_vt(g: Gen) -> None:
    """The V^T operand of this block (ds_read_b64_tr_b8); issued once S is read (after the row max)."""
    sh = g.sh
    g.k.comment("-- the V^T operand of this block (transposing LDS reads, in flight during the softmax)")
    for cb in range(sh.vc):
        for t in range(4):
            off = 16 * t * sh.d_v + 32 * cb
            g.e(f"ds_read_b64_tr_b8 {g.vop[cb].sub(2 * t, 2)}, {g.v_rd} offset:{g.buf_off + off}",
                f"V^T d {32 * cb}+, P bytes {8 * t}+")  # fmt: skip


def _read_k(g: Gen, mb: int) -> None:
    """ds_read_b128 of the K operand of S^T's keys 32 mb .. 32 mb + 31 (all d_qk)."""
    op_set = g.kop[mb if len(g.kop) == 2 else 0]
    for c in range(g.sh.kc):
        off = g.buf_off + 32 * mb * g.sh.d_qk + 64 * c
        g.e(f"ds_read_b128 {op_set[c].sub(0, 4)}, {g.k_rd} offset:{off}", f"K rows {32 * mb}+, d {64 * c}+")
        g.e(f"ds_read_b128 {op_set[c].sub(4, 4)}, {g.k_rd} offset:{off + 32}")


def _s_half(g: Gen, mb: int) -> None:
    """S^T for keys 32 mb .. 32 mb + 31: d_qk / 64 chained MFMAs."""
    op_set = g.kop[mb if len(g.kop) == 2 else 0]
    for c in range(g.sh.kc):
        src_c = "0" if c == 0 else str(g.sacc[mb])
        g.e(f"{MFMA} {g.sacc[mb]}, {op_set[c]}, {g.q.sub(8 * c, 8)}, {src_c}", f"S^T keys {32 * mb}+")


def _group_barrier(g: Gen, tag: str, first_group: bool, why: str) -> None:
    """One s_barrier executed by one wave group only (waves 0-3 or 4-7)."""
    g.e(f"s_cmp_lt_u32 {g.wave}, 4")
    g.e(f"s_cbranch_scc{0 if first_group else 1} .Lgroup_{tag}")
    g.e("s_waitcnt vmcnt(0) lgkmcnt(0)")
    g.e("s_barrier", why)
    g.k.label(f".Lgroup_{tag}")


def _pv(g: Gen, prio: bool = True) -> None:
    """O^T += V^T P^T for the block whose P and V^T operands are in the registers."""
    if prio:
        _prio(g, 1)
    for cb in range(g.sh.vc):
        g.e(f"{MFMA} {g.acc[cb]}, {g.vop[cb]}, {g.p}, {g.acc[cb]}", f"O^T d {32 * cb}+")
    if g.opts.row_sum_on_mfma(g.sh.p_mode, g.sh.d_qk):
        g.e(f"{ROW_SUM_MFMA} {g.lacc}, {g.ones}, {g.p}, {g.lacc}", "l = l + sum of the rounded P")
    if prio:
        _prio(g, 0)


def _prio(g: Gen, level: int) -> None:
    if g.opts.setprio:
        g.e(f"s_setprio {level}", "MFMA issue first" if level else "softmax at normal priority")


def _values(g: Gen) -> list[tuple[int, int, R]]:
    """The 32 scores of a lane as (S^T tile s, accumulator register r, register):
    key = 64 kb + 32 s + 8 (r / 4) + 4 g + r % 4; P byte 16 s + r."""
    return [(s, r, g.sacc[s][r]) for s in range(2) for r in range(16)]


def _mask(g: Gen) -> None:
    g.k.comment("-- 4. mask: key offset 32 s + 8 (r/4) + r%4 > rel = limit - 64 kb - 4 g  ->  S = -inf")
    kb64 = g.sv("kb64")
    g.e(f"s_lshl_b32 {kb64}, {g.kb}, 6")
    g.e(f"v_subrev_u32_e32 {g.rel}, {kb64}, {g.lim}")
    g.s.free(kb64)
    vals = _values(g)
    for q in range(0, len(vals), 4):
        group = vals[q : q + 4]
        for i, (s, r, _reg) in enumerate(group):
            off = 32 * s + 8 * (r // 4) + r % 4
            g.e(f"v_cmp_gt_i32_e64 {g.mask_sel.sub(2 * i, 2)}, {off}, {g.rel}")
        for i, (_s, _r, reg) in enumerate(group):
            g.e(f"v_cndmask_b32_e64 {reg}, {reg}, {g.ninf}, {g.mask_sel.sub(2 * i, 2)}")


def _half_reduce(g: Gen, x: R, y: R, op: str, into: R | None = None) -> None:
    """into = op(x of this lane, x of lane l ^ 32) in every lane (y: scratch)."""
    g.e(f"v_mov_b32_e32 {y}, {x}")
    g.e(f"v_permlane32_swap_b32 {x}, {y}", "x: low half's value in both halves; y: high half's")
    g.e(f"{op} {into or x}, {x}, {y}")


def _softmax(g: Gen, tag: str) -> None:
    k = g.k
    vals = [reg for _s, _r, reg in _values(g)]
    mx, tmp = g.t4[0], g.t4[1]
    k.comment("-- 5. row max: one max3 chain from the row's running max of S, one half-wave exchange;")
    k.comment("   m_ref = C max S (C > 0: the max of t = C S), alpha = exp2(m - m_ref)")
    g.e(f"v_max3_f32 {mx}, {g.ms}, {vals[0]}, {vals[1]}")
    rest = vals[2:]
    while len(rest) >= 2:
        g.e(f"v_max3_f32 {mx}, {mx}, {rest[0]}, {rest[1]}")
        rest = rest[2:]
    if rest:
        g.e(f"v_max_f32_e32 {mx}, {mx}, {rest[0]}")
    _half_reduce(g, mx, tmp, "v_max_f32_e32", into=None if g.tau > 0 else g.ms)
    if g.tau > 0:
        _stale_test(g, mx)
    _read_vt(g)
    if g.sh.waves == 8:
        g.e("s_waitcnt lgkmcnt(0)", "this wave's LDS reads of block kb are done")
        g.e("s_barrier", "MFMA phase | softmax phase: S (and the P.V before it) have landed")
    if g.tau > 0:
        _stale_update(g, mx, tmp, tag)
    else:
        g.e(f"v_mul_f32_e32 {g.m_new}, {g.ms}, {g.cs}", "m_ref = m_new = max(m, C max_j S_j)")
        _alpha(g, tmp)
    if g.sh.p_mode == "lean":
        _lean_p(g, tag)
    else:
        _exact_p(g)
    if not g.opts.row_sum_on_mfma(g.sh.p_mode, g.sh.d_qk):
        _row_sum(g)


def _alpha(g: Gen, tmp: R) -> None:
    g.e(f"v_sub_f32_e32 {tmp}, {g.m_old}, {g.m_new}")
    g.e(f"v_exp_f32_e32 {g.alpha2[0]}, {tmp}", "alpha = exp2(m - m_ref)")


def _stale_test(g: Gen, mx: R) -> None:
    """Stale running max, first half (before the V^T reads, which cover the vcc wait states): the
    candidate max(m, C max_j S_j) in m_new, and vcc = the rows where it exceeds thr (m moves there).

    mx holds max(kept max S, max_j S_j), so C mx = max(m, C max_j S_j) bit for bit (C > 0, and m = C
    times the kept max S). thr is fl(m + tau), as the contract compares, or C M_NONE before the row's
    first key, which any key's C S exceeds, as any t exceeds -inf: a fully masked block keeps the row's
    state, and m + tau never absorbs a first key whatever the size of C.
    """
    g.e(f"v_mul_f32_e32 {g.m_new}, {mx}, {g.cs}", "max(m, C max_j S_j)")
    g.e(f"v_cmp_gt_f32_e32 vcc, {g.m_new}, {g.thr}", f"raised by more than stale_tau {g.tau:g}?")


def _stale_update(g: Gen, mx: R, tmp: R, tag: str) -> None:
    """Stale running max, second half: m_new = the candidate where vcc, else m. Where no row's m moved,
    nothing else changes (alpha would be exp2(m - m) = 1 in every lane), so one branch skips the rest,
    which is: the moved rows' new max of S and thr = m_new + tau, alpha, the VALU row sum's l * alpha
    (before the block's sum is added in 7., as the contract rounds it) and the rescale of O (and the
    row-sum tile), here rather than in 8.: the P.V that last wrote acc was issued before this block's
    S, whose results the row max has read. The branch jumps where no row moved (the usual block of a
    long row) and falls through into the rescale otherwise, so a block takes at most one taken branch
    for all of it (32 cycles in the timing model, as much as 8 VALU instructions)."""
    g.e(f"v_cndmask_b32_e32 {g.m_new}, {g.m_old}, {g.m_new}, vcc", "m_ref = m_new")
    g.e(f"s_cbranch_vccz .Lkept_{tag}", "no row's m moved: no alpha, no rescale")
    _alpha(g, tmp)
    g.e(f"v_cndmask_b32_e32 {g.ms}, {g.ms}, {mx}, vcc", "the max of S of the new m (covers exp2's result)")
    g.e(f"v_add_f32_e32 {tmp}, {f32_hex(g.tau)}, {g.m_new}")
    g.e(f"v_cndmask_b32_e32 {g.thr}, {g.thr}, {tmp}, vcc", "thr = m_new + tau where m moved")
    if not g.opts.row_sum_on_mfma(g.sh.p_mode, g.sh.d_qk):
        g.e(f"v_mul_f32_e32 {g.l}, {g.l}, {g.alpha2[0]}", "l * alpha (the block's sum is added in 7.)")
    _rescale(g)
    g.k.label(f".Lkept_{tag}")


def _p_byte(s: int, r: int) -> tuple[int, int]:
    """(P^T operand register, byte) of the score (s, r): byte 16 s + r of the 32-byte operand."""
    b = 16 * s + r
    return b // 4, b % 4


def _lean_p(g: Gen, tag: str) -> None:
    g.k.comment("-- 6. lean P: code = clamp(rint(fma(S, 8C, 120 - 8 m_ref)), 0, 126), computed 2^-24 scaled:")
    g.k.comment(
        "   x = fma(S, 2^-24 8C, 2^-24 B) = 2^-24 fl(S 8C + B), clamped to [0, 1]; f16(x) has bits = code"
    )
    b, kneg, k120, ksel, k2p20 = g.b2, *g.lean_k
    g.e(f"v_fma_f32 {b[0]}, {g.m_new}, {kneg}, {k120}", "B' = 2^-24 (120 - 8 m_ref), one rounding")
    for s in range(2):
        for r in range(0, 16, 2):
            pair = g.sacc[s].sub(r, 2)
            g.e(f"v_pk_fma_f32 {pair}, {pair}, {g.c2}, {b} op_sel_hi:[1,1,0] clamp",
                "x of two keys (< 0, -inf: 0)")  # fmt: skip
    # The clamp at 126 can only act when |m_ref| >= 2^20: below, fl(C S) <= m_ref gives
    # S A <= 8 m_ref + 4 ulp(m_ref) <= 8 m_ref + 1/4 and B <= 120 - 8 m_ref + 1/2, so S A + B < 121.
    # With stale_tau, fl(C S) <= fl(m_ref + tau) and |m_ref| < 2^16 give S A <= 8 (m_ref + tau) + 1/16
    # and B <= 120 - 8 m_ref + 1/32, so S A + B < 120 + 8 tau + 0.1 < 126.5 for tau < 0.8.
    g.e(f"v_cmp_gt_f32_e64 vcc, |{g.m_new}|, {k2p20}", "some row has |m_ref| > 2^20" if g.tau == 0 else
        "some row has |m_ref| > 2^16")  # fmt: skip
    g.e(f"s_cbranch_vccnz .Lclamp_{tag}", "rare: out of line, so the usual path takes no branch")
    g.k.label(f".Lclamped_{tag}")
    g.out_of_line.append(lambda: _clamp_block(g, tag))
    for s in range(2):
        acc = g.sacc[s]
        for r in range(0, 16, 4):
            preg, _ = _p_byte(s, r)
            g.e(f"v_cvt_pk_f16_f32 {acc[r]}, {acc[r]}, {acc[r + 1]}", "round to f16: bits = code (< 1024)")
            g.e(f"v_cvt_pk_f16_f32 {acc[r + 2]}, {acc[r + 2]}, {acc[r + 3]}")
            g.e(f"v_perm_b32 {g.p[preg]}, {acc[r + 2]}, {acc[r]}, {ksel}", "four codes into the P operand")


def _clamp_block(g: Gen, tag: str) -> None:
    """The lean codes' clamp at 126 (x <= 2^-24 126), placed after the program's end."""
    g.k.label(f".Lclamp_{tag}")
    g.k.comment("lean P with |m_ref| > 2^20: the clamp at 126 can act")
    for _s, _r, reg in _values(g):
        g.e(f"v_min_f32_e32 {reg}, {f32_hex(LEAN_MAX_CODE * LEAN_SCALE)}, {reg}")
    g.e(f"s_branch .Lclamped_{tag}")


def _exact_p(g: Gen) -> None:
    g.k.comment("-- 6. exact P: p = e4m3(exp2((S C - m_ref) + 8)), packed two per half-dword")
    b = g.b2
    g.e(f"v_sub_f32_e32 {b[0]}, 0, {g.m_new}", "-m_ref")
    for s in range(2):
        for r in range(0, 16, 2):
            pair = g.sacc[s].sub(r, 2)
            g.e(f"v_pk_mul_f32 {pair}, {pair}, {g.c2}", "t = S C")
            g.e(f"v_pk_add_f32 {pair}, {pair}, {b} op_sel_hi:[1,0]", "t - m_ref")
            g.e(f"v_pk_add_f32 {pair}, {pair}, {g.eight2}", "+ 8")
    for _s, _r, reg in _values(g):
        g.e(f"v_exp_f32_e32 {reg}, {reg}")
    for s in range(2):
        for r in range(0, 16, 2):
            preg, byte = _p_byte(s, r)
            sel = " op_sel:[0,0,1]" if byte else ""
            g.e(
                f"v_cvt_pk_fp8_f32 {g.p[preg]}, {g.sacc[s][r]}, {g.sacc[s][r + 1]}{sel}", "e4m3, nearest even"
            )


def _row_sum(g: Gen) -> None:
    g.k.comment("-- 7. row sum of the ROUNDED P (decoded codes; exact in any order), l = l alpha + sum")
    t, bs = g.t4, g.bsum
    for i in range(8):
        g.e(f"v_cvt_pk_f32_fp8_e32 {t.sub(0, 2)}, {g.p[i]}")
        g.e(f"v_cvt_pk_f32_fp8_sdwa {t.sub(2, 2)}, {g.p[i]} src0_sel:WORD_1")
        if i == 0:
            g.e(f"v_pk_add_f32 {bs}, {t.sub(0, 2)}, {t.sub(2, 2)}")
        else:
            g.e(f"v_pk_add_f32 {bs}, {bs}, {t.sub(0, 2)}")
            g.e(f"v_pk_add_f32 {bs}, {bs}, {t.sub(2, 2)}")
    g.e(f"v_add_f32_e32 {bs[0]}, {bs[0]}, {bs[1]}")
    _half_reduce(g, bs[0], bs[1], "v_add_f32_e32")
    if g.tau == 0:  # with stale_tau, l * alpha ran where some row's max moved (_stale_update)
        g.e(f"v_mul_f32_e32 {g.l}, {g.l}, {g.alpha2[0]}")
    g.e(f"v_add_f32_e32 {g.l}, {g.l}, {bs[0]}")


def _epilogue(g: Gen) -> None:
    k, a = g.k, g.karg
    ls, r, t = g.t4[2], g.t4[3], g.t4
    k.comment("---- epilogue: out = (acc / max(l, 1)) * v_descale -> bf16; a row that saw no key has acc = 0")
    if g.opts.row_sum_on_mfma(g.sh.p_mode, g.sh.d_qk):
        g.e(f"v_mov_b32_e32 {g.l}, {g.lacc[0]}", "l from the matrix core's row sums")
    g.e(f"v_max_f32_e32 {ls}, 1.0, {g.l}")
    g.e(f"v_rcp_f32_e32 {r}, {ls}")
    g.e(f"v_fma_f32 {t[0]}, -{ls}, {r}, 1.0", "Newton step on 1/l")
    g.e(f"v_fma_f32 {r}, {t[0]}, {r}, {r}")
    # The division in pairs: each half runs the scalar sequence q0 = acc r, e = acc - l q0 (exact),
    # acc / l = q0 + e r, then * v_descale; op_sel picks l or 1/l (the pair ls:r) for both halves.
    lr, q0, e, vd = g.t4.sub(2, 2), g.t4.sub(0, 2), g.bsum, g.b2
    g.e(f"v_mov_b32_e32 {vd[0]}, {a.reg('v_descale')}")
    for cb, acc in enumerate(g.acc):
        for i in range(0, 16, 2):
            x = acc.sub(i, 2)
            g.e(f"v_pk_mul_f32 {q0}, {x}, {lr} op_sel:[0,1] op_sel_hi:[1,1]", "q0 = acc / l")
            g.e(f"v_pk_fma_f32 {e}, {lr}, {q0}, {x} op_sel_hi:[0,1,1] neg_lo:[1,0,0] neg_hi:[1,0,0]",
                "residual, exact")  # fmt: skip
            g.e(f"v_pk_fma_f32 {x}, {e}, {lr}, {q0} op_sel:[0,1,0] op_sel_hi:[1,1,1]", "acc / l, rounded")
            g.e(f"v_pk_mul_f32 {x}, {x}, {vd} op_sel_hi:[1,0]", "* v_descale")
        for q in range(4):
            g.e(f"v_cvt_pk_bf16_f32 {acc[4 * q]}, {acc[4 * q]}, {acc[4 * q + 1]}")
            g.e(f"v_cvt_pk_bf16_f32 {acc[4 * q + 1]}, {acc[4 * q + 2]}, {acc[4 * q + 3]}")
            off = 2 * (32 * cb + 8 * q)
            g.e(f"buffer_store_dwordx2 {acc.sub(4 * q, 2)}, {g.o_off}, {g.ro}, 0 offen offset:{off}",
                f"d {32 * cb + 8 * q}+4g .. +3")  # fmt: skip
    lse_bit = g.abi.flags["ZYFA_FLAG_LSE"].bit_length() - 1
    k.comment("lse = ((m + log2 l) - 8) ln 2, +inf for a row that saw no key; lanes 0..31 store")
    g.e(f"s_bitcmp1_b32 {a.reg('flags')}, {lse_bit}")
    g.e("s_cbranch_scc0 .Lend")
    x, inf = t[0], t[1]
    g.e(f"v_log_f32_e32 {x}, {ls}")
    g.e(f"v_mul_f32_e32 {inf}, {g.ms}, {g.cs}", "m = C max S")
    g.e(f"v_add_f32_e32 {x}, {inf}, {x}")
    g.e(f"v_add_f32_e32 {x}, {f32_hex(-SHIFT)}, {x}")
    g.e(f"v_mul_f32_e32 {x}, {f32_hex(math.log(2.0))}, {x}")
    g.e(f"v_mov_b32_e32 {inf}, {f32_hex(math.inf)}")
    g.e(f"v_cmp_eq_f32_e32 vcc, 0, {g.l}")
    g.e(f"v_cndmask_b32_e32 {x}, {x}, {inf}, vcc")
    g.e("s_mov_b32 exec_hi, 0")
    g.e(f"buffer_store_dword {x}, {g.lse_off}, {g.rl}, 0 offen")
