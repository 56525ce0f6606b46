"""The Kernel builder: register/LDS counts from the program, branch ranges, labels, hazard padding."""

from __future__ import annotations

import pytest

from zyfa_asmgen.isa import Instr
from zyfa_asmgen.kernel import Kernel, KernelBuildError


def _instrs(prog):
    return [ln.text for ln in prog.lines if ln.kind == "instr"]


def test_counts_registers_from_operands():
    k = Kernel("t", preloaded_sgprs=5, preloaded_vgprs=1)
    k.emit("v_mov_b32_e32 v3, 0")
    k.emit("global_load_dwordx4 v[10:13], v[0:1], off")
    k.emit("s_load_dwordx2 s[20:21], s[0:1], 0x0")
    k.emit("v_accvgpr_write_b32 a7, v3")
    prog = k.finalize()
    assert (prog.vgprs, prog.sgprs, prog.agprs) == (14, 22, 8)
    assert not prog.uses_vcc
    assert prog.lds_bytes == 0


def test_preloaded_registers_count_even_unread_and_vcc_is_seen():
    k = Kernel("t", preloaded_sgprs=5, preloaded_vgprs=3)
    k.emit("v_cmp_gt_i32_e32 vcc, s4, v0")
    prog = k.finalize()
    assert (prog.vgprs, prog.sgprs) == (3, 5)
    assert prog.uses_vcc


def test_lds_is_counted_from_allocations():
    k = Kernel("t")
    assert k.lds("a", 100) == 0
    assert k.lds("b", 64, align=128) == 128
    k.emit("ds_write_b32 v0, v1")
    assert k.finalize().lds_bytes == 192
    k2 = Kernel("u")
    k2.emit("ds_read_b32 v1, v0")
    with pytest.raises(KernelBuildError, match="allocated no LDS"):
        k2.finalize()


@pytest.mark.parametrize("nops", [32767, 32768])
def test_forward_branch_range(nops):
    k = Kernel("t")
    k.emit("s_branch .Lfar")
    for _ in range(nops):
        k.emit("s_nop 0")
    k.label(".Lfar")
    k.emit("s_endpgm")
    if nops <= 32767:
        k.finalize()
    else:
        with pytest.raises(KernelBuildError, match="SOPP range"):
            k.finalize()


def test_backward_branch_range_counts_wide_instructions():
    k = Kernel("t")
    k.label(".Lback")
    for _ in range(16384):  # 8-byte VOP3: 32768 words, one past the backward reach with the branch
        k.emit("v_fma_f32 v1, v2, v3, v4")
    k.emit("s_cbranch_scc1 .Lback")
    with pytest.raises(KernelBuildError, match="SOPP range"):
        k.finalize()


def test_labels_must_exist_and_be_unique():
    k = Kernel("t")
    k.emit("s_branch .Lnowhere")
    with pytest.raises(KernelBuildError, match="unknown label"):
        k.finalize()
    k2 = Kernel("t")
    k2.label(".La")
    with pytest.raises(KernelBuildError, match="duplicate"):
        k2.label(".La")


def test_finalized_kernel_is_closed_and_mfma_refused():
    k = Kernel("t")
    k.emit("s_endpgm")
    k.finalize()
    with pytest.raises(KernelBuildError, match="finalized"):
        k.emit("s_endpgm")
    with pytest.raises(KernelBuildError, match="MFMA"):
        Kernel("u").emit("v_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], v[0:15]")


def test_trans_result_gets_one_wait_state():
    k = Kernel("t")
    k.emit("v_exp_f32_e32 v1, v2")
    k.emit("v_add_f32_e32 v3, v1, v4")
    k.emit("v_exp_f32_e32 v5, v2")
    k.emit("v_mov_b32_e32 v6, v7")  # independent: fills the wait state
    k.emit("v_add_f32_e32 v8, v5, v4")
    assert _instrs(k.finalize()) == [
        "v_exp_f32_e32 v1, v2", "s_nop 0", "v_add_f32_e32 v3, v1, v4",
        "v_exp_f32_e32 v5, v2", "v_mov_b32_e32 v6, v7", "v_add_f32_e32 v8, v5, v4",
    ]  # fmt: skip


def test_vcc_written_by_valu_then_read_by_valu_needs_two():
    k = Kernel("t")
    k.emit("v_cmp_eq_f32_e32 vcc, 0, v1")
    k.emit("v_cndmask_b32_e32 v2, v3, v4, vcc")
    assert _instrs(k.finalize())[1] == "s_nop 1"


def test_valu_sgpr_write_then_vmem_read_needs_five():
    k = Kernel("t")
    k.emit("v_readfirstlane_b32 s4, v1")
    k.emit("s_mov_b32 s9, 0")
    k.emit("global_load_dword v2, v3, s[4:5]")
    assert _instrs(k.finalize())[2] == "s_nop 3"


def test_branch_drains_the_hazard_window():
    k = Kernel("t")
    k.label(".Ltop")
    k.emit("v_cmp_lt_i32_e32 vcc, s1, v2")
    k.emit("s_and_saveexec_b64 s[4:5], vcc")
    k.emit("s_cbranch_execz .Ltop")
    assert _instrs(k.finalize()) == [
        "v_cmp_lt_i32_e32 vcc, s1, v2", "s_and_saveexec_b64 s[4:5], vcc", "s_nop 3", "s_cbranch_execz .Ltop",
    ]  # fmt: skip


def test_store_data_overwrite_waits():
    k = Kernel("t")
    k.emit("global_store_dwordx4 v[0:1], v[4:7], off")
    k.emit("v_mov_b32_e32 v5, 0")
    assert _instrs(k.finalize())[1] == "s_nop 1"


def test_instr_parse_defs_and_uses():
    i = Instr.parse("v_mad_u64_u32 v[2:3], vcc, s6, v1, v[2:3]")
    assert {(r.file, r.first, r.count) for r in i.defs} == {("v", 2, 2), ("vcc", 0, 2)}
    assert ("s", 6, 1) in {(r.file, r.first, r.count) for r in i.uses}
    st = Instr.parse("global_store_dwordx4 v[6:7], v[64:67], off offset:16")
    assert st.defs == () and st.modifiers == ("offset:16",)
    assert Instr.parse("v_add_f32_e32 v16, 0x41000000, v16").max_size() == 8
    assert Instr.parse("v_add_f32_e32 v16, 4.0, v16").max_size() == 4
