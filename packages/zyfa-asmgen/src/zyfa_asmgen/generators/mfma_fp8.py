"""mfma_fp8: FP8 (e4m3fn) causal attention on the gfx950 matrix cores, ZYFA numerics.

Each wave64 owns 32 query rows and walks the keys in blocks of 64 (tile_n 64, the P-scaling
block); a workgroup has 1, 2, 4 or 8 waves (threads 64 x waves, tile_m 32 x waves; the variants
use 2) that share one K/V stream through LDS. The attention products are
`v_mfma_f32_32x32x64_f8f6f4` (e4m3 x e4m3, fp32 accumulate), computed transposed so that every lane
owns ONE query row (lean P adds one `v_mfma_f32_16x16x128_f8f6f4` per block for the row sums):

    S^T[64 keys x 32 rows] = K_blk . Q^T    2 x (d_qk/64) MFMAs; A = K rows from LDS, B = Q (registers)
    O^T[d_v x 32 rows]    += V^T . P^T      d_v/32 MFMAs;     A = V^T by transposing LDS reads, B = P

In the 32x32 accumulator layout lane l holds column l % 32 (its query row) and 16 rows
8*(r/4) + 4*(l/32) + r%4 of the M dimension (keys of S^T, head dims of O^T), so the softmax is
lane-local except for one swap between the two half-waves (v_permlane32_swap) for the row max (and
one for a VALU row sum). P's 32 e4m3 bytes per lane are packed straight into the B operand of the
P.V MFMA; the key each byte stands for is fixed by that packing, and the V^T operand is read from LDS with
`ds_read_b64_tr_b8` at row addresses chosen to match it (see `_v_lane_base`).

Why 32x32x64 and not 16x16x128: per MFMA the same 4 KiB of A and B operands feed twice the
multiply-adds (65536 vs 32768), halving LDS operand traffic per FLOP, and a query row lives in two
lanes instead of four, so the row max and row sum need one cross-lane step instead of two. Both take
the same matrix-core time per FLOP in the timing model (16 passes for 32x32x64, 8 for 16x16x128).

Memory: Q is loaded once into registers (raw buffer loads; rows past seqlen_q read 0). K and V
blocks go global -> LDS directly (`buffer_load_dwordx4 ... lds`), double buffered (block kb in
buffer kb % 2; the block loops are unrolled by two, so the buffer is an immediate offset): block
kb+1 is requested before block kb's matrix work starts; up to four waves each move their share of every
block and all waves meet at an s_barrier per block (two with 8 waves, see Options.pingpong). The
raw buffer resources end at the last valid key, so ragged tails read zeros and are masked like
causal keys. Output and LSE stores go through raw
buffers that end at seqlen_q, so rows past it are dropped by the hardware's range check.

Numerics (docs/numerics.md, FP8 mode, SHIFT 8), per row and block, all fp32:
    C = ((softmax_scale * q_descale) * k_descale) * log2(e); m_new = max(m, C * max_j S_j)
    m_ref = m_new, or 0 while m_new = -inf;  alpha = exp2(m - m_ref);  m = m_new
    (kept as the running max of S and m = C max S, equal bit for bit as C > 0; M_NONE below stands
    in for -inf, where only zeros are scaled)
    stale_tau > 0 (the variant's field): m_new = m unless C max(max S, max_j S_j) > m + tau, then
    alpha = exp2(0) = 1 exactly and the row's max of S stays too (_stale_test, _stale_update)
    lean:  code_j = clamp(rint(fma(S_j, 8C, 120 - 8 m_ref)), 0, 126), computed 2^-24 scaled so
           that an f16 conversion does the rint (LEAN_SCALE)
    exact: code_j = e4m3(exp2((S_j * C - m_ref) + 8))
    l = l * alpha + sum_j decode(code_j)  (the rounded P; exact in any order: multiples of 2^-9 < 2^15;
                                          on the VALU, or by an MFMA with a 0/1 operand)
    acc = acc * alpha + P.V (MFMA);  out = (acc / max(l, 1)) * v_descale -> bf16
    lse = ((m + log2 l) - 8) ln 2
Masked keys (causal, or past seqlen_k) get S = -inf before the max, so their code is 0.

Schedule: blocks that every row of the tile sees completely run in a loop without masking; the
remaining (diagonal and tail) blocks run the same body with the mask. Fully masked blocks are never
visited. Query tiles are dispatched longest first: by the variant's tile_order, workgroup x = 0 takes
the last tile of its head ("descending"), or the workgroups in dispatch order take the last tile of
every head and batch first ("global_descending", see Gen._global_tile). Wait states
come from the simulator's hazard rules over the control flow (`Kernel(sim_hazards=True)`).

Packed batches (the variant's layout "varlen", grid "batch_tiles"): mfma_fp8_varlen turns the workgroup's
batch index into a sequence of the packed batch and rewrites the kernel arguments into that sequence's dense
view; the program above then runs unchanged (a dense build emits exactly what it did without the option).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..abi import AbiLayout
from ..codeobject import LaunchShape, assembly_file
from ..kernel import Kernel, Program
from ..regs import R, RegFile
from ..variant import Variant, VariantError
from .common import KernArgs, buffer_rsrc, f32_hex, s_mad64, s_reciprocals, s_udivmod
from .mfma_fp8_paged import dma_pieces, paged_advance, paged_bases, paged_request
from .mfma_fp8_varlen import LAYOUTS, enter_sequence, kernarg_params, table_descales

ARCH = "gfx950"
ROWS_PER_WAVE = 32  # query rows of one wave (the N dimension of every MFMA)
TILE_N = 64  # keys per block (two 32-key S^T tiles)
WAVES = (1, 2, 4, 8)  # waves per workgroup: tile_m = 32 x waves rows share one K/V stream through LDS
DMA_WAVES = 4  # at most this many waves of a workgroup move K/V into LDS (with 8: the first group)
SHIFT = 8.0
LEAN_MAX_CODE = 126.0
LEAN_B0 = 8.0 * (SHIFT + 7.0)  # 120: the code of 2^SHIFT is 8 * (SHIFT + 7)
# Lean P runs its FMA scaled by 2^-24, so that a conversion to f16 rounds onto f16's subnormal grid
# (spacing 2^-24) and leaves the code rint(S A + B) as the f16's bits (docs/numerics.md, section 2).
LEAN_SCALE = 2.0**-24
# The running max of S before a row has seen a key: below any score (|S| <= 192 * 448^2 < 2^26), so
# no key of the row is ever measured against it, and finite, so m_ref = C M_NONE gives finite
# alpha and B (the row's P, l and acc stay 0 until its first key; its lse is +inf by l = 0).
M_NONE = -(2.0**30)
# Lean P skips its clamp at 126 while every row has |m_ref| below this (the clamp cannot act there;
# _lean_p in the body gives the bound): 2^20 with the exact running max, 2^16 with a stale one, whose
# codes reach 120 + 8 tau and so leave less room for the roundings of C S, m + tau and B.
LEAN_CLAMP_FREE = {False: 2.0**20, True: 2.0**16}
# Largest stale_tau (exclusive): lean codes stay <= 126 (120 + 8 tau + 0.1 < 126.5 below LEAN_CLAMP_FREE)
# and exact P <= 2^(8 + tau) below e4m3's 448 = 2^8.807. The same bound as the ABI header's
# ZYFA_FP8_MAX_STALE_TAU, which the build checks every variant row against.
MAX_STALE_TAU = 0.8
MFMA = "v_mfma_f32_32x32x64_f8f6f4"
ROW_SUM_MFMA = "v_mfma_f32_16x16x128_f8f6f4"  # half the matrix-core time of MFMA; see _row_sum_operand
P_MODES = ("lean", "exact")
# Query-tile orders the kernel implements (the variant's tile_order; see kernels/tools/zyfa_kernel_build.py):
# "descending" = workgroup x = 0 takes the last tile of its (head, batch); "global_descending" = the
# workgroups in dispatch order take the last tile of every (head, batch) first, then the one before it.
TILE_ORDERS = ("descending", "global_descending")


@dataclass(frozen=True)
class Shape:
    """Head dims and the LDS layout they imply."""

    d_qk: int
    d_v: int
    p_mode: str
    waves: int

    @property
    def dma_waves(self) -> int:
        """Waves that issue the K/V LDS-DMA (waves 0 .. dma_waves-1)."""
        return min(self.waves, DMA_WAVES)

    @property
    def tile_m(self) -> int:
        """Query rows per workgroup."""
        return ROWS_PER_WAVE * self.waves

    @property
    def kc(self) -> int:
        """64-wide chunks of d_qk: K-steps of the S MFMA."""
        return self.d_qk // 64

    @property
    def vc(self) -> int:
        """32-wide chunks of d_v: P.V MFMAs per block."""
        return self.d_v // 32

    @property
    def k_bytes(self) -> int:
        """One K block in LDS: 64 rows of d_qk bytes, row-major."""
        return TILE_N * self.d_qk

    @property
    def v_bytes(self) -> int:
        """One V block in LDS: 64 rows of d_v bytes, row-major."""
        return TILE_N * self.d_v

    @property
    def buf(self) -> int:
        """Bytes of one LDS buffer (K then V); two of them."""
        return self.k_bytes + self.v_bytes


@dataclass(frozen=True)
class Options:
    """Schedule switches that leave the numerics alone (the variants use the defaults; the
    ablation in docs/gfx950-fp8-kernel.md turns them off).

    setprio: raise the wave's priority (s_setprio 1) while it issues its MFMAs, so on a SIMD shared
        by two waves the matrix work of one goes first (the timing model's arbiter honours
        s_setprio). Off by default: where a VALU op waits for the matrix core anyway (the
        calibrated model), holding the other wave's softmax back costs more than it orders.
    pipeline: block kb's P.V product is issued in iteration kb+1 right after S of block kb+1, so a
        wave issues its eight MFMAs back to back and then runs one softmax (a P of zeros feeds the
        first, harmless P.V; the last one follows the loops). By default only at d_qk > 128: at
        d=128 the deferral changes nothing per block in the calibrated model and its prologue and
        extra P.V cost more than they give (docs/gfx950-fp8-kernel.md, ablation).
    pingpong: with 8 waves per workgroup (two per SIMD), the second group of four starts one barrier
        late, so on every SIMD one wave issues its MFMAs while the other runs its softmax; each
        iteration has two workgroup barriers (before the MFMAs, and after the row max, when S has
        landed). Only the first group moves K/V, so the second never waits on a DMA. Off: both
        groups in step, same barriers.
    share_k_operand: S^T's second 32-key half reads its K operand into the AGPRs of the first
        once the first half's MFMAs are issued (24 AGPRs fewer at d_qk 192; relies, like the
        deferred P.V, on an MFMA reading srcA when it starts).
    mfma_row_sum: the row sum of the rounded P comes from one more MFMA per block (16x16x128, half
        the matrix time of the others), a 0/1 operand times the same P bytes, accumulated and
        rescaled like O, instead of 32 VALU decodes and adds.
        Exact in the simulator (it rounds the MFMA's exact sum once, and the block sums are exact
        anyway); on hardware it rests on the MFMA's undocumented accumulation, as the sm_90a lean
        kernels' tensor-core row sums do (docs/numerics.md), so exact P keeps the VALU sum.
    """

    setprio: bool = False
    pipeline: bool | None = None  # None: on for lean P at d_qk > 128 only (the modelled ablation's choice)
    mfma_row_sum: bool | None = None  # None: on for lean P
    share_k_operand: bool | None = None  # None: on where the row-sum MFMA would not fit otherwise
    pingpong: bool = True  # with 8 waves: the two groups of 4 run half an iteration apart

    def pipelined(self, p_mode: str, d_qk: int) -> bool:
        """Whether the P.V product is deferred by one block for this p_mode and d_qk."""
        return p_mode == "lean" and d_qk > 128 if self.pipeline is None else self.pipeline

    def row_sum_on_mfma(self, p_mode: str, d_qk: int) -> bool:
        """Whether the row sums come from the matrix core (by default for lean P)."""
        return p_mode == "lean" if self.mfma_row_sum is None else self.mfma_row_sum

    def shares_k_operand(self, p_mode: str, d_qk: int) -> bool:
        """Whether the two 32-key halves of S^T read their K operand into the same AGPRs, one after
        the other. By default where d_qk > 128 and the row sums are on the matrix core: without it
        the row-sum MFMA's 16 VGPRs + 8 AGPRs push a 192/128 wave past 256 registers, halving the
        occupancy (MODELLED at 16K: 2100 against 2690 TFLOP/s, docs/gfx950-fp8-kernel.md)."""
        if self.share_k_operand is None:
            return d_qk > 128 and self.row_sum_on_mfma(p_mode, d_qk)
        return self.share_k_operand


def _check_variant(var: Variant) -> Shape:
    waves = var.threads // 64
    wanted = {"arch": ARCH, "dtype": "e4m3fn", "tile_m": ROWS_PER_WAVE * waves, "tile_n": TILE_N,
              "threads": 64 * waves}  # fmt: skip
    bad = {key: getattr(var, key) for key, want in wanted.items() if getattr(var, key) != want}
    if bad or waves not in WAVES:
        raise VariantError(
            f"mfma_fp8 implements threads 64 x waves (waves in {WAVES}), tile_m 32 x waves, {wanted}; "
            f"variant {var.name!r} asks {bad or {'threads': var.threads}}"
        )
    if var.p_mode not in P_MODES:
        raise VariantError(f"mfma_fp8: p_mode must be one of {P_MODES}, got {var.p_mode!r}")
    if var.layout not in LAYOUTS:
        raise VariantError(f"mfma_fp8: layout must be one of {LAYOUTS}, got {var.layout!r}")
    if var.tile_order not in TILE_ORDERS:
        raise VariantError(f"mfma_fp8: tile_order must be one of {TILE_ORDERS}, got {var.tile_order!r}")
    if not 0.0 <= var.stale_tau < MAX_STALE_TAU:
        raise VariantError(f"mfma_fp8: stale_tau must be >= 0 and < {MAX_STALE_TAU}, got {var.stale_tau!r}")
    if var.d_qk not in (64, 128, 192, 256) or var.d_v not in (64, 128):
        raise VariantError(
            f"mfma_fp8 needs d_qk in 64/128/192/256 and d_v in 64/128 (got {var.d_qk}, {var.d_v})"
        )
    return Shape(var.d_qk, var.d_v, var.p_mode, waves)


class Gen:
    """Emits one kernel: registers by name, phases as methods, in program order."""

    def __init__(self, var: Variant, abi: AbiLayout, opts: Options) -> None:
        self.sh = _check_variant(var)
        self.opts = opts
        self.abi = abi
        self.k = Kernel(var.name, preloaded_sgprs=5, preloaded_vgprs=1, sim_hazards=True)
        self.v = RegFile("v", base=1)  # v0: work-item id
        self.a = RegFile("a")
        self.s = RegFile("s", base=5)  # s[0:1] kernarg pointer, s2..s4 workgroup ids x, y, z
        self.tile_order = var.tile_order
        self.tau = var.stale_tau  # 0: the exact running max
        self.layout = var.layout  # "varlen": each workgroup runs the dense program on its sequence's view
        # The workgroup's query head and batch: the ids y and z, or (global_descending) computed.
        self.head, self.batch = R("s", 3, 1, "workgroup_id_y"), R("s", 4, 1, "workgroup_id_z")
        self.lds = self.k.lds("kv", 2 * self.sh.buf)
        self.out_of_line: list = []  # emitters of rarely taken code, placed after s_endpgm

    # ---- small helpers ---------------------------------------------------------------------------
    def e(self, text: str, comment: str = "") -> None:
        self.k.emit(text, comment)

    def sv(self, name: str, n: int = 1, align: int = 1) -> R:
        return self.s.alloc(name, n, align)

    def vv(self, name: str, n: int = 1, align: int = 1) -> R:
        return self.v.alloc(name, n, align)

    # ---- setup -------------------------------------------------------------------------------------
    def setup(self) -> None:
        k, sh = self.k, self.sh
        self.karg = KernArgs(k, self.abi, self.sv("karg", -(-self.abi.size // 4), 4), "s[0:1]")
        a = self.karg
        self.lse_rows = a.reg("seqlen_q")  # lse's rows per head: seqlen_q, or total_q of a packed batch
        k.comment("a kernel built for other head dims writes nothing (the launcher checks first)")
        self.e(f"s_cmp_eq_u32 {a.reg('d_qk')}, {sh.d_qk}")
        self.e("s_cbranch_scc0 .Lend")
        self.e(f"s_cmp_eq_u32 {a.reg('d_v')}, {sh.d_v}")
        self.e("s_cbranch_scc0 .Lend")
        self._tile_and_blocks()
        self._kv_head()
        if self.layout != "dense":
            table_descales(self)
        self._bases()
        if self.layout != "dense":
            self.s.free(self.lse_rows)
        self._lane_constants()
        self._scale_constants()
        self._load_q()
        self._init_state()

    def _tile_and_blocks(self) -> None:
        a, t = self.karg, self.sv("t", 2)
        sq, sk = a.reg("seqlen_q"), a.reg("seqlen_k")
        self.row0, self.diag = self.sv("row0"), self.sv("diag")
        self.wave, self.roww = self.sv("wave"), self.sv("row0_wave")
        shift = self.sh.tile_m.bit_length() - 1
        self.nblocks, self.nfull, self.kb = self.sv("nblocks"), self.sv("nfull"), self.sv("kb")
        causal_bit = self.abi.flags["ZYFA_FLAG_CAUSAL"].bit_length() - 1
        self.e(f"s_add_u32 {t[0]}, {sq}, {self.sh.tile_m - 1}")
        self.e(f"s_lshr_b32 {t[0]}, {t[0]}, {shift}", f"tiles = ceil(seqlen_q / {self.sh.tile_m})")
        if self.tile_order == "global_descending":
            self._global_tile(t[0])
        else:
            self.k.comment("longest query tiles first: workgroup x = 0 takes the last tile of its head")
            self.e(f"s_sub_u32 {t[0]}, {t[0]}, 1")
            self.e(f"s_sub_u32 {t[0]}, {t[0]}, s2")
        self.e(f"s_lshl_b32 {self.row0}, {t[0]}, {shift}", f"row0 = tile * {self.sh.tile_m}")
        vt = self.vv("wave_v")
        self.e(f"v_lshrrev_b32_e32 {vt}, 6, v0")
        self.e(f"v_readfirstlane_b32 {self.wave}, {vt}", "this wave's index in the workgroup")
        self.v.free(vt)
        self.e(f"s_lshl_b32 {t[0]}, {self.wave}, 5")
        self.e(f"s_add_u32 {self.roww}, {self.row0}, {t[0]}", "the wave's first row")
        if self.layout != "dense":
            enter_sequence(self)
        self.k.comment("row i sees keys j <= i + diag: diag = seqlen_k - seqlen_q (causal) or seqlen_k")
        self.e(f"s_sub_i32 {self.diag}, {sk}, {sq}")
        self.e(f"s_bitcmp1_b32 {a.reg('flags')}, {causal_bit}")
        self.e(f"s_cselect_b32 {self.diag}, {self.diag}, {sk}")
        self.k.comment(
            "blocks = those holding a key the tile's last valid row sees; full = those every row sees"
        )
        self.e(f"s_add_i32 {t[0]}, {self.row0}, {self.sh.tile_m - 1}")
        self.e(f"s_add_i32 {t[1]}, {sq}, -1")
        self.e(f"s_min_i32 {t[0]}, {t[0]}, {t[1]}", "last valid row")
        self.e(f"s_add_i32 {t[0]}, {t[0]}, {self.diag}")
        self.e(f"s_add_i32 {t[1]}, {sk}, -1")
        self.e(f"s_min_i32 {t[0]}, {t[0]}, {t[1]}", "its last visible key")
        self.e(f"s_add_i32 {t[0]}, {t[0]}, {TILE_N}")
        self.e(f"s_ashr_i32 {self.nblocks}, {t[0]}, 6")
        self.e(f"s_max_i32 {self.nblocks}, {self.nblocks}, 0")
        self.e(f"s_add_i32 {t[0]}, {self.row0}, {self.diag}")
        self.e(f"s_min_i32 {t[0]}, {t[0]}, {t[1]}", "the first row's last visible key")
        self.e(f"s_add_i32 {t[0]}, {t[0]}, 1")
        self.e(f"s_ashr_i32 {self.nfull}, {t[0]}, 6")
        self.e(f"s_max_i32 {self.nfull}, {self.nfull}, 0")
        self.e(f"s_min_i32 {self.nfull}, {self.nfull}, {self.nblocks}")
        self.s.free(t)

    def _global_tile(self, tiles: R) -> None:
        """tiles -> this workgroup's query tile; self.head and self.batch from its dispatch position.

        The workgroups in dispatch order (x fastest, then y, z) take the last query tile of every
        (head, batch) pair, then the one before it, and so on: position lin = x + tiles (y + heads_q z)
        computes tile tiles - 1 - lin / pairs of pair lin % pairs = head + heads_q batch, where
        pairs = heads_q batch. All in unsigned 32 bits, as kernels/gfx950/fa_fwd_bf16.hip does and
        zyfa_asmgen.sim.cli.tile_of models it: 2^32 workgroups of 32 or more query rows would need a
        q tensor of at least 2^43 bytes (d_qk >= 64), more than any device holds."""
        a = self.karg
        heads = a.reg("heads_q")
        self.head, self.batch = self.sv("head"), self.sv("batch")
        lin, pairs, quo, pair = self.sv("lin"), self.sv("pairs"), self.sv("quo"), self.sv("pair")
        z_pairs, z_heads, tmp = self.sv("z_pairs"), self.sv("z_heads"), self.sv("div_tmp", 2)
        vp, vh = self.vv("rcp_pairs"), self.vv("rcp_heads")
        self.k.comment("longest query tiles of the whole launch first: the last tile of every head and batch")
        self.e(f"s_mul_i32 {pairs}, {heads}, {a.reg('batch')}", "(head, batch) pairs")
        s_reciprocals(self.k, [(z_pairs, pairs, vp), (z_heads, heads, vh)])
        self.e(f"s_mul_i32 {lin}, {heads}, s4")
        self.e(f"s_add_u32 {lin}, {lin}, s3")
        self.e(f"s_mul_i32 {lin}, {lin}, {tiles}")
        self.e(f"s_add_u32 {lin}, {lin}, s2", "the workgroup's dispatch position")
        s_udivmod(self.k, quo, pair, lin, pairs, z_pairs, tmp)
        self.e(f"s_sub_u32 {tiles}, {tiles}, 1")
        self.e(f"s_sub_u32 {tiles}, {tiles}, {quo}", "tile = tiles - 1 - lin / pairs")
        s_udivmod(self.k, self.batch, self.head, pair, heads, z_heads, tmp)
        self.v.free(vp)
        self.v.free(vh)
        for r in (lin, pairs, quo, pair, z_pairs, z_heads, tmp):
            self.s.free(r)

    def _kv_head(self) -> None:
        """kv_head = floor(head * heads_kv / heads_q), by at most heads_kv subtractions."""
        a = self.karg
        rem = self.sv("gqa_rem")
        self.kvh = self.sv("kvh")
        self.k.comment("GQA / MQA: kv head = floor(head * heads_kv / heads_q)")
        self.e(f"s_mul_i32 {rem}, {self.head}, {a.reg('heads_kv')}")
        self.e(f"s_mov_b32 {self.kvh}, 0")
        self.k.label(".Lgqa")
        self.e(f"s_cmp_lt_u32 {rem}, {a.reg('heads_q')}")
        self.e("s_cbranch_scc1 .Lgqa_done")
        self.e(f"s_sub_u32 {rem}, {rem}, {a.reg('heads_q')}")
        self.e(f"s_add_u32 {self.kvh}, {self.kvh}, 1")
        self.e("s_branch .Lgqa")
        self.k.label(".Lgqa_done")
        self.s.free(rem)

    def _base(self, tensor: str, head: R, elem_shift: int, row: R | None) -> R:
        """pointer + (batch * stride_b + head * stride_h [+ row * stride_s]) << elem_shift (64-bit)."""
        a = self.karg
        base, tmp, st = self.sv(f"{tensor}_base", 2, 2), self.sv("mad_tmp", 3), self.sv("stride", 2, 2)
        self.e(f"s_mov_b64 {base}, {a.pair(tensor)}")
        for field, x in (("batch", self.batch), ("head", head), ("seq", row)):
            if x is None:
                continue
            self.e(f"s_lshl_b64 {st}, {a.pair(f'{tensor}_stride_{field}')}, {elem_shift}")
            s_mad64(self.k, base, x, st, tmp)
        self.s.free(tmp)
        self.s.free(st)
        return base

    def _bases(self) -> None:
        """Buffer resources: Q and out of this tile (end at seqlen_q), K and V of key block 0, lse."""
        a = self.karg
        t = self.sv("nrec")
        self.k.comment("raw buffer resources; each ends where the tensor's valid rows end")
        paged = self.layout == "paged"
        self.rq = self.sv("rsrc_q", 4, 4)
        if not paged:
            self.rk, self.rv = self.sv("rsrc_k", 4, 4), self.sv("rsrc_v", 4, 4)
        self.ro, self.rl = self.sv("rsrc_o", 4, 4), self.sv("rsrc_lse", 4, 4)
        if not paged:
            self.kstep, self.vstep = self.sv("kstep"), self.sv("vstep")
        rows_left = self.sv("rows_left")
        self.e(f"s_sub_i32 {rows_left}, {a.reg('seqlen_q')}, {self.roww}")
        self.e(
            f"s_max_i32 {rows_left}, {rows_left}, 0", "a wave wholly past seqlen_q reads and writes nothing"
        )
        for name, rsrc, head, shift in (("q", self.rq, self.head, 0), ("out", self.ro, self.head, 1)):
            base = self._base(name, head, shift, self.roww)
            self.e(f"s_mul_i32 {t}, {rows_left}, {a.reg(f'{name}_stride_seq')}")
            if shift:
                self.e(f"s_lshl_b32 {t}, {t}, {shift}")
            buffer_rsrc(self.k, rsrc, base, str(t))
            self.s.free(base)
        for name, rsrc, step in () if paged else (("k", self.rk, self.kstep), ("v", self.rv, self.vstep)):
            base = self._base(name, self.kvh, 0, None)
            self.e(f"s_mul_i32 {t}, {a.reg('seqlen_k')}, {a.reg(f'{name}_stride_seq')}")
            buffer_rsrc(self.k, rsrc, base, str(t))
            self.e(
                f"s_lshl_b32 {step}, {a.reg(f'{name}_stride_seq')}, 6", f"{name} bytes per block of 64 keys"
            )
            self.s.free(base)
        if paged:
            paged_bases(self)
        self.k.comment("lse [b, heads_q, seqlen_q] fp32 from row0")
        base = self.sv("lse_base", 2, 2)
        self.e(f"s_mul_i32 {t}, {self.batch}, {a.reg('heads_q')}")
        self.e(f"s_add_u32 {t}, {t}, {self.head}")
        self.e(f"s_mul_i32 {t}, {t}, {self.lse_rows}")
        self.e(f"s_add_u32 {t}, {t}, {self.roww}")
        self.e(f"s_mul_hi_u32 {base[1]}, {t}, 4")
        self.e(f"s_mul_i32 {base[0]}, {t}, 4")
        self.e(f"s_add_u32 {base[0]}, {base[0]}, {a.reg('lse')}")
        self.e(f"s_addc_u32 {base[1]}, {base[1]}, {a.reg('lse', 1)}")
        self.e(f"s_lshl_b32 {t}, {rows_left}, 2")
        buffer_rsrc(self.k, self.rl, base, str(t))
        self.s.free(base)
        self.s.free(t)
        self.s.free(rows_left)
        self.mask_sel = self.sv("mask_sel", 8, 2)  # four lane masks of the causal compare

    # ---- per-lane constants -------------------------------------------------------------------------
    def _lane_constants(self) -> None:
        sh, a = self.sh, self.karg
        self.k.comment("per-lane constants: lane l owns query row l % 32, half g = l / 32")
        col, g, t = self.vv("lane_col"), self.vv("lane_g"), self.vv("tmp_lane", 4)
        self.e(f"v_and_b32_e32 {col}, 31, v0")
        self.e(f"v_bfe_u32 {g}, v0, 5, 1")
        self.q_off = self.vv("q_off")
        self.e(f"v_mul_lo_u32 {self.q_off}, {a.reg('q_stride_seq')}, {col}")
        self.e(f"v_lshl_add_u32 {self.q_off}, {g}, 4, {self.q_off}", "+ 16 g bytes")
        self.o_off = self.vv("o_off")
        self.e(f"v_mul_lo_u32 {self.o_off}, {a.reg('out_stride_seq')}, {col}")
        self.e(f"v_lshlrev_b32_e32 {self.o_off}, 1, {self.o_off}")
        self.e(f"v_lshl_add_u32 {self.o_off}, {g}, 3, {self.o_off}", "+ 4 g bf16")
        self.lse_off = self.vv("lse_off")
        self.e(f"v_lshlrev_b32_e32 {self.lse_off}, 2, {col}")
        self.k_rd = self.vv("k_rd")  # LDS byte of this lane's K row chunk in buffer 0
        self.e(f"v_mul_u32_u24_e32 {self.k_rd}, {sh.d_qk}, {col}")
        self.e(f"v_lshl_add_u32 {self.k_rd}, {g}, 4, {self.k_rd}")
        self.v_rd = self.vv("v_rd")
        self._v_lane_base(self.v_rd, t)
        if self.layout == "paged":  # each lane's piece of a block; the gather finds its page per block
            self.k_dma, self.v_dma = dma_pieces(self, "k", sh.d_qk, t), dma_pieces(self, "v", sh.d_v, t)
        else:
            self.k_dma = self._dma_offsets("k", sh.d_qk, a.reg("k_stride_seq"), t)
            self.v_dma = self._dma_offsets("v", sh.d_v, a.reg("v_stride_seq"), t)
        self.k.comment("causal limit per lane: last visible key of the row, less 4 g (the lane's key offset)")
        self.lim = self.vv("limit")
        self.e(f"v_add_u32_e32 {self.lim}, {self.roww}, {col}")
        self.e(f"v_add_u32_e32 {self.lim}, {self.diag}, {self.lim}")
        sk1 = self.sv("sk1")
        self.e(f"s_add_i32 {sk1}, {a.reg('seqlen_k')}, -1")
        self.e(f"v_min_i32_e32 {self.lim}, {sk1}, {self.lim}")
        self.s.free(sk1)
        self.e(f"v_lshlrev_b32_e32 {t[0]}, 2, {g}")
        self.e(f"v_sub_u32_e32 {self.lim}, {self.lim}, {t[0]}")
        for r in (col, g, t):
            self.v.free(r)

    def _v_lane_base(self, dst: R, t: R) -> None:
        """LDS byte each lane's ds_read_b64_tr_b8 reads for the V^T operand (buffer 0, t = 0, chunk 0).

        Result lane l of a 16-lane group G gets byte l % 8 of source lanes 16G + 2j + (l % 16) / 8,
        j = 0..7 (sim/ops_memory.tr_source). Source lane (G, j, h) reads row key(j, g) at column
        16 (G % 2) + 8 h, so result lane l receives column l % 32 of rows key(0..7, g): exactly the
        keys its P bytes 8t..8t+7 stand for, key = 16 t + 8 (j / 4) + 4 g + j % 4 (t: the offset).
        """
        sh = self.sh
        j, gg = t[0], t[1]
        self.e(f"v_bfe_u32 {j}, v0, 1, 3", "j = (lane / 2) % 8")
        self.e(f"v_bfe_u32 {gg}, v0, 5, 1", "g = (lane / 32) % 2")
        self.e(f"v_and_b32_e32 {dst}, 3, {j}", "j % 4")
        self.e(f"v_lshl_add_u32 {dst}, {gg}, 2, {dst}", "+ 4 g")
        self.e(f"v_lshrrev_b32_e32 {j}, 2, {j}")
        self.e(f"v_lshl_add_u32 {dst}, {j}, 3, {dst}", "+ 8 (j / 4): the row")
        self.e(f"v_mul_u32_u24_e32 {dst}, {sh.d_v}, {dst}")
        self.e(f"v_bfe_u32 {j}, v0, 4, 1", "G % 2")
        self.e(f"v_lshl_add_u32 {dst}, {j}, 4, {dst}", "+ 16 (G % 2)")
        self.e(f"v_and_b32_e32 {j}, 1, v0", "h")
        self.e(f"v_lshl_add_u32 {dst}, {j}, 3, {dst}", "+ 8 h")
        self.e(f"v_add_u32_e32 {dst}, {sh.k_bytes}, {dst}", "V follows K in the buffer")

    def dma_row_col(self, i: int, width: int, t: R) -> tuple[str, str]:
        """Emit the (row, column) registers (t[1], t[2]) of the block byte this lane fills in its i-th
        1 KiB LDS-DMA of a block: LDS byte x = 1024 i' + 16 lane holds row x / width, column x % width
        (row-major, width <= 256). Wave w < dma_waves issues the DMAs i' = dma_waves i + w, so
        x = 1024 dma_waves i + 16 v0."""
        x, row, c = t[0], t[1], t[2]
        self.e(f"v_lshlrev_b32_e32 {x}, 4, v0")
        if i:
            self.e(f"v_add_u32_e32 {x}, {1024 * self.sh.dma_waves * i}, {x}")
        if width & (width - 1) == 0:
            self.e(f"v_lshrrev_b32_e32 {row}, {width.bit_length() - 1}, {x}")
        else:  # width = 64 * 3: row = ((x / 64) * 43691) >> 17, exact for x / 64 < 2^16
            self.e(f"v_lshrrev_b32_e32 {row}, 6, {x}")
            self.e(f"v_mul_u32_u24_e32 {row}, 0xaaab, {row}")
            self.e(f"v_lshrrev_b32_e32 {row}, 17, {row}")
        self.e(f"v_mul_u32_u24_e32 {c}, {width}, {row}")
        self.e(f"v_sub_u32_e32 {c}, {x}, {c}", "column")
        return row, c

    def _dma_offsets(self, name: str, width: int, stride: R, t: R) -> R:
        """Global byte offset each lane fetches in each 1 KiB LDS-DMA of a block (dma_row_col's row and
        column, row * stride + column)."""
        n = TILE_N * width // 1024 // self.sh.dma_waves
        out = self.vv(f"{name}_dma", n)
        for i in range(n):
            row, c = self.dma_row_col(i, width, t)
            self.e(f"v_mul_lo_u32 {row}, {stride}, {row}")
            self.e(f"v_add_u32_e32 {out[i]}, {row}, {c}")
        return out

    def _scale_constants(self) -> None:
        a = self.karg
        self.k.comment("C = ((softmax_scale * q_descale) * k_descale) * log2(e); lean A = 8 C (pairs)")
        self.c2 = self.vv("c2", 2, 2)
        c = self.c2[0]
        self.e(f"v_mov_b32_e32 {c}, {a.reg('softmax_scale')}")
        self.e(f"v_mul_f32_e32 {c}, {a.reg('q_descale')}, {c}")
        self.e(f"v_mul_f32_e32 {c}, {a.reg('k_descale')}, {c}")
        self.e(f"v_mul_f32_e32 {c}, {f32_hex(math.log2(math.e))}, {c}")
        if self.sh.p_mode == "lean":
            self.e(f"v_mul_f32_e32 {self.c2[1]}, {f32_hex(LEAN_SCALE * 8.0)}, {c}", "A' = 2^-24 8 C (exact)")
            self.e(f"v_mov_b32_e32 {c}, {self.c2[1]}")
            self.lean_k = self.vv("lean_k", 4)
            for i, (val, why) in enumerate(
                (
                    (f32_hex(-8.0 * LEAN_SCALE), "-2^-24 8: B' = fma(m_ref, this, next)"),
                    (f32_hex(LEAN_B0 * LEAN_SCALE), "2^-24 120"),
                    ("0x06040200", "v_perm_b32: the low byte of each f16 of two pairs"),
                    (f32_hex(LEAN_CLAMP_FREE[self.tau > 0]), "|m_ref| from which the clamp at 126 can act"),
                )
            ):
                self.e(f"v_mov_b32_e32 {self.lean_k[i]}, {val}", why)
        else:
            self.e(f"v_mov_b32_e32 {self.c2[1]}, {c}")
            self.eight2 = self.vv("eight2", 2, 2)
            self.e(f"v_mov_b32_e32 {self.eight2[0]}, {f32_hex(SHIFT)}")
            self.e(f"v_mov_b32_e32 {self.eight2[1]}, {f32_hex(SHIFT)}")
        self.cs = self.vv("c_scalar")  # C itself (the lean pair holds 8 C)
        self.e(f"v_mov_b32_e32 {self.cs}, {a.reg('softmax_scale')}")
        self.e(f"v_mul_f32_e32 {self.cs}, {a.reg('q_descale')}, {self.cs}")
        self.e(f"v_mul_f32_e32 {self.cs}, {a.reg('k_descale')}, {self.cs}")
        self.e(f"v_mul_f32_e32 {self.cs}, {f32_hex(math.log2(math.e))}, {self.cs}")
        self.ninf = self.vv("neg_inf")
        self.e(f"v_mov_b32_e32 {self.ninf}, {f32_hex(-math.inf)}")

    def _load_q(self) -> None:
        sh = self.sh
        self.q = self.vv("q", 8 * sh.kc, 4)
        self.k.comment(
            "Q^T operand, loaded once: lane (row, g) holds bytes [16g, +16) and [32 + 16g, +16) of each 64"
        )
        for c in range(sh.kc):
            for half in (0, 1):
                dst = self.q.sub(8 * c + 4 * half, 4)
                self.e(
                    f"buffer_load_dwordx4 {dst}, {self.q_off}, {self.rq}, 0 offen offset:{64 * c + 32 * half}"
                )

    def _init_state(self) -> None:
        sh = self.sh
        self.k.comment("running state: max S = M_NONE (no key yet), m = C M_NONE, l = 0, acc = 0")
        # m of the row before an even block lives in m_even, before an odd block in m_odd: the loops
        # are unrolled by two, so each block writes the other register and nothing is copied
        self.ms, self.l = self.vv("max_s"), self.vv("l")
        self.m_even, self.m_odd = self.vv("m_even"), self.vv("m_odd")
        self.e(f"v_mov_b32_e32 {self.ms}, {f32_hex(M_NONE)}")
        self.e(f"v_mul_f32_e32 {self.m_even}, {f32_hex(M_NONE)}, {self.cs}")
        self.e(f"v_mov_b32_e32 {self.l}, 0")
        self.acc = [self.vv(f"acc{i}", 16, 4) for i in range(sh.vc)]
        for acc in self.acc:
            for i in range(16):
                self.e(f"v_mov_b32_e32 {acc[i]}, 0")
        self.sacc = [self.vv(f"s{i}", 16, 4) for i in range(2)]  # S^T of the block, 2 x 32 keys
        self.p = self.vv("p", 8, 4)  # P^T operand: 32 e4m3 bytes
        halves = 1 if self.opts.shares_k_operand(sh.p_mode, sh.d_qk) else 2
        self.kop = [[self.a.alloc(f"k{mb}_{c}", 8, 4) for c in range(sh.kc)] for mb in range(halves)]
        self.vop = [self.a.alloc(f"v{cb}", 8, 4) for cb in range(sh.vc)]
        self.rel = self.vv("rel")
        self.alpha2 = self.vv("alpha2", 2, 2)
        self.b2 = self.vv("b2", 2, 2)  # lean: B' = 2^-24 (120 - 8 m_ref); exact: -m_ref (low half)
        for r in (self.alpha2[1], self.b2[1]):  # read by the packed ops, which use only the low half
            self.e(f"v_mov_b32_e32 {r}, 0")
        self.t4 = self.vv("t4", 4, 2)
        self.bsum = self.vv("bsum", 2, 2)
        if self.opts.row_sum_on_mfma(sh.p_mode, sh.d_qk):
            self._row_sum_operand()
        if self.tau > 0:
            self.thr = self.vv("m_plus_tau")  # m + tau, or C M_NONE before the row's first key
            self.e(f"v_mov_b32_e32 {self.thr}, {self.m_even}", "stale max: any key's C S exceeds C M_NONE")

    def _row_sum_operand(self) -> None:
        """The A operand of the row-sum MFMA (16x16x128: B = the P^T operand as it is).

        As its B operand, P's bytes of lane l are column n = l % 16 for the keys of lane group
        G = l / 16, i.e. query row n + 16 (G % 2). D row i (lanes 16 (i / 4) + n) must sum the two
        groups of its own row: A[i][k] = 1 (e4m3 0x38) where G(k) % 2 = (i / 4) % 2, else 0. A row
        m = l % 16 holds the keys of group l / 16, so lane l is all ones where bit 4 of l equals
        bit 2, else zeros, and every lane's D registers hold the sum of its own row's P.
        """
        self.k.comment("row sums on the matrix core (16x16x128): A = ones where lane bit 4 = lane bit 2")
        self.lacc = self.vv("lacc", 4, 4)
        for i in range(4):
            self.e(f"v_mov_b32_e32 {self.lacc[i]}, 0")
        self.ones = self.a.alloc("ones", 8, 4)
        t = self.bsum
        self.e(f"v_bfe_u32 {t[0]}, v0, 4, 1")
        self.e(f"v_bfe_u32 {t[1]}, v0, 2, 1")
        self.e(f"v_cmp_eq_u32_e32 vcc, {t[0]}, {t[1]}")
        self.e(f"v_mov_b32_e32 {t[1]}, 0x38383838")
        self.e(f"v_cndmask_b32_e32 {t[0]}, 0, {t[1]}, vcc")
        for i in range(8):
            self.e(f"v_accvgpr_write_b32 {self.ones[i]}, {t[0]}")

    # ---- K/V streaming -----------------------------------------------------------------------------
    def request_block(self, lds_off: str) -> None:
        """LDS-DMA of the block the K/V resources point at into the buffer at SGPR `lds_off`; each
        DMA wave moves its share (1 KiB DMAs i = dma_waves j + w). A paged build gathers from the cache."""
        if self.layout == "paged":
            paged_request(self, lds_off)
            return
        base = self.sv("dma_base")
        skip = f".Lno_dma_{self._uid()}"
        if self.sh.waves > self.sh.dma_waves:
            self.e(f"s_cmp_lt_u32 {self.wave}, {self.sh.dma_waves}")
            self.e(f"s_cbranch_scc0 {skip}", "the second wave group moves no K/V")
        self.e(f"s_lshl_b32 {base}, {self.wave}, 10")
        self.e(f"s_add_u32 {base}, {base}, {lds_off}", "buffer + 1 KiB x wave")
        step = 1024 * self.sh.dma_waves
        for name, dma, rsrc, first in (
            ("K", self.k_dma, self.rk, 0),
            ("V", self.v_dma, self.rv, self.sh.k_bytes),
        ):
            for i in range(dma.count):
                self.e(f"s_add_u32 m0, {base}, {first + step * i}", f"{name} rows -> LDS")
                self.e(f"buffer_load_dwordx4 {dma[i]}, {rsrc}, 0 offen lds")
        if self.sh.waves > self.sh.dma_waves:
            self.k.label(skip)
        self.s.free(base)

    def _uid(self) -> int:
        self._labels_made = getattr(self, "_labels_made", 0) + 1
        return self._labels_made

    def advance_kv(self) -> None:
        """Point the K/V resources at the next block: base += 64 rows, num_records -= 64 rows."""
        if self.layout == "paged":
            paged_advance(self)
            return
        for rsrc, step in ((self.rk, self.kstep), (self.rv, self.vstep)):
            self.e(f"s_add_u32 {rsrc[0]}, {rsrc[0]}, {step}")
            self.e(f"s_addc_u32 {rsrc[1]}, {rsrc[1]}, 0")
            self.e(f"s_sub_u32 {rsrc[2]}, {rsrc[2]}, {step}")


def _build(var: Variant, abi: AbiLayout, opts: Options | None = None) -> tuple[Gen, Program]:
    from .mfma_fp8_body import emit_kernel

    g = Gen(var, abi, opts or Options())
    emit_kernel(g)
    return g, g.k.finalize()


def build_program(var: Variant, abi: AbiLayout, opts: Options | None = None) -> Program:
    """Emit and finalize the kernel body for `var` (checked to be what this generator implements)."""
    return _build(var, abi, opts)[1]


_LAYOUT_NOTE = {  # appended to the header's kernarg line
    "varlen": "\nPacked batch (layout varlen): zyfa_varlen_args follows; workgroup z runs sequence z's view.",
    "paged": "\nPaged K/V (layout paged): zyfa_varlen_args follows; workgroup z runs sequence z's view,"
    "\nK and V blocks gathered through its page-table row (global_load_lds_dwordx4).",
}


def _header(var: Variant, prog: Program, sh: Shape) -> str:
    stale = f", stale_tau {var.stale_tau:g}" if var.stale_tau > 0 else ""
    return f"""{var.name}: generated by zyfa_asmgen.generators.mfma_fp8 -- do not edit.
