"""Required wait states between dependent instructions that gfx950 does not interlock.

Each rule is a fact taken from LLVM's AMDGPU hazard recognizer (llvm/lib/Target/AMDGPU/
GCNHazardRecognizer.cpp, the functions named below, for subtargets with GFX940Insts, plus the
gfx950 changes of LLVM pull requests #117263, #117285-#117287, #126132, #126727, #126732, #197267),
re-expressed here; no code is copied. Wait states are counted as LLVM counts them: every issued
instruction is one wait state, `s_nop N` is N+1, and the count is taken on the wave's dynamic
instruction stream (so branches are followed as they executed).

MFMA pass counts (LLVM's scheduling-model latency of each MFMA) are checked against the pinned
compiler's own s_nop padding in tests/sim/test_hazards.py.
"""

from __future__ import annotations

from collections.abc import Callable

from .core import EXEC, M0, VCC, Op

# MFMA -> number of passes on gfx950 (all of these are XDL instructions).
MFMA_PASSES = {
    "v_mfma_f32_32x32x16_bf16": 8,
    "v_mfma_f32_16x16x32_bf16": 4,
    "v_mfma_f32_32x32x64_f8f6f4": 16,
    "v_mfma_f32_16x16x128_f8f6f4": 8,
    "v_mfma_f32_32x32x8_bf16": 8,
    "v_mfma_f32_16x16x16_bf16": 4,
    "v_mfma_f32_32x32x16_fp8_fp8": 8,
    "v_mfma_f32_16x16x32_fp8_fp8": 4,
}


def passes(op: Op) -> int:
    """Passes of an MFMA op (by its layout family name)."""
    return MFMA_PASSES[op.info["mfma"]]


# ---- register-set helpers -------------------------------------------------------------------------

Regs = tuple[tuple[str, int, int], ...]


