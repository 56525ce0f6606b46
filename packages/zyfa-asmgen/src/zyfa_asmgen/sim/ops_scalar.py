"""Scalar ALU (SOP1/SOP2/SOPC/SOPK), program control (SOPP) and scalar memory (SMEM) semantics.

Semantics follow the CDNA4 ISA pseudocode (SCC rules included: e.g. s_max_i32 sets SCC = S0 >= S1,
s_and_b32 sets SCC = result != 0). Values are Python ints; sign handling through `sext`.
"""

from __future__ import annotations

from collections.abc import Callable

from .asm import Instruction
from .core import (
    EXEC,
    M0,
    MASK32,
    MASK64,
    VCC,
    Ctx,
    Op,
    Wave,
    as_reg,
    check_no_mods,
    handler,
    label_target,
    reg_of,
    scalar_dst,
    scalar_src,
)
from .errors import UnsupportedOperand
from .fp import sext

S32 = lambda x: sext(x, 32)  # noqa: E731 - short local alias for readability of the tables below


def _ovf_add(a: int, b: int, r: int) -> int:
    return int(((a ^ r) & (b ^ r)) >> 31 & 1)


def _ovf_sub(a: int, b: int, r: int) -> int:
    return int(((a ^ b) & (a ^ r)) >> 31 & 1)


# name -> f(a, b, scc) -> (result, new_scc or None). Operands are unsigned 32-bit ints.
SOP2_32: dict[str, Callable[[int, int, int], tuple[int, int | None]]] = {
    "s_add_u32": lambda a, b, c: ((a + b) & MASK32, int(a + b > MASK32)),
    "s_sub_u32": lambda a, b, c: ((a - b) & MASK32, int(b > a)),
    "s_addc_u32": lambda a, b, c: ((a + b + c) & MASK32, int(a + b + c > MASK32)),
    "s_subb_u32": lambda a, b, c: ((a - b - c) & MASK32, int(b + c > a)),
    "s_add_i32": lambda a, b, c: ((a + b) & MASK32, _ovf_add(a, b, (a + b) & MASK32)),
    "s_sub_i32": lambda a, b, c: ((a - b) & MASK32, _ovf_sub(a, b, (a - b) & MASK32)),
    "s_min_i32": lambda a, b, c: (a if S32(a) < S32(b) else b, int(S32(a) < S32(b))),
    "s_min_u32": lambda a, b, c: (a if a < b else b, int(a < b)),
    "s_max_i32": lambda a, b, c: (a if S32(a) >= S32(b) else b, int(S32(a) >= S32(b))),
    "s_max_u32": lambda a, b, c: (a if a >= b else b, int(a >= b)),
    "s_cselect_b32": lambda a, b, c: (a if c else b, None),
    "s_and_b32": lambda a, b, c: _z(a & b),
    "s_or_b32": lambda a, b, c: _z(a | b),
    "s_xor_b32": lambda a, b, c: _z(a ^ b),
    "s_andn2_b32": lambda a, b, c: _z(a & ~b & MASK32),
    "s_orn2_b32": lambda a, b, c: _z((a | ~b) & MASK32),
    "s_nand_b32": lambda a, b, c: _z(~(a & b) & MASK32),
    "s_nor_b32": lambda a, b, c: _z(~(a | b) & MASK32),
    "s_xnor_b32": lambda a, b, c: _z(~(a ^ b) & MASK32),
    "s_lshl_b32": lambda a, b, c: _z((a << (b & 31)) & MASK32),
    "s_lshr_b32": lambda a, b, c: _z(a >> (b & 31)),
    "s_ashr_i32": lambda a, b, c: _z((S32(a) >> (b & 31)) & MASK32),
    "s_bfm_b32": lambda a, b, c: ((((1 << (a & 31)) - 1) << (b & 31)) & MASK32, None),
    "s_mul_i32": lambda a, b, c: ((S32(a) * S32(b)) & MASK32, None),
    "s_mul_hi_u32": lambda a, b, c: ((a * b) >> 32, None),
    "s_mul_hi_i32": lambda a, b, c: (((S32(a) * S32(b)) >> 32) & MASK32, None),
    "s_bfe_u32": lambda a, b, c: _z((a >> (b & 31)) & ((1 << ((b >> 16) & 0x7F)) - 1) & MASK32),
    "s_bfe_i32": lambda a, b, c: _z(_bfe_i(a, b, 32)),
    "s_absdiff_i32": lambda a, b, c: _z(abs(S32((a - b) & MASK32)) & MASK32),  # 32-bit difference first
    "s_lshl1_add_u32": lambda a, b, c: _sh_add(a, b, 1),
    "s_lshl2_add_u32": lambda a, b, c: _sh_add(a, b, 2),
    "s_lshl3_add_u32": lambda a, b, c: _sh_add(a, b, 3),
    "s_lshl4_add_u32": lambda a, b, c: _sh_add(a, b, 4),
    "s_pack_ll_b32_b16": lambda a, b, c: ((a & 0xFFFF) | ((b & 0xFFFF) << 16), None),
    "s_pack_lh_b32_b16": lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF0000), None),
    "s_pack_hh_b32_b16": lambda a, b, c: ((a >> 16) | (b & 0xFFFF0000), None),
}

