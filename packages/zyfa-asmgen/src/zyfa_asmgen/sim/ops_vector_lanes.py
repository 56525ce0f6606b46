"""Vector compares (VOPC: v_cmp, v_cmpx, v_cmp_class) and lane access (readfirstlane, readlane,
writelane, swap, permlane swaps)."""

from __future__ import annotations

import numpy as np

from .asm import Instruction
from .core import (
    EXEC,
    MASK32,
    Ctx,
    Op,
    Wave,
    check_no_mods,
    handler,
    mask_to_int,
    pattern_handler,
    reg_of,
    scalar_dst,
    scalar_src,
    vdst_ref,
    vector_src,
)
from .errors import UnsupportedOperand
from .ops_vector_arith import U32
from .valu import ValuBuilder, src_regs

# ---- compares -------------------------------------------------------------------------------------

_CMP_F = {
    "f": lambda a, b: np.zeros(a.shape, bool),
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "lg": lambda a, b: (a < b) | (a > b),
    "ge": lambda a, b: a >= b,
    "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
    "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b),
    "nlg": lambda a, b: ~((a < b) | (a > b)),
    "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b),
    "neq": lambda a, b: ~(a == b),
    "nlt": lambda a, b: ~(a < b),
    "tru": lambda a, b: np.ones(a.shape, bool),
    "t": lambda a, b: np.ones(a.shape, bool),
}
_CMP_I = {
    "f": lambda a, b: np.zeros(a.shape, bool),
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ne": lambda a, b: a != b,
    "lg": lambda a, b: a != b,
    "ge": lambda a, b: a >= b,
    "t": lambda a, b: np.ones(a.shape, bool),
}