FP8 (e4m3fn q/k/v, bf16 out) causal attention, ZYFA numerics, p_mode {sh.p_mode}, SHIFT {SHIFT:g}{stale}.
arch {ARCH}; tile_m {sh.tile_m} query rows x tile_n {TILE_N} keys per block; {sh.waves} wave64 per workgroup
(32 rows each, one shared K/V stream);
{MFMA} for S^T = K Q^T ({2 * sh.kc} per block) and O^T += V^T P^T ({sh.vc} per block).
LDS {prog.lds_bytes} bytes (2 buffers of K {sh.k_bytes} + V {sh.v_bytes});
VGPRs {prog.vgprs}, AGPRs {prog.agprs}, SGPRs {prog.sgprs}.
Kernarg: zyfa_fwd_args by value, offsets parsed from kernels/abi/zyfa_abi.h.{_LAYOUT_NOTE.get(var.layout, "")}
"""


def generate_with_operands(
    var: Variant, abi: AbiLayout, opts: Options | None = None
) -> tuple[str, dict[str, str]]:
    """The assembly file and where its MFMA operands live ({"p": "v[..]", "q": ..., "acc0": ...}),
    for tests that read them in the simulator."""
    g, prog = _build(var, abi, opts)
    params = kernarg_params(abi, var.layout)
    shape = LaunchShape(threads=64 * g.sh.waves, kernarg_bytes=sum(params[-1][1:]), params=params)
    regs = {"p": str(g.p), "q": str(g.q), **{f"acc{i}": str(r) for i, r in enumerate(g.acc)}}
    return assembly_file(prog, shape, _header(var, prog, g.sh)), regs


def generate(var: Variant, abi: AbiLayout) -> str:
    """The complete gfx950 assembly file for `var`."""
    return generate_with_operands(var, abi)[0]