# 64-bit SOP2: second operand is 64-bit unless noted in SHIFT64 (then a 32-bit shift amount).
SOP2_64: dict[str, Callable[[int, int, int], tuple[int, int | None]]] = {
    "s_and_b64": lambda a, b, c: _z(a & b),
    "s_or_b64": lambda a, b, c: _z(a | b),
    "s_xor_b64": lambda a, b, c: _z(a ^ b),
    "s_andn2_b64": lambda a, b, c: _z(a & ~b & MASK64),
    "s_orn2_b64": lambda a, b, c: _z((a | ~b) & MASK64),
    "s_nand_b64": lambda a, b, c: _z(~(a & b) & MASK64),
    "s_nor_b64": lambda a, b, c: _z(~(a | b) & MASK64),
    "s_xnor_b64": lambda a, b, c: _z(~(a ^ b) & MASK64),
    "s_cselect_b64": lambda a, b, c: (a if c else b, None),
    "s_lshl_b64": lambda a, b, c: _z((a << (b & 63)) & MASK64),
    "s_lshr_b64": lambda a, b, c: _z(a >> (b & 63)),
    "s_ashr_i64": lambda a, b, c: _z((sext(a, 64) >> (b & 63)) & MASK64),
    "s_bfe_u64": lambda a, b, c: _z((a >> (b & 63)) & ((1 << ((b >> 16) & 0x7F)) - 1) & MASK64),
    "s_bfe_i64": lambda a, b, c: _z(_bfe_i(a, b, 64)),
    "s_bfm_b64": lambda a, b, c: ((((1 << (a & 63)) - 1) << (b & 63)) & MASK64, None),
}
SHIFT64 = {"s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64", "s_bfm_b64"}
SRC0_32_IN_64 = {"s_bfm_b64"}


def _z(r: int) -> tuple[int, int]:
    return r, int(r != 0)


def _sh_add(a: int, b: int, n: int) -> tuple[int, int]:
    t = (a << n) + b
    return t & MASK32, int(t > MASK32)


def _bfe_i(a: int, b: int, bits: int) -> int:
    width = (b >> 16) & 0x7F
    if width == 0:
        return 0
    v = (sext(a, bits) >> (b & (bits - 1))) & ((1 << width) - 1)  # arithmetic shift (ISA)
    return sext(v, width) & ((1 << bits) - 1)


def _popcount(x: int) -> int:
    return bin(x).count("1")


def _ff1(x: int, bits: int) -> int:
    if x == 0:
        return MASK32
    return (x & -x).bit_length() - 1


def _flbit(x: int, bits: int) -> int:
    if x == 0:
        return MASK32
    return bits - x.bit_length()


