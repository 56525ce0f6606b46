"""Vector ALU: packed f32 (VOP3P), conversions to and from bf16 / f16 / fp8 / u8, and accvgpr moves.

Importing this module registers every vector ALU handler: the arithmetic (ops_vector_arith.py) and the
compares and lane access (ops_vector_lanes.py) are imported here for that.
"""

from __future__ import annotations

import numpy as np

from . import ops_vector_lanes  # noqa: F401  (registers its handlers)
from .asm import Instruction
from .core import (
    LANES,
    Ctx,
    Op,
    Wave,
    check_no_mods,
    handler,
    reg_of,
    vdst_ref,
    vector_src,
)
from .errors import UnsupportedOperand
from .fp import (
    f32_to_bf16_bits,
    f32_to_f16_bits,
    f32_to_fp8,
    fma_f32,
    fp8_decode,
)
from .ops_vector_arith import _ERR, F32, U32, _operands
from .valu import ValuBuilder, dst_writer, src_regs

# ---- packed f32 (VOP3P) -------------------------------------------------------------------------


@handler("v_pk_fma_f32", "v_pk_mul_f32", "v_pk_add_f32", "v_pk_mov_b32")
def _pk_f32(inst: Instruction, ctx: Ctx) -> Op:
    name = inst.op
    n = 3 if name == "v_pk_fma_f32" else 2
    dst, srcs = _operands(inst, n)
    check_no_mods(inst, {"op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp"})
    op_sel = inst.mods.get("op_sel", [0] * n)
    op_sel_hi = inst.mods.get("op_sel_hi", [0, 1] if name == "v_pk_mov_b32" else [1] * n)
    if name == "v_pk_mov_b32":
        op_sel_hi = [0, 1]  # v_pk_mov_b32: op_sel picks each half's source dword (ISA pseudocode)
    neg_lo = inst.mods.get("neg_lo", [0] * n)
    neg_hi = inst.mods.get("neg_hi", [0] * n)
    clamp = bool(inst.mods.get("clamp"))
    getters = []
    for op in srcs:
        if op.kind == "reg":
            r = op.reg
            if r.file == "s":
                i = r.index
                getters.append(lambda w, i=i: (np.full(LANES, w.s[i], U32), np.full(LANES, w.s[i + 1], U32)))
            else:
                f, i = r.file, r.index
                getters.append(lambda w, f=f, i=i: (w.vfile(f)[i], w.vfile(f)[i + 1]))
        else:
            # An inline constant is the same 32-bit value for both halves.
            c = vector_src(op, "f")
            getters.append(lambda w, c=c: (c(w), c(w)))
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        lo_in, hi_in = [], []
        for k, g in enumerate(getters):
            pair = g(w)
            a = pair[op_sel[k]].view(F32)
            b = pair[op_sel_hi[k]].view(F32)
            if name != "v_pk_mov_b32":
                a = -a if neg_lo[k] else a
                b = -b if neg_hi[k] else b
            lo_in.append(a)
            hi_in.append(b)
        outs = []
        for ins in (lo_in, hi_in):
            if name == "v_pk_mov_b32":
                outs.append(None)
                continue
            with np.errstate(**_ERR):
                outs.append(_pk_compute(name, ins))
        if name == "v_pk_mov_b32":
            outs = [lo_in[0], hi_in[1]]
        arr = w.vfile(file)
        for k in range(2):
            r = outs[k]
            if clamp:
                r = np.where(np.isnan(r), F32(0), np.clip(r, 0, 1)).astype(F32)
            w.vwrite(arr, didx + k, np.asarray(r, dtype=F32).view(U32))

    reads = tuple((r[0], r[1], 2) for r in (reg_of(s) for s in srcs) if r)
    return Op(fn, "valu", inst, reads, ((file, didx, 2),))


def _pk_compute(name: str, ins: list) -> np.ndarray:
    if name == "v_pk_fma_f32":
        return fma_f32(*ins)
    if name == "v_pk_mul_f32":
        return (ins[0] * ins[1]).astype(F32)
    return (ins[0] + ins[1]).astype(F32)


# ---- conversions to bf16 / f16 / fp8 / u8 -------------------------------------------------------


@handler("v_cvt_pk_bf16_f32", "v_cvt_pk_f16_f32")
def _cvt_pk16(inst: Instruction, ctx: Ctx) -> Op:
    dst, srcs = _operands(inst, 2)
    vb = ValuBuilder(inst, srcs, ["f32", "f32"], {"clamp"})
    conv = f32_to_bf16_bits if inst.op == "v_cvt_pk_bf16_f32" else f32_to_f16_bits
    clamp = bool(inst.mods.get("clamp"))
    wr = dst_writer(inst, dst)
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        (a, b), m = vb.sources(w)
        if clamp:
            a = np.where(np.isnan(a), F32(0), np.clip(a, 0, 1)).astype(F32)
            b = np.where(np.isnan(b), F32(0), np.clip(b, 0, 1)).astype(F32)
        wr(w, conv(a) | (conv(b) << U32(16)), m)

    return Op(fn, "valu", inst, src_regs(srcs, ["f32", "f32"]), ((file, didx, 1),))


# The saturation behaviour of the gfx950 FP8 conversions is not established by our oracles (README
# section 3): default is OCP non-saturating (overflow -> NaN for e4m3, inf for e5m2), switchable
# with the module flag below for what-if runs.
FP8_SATURATE = False