def _overlap(a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    return a[0] == b[0] and a[1] < b[1] + b[2] and b[1] < a[1] + a[2]


def _any_overlap(xs: Regs, ys: Regs) -> bool:
    return any(_overlap(x, y) for x in xs for y in ys)


def _vgprs(regs: Regs) -> Regs:
    return tuple(r for r in regs if r[0] in ("v", "a"))


def _sgprs(regs: Regs) -> Regs:
    """SGPR reads/writes that count for SGPR hazards (EXEC excluded: it is read by every VALU)."""
    return tuple(r for r in regs if r[0] == "s" and not (r[1] >= EXEC))


EXEC_REG = ("s", EXEC, 2)
VCC_REG = ("s", VCC, 2)
M0_REG = ("s", M0, 1)

VALU_KINDS = ("valu", "trans", "mfma")
MEM_KINDS = ("vmem_load", "vmem_store", "lds_dma", "ds")


def is_valu(op: Op) -> bool:
    """LLVM isVALU: vector ALU including MFMA and transcendentals."""
    return op.kind in VALU_KINDS


def is_legacy_valu(op: Op) -> bool:
    """VALU that is not an MFMA (LLVM IsLegacyVALUFn)."""
    return op.kind in ("valu", "trans")


def is_dpp(op: Op) -> bool:
    return op.inst.enc == "dpp"


def writes_partial_dst(op: Op) -> bool:
    """SDWA with dst_sel != DWORD, or a VOP3 op_sel destination bit (hasDstSelForwardingHazard)."""
    if op.inst.enc == "sdwa":
        return op.inst.mods.get("dst_sel", "DWORD") != "DWORD"
    sel = op.inst.mods.get("op_sel")
    return bool(sel) and op.kind in ("valu", "trans") and bool(sel[-1]) and len(sel) in (3, 4)


def _mfma_srcs(op: Op) -> tuple[Regs, Regs]:
    """(srcA/srcB regs, srcC regs) of an MFMA."""
    reads = op.reads
    ab = reads[:2]
    c = reads[2:3]
    return ab, c


def store_data_regs(op: Op) -> Regs:
    """Data registers of a VMEM store wider than 64 bits (LLVM createsVALUHazard), else ()."""
    if op.kind != "vmem_store" or op.info.get("bytes", 0) <= 8:
        return ()
    return (op.reads[-1],)


# ---- the rules ------------------------------------------------------------------------------------
# A rule gets (op, recent) where recent is a list of (wait_states_since, producer_op), newest first,
# limited to the last 24 wait states. It returns (name, required, producer) or None.

Rule = Callable[[Op, list], "tuple[str, int, Op] | None"]


def _first(recent: list, pred: Callable[[Op], bool], limit: int) -> tuple[int, Op] | None:
    for since, p in recent:
        if since >= limit:
            return None
        if pred(p):
            return since, p
    return None


def _need(name: str, need: int, hit: tuple[int, Op] | None):
    if hit is None:
        return None
    since, p = hit
    if since < need:
        return name, need, p, since
    return None


def rule_mfma_after_valu_exec(op: Op, recent: list):
    """checkMAIHazards90A: a VALU write of EXEC needs 4 wait states before an MFMA."""
    if op.kind != "mfma":
        return None
    hit = _first(recent, lambda p: is_legacy_valu(p) and _any_overlap(p.writes, (EXEC_REG,)), 4)
    return _need("checkMAIHazards90A:valu-writes-exec", 4, hit)


def rule_mfma_after_valu_vgpr(op: Op, recent: list):
    """checkMAIHazards90A: a (non-MFMA) VALU write of a VGPR/AGPR an MFMA reads needs 2 wait states."""
    if op.kind != "mfma":
        return None
    srcs = _vgprs(op.reads)
    hit = _first(recent, lambda p: is_legacy_valu(p) and _any_overlap(p.writes, srcs), 2)
    return _need("checkMAIHazards90A:valu-writes-vgpr", 2, hit)


def rule_mfma_after_mfma(op: Op, recent: list):
    """checkMAIHazards90A: an XDL MFMA result read by another MFMA.

    As srcC: none when the srcC tuple is exactly the previous destination (accumulator chaining);
    a partial overlap needs passes + 2 on gfx950 (gfx940: passes + 1, PR #117263).
    As srcA/srcB: passes + 3, plus one more on gfx950 for more than 2 passes (PR #126732).
    """
    if op.kind != "mfma":
        return None
    ab, c = _mfma_srcs(op)
    worst = None
    for regs, is_c in ((ab, False), (c, True)):
        for r in regs:
            hit = _first(recent, lambda p, r=r: p.kind == "mfma" and _overlap(p.writes[0], r), 21)
            if hit is None:
                continue
            since, p = hit
            n = passes(p)
            if is_c:
                need = 0 if p.writes[0] == r else n + 2
                name = "checkMAIHazards90A:mfma-writes-overlapped-srcc"
            else:
                need = n + 3 + (1 if n != 2 else 0)
                name = "checkMAIHazards90A:mfma-writes-srcab"
            if since < need and (worst is None or need - since > worst[1] - worst[3]):
                worst = (name, need, p, since)
    return worst


def _xdl_write_read_need(n: int) -> int:
    # GFX940_XDL_N_PassWriteVgprVALUMemExpReadWaitStates (passes + 3) plus one on gfx950 for more
    # than 2 passes (PR #126727); matches the pinned clang's padding (tests/sim/test_hazards.py).
    return n + 3 + (1 if n != 2 else 0)


def rule_valu_mem_after_mfma(op: Op, recent: list):
    """checkMAIVALUHazards: a VALU or memory instruction reading a VGPR/AGPR an MFMA wrote."""
    if op.kind not in ("valu", "trans") + MEM_KINDS:
        return None
    srcs = _vgprs(op.reads)
    if not srcs:
        return None
    hit = _first(recent, lambda p: p.kind == "mfma" and _any_overlap(p.writes, srcs), 21)
    if hit is None:
        return None
    return _need("checkMAIVALUHazards:mfma-writes-vgpr-read", _xdl_write_read_need(passes(hit[1])), hit)


def rule_valu_mem_waw_after_mfma(op: Op, recent: list):
    """checkMAIVALUHazards: a VALU or load overwriting a register an MFMA wrote (WAW, PR #126132)."""
    if op.kind not in ("valu", "trans", "vmem_load", "ds"):
        return None
    dsts = _vgprs(op.writes)
    if not dsts:
        return None
    hit = _first(recent, lambda p: p.kind == "mfma" and _any_overlap(p.writes, dsts), 21)
    if hit is None:
        return None
    return _need("checkMAIVALUHazards:mfma-writes-vgpr-waw", _xdl_write_read_need(passes(hit[1])), hit)


_WAR_BY_PASSES = {2: 1, 4: 3, 8: 7, 16: 15}


def rule_valu_war_mfma_srcc(op: Op, recent: list):
    """checkMAIVALUHazards: overwriting a register an XDL MFMA reads as srcC (WAR): 1/3/7/15 for
    2/4/8/16 passes."""
    if op.kind not in ("valu", "trans", "vmem_load", "ds"):
        return None
    dsts = _vgprs(op.writes)
    if not dsts:
        return None
    hit = _first(recent, lambda p: p.kind == "mfma" and _any_overlap(_mfma_srcs(p)[1], dsts), 16)
    if hit is None:
        return None
    return _need("checkMAIVALUHazards:mfma-reads-srcc-war", _WAR_BY_PASSES[passes(hit[1])], hit)


def rule_trans_forwarding(op: Op, recent: list):
    """checkVALUHazards (hasTransForwardingHazard): a transcendental result read by a
    non-transcendental VALU needs 1 wait state."""
    if op.kind != "valu":
        return None
    srcs = _vgprs(op.reads)
    hit = _first(recent, lambda p: p.kind == "trans" and _any_overlap(p.writes, srcs), 1)
    return _need("checkVALUHazards:trans-forwarding", 1, hit)


def rule_dst_sel_forwarding(op: Op, recent: list):
    """checkVALUHazards (hasDstSelForwardingHazard): a VALU that wrote part of a VGPR (SDWA
    dst_sel, op_sel destination) read by the next VALU needs 1 wait state."""
    if not is_valu(op):
        return None
    srcs = _vgprs(op.reads)
    hit = _first(recent, lambda p: is_valu(p) and writes_partial_dst(p) and _any_overlap(p.writes, srcs), 1)
    return _need("checkVALUHazards:dst-sel-forwarding", 1, hit)


def rule_valu_sgpr_valu(op: Op, recent: list):
    """checkVALUHazards (hasVDecCoExecHazard): a VALU write of an SGPR (incl. VCC) read by a VALU
    needs 2 wait states."""
    if not is_valu(op):
        return None
    sreads = _sgprs(op.reads)
    if not sreads:
        return None
    hit = _first(recent, lambda p: is_valu(p) and _any_overlap(_sgprs(p.writes), sreads), 2)
    return _need("checkVALUHazards:valu-writes-sgpr-valu-reads", 2, hit)


def rule_readlane(op: Op, recent: list):
    """checkVALUHazards: v_readlane/v_readfirstlane after a VALU write of their VGPR source (1),
    and v_readlane/v_readfirstlane/v_writelane after a VALU write of EXEC (4)."""
    name = op.inst.op
    if name not in ("v_readlane_b32", "v_readfirstlane_b32", "v_writelane_b32"):
        return None
    out = None
    if name != "v_writelane_b32":
        src = _vgprs(op.reads)[:1]
        hit = _first(recent, lambda p: is_valu(p) and _any_overlap(p.writes, src), 1)
        out = _need("checkVALUHazards:valu-writes-readlane-vgpr", 1, hit)
    if out is None:
        hit = _first(recent, lambda p: is_valu(p) and _any_overlap(p.writes, (EXEC_REG,)), 4)
        out = _need("checkVALUHazards:valu-writes-exec-rwlane", 4, hit)
    return out


def _store_data_hazard_window(p: Op) -> int:
    # gfx940 family: 2 wait states (checkVALUHazardsHelper), 1 for MUBUF stores with an SGPR
    # soffset (PR #197267).
    if p.inst.op.startswith("buffer_") and len(p.inst.operands) > 3 and p.inst.operands[3].kind == "reg":
        return 1
    return 2


def rule_store_data_overwrite(op: Op, recent: list):
    """checkVALUHazardsHelper (has12DWordStoreHazard): a VALU overwriting the data VGPRs of a VMEM
    store wider than 64 bits."""
    if not is_valu(op):
        return None
    dsts = _vgprs(op.writes)
    hit = _first(recent, lambda p: _any_overlap(store_data_regs(p), dsts), 2)
    if hit is None:
        return None
    return _need("checkVALUHazardsHelper:store-data-overwritten", _store_data_hazard_window(hit[1]), hit)


def rule_dpp(op: Op, recent: list):
    """checkDPPHazards: any write of a VGPR a DPP instruction reads (2), a VALU write of EXEC (5)."""
    if not is_dpp(op):
        return None
    srcs = _vgprs(op.reads)
    hit = _first(recent, lambda p: _any_overlap(p.writes, srcs), 2)
    out = _need("checkDPPHazards:vgpr", 2, hit)
    if out is None:
        hit = _first(recent, lambda p: is_valu(p) and _any_overlap(p.writes, (EXEC_REG,)), 5)
        out = _need("checkDPPHazards:exec", 5, hit)
    return out


def rule_div_fmas(op: Op, recent: list):
    """checkDivFMasHazards: v_div_fmas_f32 needs 4 wait states after a VALU write of VCC."""
    if op.inst.op != "v_div_fmas_f32":
        return None
    hit = _first(recent, lambda p: is_valu(p) and _any_overlap(p.writes, (VCC_REG,)), 4)
    return _need("checkDivFMasHazards", 4, hit)


def rule_rwlane_select(op: Op, recent: list):
    """checkRWLaneHazards: an SGPR lane select of v_readlane/v_writelane written by a VALU needs 4."""
    if op.inst.op not in ("v_readlane_b32", "v_writelane_b32"):
        return None
    sel = op.inst.operands[2]
    if sel.kind != "reg" or sel.reg.file != "s":
        return None
    r = ("s", sel.reg.index, 1)
    hit = _first(recent, lambda p: is_valu(p) and _any_overlap(p.writes, (r,)), 4)
    return _need("checkRWLaneHazards", 4, hit)


def rule_vmem_sgpr(op: Op, recent: list):
    """checkVMEMHazards: a VMEM instruction reading an SGPR a VALU wrote needs 5 wait states."""
    if op.kind not in ("vmem_load", "vmem_store", "lds_dma"):
        return None
    sreads = tuple(r for r in op.reads if r[0] == "s")
    hit = _first(recent, lambda p: is_valu(p) and _any_overlap(p.writes, sreads), 5)
    return _need("checkVMEMHazards:valu-writes-sgpr", 5, hit)


def rule_m0_lds_dma(op: Op, recent: list):
    """checkReadM0Hazards (hasReadM0LdsDmaHazard): LDS DMA after an SALU write of M0 needs 1."""
    if op.kind != "lds_dma":
        return None
    hit = _first(recent, lambda p: p.kind == "salu" and _any_overlap(p.writes, (M0_REG,)), 1)
    return _need("checkReadM0Hazards", 1, hit)


def rule_permlane(op: Op, recent: list):
    """gfx950 (PR #117287): v_permlane16/32_swap needs 2 wait states after a VALU write of a VGPR
    it reads."""
    if not op.info.get("permlane"):
        return None
    srcs = _vgprs(op.reads)
    hit = _first(recent, lambda p: is_valu(p) and _any_overlap(p.writes, srcs), 2)
    return _need("checkPermlaneHazards:valu-writes-vgpr", 2, hit)


def rule_setreg(op: Op, recent: list):
    """checkGetRegHazards / checkSetRegHazards: s_getreg/s_setreg of a register written by s_setreg
    needs 2 wait states."""
    if op.inst.op not in ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32"):
        return None
    hw = op.inst.operands[1 if op.inst.op == "s_getreg_b32" else 0].args.split(",")[0].strip()

    def is_setreg(p: Op) -> bool:
        if p.inst.op not in ("s_setreg_b32", "s_setreg_imm32_b32"):
            return False
        return p.inst.operands[0].args.split(",")[0].strip() == hw

    hit = _first(recent, is_setreg, 2)
    return _need("checkSetRegHazards", 2, hit)


ALL_RULES: list[Rule] = [
    rule_mfma_after_valu_exec,
    rule_mfma_after_valu_vgpr,
    rule_mfma_after_mfma,
    rule_valu_mem_after_mfma,
    rule_valu_mem_waw_after_mfma,
    rule_valu_war_mfma_srcc,
    rule_trans_forwarding,
    rule_dst_sel_forwarding,
    rule_valu_sgpr_valu,
    rule_readlane,
    rule_store_data_overwrite,
    rule_dpp,
    rule_div_fmas,
    rule_rwlane_select,
    rule_vmem_sgpr,
    rule_m0_lds_dma,
    rule_permlane,
    rule_setreg,
]

# Instruction classes no rule looks at as the *consumer*: skip the scan for them.
_CONSUMER_KINDS = {"valu", "trans", "mfma", "vmem_load", "vmem_store", "lds_dma", "ds", "salu"}


def default_rules() -> list[Rule]:
    """The rule list checked before every instruction."""
    return list(ALL_RULES)


def check(op: Op, history, ws_now: int, rules: list[Rule]) -> list[tuple[str, int, Op, int]]:
    """Apply the rules to `op` given the wave's history [(end wait state, producer op), ...]."""
    if op.kind not in _CONSUMER_KINDS:
        return []
    recent = []
    for end, p in reversed(history):
        since = ws_now - end
        if since >= 24:
            break
        recent.append((since, p))
    if not recent:
        return []
    out = []
    for rule in rules:
        r = rule(op, recent)
        if r is not None:
            out.append(r)
    return out