def _brev(x: int, bits: int) -> int:
    return int(f"{x:0{bits}b}"[::-1], 2)


# SOP1: name -> (width of src/dst, f(a, scc) -> (result, scc or None))
SOP1: dict[str, tuple[int, int, Callable[[int, int], tuple[int, int | None]]]] = {
    "s_mov_b32": (32, 32, lambda a, c: (a, None)),
    "s_mov_b64": (64, 64, lambda a, c: (a, None)),
    "s_not_b32": (32, 32, lambda a, c: _z(~a & MASK32)),
    "s_not_b64": (64, 64, lambda a, c: _z(~a & MASK64)),
    "s_brev_b32": (32, 32, lambda a, c: (_brev(a, 32), None)),
    "s_brev_b64": (64, 64, lambda a, c: (_brev(a, 64), None)),
    "s_bcnt0_i32_b32": (32, 32, lambda a, c: _z(32 - _popcount(a))),
    "s_bcnt0_i32_b64": (64, 32, lambda a, c: _z(64 - _popcount(a))),
    "s_bcnt1_i32_b32": (32, 32, lambda a, c: _z(_popcount(a))),
    "s_bcnt1_i32_b64": (64, 32, lambda a, c: _z(_popcount(a))),
    "s_ff0_i32_b32": (32, 32, lambda a, c: (_ff1(~a & MASK32, 32), None)),
    "s_ff0_i32_b64": (64, 32, lambda a, c: (_ff1(~a & MASK64, 64), None)),
    "s_ff1_i32_b32": (32, 32, lambda a, c: (_ff1(a, 32), None)),
    "s_ff1_i32_b64": (64, 32, lambda a, c: (_ff1(a, 64), None)),
    "s_flbit_i32_b32": (32, 32, lambda a, c: (_flbit(a, 32), None)),
    "s_flbit_i32_b64": (64, 32, lambda a, c: (_flbit(a, 64), None)),
    "s_sext_i32_i8": (32, 32, lambda a, c: (sext(a, 8) & MASK32, None)),
    "s_sext_i32_i16": (32, 32, lambda a, c: (sext(a, 16) & MASK32, None)),
    "s_abs_i32": (32, 32, lambda a, c: _z(abs(S32(a)) & MASK32)),
}

# s_*_saveexec_b64: new exec from (S0, EXEC); D = old EXEC; SCC = new EXEC != 0.
SAVEEXEC: dict[str, Callable[[int, int], int]] = {
    "s_and_saveexec_b64": lambda s, e: s & e,
    "s_or_saveexec_b64": lambda s, e: s | e,
    "s_xor_saveexec_b64": lambda s, e: s ^ e,
    "s_andn2_saveexec_b64": lambda s, e: s & ~e,
    "s_orn2_saveexec_b64": lambda s, e: s | ~e,
    "s_nand_saveexec_b64": lambda s, e: ~(s & e),
    "s_nor_saveexec_b64": lambda s, e: ~(s | e),
    "s_xnor_saveexec_b64": lambda s, e: ~(s ^ e),
    "s_andn1_saveexec_b64": lambda s, e: ~s & e,
    "s_orn1_saveexec_b64": lambda s, e: ~s | e,
}