def _class_f32(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    bits = x.view(U32)
    exp = (bits >> U32(23)) & U32(0xFF)
    mant = bits & U32(0x7FFFFF)
    neg = (bits >> U32(31)) == 1
    snan = (exp == 255) & (mant != 0) & ((mant >> U32(22)) == 0)
    qnan = (exp == 255) & ((mant >> U32(22)) == 1)
    inf = (exp == 255) & (mant == 0)
    normal = (exp > 0) & (exp < 255)
    denorm = (exp == 0) & (mant != 0)
    bit = np.where(
        snan,
        0,
        np.where(
            qnan,
            1,
            np.where(
                inf,
                np.where(neg, 2, 9),
                np.where(
                    normal, np.where(neg, 3, 8), np.where(denorm, np.where(neg, 4, 7), np.where(neg, 5, 6))
                ),
            ),
        ),
    )
    return ((mask >> bit.astype(U32)) & U32(1)) == 1


@pattern_handler(r"v_cmpx?_(\w+?)_(f32|i32|u32|i64|u64|f64|i16|u16|f16)")
def _cmp(inst: Instruction, ctx: Ctx) -> Op:
    import re

    m = re.fullmatch(r"v_(cmpx?)_(\w+?)_(f32|i32|u32|i64|u64|f64|i16|u16|f16)", inst.op)
    kind, cond, ty = m.group(1), m.group(2), m.group(3)
    if ty in ("f16", "i16", "u16"):
        raise UnsupportedOperand(f"16-bit compare {inst.op}")
    if cond == "class":
        types = ["f32" if ty == "f32" else "f64", "u32"]
    elif ty in ("f32", "f64"):
        types = [ty, ty]
    elif ty in ("i64", "u64"):
        types = ["u64", "u64"]
    else:
        types = ["u32", "u32"]
    ops = inst.operands
    # e32 writes VCC (written explicitly as the first operand by LLVM); e64 names the SGPR pair.
    # gfx9 v_cmpx writes EXEC and also the SDST (VCC for e32).
    sdst, srcs = ops[0], ops[1:]
    if sdst.kind != "reg" or sdst.reg.file != "s":
        raise UnsupportedOperand(f"{inst.op}: bad destination {sdst.text!r}")
    sidx = sdst.reg.index
    vb = ValuBuilder(inst, srcs, types, set())
    if cond == "class":
        f = _class_f32 if ty == "f32" else None
        if f is None:
            raise UnsupportedOperand("v_cmp_class_f64")
    elif ty.startswith("f"):
        f = _CMP_F[cond]
    else:
        f = _CMP_I[cond]
    signed = ty in ("i32", "i64")

    def fn(w: Wave) -> None:
        (a, b), mm = vb.sources(w)
        if signed:
            a = a.view(np.int32 if ty == "i32" else np.int64)
            b = b.view(np.int32 if ty == "i32" else np.int64)
        with np.errstate(invalid="ignore"):
            res = f(a, b)
        res = res & w.exec_mask
        if mm is not None:
            raise UnsupportedOperand("DPP on v_cmp")
        w.lane_mask_set(sidx, res)
        if kind == "cmpx":
            w.set_exec(mask_to_int(res))

    writes = (("s", sidx, 2),) + ((("s", EXEC, 2),) if kind == "cmpx" else ())
    reads = src_regs(srcs, types) + (("s", EXEC, 2),)
    return Op(fn, "valu", inst, reads, writes)


# ---- lane access ------------------------------------------------------------------------------------


@handler("v_readfirstlane_b32")
def _readfirstlane(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, set())
    d, s = inst.operands
    src = vector_src(s)
    wd = scalar_dst(d)

    def fn(w: Wave) -> None:
        m = w.exec_mask
        lane = int(np.argmax(m)) if m.any() else 0
        wd(w, int(src(w)[lane]))

    return Op(fn, "valu", inst, (reg_of(s),) if reg_of(s) else (), (reg_of(d),))


@handler("v_readlane_b32")
def _readlane(inst: Instruction, ctx: Ctx) -> Op:
    d, s, ln = inst.operands
    src = vector_src(s)
    lane_of = scalar_src(ln)
    wd = scalar_dst(d)

    def fn(w: Wave) -> None:
        wd(w, int(src(w)[lane_of(w) & 63]))

    reads = tuple(r for r in (reg_of(s), reg_of(ln)) if r)
    return Op(fn, "valu", inst, reads, (reg_of(d),))


@handler("v_writelane_b32")
def _writelane(inst: Instruction, ctx: Ctx) -> Op:
    d, s, ln = inst.operands
    val_of = scalar_src(s)
    lane_of = scalar_src(ln)
    file, didx, _ = vdst_ref(d)

    def fn(w: Wave) -> None:
        # Writes the lane regardless of EXEC (ISA: v_writelane ignores the EXEC mask).
        w.vfile(file)[didx, lane_of(w) & 63] = val_of(w) & MASK32

    reads = tuple(r for r in (reg_of(s), reg_of(ln)) if r) + ((file, didx, 1),)
    return Op(fn, "valu", inst, reads, ((file, didx, 1),))


@handler("v_swap_b32")
def _swap(inst: Instruction, ctx: Ctx) -> Op:
    d, s = inst.operands
    fd, di, _ = vdst_ref(d)
    fs, si, _ = vdst_ref(s)

    def fn(w: Wave) -> None:
        a, b = w.vfile(fd)[di].copy(), w.vfile(fs)[si].copy()
        w.vwrite(w.vfile(fd), di, b)
        w.vwrite(w.vfile(fs), si, a)

    return Op(fn, "valu", inst, ((fd, di, 1), (fs, si, 1)), ((fd, di, 1), (fs, si, 1)))


@handler("v_permlane16_swap_b32", "v_permlane32_swap_b32")
def _permlane_swap(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"bound_ctrl", "fi"})
    d, s = inst.operands
    fd, di, _ = vdst_ref(d)
    fs, si, _ = vdst_ref(s)
    # permlane32: vdst lanes 32..63 <-> src0 lanes 0..31. permlane16: in each 32-lane half,
    # vdst lanes 16..31 <-> src0 lanes 0..15 (CDNA4 pseudocode). bound_ctrl/fi only matter for
    # inactive lanes, which the ops below leave unwritten.
    if inst.op == "v_permlane32_swap_b32":
        lo = np.arange(32)
        hi = lo + 32
    else:
        lo = np.concatenate([np.arange(16), np.arange(32, 48)])
        hi = lo + 16

    def fn(w: Wave) -> None:
        vd, vs = w.vfile(fd), w.vfile(fs)
        ex = w.exec_mask
        a = vs[si, lo].copy()
        b = vd[di, hi].copy()
        # A lane pair swaps when both lanes are active (inactive lanes keep their values).
        ok = ex[lo] & ex[hi]
        vs[si, lo] = np.where(ok, b, vs[si, lo])
        vd[di, hi] = np.where(ok, a, vd[di, hi])

    return Op(
        fn, "valu", inst, ((fd, di, 1), (fs, si, 1)), ((fd, di, 1), (fs, si, 1)), info={"permlane": True}
    )
