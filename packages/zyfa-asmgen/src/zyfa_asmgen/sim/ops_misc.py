"""Instructions outside the scalar, vector, memory and MFMA families of the other ops_* modules.

v_nop   a VALU instruction that changes no state; it takes a VALU issue slot and is one wait
        state for the hazard rules, as every instruction is (CDNA4 ISA, "VOP1 instructions").
"""

from __future__ import annotations

from .asm import Instruction
from .core import Ctx, Op, check_no_mods, handler
from .errors import UnsupportedOperand


@handler("v_nop")
def _v_nop(inst: Instruction, ctx: Ctx) -> Op:
    if inst.operands:
        raise UnsupportedOperand(f"v_nop takes no operands, got {inst.text!r}")
    check_no_mods(inst, set())
    return Op(lambda w: None, "valu", inst)