SOPC: dict[str, tuple[int, Callable[[int, int], bool]]] = {
    "s_cmp_eq_i32": (32, lambda a, b: a == b),
    "s_cmp_lg_i32": (32, lambda a, b: a != b),
    "s_cmp_gt_i32": (32, lambda a, b: S32(a) > S32(b)),
    "s_cmp_ge_i32": (32, lambda a, b: S32(a) >= S32(b)),
    "s_cmp_lt_i32": (32, lambda a, b: S32(a) < S32(b)),
    "s_cmp_le_i32": (32, lambda a, b: S32(a) <= S32(b)),
    "s_cmp_eq_u32": (32, lambda a, b: a == b),
    "s_cmp_lg_u32": (32, lambda a, b: a != b),
    "s_cmp_gt_u32": (32, lambda a, b: a > b),
    "s_cmp_ge_u32": (32, lambda a, b: a >= b),
    "s_cmp_lt_u32": (32, lambda a, b: a < b),
    "s_cmp_le_u32": (32, lambda a, b: a <= b),
    "s_cmp_eq_u64": (64, lambda a, b: a == b),
    "s_cmp_lg_u64": (64, lambda a, b: a != b),
    "s_bitcmp0_b32": (32, lambda a, b: (a >> (b & 31)) & 1 == 0),
    "s_bitcmp1_b32": (32, lambda a, b: (a >> (b & 31)) & 1 == 1),
    "s_bitcmp0_b64": (64, lambda a, b: (a >> (b & 63)) & 1 == 0),
    "s_bitcmp1_b64": (64, lambda a, b: (a >> (b & 63)) & 1 == 1),
}

SCC_REG = ("scc", 0, 1)


def _sregs(*ops, widths=None) -> tuple:
    out = []
    for i, op in enumerate(ops):
        r = reg_of(op)
        if r is None:
            continue
        if widths and widths[i] == 64 and r[2] == 1:
            r = (r[0], r[1], 2)
        out.append(r)
    return tuple(out)


@handler(*SOP2_32)
def _sop2_32(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, set())
    d, s0, s1 = inst.operands
    f = SOP2_32[inst.op]
    ra, rb, wd = scalar_src(s0), scalar_src(s1), scalar_dst(d)

    def fn(w: Wave) -> None:
        r, scc = f(ra(w), rb(w), w.scc)
        wd(w, r)
        if scc is not None:
            w.scc = scc

    reads = _sregs(s0, s1) + ((SCC_REG,) if inst.op in ("s_addc_u32", "s_subb_u32", "s_cselect_b32") else ())
    return Op(fn, "salu", inst, reads, _sregs(d) + (SCC_REG,))


@handler(*SOP2_64)
def _sop2_64(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, set())
    d, s0, s1 = inst.operands
    f = SOP2_64[inst.op]
    w0 = 32 if inst.op in SRC0_32_IN_64 else 64
    w1 = 32 if inst.op in SHIFT64 else 64
    ra, rb, wd = scalar_src(s0, w0), scalar_src(s1, w1), scalar_dst(d, 64)

    def fn(w: Wave) -> None:
        r, scc = f(ra(w), rb(w), w.scc)
        wd(w, r)
        if scc is not None:
            w.scc = scc

    reads = _sregs(s0, s1, widths=(w0, w1)) + ((SCC_REG,) if inst.op == "s_cselect_b64" else ())
    return Op(fn, "salu", inst, reads, _sregs(d, widths=(64,)) + (SCC_REG,))


@handler(*SOP1)
def _sop1(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, set())
    d, s0 = inst.operands
    ws, wdw, f = SOP1[inst.op]
    ra, wd = scalar_src(s0, ws), scalar_dst(d, wdw)

    def fn(w: Wave) -> None:
        r, scc = f(ra(w), w.scc)
        wd(w, r)
        if scc is not None:
            w.scc = scc

    return Op(fn, "salu", inst, _sregs(s0, widths=(ws,)), _sregs(d, widths=(wdw,)) + (SCC_REG,))


@handler("s_cmov_b32", "s_cmov_b64")
def _cmov(inst: Instruction, ctx: Ctx) -> Op:
    d, s0 = inst.operands
    width = 64 if inst.op.endswith("64") else 32
    ra, wd = scalar_src(s0, width), scalar_dst(d, width)

    def fn(w: Wave) -> None:
        if w.scc:
            wd(w, ra(w))

    return Op(fn, "salu", inst, _sregs(s0, widths=(width,)) + (SCC_REG,), _sregs(d, widths=(width,)))


