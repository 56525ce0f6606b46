"""Parser tests against the toolchain oracles (assembler-accepted lines, clang -S output)."""

from __future__ import annotations

import re

import pytest

from zyfa_asmgen.sim import AsmParseError, parse_asm
from zyfa_asmgen.sim.asm import imm_bits, parse_instruction, parse_operand
from zyfa_asmgen.sim.yamlmini import load as yaml_load


def _statement_lines(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        s = re.split(r";|//", raw)[0].strip()
        if s and not s.startswith(".") and not s.endswith(":"):
            out.append(s)
    return out


def test_probe_every_accepted_line_parses(oracle) -> None:
    text = oracle("toolchain/gfx950_probe_accepted.s").read_text()
    prog = parse_asm(text)
    assert len(prog.instructions) == len(_statement_lines(text)) == 156
    assert prog.target == "amdgcn-amd-amdhsa--gfx950"
    assert prog.labels["probe"] == 0 and prog.labels["probe_end"] == 155


def test_assembler_listing_parses_identically(oracle) -> None:
    """The assembler's own printout (canonical spelling) parses to the same canonical ops."""
    src = parse_asm(oracle("toolchain/gfx950_probe_accepted.s").read_text())
    enc = parse_asm(oracle("toolchain/gfx950_probe_accepted.enc.txt").read_text())
    assert [i.op for i in src.instructions] == [i.op for i in enc.instructions]
    # Same register operands line by line (aliases and suffixes aside).
    for a, b in zip(src.instructions, enc.instructions, strict=True):
        ra = [o.reg for o in a.operands if o.kind == "reg"]
        rb = [o.reg for o in b.operands if o.kind == "reg"]
        assert ra == rb, (a.text, b.text)


def test_operand_forms() -> None:
    i = parse_instruction("v_max_f32_dpp v0, -v1, |v2| row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0", 1)
    assert i.op == "v_max_f32" and i.enc == "dpp"
    assert i.operands[1].neg and not i.operands[1].abs
    assert i.operands[2].abs and not i.operands[2].neg
    assert i.mods == {"row_shr": 1, "row_mask": 15, "bank_mask": 15, "bound_ctrl": 0}
    i = parse_instruction("buffer_load_dwordx4 v[0:3], v4, s[8:11], s12 offen offset:16 sc0 nt", 1)
    assert [str(o.reg) for o in i.operands] == ["v[0:3]", "v4", "s[8:11]", "s12"]
    assert i.mods == {"offen": True, "offset": 16, "sc0": True, "nt": True}
    i = parse_instruction("v_pk_fma_f32 v[0:1], v[2:3], s[4:5], v[6:7] op_sel_hi:[1,0,1]", 1)
    assert i.mods["op_sel_hi"] == [1, 0, 1]
    i = parse_instruction("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 8), 0", 1)
    assert i.operands[0].kind == "func" and i.operands[0].name == "hwreg"
    i = parse_instruction("ds_swizzle_b32 v0, v1 offset:swizzle(SWAP,16)", 1)
    assert i.mods["offset"] == "swizzle(SWAP,16)"
    i = parse_instruction("s_waitcnt vmcnt(1) expcnt(0) lgkmcnt(2)", 1)
    assert [(o.name, o.args) for o in i.operands] == [("vmcnt", "1"), ("expcnt", "0"), ("lgkmcnt", "2")]
    i = parse_instruction("v_cmp_gt_f32_e64 s[4:5], -|v0|, 0.5", 1)
    assert i.op == "v_cmp_gt_f32" and i.enc == "e64" and i.operands[1].neg and i.operands[1].abs
    assert parse_instruction("v_accvgpr_read v0, a0", 1).op == "v_accvgpr_read_b32"
    alias = parse_instruction("v_mfma_f32_32x32x8bf16_1k v[0:15], v[0:1], v[2:3], 0", 1)
    assert alias.op == "v_mfma_f32_32x32x8_bf16"
    i = parse_instruction("global_load_dwordx4 v[0:3], v[4:5], off", 1)
    assert i.operands[2].kind == "off"
    assert parse_operand("vcc").reg.index == 106 and parse_operand("exec_hi").reg.index == 127
    assert parse_operand("m0").reg.index == 124 and parse_operand("scc").reg.file == "scc"


def test_immediates() -> None:
    assert imm_bits(parse_operand("1.0"), 32, "f") == 0x3F800000
    assert imm_bits(parse_operand("-2.0"), 32, "f") == 0xC0000000
    assert imm_bits(parse_operand("0.15915494"), 32, "f") == 0x3E22F983
    assert imm_bits(parse_operand("-1"), 32, "i") == 0xFFFFFFFF
    assert imm_bits(parse_operand("0x3fb8aa3b"), 32, "f") == 0x3FB8AA3B
    assert imm_bits(parse_operand("1.0"), 64, "f") == 0x3FF0000000000000


def test_bad_operand_names_the_line() -> None:
    with pytest.raises(AsmParseError, match="line 3"):
        parse_asm(".text\nk:\n  v_add_f32 v0, v1, @@@\n")


def test_hip_output_kernels_descriptors_and_metadata(oracle) -> None:
    text = oracle("toolchain/hip_builtins_probe.gfx950.s").read_text()
    prog = parse_asm(text)
    assert set(prog.kernels) == {"k_bf16", "k_f8_s0", "k_f8_s127", "k_f8_var", "k_f8_16", "k_misc", "k_tr"}
    k = prog.kernels["k_bf16"]
    assert k.descriptor["next_free_vgpr"] == 26 and k.descriptor["accum_offset"] == 28
    assert k.descriptor["user_sgpr_kernarg_segment_ptr"] == 1
    assert k.descriptor["system_sgpr_workgroup_id_x"] == 1
    assert k.metadata[".kernarg_segment_size"] == 24
    assert [a[".offset"] for a in k.metadata[".args"]] == [0, 8, 16]
    assert prog.instructions[k.entry].op == "s_load_dwordx4"
    assert prog.symbols["k_bf16.num_vgpr"] == 26
    assert prog.kernels["k_f8_var"].metadata[".kernarg_segment_size"] == 32


def test_handwritten_kernel_flow_mappings(oracle) -> None:
    prog = parse_asm(oracle("toolchain/mfma_dump_kernel_gfx950.s").read_text())
    k = prog.kernel()
    assert k.metadata[".args"][2] == {".name": "d", ".size": 8, ".offset": 16, ".value_kind": "global_buffer",
                                      ".address_space": "global"}  # fmt: skip
    assert k.descriptor["accum_offset"] == 36 and k.descriptor["next_free_vgpr"] == 52


def test_yaml_subset_matches_pyyaml(oracle) -> None:
    yaml = pytest.importorskip("yaml")
    for rel in ("toolchain/hip_builtins_probe.gfx950.s", "toolchain/mfma_dump_kernel_gfx950.s"):
        text = oracle(rel).read_text()
        body = re.search(r"\.amdgpu_metadata\n(.*?)\n\s*\.end_amdgpu_metadata", text, re.S).group(1)
        assert yaml_load(body) == yaml.safe_load(body)


def test_yaml_rejects_unsupported() -> None:
    from zyfa_asmgen.sim.yamlmini import YamlError

    with pytest.raises(YamlError):
        yaml_load("a: [1, 2\n")
