"""gfx950 (CDNA3/CDNA4 family) software wait-state rules for the instructions the generator emits.

The hardware does not interlock these cases; the program must put enough independent instructions
(or `s_nop`) between the two. Every issued instruction counts one wait state, `s_nop N` counts N+1.
Sources: LLVM's GCNHazardRecognizer (the gfx940 rules it applies to gfx950) and AMD rocRoller's
wait-state observer tables for 94x/950 (`VALUTransWrite94x`, `VALUWriteSGPRVCC94x`,
`VALUWriteSGPRVMEM`, `BufferStoreDwordXXRead`, `OPSEL94x`, `VALUWriteVCCVDIVFMAS`). MFMA (XDL)
dependencies are not modelled here: `Kernel` refuses v_mfma_* while this module is in use, so no
MFMA hazard can slip through silently; MFMA kernels use `Kernel(sim_hazards=True)`, which places
wait states with the simulator's full rule set (`wait_states`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .isa import Instr

# The longest distance any rule below looks back (VALU SGPR write -> VMEM read).
MAX_WAIT_STATES = 5

_LANESELECT_OPS = ("v_readlane_b32", "v_writelane_b32")


@dataclass(frozen=True)
class Need:
    """`wait_states` must separate the two instructions; `rule` says why (goes into a comment)."""

    wait_states: int
    rule: str


def _units(regs: Iterable) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for r in regs:
        out |= r.units()
    return out


def _sgpr_like(units: set[tuple[str, int]]) -> set[tuple[str, int]]:
    return {u for u in units if u[0] in ("s", "vcc")}


def _partial_dst(i: Instr) -> bool:
    """VALU writing part of a VGPR: SDWA dst_sel, VOP3 op_sel on the destination, fp8 byte selects."""
    if i.mnemonic.endswith("_sdwa"):
        return any(m.startswith("dst_sel:") and m != "dst_sel:DWORD" for m in i.modifiers)
    for m in i.modifiers:
        if m.startswith("op_sel:"):
            sel = m[len("op_sel:") :].strip("[]").split(",")
            if sel and sel[-1].strip() == "1":
                return True
    return False


def required(prev: Instr, nxt: Instr) -> Need | None:
    """The wait states `nxt` needs after `prev` (None: no rule applies)."""
    if not prev.is_valu and not prev.mnemonic.startswith(("global_store", "buffer_store")):
        return None
    pdefs = _units(prev.defs)
    nuses = _units(nxt.uses)
    ndefs = _units(nxt.defs)
    needs: list[Need] = []
    if prev.is_valu:
        if prev.is_trans and nxt.is_valu and not nxt.is_trans and pdefs & nuses & _vgprs(pdefs):
            needs.append(Need(1, "trans result read by VALU"))
        if _partial_dst(prev) and nxt.is_valu and pdefs & nuses:
            needs.append(Need(1, "partial-dst (sdwa/op_sel) result read by VALU"))
        sg = _sgpr_like(pdefs) & nuses
        if sg and nxt.is_valu:
            if nxt.base in _LANESELECT_OPS:
                needs.append(Need(4, "VALU-written SGPR read as lane select"))
            elif nxt.base.startswith("v_div_fmas") and ("vcc", 0) in sg:
                needs.append(Need(4, "VALU-written VCC read by v_div_fmas"))
            else:
                needs.append(Need(2, "VALU-written SGPR/VCC read by VALU"))
        if sg and (nxt.is_vmem or nxt.is_lds):
            needs.append(Need(5, "VALU-written SGPR read by VMEM"))
        if ("exec", 0) in pdefs and nxt.mnemonic.endswith("_dpp"):
            needs.append(Need(5, "VALU-written EXEC before DPP"))
    elif prev.mnemonic.endswith(("dwordx3", "dwordx4")) and nxt.is_valu:
        # global/buffer store of more than 64 bits of data: its data VGPRs (2nd operand) are read late.
        data = _units(prev.uses[1:2])
        if data & ndefs:
            needs.append(Need(2, "VALU overwrites the data of a >64-bit store"))
    return max(needs, key=lambda n: n.wait_states) if needs else None


def _vgprs(units: set[tuple[str, int]]) -> set[tuple[str, int]]:
    return {u for u in units if u[0] == "v"}


def wait_states_of(i: Instr) -> int:
    """How many wait states an instruction provides by being issued (s_nop N gives N+1)."""
    if i.mnemonic == "s_nop":
        return int(i.operands[0], 0) + 1
    return 1


def pending(window: list[Instr], nxt: Instr) -> Need | None:
    """The largest unmet requirement of `nxt` against the recent instructions (oldest first)."""
    worst: Need | None = None
    distance = 0
    for prev in reversed(window):
        need = required(prev, nxt)
        if (
            need
            and need.wait_states > distance
            and (worst is None or need.wait_states - distance > worst.wait_states)
        ):
            worst = Need(need.wait_states - distance, need.rule)
        distance += wait_states_of(prev)
        if distance >= MAX_WAIT_STATES:
            break
    return worst


def drain(window: list[Instr]) -> int:
    """Wait states to insert so no instruction in `window` can still cause a hazard (before a branch).

    A branch target's other predecessors are unknown to the linear scan, so every branch leaves
    the hazard window empty: afterwards any instruction may follow.
    """
    distance = 0
    worst = 0
    for prev in reversed(window):
        reach = _max_reach(prev)
        worst = max(worst, reach - distance)
        distance += wait_states_of(prev)
        if distance >= MAX_WAIT_STATES:
            break
    return max(worst, 0)


def _max_reach(prev: Instr) -> int:
    """The longest distance at which `prev` can still be the source of some rule."""
    if prev.is_valu:
        pdefs = _units(prev.defs)
        if _sgpr_like(pdefs) or ("exec", 0) in pdefs:
            return 5
        if prev.is_trans or _partial_dst(prev):
            return 1
        return 0
    if prev.mnemonic.startswith(("global_store", "buffer_store")) and prev.mnemonic.endswith(("x3", "x4")):
        return 2
    return 0