@handler(*SAVEEXEC)
def _saveexec(inst: Instruction, ctx: Ctx) -> Op:
    d, s0 = inst.operands
    f = SAVEEXEC[inst.op]
    ra, wd = scalar_src(s0, 64), scalar_dst(d, 64)

    def fn(w: Wave) -> None:
        old = w.exec_int
        new = f(ra(w), old) & MASK64
        w.set_exec(new)
        wd(w, old)
        w.scc = int(new != 0)

    ex = ("s", EXEC, 2)
    return Op(fn, "salu", inst, _sregs(s0, widths=(64,)) + (ex,), _sregs(d, widths=(64,)) + (ex, SCC_REG))


@handler(*SOPC)
def _sopc(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, set())
    s0, s1 = inst.operands
    width, f = SOPC[inst.op]
    w1 = 32 if "bitcmp" in inst.op else width
    ra, rb = scalar_src(s0, width), scalar_src(s1, w1)

    def fn(w: Wave) -> None:
        w.scc = int(f(ra(w), rb(w)))

    return Op(fn, "salu", inst, _sregs(s0, s1, widths=(width, w1)), (SCC_REG,))


@handler("s_movk_i32", "s_cmovk_i32", "s_addk_i32", "s_mulk_i32")
def _sopk(inst: Instruction, ctx: Ctx) -> Op:
    d, k = inst.operands
    if k.kind != "int":
        raise UnsupportedOperand("SOPK needs an integer immediate")
    simm = sext(k.value, 16) & MASK32
    idx = d.reg.index
    op = inst.op
    wd = scalar_dst(d)

    def fn(w: Wave) -> None:
        if op == "s_movk_i32":
            wd(w, simm)
        elif op == "s_cmovk_i32":
            if w.scc:
                wd(w, simm)
        elif op == "s_addk_i32":
            a = w.s[idx]
            r = (a + simm) & MASK32
            w.scc = _ovf_add(a, simm, r)
            wd(w, r)
        else:
            wd(w, (S32(w.s[idx]) * S32(simm)) & MASK32)

    reads = () if op == "s_movk_i32" else _sregs(d)
    if op == "s_cmovk_i32":
        reads += (SCC_REG,)
    writes = _sregs(d) + ((SCC_REG,) if op == "s_addk_i32" else ())
    return Op(fn, "salu", inst, reads, writes)


@handler(
    *(f"s_cmpk_{c}_{t}" for c in ("eq", "lg", "gt", "ge", "lt", "le") for t in ("i32", "u32")),
)
def _cmpk(inst: Instruction, ctx: Ctx) -> Op:
    s0, k = inst.operands
    signed = inst.op.endswith("i32")
    kv = sext(k.value, 16) if signed else k.value & 0xFFFF
    cmp = {
        "eq": lambda a, b: a == b,
        "lg": lambda a, b: a != b,
        "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b,
        "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b,
    }[inst.op.split("_")[2]]
    ra = scalar_src(s0)

    def fn(w: Wave) -> None:
        a = ra(w)
        w.scc = int(cmp(S32(a) if signed else a, kv))

    return Op(fn, "salu", inst, _sregs(s0), (SCC_REG,))


# ---- program control ---------------------------------------------------------------------------


@handler("s_nop")
def _nop(inst: Instruction, ctx: Ctx) -> Op:
    n = inst.operands[0].value if inst.operands else 0
    if not 0 <= n <= 15:
        raise UnsupportedOperand(f"s_nop takes 0..15, got {n}")
    return Op(lambda w: None, "nop", inst, info={"wait_states": n + 1})


@handler("s_endpgm")
def _endpgm(inst: Instruction, ctx: Ctx) -> Op:
    def fn(w: Wave) -> None:
        w.done = True

    return Op(fn, "end", inst)


@handler("s_barrier")
def _barrier(inst: Instruction, ctx: Ctx) -> Op:
    def fn(w: Wave) -> None:
        w.at_barrier = True

    return Op(fn, "barrier", inst)


@handler("s_branch")
def _branch(inst: Instruction, ctx: Ctx) -> Op:
    tgt = label_target(inst.operands[0], ctx)

    def fn(w: Wave) -> None:
        w.pc = tgt

    return Op(fn, "branch", inst)