def _dst_opsel(inst: Instruction, nsrc: int) -> bool:
    """The destination bit of op_sel: the list's last entry (written [s0, s1, (s2,) dst])."""
    sel = inst.mods.get("op_sel")
    if sel is None:
        return False
    if len(sel) != nsrc + 1 or any(sel[:-1]):
        raise UnsupportedOperand(f"op_sel {sel} on {inst.op}")
    return bool(sel[-1])


@handler("v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32")
def _cvt_pk_fp8(inst: Instruction, ctx: Ctx) -> Op:
    dst, srcs = _operands(inst, 2)
    vb = ValuBuilder(inst, srcs, ["f32", "f32"], {"op_sel"})
    fmt = "e4m3" if "fp8" in inst.op else "e5m2"
    hi = _dst_opsel(inst, 2)
    file, didx, _ = vdst_ref(dst)
    shift = U32(16 if hi else 0)
    keep = U32(0x0000FFFF if hi else 0xFFFF0000)

    def fn(w: Wave) -> None:
        (a, b), m = vb.sources(w)
        arr = w.vfile(file)
        word = f32_to_fp8(a, fmt, FP8_SATURATE) | (f32_to_fp8(b, fmt, FP8_SATURATE) << U32(8))
        w.vwrite(arr, didx, (arr[didx] & keep) | (word << shift))

    return Op(fn, "valu", inst, src_regs(srcs, ["f32", "f32"]) + ((file, didx, 1),), ((file, didx, 1),))


@handler("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")
def _cvt_from_fp8(inst: Instruction, ctx: Ctx) -> Op:
    dst, srcs = _operands(inst, 1)
    fmt = "e4m3" if "fp8" in inst.op else "e5m2"
    pk = inst.op.startswith("v_cvt_pk")
    if inst.enc == "sdwa":
        bad = [k for k in inst.mods if k not in ("src0_sel", "dst_sel", "dst_unused", "clamp")]
        if bad:
            raise UnsupportedOperand(f"modifiers {bad} on {inst.op}")
    vb = ValuBuilder(inst, srcs, ["u32"], {"clamp"})
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        (a,), m = vb.sources(w)  # SDWA byte/word select already applied by the builder
        arr = w.vfile(file)
        if pk:
            w.vwrite(arr, didx, fp8_decode(a & U32(0xFF), fmt).view(U32))
            w.vwrite(arr, didx + 1, fp8_decode((a >> U32(8)) & U32(0xFF), fmt).view(U32))
        else:
            w.vwrite(arr, didx, fp8_decode(a & U32(0xFF), fmt).view(U32))

    return Op(fn, "valu", inst, src_regs(srcs, ["u32"]), ((file, didx, 2 if pk else 1),))


def _scale_exp(s: np.ndarray) -> np.ndarray:
    """2^(exponent field - 127) of an f32 scale operand (the ISA takes only the exponent)."""
    e = ((s.view(U32) >> U32(23)) & U32(0xFF)).astype(np.int64)
    return np.ldexp(np.float64(1), e - 127)


@handler("v_cvt_scalef32_pk_fp8_f32", "v_cvt_scalef32_pk_bf8_f32")
def _cvt_scalef32_pk(inst: Instruction, ctx: Ctx) -> Op:
    dst, srcs = _operands(inst, 3)
    vb = ValuBuilder(inst, srcs, ["f32", "f32", "f32"], {"op_sel"})
    fmt = "e4m3" if "fp8" in inst.op else "e5m2"
    hi = _dst_opsel(inst, 3)
    file, didx, _ = vdst_ref(dst)
    shift = U32(16 if hi else 0)
    keep = U32(0x0000FFFF if hi else 0xFFFF0000)

    def fn(w: Wave) -> None:
        (a, b, s), m = vb.sources(w)
        sc = _scale_exp(s)
        with np.errstate(**_ERR):
            qa = (a.astype(np.float64) / sc).astype(F32)
            qb = (b.astype(np.float64) / sc).astype(F32)
        arr = w.vfile(file)
        word = f32_to_fp8(qa, fmt, FP8_SATURATE) | (f32_to_fp8(qb, fmt, FP8_SATURATE) << U32(8))
        w.vwrite(arr, didx, (arr[didx] & keep) | (word << shift))

    return Op(fn, "valu", inst, src_regs(srcs, ["f32"] * 3) + ((file, didx, 1),), ((file, didx, 1),))


@handler("v_cvt_pk_u8_f32")
def _cvt_pk_u8(inst: Instruction, ctx: Ctx) -> Op:
    dst, srcs = _operands(inst, 3)
    vb = ValuBuilder(inst, srcs, ["f32", "u32", "u32"], set())
    wr = dst_writer(inst, dst)
    file, didx, _ = vdst_ref(dst)

    def fn(w: Wave) -> None:
        (x, sel, old), m = vb.sources(w)
        # f32_to_u8: round to nearest even, saturate to [0, 255], NaN -> 0.
        with np.errstate(**_ERR):
            v = np.where(np.isnan(x), 0, np.clip(np.rint(x.astype(np.float64)), 0, 255)).astype(U32)
        sh = (sel & U32(3)) * U32(8)
        wr(w, (old & ~(U32(0xFF) << sh)) | (v << sh), m)

    return Op(fn, "valu", inst, src_regs(srcs, ["f32", "u32", "u32"]), ((file, didx, 1),))


@handler("v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_accvgpr_mov_b32")
def _accvgpr(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, set())
    d, s = inst.operands
    src = vector_src(s)
    file, didx, _ = vdst_ref(d)

    def fn(w: Wave) -> None:
        w.vwrite(w.vfile(file), didx, src(w))

    reads = (reg_of(s),) if reg_of(s) else ()
    return Op(fn, "valu", inst, reads, ((file, didx, 1),), info={"accvgpr": inst.op})
