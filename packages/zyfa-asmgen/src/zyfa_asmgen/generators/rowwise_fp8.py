"""rowwise_fp8: the first generated gfx950 kernel, FP8 (e4m3fn) causal attention, one row per lane.

Arch gfx950 (MI355X). Tile: 64 query rows per workgroup = one wave64, each lane owns one query row
(tile_m = 64), keys are visited one at a time (tile_n = 1, the P-scaling block of the ZYFA FP8
numerics). Waves per workgroup: 1. LDS: 0 bytes. Registers: q row as packed fp8 (d_qk/4 VGPRs),
the output accumulator in fp32 (d_v VGPRs) and ~28 fixed VGPRs; the K or V row of the current key
in SGPRs (max(d_qk, d_v)/4), loaded with s_load because every lane reads the same key. The exact
counts are computed from the emitted program and printed in the file's header.

Numerics (contract, p_mode "exact", SHIFT = 8), per lane and key j <= row + seqlen_k - seqlen_q:
    S = sum_d q8[d] * k8[d]            fp32 FMA chain of exact products, d ascending
    t = S * C                          C = ((softmax_scale * q_descale) * k_descale) * log2(e)
    m_new = max(m, t); alpha = exp2(m - m_new)   (= 0 while m = -inf: exp2(-inf) = 0)
    p = e4m3fn_rne(min(exp2((t - m_new) + 8), 448))   and its f32 value pr
    l = l * alpha + pr;  acc = acc * alpha + pr * v8 (FMA, exact product);  m = m_new
    out = (acc / l) * v_descale -> bf16 RNE (0 for rows that saw no key);
    lse = ((m + log2 l) - 8) * ln 2 (+inf for rows that saw no key), when flags has ZYFA_FLAG_LSE.
Keys a row does not see are skipped with EXEC (they would change nothing: t = -inf gives alpha = 1
and p = 0). Rows past seqlen_q are off in EXEC for the whole kernel.

Every kernarg read uses the offsets parsed from kernels/abi/zyfa_abi.h (`abi.AbiLayout`).
Requirements checked by the launcher: d_qk, d_v as built (the kernel writes nothing otherwise);
q rows 16-byte aligned (global_load_dwordx4), k/v rows 4-byte aligned (s_load), out rows 16-byte
aligned; heads_q % heads_kv == 0.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from ..abi import AbiLayout
from ..codeobject import LaunchShape, assembly_file
from ..kernel import Kernel, Program
from ..variant import Variant, VariantError

ARCH = "gfx950"
TILE_M = 64  # query rows per workgroup: one per lane of the wave
TILE_N = 1  # keys per softmax block
THREADS = 64  # one wave64
SHIFT = 8.0  # FP8 P shift: the row max lands at 2^8 = 256 <= 448
E4M3_MAX = 448.0


def f32_hex(x: float) -> str:
    """The IEEE single bit pattern of x as an assembler literal."""
    return f"0x{struct.unpack('<I', struct.pack('<f', x))[0]:08x}"


def v(i: int) -> str:
    """VGPR i."""
    return f"v{i}"


def vr(i: int, n: int) -> str:
    """VGPR range of n registers from i."""
    return f"v[{i}:{i + n - 1}]"


def s(i: int) -> str:
    """SGPR i."""
    return f"s{i}"


def sr(i: int, n: int) -> str:
    """SGPR range of n registers from i."""
    return f"s[{i}:{i + n - 1}]"


# ---- SGPRs. s0..s4 are set by the hardware (descriptor: kernarg pointer, workgroup ids x, y, z).
S_KARG = 0  # s[0:1] kernarg segment pointer
S_TILE = 2  # workgroup id x: which 64-row query tile
S_HEAD = 3  # workgroup id y: query head
S_BATCH = 4  # workgroup id z: batch index
S_KROW = 6  # s[6:7] byte address of the K row of the current key (advances by k_stride_seq)
S_VROW = 8  # s[8:9] byte address of the V row of the current key
S_KSTEP = 10  # s[10:11] k_stride_seq in bytes (fp8: 1 byte per element)
S_VSTEP = 12  # s[12:13] v_stride_seq in bytes
S_KEY = 14  # key index of the loop
S_KEYS = 15  # keys any row of this tile sees: the loop runs key = 0 .. S_KEYS-1
S_ROWS_EXEC = 16  # s[16:17] EXEC of the tile's valid rows, restored after each key
S_FLAGS = 18  # flags (ZYFA_FLAG_*), kept for the epilogue
S_VDESCALE = 19  # v_descale, kept for the epilogue
S_SAVE = 20  # s[20:21] EXEC saved by s_and_saveexec in the key loop
S_KVHEAD = 21  # kv head (setup only; S_SAVE is first written in the loop)
S_DIAG = 22  # row r sees keys < r + S_DIAG (causal: seqlen_k - seqlen_q + 1), setup only
S_ROW0 = 23  # first query row of the tile, setup only
# s[24..]: setup-time kernarg copies, then (in the loop) the row buffer holding the K row, then the V row.
S_PTRS = 24  # s[24:31] q, k, v, out pointers
S_LSEPTR = 32  # s[32:33] lse pointer
S_INTS = 36  # s[36:43] batch .. flags
S_FLOATS = 44  # s[44:47] softmax_scale, q/k/v descales
S_STRIDES = 48  # s[48:53] the three strides of one tensor
S_TMP = 54  # s[54:55] setup scratch
S_MAD = 56  # s[56:58] scratch of the 64-bit multiply-add
S_BASE = 60  # s[60:61] a tensor's scalar base address before the per-row part
S_ROWBUF = 24  # s[24 : 24 + max(d_qk, d_v)/4] K row, then V row of the current key

# ---- VGPRs.
V_LANE = 0  # workitem id (hardware): row within the tile
V_ROW = 1  # query row
V_LIMIT = 2  # this row sees keys [0, limit)
V_M = 3  # running max of t (base-2 units)
V_L = 4  # running sum of the e4m3-rounded p
V_C = 5  # C, the same in every lane
V_OUT = 6  # v[6:7] byte address of this row of out
V_LSE = 8  # v[8:9] byte address of this row's lse
V_ADDR = 10  # v[10:11] scratch address / 64-bit products
V_S = 12  # score accumulator S
V_T = 13  # t = S * C
V_MNEW = 14  # m_new
V_ALPHA = 15  # alpha
V_X = 16  # exponent argument / epilogue: max(l, 1)
V_P = 17  # p before rounding / epilogue: 1/l
V_P8 = 18  # p as an e4m3 byte / epilogue scratch
V_PR = 19  # rounded p as f32
V_CVT = 20  # v[20:27] fp8 -> f32 conversions (4 of q + 4 of k, or 4 of v) / epilogue scratch
V_Q = 28  # v[28 : 28 + d_qk/4] this row of q, packed e4m3 bytes


@dataclass(frozen=True)
class Layout:
    """Registers whose place depends on the head dims."""

    d_qk: int
    d_v: int

    @property
    def q_dwords(self) -> int:
        """Packed fp8 q row: 4 elements per VGPR."""
        return self.d_qk // 4

    @property
    def v_acc(self) -> int:
        """First accumulator VGPR (4-aligned after q)."""
        return -(-(V_Q + self.q_dwords) // 4) * 4

    @property
    def rowbuf_dwords(self) -> int:
        """SGPRs of the row buffer (the longer of a K row and a V row)."""
        return max(self.d_qk, self.d_v) // 4


class KernArgs:
    """Which SGPR holds which kernarg field after `load`: offsets come from the parsed ABI."""

    def __init__(self, abi: AbiLayout) -> None:
        self.abi = abi
        self._where: dict[str, int] = {}

    def load(self, k: Kernel, first: str, count: int, dst: int) -> None:
        """s_load `count` consecutive fields from `first` into SGPRs from `dst`."""
        offset, nbytes = self.abi.span(first, count)
        s_load_bytes(k, dst, S_KARG, offset, nbytes, f"kernarg {first}..(+{count})")
        names = [f.name for f in self.abi.fields]
        for f in self.abi.fields[names.index(first) : names.index(first) + count]:
            self._where[f.name] = dst + (f.offset - offset) // 4

    def reg(self, name: str) -> int:
        """SGPR index of a loaded 32-bit field (or of the low half of a 64-bit one)."""
        if name not in self._where:
            raise KeyError(f"kernarg field {name!r} was not loaded")
        return self._where[name]


def s_load_bytes(k: Kernel, dst: int, base: int, offset: int, nbytes: int, what: str) -> None:
    """Scalar-load nbytes (multiple of 4) from s[base:base+1] + offset into s[dst..], widest first."""
    if nbytes % 4:
        raise VariantError(f"{what}: {nbytes} bytes is not a whole number of dwords")
    dwords = nbytes // 4
    done = 0
    while done < dwords:
        left = dwords - done
        n = next(w for w in (16, 8, 4, 2, 1) if w <= left and (dst + done) % min(w, 4) == 0)
        suffix = "" if n == 1 else f"x{n}"
        dreg = s(dst + done) if n == 1 else sr(dst + done, n)
        k.emit(f"s_load_dword{suffix} {dreg}, {sr(base, 2)}, 0x{offset + 4 * done:x}", what)
        done += n


def _check_variant(var: Variant) -> None:
    wanted = {"arch": ARCH, "dtype": "e4m3fn", "p_mode": "exact", "tile_m": TILE_M, "tile_n": TILE_N,
              "threads": THREADS}  # fmt: skip
    bad = {key: getattr(var, key) for key, want in wanted.items() if getattr(var, key) != want}
    if bad:
        raise VariantError(f"rowwise_fp8 implements {wanted}; variant {var.name!r} asks {bad}")
    if var.d_qk % 4 or var.d_v % 8 or not 0 < var.d_qk <= 512 or not 0 < var.d_v <= 512:
        raise VariantError(f"rowwise_fp8 needs d_qk % 4 == 0 and d_v % 8 == 0 (got {var.d_qk}, {var.d_v})")


def _load_kernargs(k: Kernel, abi: AbiLayout) -> KernArgs:
    a = KernArgs(abi)
    k.comment("kernel arguments (offsets from kernels/abi/zyfa_abi.h)")
    a.load(k, "q", 4, S_PTRS)
    a.load(k, "lse", 1, S_LSEPTR)
    a.load(k, "batch", 8, S_INTS)
    a.load(k, "softmax_scale", 4, S_FLOATS)
    k.emit("s_waitcnt lgkmcnt(0)")
    return a


def _shape_check(k: Kernel, a: KernArgs, lay: Layout) -> None:
    k.comment("a kernel built for other head dims writes nothing (the launcher checks first)")
    k.emit(f"s_cmp_eq_u32 {s(a.reg('d_qk'))}, {lay.d_qk}")
    k.emit("s_cbranch_scc0 .Lend")
    k.emit(f"s_cmp_eq_u32 {s(a.reg('d_v'))}, {lay.d_v}")
    k.emit("s_cbranch_scc0 .Lend")
    k.emit(f"s_mov_b32 {s(S_FLAGS)}, {s(a.reg('flags'))}")
    k.emit(f"s_mov_b32 {s(S_VDESCALE)}, {s(a.reg('v_descale'))}")


def _kv_head(k: Kernel, a: KernArgs) -> None:
    """kv_head = head / (heads_q / heads_kv) = floor(head * heads_kv / heads_q), by subtraction."""
    rem, hq, hkv = S_TMP, a.reg("heads_q"), a.reg("heads_kv")
    k.comment("GQA: kv head = floor(head * heads_kv / heads_q); at most heads_kv subtractions")
    k.emit(f"s_mul_i32 {s(rem)}, {s(S_HEAD)}, {s(hkv)}")
    k.emit(f"s_mov_b32 {s(S_KVHEAD)}, 0")
    k.label(".Lgqa")
    k.emit(f"s_cmp_lt_u32 {s(rem)}, {s(hq)}")
    k.emit("s_cbranch_scc1 .Lgqa_done")
    k.emit(f"s_sub_u32 {s(rem)}, {s(rem)}, {s(hq)}")
    k.emit(f"s_add_u32 {s(S_KVHEAD)}, {s(S_KVHEAD)}, 1")
    k.emit("s_branch .Lgqa")
    k.label(".Lgqa_done")


def _rows_and_limits(k: Kernel, a: KernArgs, abi: AbiLayout) -> None:
    sq, sk = s(a.reg("seqlen_q")), s(a.reg("seqlen_k"))
    t0, t1 = s(S_TMP), s(S_TMP + 1)
    causal_bit = abi.flags["ZYFA_FLAG_CAUSAL"].bit_length() - 1
    k.comment("row = tile * 64 + lane; rows past seqlen_q stay off in EXEC")
    k.emit(f"s_lshl_b32 {s(S_ROW0)}, {s(S_TILE)}, {TILE_M.bit_length() - 1}")
    k.emit(f"v_add_u32_e32 {v(V_ROW)}, {s(S_ROW0)}, {v(V_LANE)}")
    k.emit(f"v_cmp_gt_i32_e32 vcc, {sq}, {v(V_ROW)}")
    k.emit("s_and_b64 exec, exec, vcc")
    k.comment("row sees keys < row + diag (bottom-right causal: diag = seqlen_k - seqlen_q + 1),")
    k.comment("capped at seqlen_k; without the causal flag diag = seqlen_k, so the cap gives seqlen_k")
    k.emit(f"s_sub_i32 {s(S_DIAG)}, {sk}, {sq}")
    k.emit(f"s_add_i32 {s(S_DIAG)}, {s(S_DIAG)}, 1")
    k.emit(f"s_bitcmp1_b32 {s(a.reg('flags'))}, {causal_bit}")
    k.emit(f"s_cselect_b32 {s(S_DIAG)}, {s(S_DIAG)}, {sk}")
    k.emit(f"v_add_u32_e32 {v(V_LIMIT)}, {s(S_DIAG)}, {v(V_ROW)}")
    k.emit(f"v_min_i32_e32 {v(V_LIMIT)}, {sk}, {v(V_LIMIT)}")
    k.comment("keys the tile's last valid row sees: the loop bound (<= 0: no key at all)")
    k.emit(f"s_add_i32 {t0}, {s(S_ROW0)}, {TILE_M - 1}")
    k.emit(f"s_add_i32 {t1}, {sq}, -1")
    k.emit(f"s_min_i32 {t0}, {t0}, {t1}")
    k.emit(f"s_add_i32 {t0}, {t0}, {s(S_DIAG)}")
    k.emit(f"s_min_i32 {s(S_KEYS)}, {t0}, {sk}")


def _scale_constant(k: Kernel, a: KernArgs) -> None:
    k.comment("C = ((softmax_scale * q_descale) * k_descale) * log2(e), fp32, left to right")
    k.emit(f"v_mov_b32_e32 {v(V_C)}, {s(a.reg('softmax_scale'))}")
    k.emit(f"v_mul_f32_e32 {v(V_C)}, {s(a.reg('q_descale'))}, {v(V_C)}")
    k.emit(f"v_mul_f32_e32 {v(V_C)}, {s(a.reg('k_descale'))}, {v(V_C)}")
    k.emit(f"v_mul_f32_e32 {v(V_C)}, {f32_hex(math.log2(math.e))}, {v(V_C)}")


def _s_mad64(k: Kernel, acc: int, x: int, stride: int) -> None:
    """s[acc:acc+1] += s[x] (unsigned 32) * s[stride:stride+1] (64-bit), modulo 2^64."""
    lo, hi, cross = S_MAD, S_MAD + 1, S_MAD + 2
    k.emit(f"s_mul_i32 {s(lo)}, {s(x)}, {s(stride)}")
    k.emit(f"s_mul_hi_u32 {s(hi)}, {s(x)}, {s(stride)}")
    k.emit(f"s_mul_i32 {s(cross)}, {s(x)}, {s(stride + 1)}")
    k.emit(f"s_add_u32 {s(hi)}, {s(hi)}, {s(cross)}")
    k.emit(f"s_add_u32 {s(acc)}, {s(acc)}, {s(lo)}")
    k.emit(f"s_addc_u32 {s(acc + 1)}, {s(acc + 1)}, {s(hi)}")


def _v_row_address(k: Kernel, dst: int, base: int, stride: int) -> None:
    """v[dst:dst+1] = s[base:base+1] + row * s[stride:stride+1] (row >= 0, 64-bit)."""
    k.emit(f"v_mov_b32_e32 {v(dst)}, {s(base)}")
    k.emit(f"v_mov_b32_e32 {v(dst + 1)}, {s(base + 1)}")
    k.emit(f"v_mad_u64_u32 {vr(dst, 2)}, vcc, {s(stride)}, {v(V_ROW)}, {vr(dst, 2)}")
    k.emit(f"v_mul_lo_u32 {v(V_S)}, {s(stride + 1)}, {v(V_ROW)}")
    k.emit(f"v_add_u32_e32 {v(dst + 1)}, {v(dst + 1)}, {v(V_S)}")


def _tensor_base(k: Kernel, a: KernArgs, tensor: str, ptr: str, head: int, elem_shift: int, dst: int) -> None:
    """s[dst:dst+1] = pointer + (batch * stride_batch + head * stride_head) << elem_shift; strides
    of `tensor` stay in S_STRIDES (in bytes) for the caller."""
    a.load(k, f"{tensor}_stride_batch", 3, S_STRIDES)
    k.emit("s_waitcnt lgkmcnt(0)")
    if elem_shift:
        for i in range(3):
            reg = sr(S_STRIDES + 2 * i, 2)
            k.emit(f"s_lshl_b64 {reg}, {reg}, {elem_shift}", f"{tensor} strides in bytes")
    p = a.reg(ptr)
    k.emit(f"s_mov_b64 {sr(dst, 2)}, {sr(p, 2)}")
    _s_mad64(k, dst, S_BATCH, S_STRIDES)
    _s_mad64(k, dst, head, S_STRIDES + 4)


def _addresses(k: Kernel, a: KernArgs, abi: AbiLayout, lay: Layout) -> None:
    base = S_BASE
    k.comment("q row (fp8): q + b*sb + head*sh + row*ss; load it packed, 16 bytes per VGPR quad")
    _tensor_base(k, a, "q", "q", S_HEAD, 0, base)
    _v_row_address(k, V_ADDR, base, S_STRIDES + 2)
    for i in range(lay.q_dwords // 4):
        k.emit(f"global_load_dwordx4 {vr(V_Q + 4 * i, 4)}, {vr(V_ADDR, 2)}, off offset:{16 * i}")
    for i in range(lay.q_dwords // 4 * 4, lay.q_dwords):
        k.emit(f"global_load_dword {v(V_Q + i)}, {vr(V_ADDR, 2)}, off offset:{4 * i}")
    k.comment("k and v rows of key 0 of this kv head; each key adds the seq stride")
    _tensor_base(k, a, "k", "k", S_KVHEAD, 0, S_KROW)
    k.emit(f"s_mov_b64 {sr(S_KSTEP, 2)}, {sr(S_STRIDES + 2, 2)}")
    _tensor_base(k, a, "v", "v", S_KVHEAD, 0, S_VROW)
    k.emit(f"s_mov_b64 {sr(S_VSTEP, 2)}, {sr(S_STRIDES + 2, 2)}")
    k.comment("out row (bf16, 2 bytes per element)")
    _tensor_base(k, a, "out", "out", S_HEAD, 1, base)
    _v_row_address(k, V_OUT, base, S_STRIDES + 2)
    k.comment("lse [b, heads_q, seqlen_q] fp32: lse + 4 * ((b * heads_q + head) * seqlen_q + row)")
    idx, sq = S_TMP, a.reg("seqlen_q")
    k.emit(f"s_mul_i32 {s(idx)}, {s(S_BATCH)}, {s(a.reg('heads_q'))}")
    k.emit(f"s_add_u32 {s(idx)}, {s(idx)}, {s(S_HEAD)}")
    k.emit(f"s_mov_b64 {sr(base, 2)}, {sr(a.reg('lse'), 2)}")
    k.emit(f"s_lshl_b32 {s(S_STRIDES)}, {s(sq)}, 2", "seqlen_q * 4 bytes, as a 64-bit stride")
    k.emit(f"s_lshr_b32 {s(S_STRIDES + 1)}, {s(sq)}, 30")
    _s_mad64(k, base, idx, S_STRIDES)
    k.emit(f"v_mov_b32_e32 {v(V_LSE)}, {s(base)}")
    k.emit(f"v_mov_b32_e32 {v(V_LSE + 1)}, {s(base + 1)}")
    k.emit(f"v_mad_u64_u32 {vr(V_LSE, 2)}, vcc, 4, {v(V_ROW)}, {vr(V_LSE, 2)}")


def _init_state(k: Kernel, lay: Layout) -> None:
    k.comment("m = -inf, l = 0, acc = 0")
    k.emit(f"v_mov_b32_e32 {v(V_M)}, {f32_hex(-math.inf)}")
    k.emit(f"v_mov_b32_e32 {v(V_L)}, 0")
    for i in range(lay.d_v):
        k.emit(f"v_mov_b32_e32 {v(lay.v_acc + i)}, 0")
    k.emit("s_waitcnt vmcnt(0)", "q row loaded")


def _fp8_to_f32(k: Kernel, dst: int, src: str) -> None:
    """The four e4m3 bytes of a dword (VGPR or SGPR) to four f32 VGPRs dst..dst+3, byte b -> dst+b."""
    k.emit(f"v_cvt_f32_fp8_e32 {v(dst)}, {src}")
    for b in (1, 2, 3):
        k.emit(f"v_cvt_f32_fp8_sdwa {v(dst + b)}, {src} src0_sel:BYTE_{b}")


def _score(k: Kernel, lay: Layout) -> None:
    """V_S = q . k over d ascending: one FMA chain of exact products."""
    k.emit(f"v_mov_b32_e32 {v(V_S)}, 0")
    for w in range(lay.q_dwords):
        _fp8_to_f32(k, V_CVT, v(V_Q + w))
        _fp8_to_f32(k, V_CVT + 4, s(S_ROWBUF + w))
        for b in range(4):
            k.emit(f"v_fmac_f32_e32 {v(V_S)}, {v(V_CVT + b)}, {v(V_CVT + 4 + b)}")


def _softmax_step(k: Kernel) -> None:
    k.emit(f"v_mul_f32_e32 {v(V_T)}, {v(V_S)}, {v(V_C)}", "t = S * C")
    k.emit(f"v_max_f32_e32 {v(V_MNEW)}, {v(V_M)}, {v(V_T)}", "m_new")
    k.emit(f"v_sub_f32_e32 {v(V_X)}, {v(V_M)}, {v(V_MNEW)}", "m - m_new (-inf while m = -inf)")
    k.emit(f"v_exp_f32_e32 {v(V_ALPHA)}, {v(V_X)}", "alpha = exp2(m - m_new); exp2(-inf) = 0")
    k.emit(f"v_sub_f32_e32 {v(V_X)}, {v(V_T)}, {v(V_MNEW)}", "t - m_new")
    k.emit(f"v_add_f32_e32 {v(V_X)}, {f32_hex(SHIFT)}, {v(V_X)}", "+ SHIFT")
    k.emit(f"v_exp_f32_e32 {v(V_P)}, {v(V_X)}", "p = exp2(t - m_new + 8) <= 256")
    k.emit(f"v_min_f32_e32 {v(V_P)}, {f32_hex(E4M3_MAX)}, {v(V_P)}", "saturate at the e4m3fn max")
    k.emit(f"v_cvt_pk_fp8_f32 {v(V_P8)}, {v(V_P)}, {v(V_P)}", "e4m3fn, round to nearest even")
    k.emit(f"v_cvt_f32_fp8_e32 {v(V_PR)}, {v(V_P8)}", "the rounded p as f32")
    k.emit(f"v_mul_f32_e32 {v(V_L)}, {v(V_L)}, {v(V_ALPHA)}", "l *= alpha")
    k.emit(f"v_add_f32_e32 {v(V_L)}, {v(V_L)}, {v(V_PR)}", "l += rounded p")
    k.emit(f"v_mov_b32_e32 {v(V_M)}, {v(V_MNEW)}", "m = m_new")


def _accumulate(k: Kernel, lay: Layout) -> None:
    """acc[d] = acc[d] * alpha + pr * v8[d] for the V row in the row buffer."""
    for w in range(lay.d_v // 4):
        _fp8_to_f32(k, V_CVT, s(S_ROWBUF + w))
        for b in range(4):
            acc = v(lay.v_acc + 4 * w + b)
            k.emit(f"v_mul_f32_e32 {acc}, {acc}, {v(V_ALPHA)}")
            k.emit(f"v_fmac_f32_e32 {acc}, {v(V_PR)}, {v(V_CVT + b)}")


def _key_loop(k: Kernel, lay: Layout) -> None:
    k.comment("---- key loop: key = 0 .. keys-1; EXEC = rows that see the key")
    k.emit(f"s_mov_b64 {sr(S_ROWS_EXEC, 2)}, exec")
    k.emit(f"s_mov_b32 {s(S_KEY)}, 0")
    k.emit(f"s_cmp_lt_i32 {s(S_KEY)}, {s(S_KEYS)}")
    k.emit("s_cbranch_scc0 .Lkeys_done")
    k.label(".Lkey")
    k.emit(f"v_cmp_lt_i32_e32 vcc, {s(S_KEY)}, {v(V_LIMIT)}", "key < this row's limit")
    k.emit(f"s_and_saveexec_b64 {sr(S_SAVE, 2)}, vcc")
    k.emit("s_cbranch_execz .Lkey_next")
    s_load_bytes(k, S_ROWBUF, S_KROW, 0, lay.d_qk, "K row of this key")
    k.emit("s_waitcnt lgkmcnt(0)")
    _score(k, lay)
    k.comment("the K row has been read: fetch the V row into the same SGPRs while softmax runs")
    s_load_bytes(k, S_ROWBUF, S_VROW, 0, lay.d_v, "V row of this key")
    _softmax_step(k)
    k.emit("s_waitcnt lgkmcnt(0)")
    _accumulate(k, lay)
    k.label(".Lkey_next")
    k.emit(f"s_mov_b64 exec, {sr(S_ROWS_EXEC, 2)}")
    k.emit(f"s_add_u32 {s(S_KEY)}, {s(S_KEY)}, 1")
    k.emit(f"s_add_u32 {s(S_KROW)}, {s(S_KROW)}, {s(S_KSTEP)}")
    k.emit(f"s_addc_u32 {s(S_KROW + 1)}, {s(S_KROW + 1)}, {s(S_KSTEP + 1)}")
    k.emit(f"s_add_u32 {s(S_VROW)}, {s(S_VROW)}, {s(S_VSTEP)}")
    k.emit(f"s_addc_u32 {s(S_VROW + 1)}, {s(S_VROW + 1)}, {s(S_VSTEP + 1)}")
    k.emit(f"s_cmp_lt_i32 {s(S_KEY)}, {s(S_KEYS)}")
    k.emit("s_cbranch_scc1 .Lkey")
    k.label(".Lkeys_done")


def _divide_and_store(k: Kernel, lay: Layout) -> None:
    """out = (acc / l) * v_descale as bf16, packed in place into acc's first d_v/2 VGPRs, stored."""
    ld, r, e = V_X, V_P, V_P8
    k.comment("---- epilogue. A row that saw a key has l >= 256 (its max key adds e4m3(2^8)); a row that")
    k.comment("saw none has l = 0 and acc = 0, so dividing by max(l, 1) writes 0 for it with no select")
    k.emit(f"v_max_f32_e32 {v(ld)}, 1.0, {v(V_L)}")
    k.emit(f"v_rcp_f32_e32 {v(r)}, {v(ld)}", "1/l within 1 ulp")
    k.emit(f"v_fma_f32 {v(e)}, -{v(ld)}, {v(r)}, 1.0", "Newton step on the reciprocal")
    k.emit(f"v_fma_f32 {v(r)}, {v(e)}, {v(r)}, {v(r)}")
    for p in range(lay.d_v // 2):
        for half in (0, 1):
            acc, q, rem = v(lay.v_acc + 2 * p + half), v(V_CVT + 2 * half), v(V_CVT + 2 * half + 1)
            k.emit(f"v_mul_f32_e32 {q}, {acc}, {v(r)}", "q0 = acc * (1/l)")
            k.emit(f"v_fma_f32 {rem}, -{v(ld)}, {q}, {acc}", "acc - l*q0, exact")
            k.emit(f"v_fma_f32 {q}, {rem}, {v(r)}, {q}", "acc / l, rounded")
            k.emit(f"v_mul_f32_e32 {q}, {s(S_VDESCALE)}, {q}", "* v_descale")
        k.emit(f"v_cvt_pk_bf16_f32 {v(lay.v_acc + p)}, {v(V_CVT)}, {v(V_CVT + 2)}", "bf16 RNE pair")
    for i in range(lay.d_v // 8):
        k.emit(f"global_store_dwordx4 {vr(V_OUT, 2)}, {vr(lay.v_acc + 4 * i, 4)}, off offset:{16 * i}")


def _store_lse(k: Kernel, abi: AbiLayout) -> None:
    lse_bit = abi.flags["ZYFA_FLAG_LSE"].bit_length() - 1
    out, inf = V_CVT, V_CVT + 1
    k.comment("lse = ((m + log2 l) - 8) * ln 2, +inf for a row that saw no key")
    k.emit(f"s_bitcmp1_b32 {s(S_FLAGS)}, {lse_bit}")
    k.emit("s_cbranch_scc0 .Lend")
    k.emit(f"v_log_f32_e32 {v(out)}, {v(V_X)}", "log2(max(l, 1))")
    k.emit(f"v_add_f32_e32 {v(out)}, {v(V_M)}, {v(out)}")
    k.emit(f"v_add_f32_e32 {v(out)}, {f32_hex(-SHIFT)}, {v(out)}")
    k.emit(f"v_mul_f32_e32 {v(out)}, {f32_hex(math.log(2.0))}, {v(out)}")
    k.emit(f"v_mov_b32_e32 {v(inf)}, {f32_hex(math.inf)}")
    k.emit(f"v_cmp_eq_f32_e32 vcc, 0, {v(V_L)}")
    k.emit(f"v_cndmask_b32_e32 {v(out)}, {v(out)}, {v(inf)}, vcc")
    k.emit(f"global_store_dword {vr(V_LSE, 2)}, {v(out)}, off")


def build_program(var: Variant, abi: AbiLayout) -> Program:
    """Emit and finalize the kernel body for `var` (checked to be what this generator implements)."""
    _check_variant(var)
    lay = Layout(var.d_qk, var.d_v)
    k = Kernel(var.name, preloaded_sgprs=S_BATCH + 1, preloaded_vgprs=V_LANE + 1)
    a = _load_kernargs(k, abi)
    _shape_check(k, a, lay)
    _kv_head(k, a)
    _rows_and_limits(k, a, abi)
    _scale_constant(k, a)
    _addresses(k, a, abi, lay)
    _init_state(k, lay)
    _key_loop(k, lay)
    _divide_and_store(k, lay)
    _store_lse(k, abi)
    k.label(".Lend")
    k.emit("s_endpgm")
    return k.finalize()


def _header(var: Variant, prog: Program) -> str:
    lay = Layout(var.d_qk, var.d_v)
    return f"""{var.name}: generated by zyfa_asmgen.generators.rowwise_fp8 -- do not edit.
FP8 (e4m3fn q/k/v, bf16 out) causal attention, ZYFA numerics with p_mode exact, SHIFT {SHIFT:g}.
arch {ARCH}; tile_m {TILE_M} (one query row per lane), tile_n {TILE_N}; 1 wave64 per workgroup.
LDS {prog.lds_bytes} bytes; VGPRs {prog.vgprs} (q {lay.q_dwords} packed fp8 from v{V_Q},
acc {var.d_v} fp32 from v{lay.v_acc}), AGPRs {prog.agprs},
SGPRs {prog.sgprs} (K/V row buffer {lay.rowbuf_dwords} from s{S_ROWBUF}).
Kernarg: zyfa_fwd_args by value, offsets parsed from kernels/abi/zyfa_abi.h."""


def generate(var: Variant, abi: AbiLayout) -> str:
    """The complete gfx950 assembly file for `var`."""
    prog = build_program(var, abi)
    shape = LaunchShape(threads=THREADS, kernarg_bytes=abi.size)
    return assembly_file(prog, shape, _header(var, prog))