_CONDS: dict[str, tuple[Callable[[Wave], bool], tuple]] = {
    "s_cbranch_scc0": (lambda w: w.scc == 0, (SCC_REG,)),
    "s_cbranch_scc1": (lambda w: w.scc == 1, (SCC_REG,)),
    "s_cbranch_vccz": (lambda w: (w.s[VCC] | w.s[VCC + 1]) == 0, (("s", VCC, 2),)),
    "s_cbranch_vccnz": (lambda w: (w.s[VCC] | w.s[VCC + 1]) != 0, (("s", VCC, 2),)),
    "s_cbranch_execz": (lambda w: (w.s[EXEC] | w.s[EXEC + 1]) == 0, (("s", EXEC, 2),)),
    "s_cbranch_execnz": (lambda w: (w.s[EXEC] | w.s[EXEC + 1]) != 0, (("s", EXEC, 2),)),
}


@handler(*_CONDS)
def _cbranch(inst: Instruction, ctx: Ctx) -> Op:
    tgt = label_target(inst.operands[0], ctx)
    cond, reads = _CONDS[inst.op]

    def fn(w: Wave) -> None:
        if cond(w):
            w.pc = tgt

    return Op(fn, "branch", inst, reads)


def parse_waitcnt(inst: Instruction) -> dict[str, int]:
    """Counter limits of an s_waitcnt (missing counters = no wait). gfx9 encoding for numbers."""
    lim = {"vmcnt": 63, "expcnt": 7, "lgkmcnt": 15}
    for op in inst.operands:
        if op.kind == "func" and op.name in lim:
            lim[op.name] = int(op.args, 0)
        elif op.kind == "func" and op.name.endswith("_sat") and op.name[:-4] in lim:
            lim[op.name[:-4]] = int(op.args, 0)
        elif op.kind == "int":
            v = op.value
            lim = {
                "vmcnt": (v & 0xF) | (((v >> 14) & 0x3) << 4),
                "expcnt": (v >> 4) & 0x7,
                "lgkmcnt": (v >> 8) & 0xF,
            }
        else:
            raise UnsupportedOperand(f"bad s_waitcnt operand {op.text!r}")
    return lim


@handler("s_waitcnt")
def _waitcnt(inst: Instruction, ctx: Ctx) -> Op:
    lim = parse_waitcnt(inst)
    return Op(lambda w: None, "waitcnt", inst, info={"limits": lim})


@handler("s_setprio", "s_sleep", "s_dcache_wb", "s_dcache_inv", "s_icache_inv", "s_sched_barrier")
def _hint(inst: Instruction, ctx: Ctx) -> Op:
    # Scheduling hints and cache maintenance: no architectural effect in a functional model.
    return Op(lambda w: None, "other", inst)


@handler("s_memtime", "s_memrealtime")
def _memtime(inst: Instruction, ctx: Ctx) -> Op:
    wd = scalar_dst(inst.operands[0], 64)

    def fn(w: Wave) -> None:
        wd(w, w.executed * 4)  # a monotonic stand-in; the simulator has no real clock

    return Op(fn, "smem", inst, (), _sregs(inst.operands[0], widths=(64,)))


@handler("s_getreg_b32")
def _getreg(inst: Instruction, ctx: Ctx) -> Op:
    d, hw = inst.operands
    reg, off, size = _hwreg(hw)
    wd = scalar_dst(d)

    def fn(w: Wave) -> None:
        wd(w, (w.mode.get(reg, 0) >> off) & ((1 << size) - 1))

    return Op(fn, "salu", inst, (), _sregs(d))


