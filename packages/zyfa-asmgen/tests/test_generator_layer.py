"""The generator layer under mfma_fp8: named registers (`regs`) and wait states from the simulator's
hazard rules over the control flow (`wait_states`, `Kernel(sim_hazards=True)`)."""

from __future__ import annotations

import pytest

from zyfa_asmgen.kernel import Kernel
from zyfa_asmgen.regs import RegFile, RegisterError
from zyfa_asmgen.wait_states import plan

MFMA = "v_mfma_f32_32x32x64_f8f6f4"


def test_registers_are_named_aligned_and_reused():
    v = RegFile("v", base=1)
    acc = v.alloc("acc", 16, align=4)
    t = v.alloc("t")
    assert str(acc) == "v[4:19]" and str(acc[3]) == "v7" and str(acc.sub(2, 2)) == "v[6:7]"
    assert str(t) == "v1"
    v.free(t)
    assert str(v.alloc("u", 2, align=2)) == "v[2:3]"  # first fit, below acc
    assert v.high == 20
    with pytest.raises(RegisterError, match="already allocated"):
        v.alloc("acc")
    with pytest.raises(RegisterError, match="no 300 free v-registers"):
        v.alloc("big", 300)
    with pytest.raises(IndexError):
        acc.sub(15, 2)


def _pads(lines: list[tuple[str, str]]) -> dict[int, int]:
    return {i: n for i, (n, _why) in plan(lines).items()}


def test_mfma_result_read_by_valu_gets_its_wait_states():
    body = [("instr", f"{MFMA} v[0:15], a[0:7], a[8:15], 0"), ("instr", "v_add_f32_e32 v20, v0, v0"),
            ("instr", "s_endpgm")]  # fmt: skip
    pads = _pads(body)
    assert pads == {1: 20}  # 16 passes + 4 on gfx950 (the simulator's rule)
    # independent instructions in between count
    body[1:1] = [("instr", "v_mov_b32_e32 v30, 0")] * 5
    assert _pads(body) == {6: 15}


def test_loop_carried_hazard_is_padded_at_the_loop_head():
    """An MFMA at the end of a loop body and a VALU read of its result at the top: the linear order
    never puts them next to each other, only the back edge does."""
    body = [
        ("instr", "s_mov_b32 s0, 3"),
        ("label", ".Lloop"),
        ("instr", "v_add_f32_e32 v20, v0, v0"),
        ("instr", f"{MFMA} v[0:15], a[0:7], a[8:15], v[0:15]"),
        ("instr", "s_sub_u32 s0, s0, 1"),
        ("instr", "s_cmp_lg_u32 s0, 0"),
        ("instr", "s_cbranch_scc1 .Lloop"),
        ("instr", "s_endpgm"),
    ]
    pads = _pads(body)
    assert set(pads) == {2} and pads[2] == 20 - 3  # the 3 SALU ops after the MFMA count


def test_kernel_with_sim_hazards_emits_the_padding():
    k = Kernel("t", sim_hazards=True)
    k.emit("v_mov_b32_e32 v1, 1.0")
    k.emit("v_exp_f32_e32 v2, v1")
    k.emit("v_add_f32_e32 v3, v2, v2")
    k.emit("s_endpgm")
    text = k.finalize().body_text()
    assert "s_nop 0  // hazard: checkVALUHazards:trans-forwarding" in text
    assert text.index("v_exp_f32") < text.index("s_nop 0") < text.index("v_add_f32")