@handler("s_setreg_b32", "s_setreg_imm32_b32")
def _setreg(inst: Instruction, ctx: Ctx) -> Op:
    hw, src = inst.operands
    reg, off, size = _hwreg(hw)
    if reg != "HW_REG_MODE":
        raise UnsupportedOperand(f"s_setreg of {reg} is not modelled")
    ra = scalar_src(src)
    mask = ((1 << size) - 1) << off

    def fn(w: Wave) -> None:
        old = w.mode.get(reg, 0)
        w.mode[reg] = (old & ~mask) | ((ra(w) << off) & mask)

    return Op(fn, "salu", inst, _sregs(src), ())


def _hwreg(op) -> tuple[str, int, int]:
    if op.kind != "func" or op.name != "hwreg":
        raise UnsupportedOperand(f"expected hwreg(...), got {op.text!r}")
    parts = [p.strip() for p in op.args.split(",")]
    off = int(parts[1], 0) if len(parts) > 1 else 0
    size = int(parts[2], 0) if len(parts) > 2 else 32
    return parts[0], off, size


# ---- scalar memory -----------------------------------------------------------------------------

_SLOAD = {
    "s_load_dword": 1,
    "s_load_dwordx2": 2,
    "s_load_dwordx4": 4,
    "s_load_dwordx8": 8,
    "s_load_dwordx16": 16,
}
_SBUF = {f"s_buffer_{k[2:]}": v for k, v in _SLOAD.items()}


@handler(*_SLOAD)
def _s_load(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"glc", "sc0", "sc1", "nt", "offset"})
    d, base, off = inst.operands
    n = _SLOAD[inst.op]
    if d.reg.count != n or base.reg.count != 2:
        raise UnsupportedOperand("s_load register tuple sizes do not match")
    didx, bidx = d.reg.index, base.reg.index
    roff = scalar_src(off)
    extra = inst.mods.get("offset", 0)

    def fn(w: Wave) -> None:
        addr = (w.sget(bidx, 2) + roff(w) + extra) & MASK64 & ~3  # dword aligned (ISA: low bits ignored)
        data = w.wg.mem.read_scalar(addr, 4 * n, inst.op)
        for i in range(n):
            w.s[didx + i] = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        if didx <= EXEC + 1 < didx + n + 1:
            w._exec_key = -1

    def addr(w: Wave) -> int:
        return (w.sget(bidx, 2) + roff(w) + extra) & MASK64 & ~3

    reads = (("s", bidx, 2),) + _sregs(off)
    info = {"counter": "lgkm", "smem": True, "bytes": 4 * n, "addr": addr}
    return Op(fn, "smem", inst, reads, (("s", didx, n),), info=info)


@handler(*_SBUF)
def _s_buffer_load(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"glc", "sc0", "sc1", "nt"})
    d, rsrc, off = inst.operands
    n = _SBUF[inst.op]
    didx, ridx = d.reg.index, rsrc.reg.index
    roff = scalar_src(off)

    def fn(w: Wave) -> None:
        base = w.sget(ridx, 2) & ((1 << 48) - 1)
        num_records = w.s[ridx + 2]
        o = roff(w) & ~3
        for i in range(n):
            bo = o + 4 * i
            # Scalar buffer loads return 0 for dwords past num_records (ISA range checking).
            if bo + 4 > num_records:
                w.s[didx + i] = 0
            else:
                w.s[didx + i] = int.from_bytes(w.wg.mem.read_scalar(base + bo, 4, inst.op), "little")

    def addr(w: Wave) -> int:
        return (w.sget(ridx, 2) & ((1 << 48) - 1)) + (roff(w) & ~3)

    reads = (("s", ridx, 4),) + _sregs(off)
    info = {"counter": "lgkm", "smem": True, "bytes": 4 * n, "addr": addr}
    return Op(fn, "smem", inst, reads, (("s", didx, n),), info=info)


@handler("s_getpc_b64")
def _getpc(inst: Instruction, ctx: Ctx) -> Op:
    raise UnsupportedOperand("s_getpc_b64: the simulator has no byte addresses for code")


# Implicit-operand helpers used by other modules.
M0_REG = ("s", M0, 1)
VCC_OPERAND = as_reg("s", VCC, 2)
