"""mfma_fp8 (every asmgen entry of variants.bzl): the emitted file reads the ABI offsets, its
descriptor matches the program, and it assembles and links with the pinned LLVM into a code object
whose resources fit gfx950 and the design (one wave, two K/V buffers in LDS)."""

from __future__ import annotations

import re
import subprocess
from collections import Counter

import pytest
from asmgen_testlib import read_variants

from zyfa_asmgen.abi import parse_abi_header, parse_abi_text
from zyfa_asmgen.assembler import build_hsaco, descriptor_fields
from zyfa_asmgen.codeobject import MAX_LDS_BYTES, MAX_UNIFIED_VGPRS, resources
from zyfa_asmgen.generators import generate
from zyfa_asmgen.generators.mfma_fp8 import Options, build_program
from zyfa_asmgen.variant import Variant, VariantError

ASMGEN = [v for v in read_variants() if v["kind"] == "asmgen"]
HD128 = {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_gfx950", "arch": "gfx950", "dtype": "e4m3fn", "d_qk": 128,
         "d_v": 128, "causal": True, "p_mode": "lean", "kind": "asmgen", "src": "mfma_fp8", "tile_m": 32,
         "tile_n": 64, "threads": 64, "smem_bytes": 0, "tile_order": "descending"}  # fmt: skip
CASES = ASMGEN or [
    HD128,
    {**HD128, "name": "fa_fwd_e4m3fn_hd192x128_causal_gfx950", "d_qk": 192, "p_mode": "exact"},
]


def test_variant_list_has_the_fp8_kernels():
    keys = {(v["d_qk"], v["d_v"], v["p_mode"]) for v in ASMGEN if v["src"] == "mfma_fp8"}
    assert keys == {(128, 128, "lean"), (128, 128, "exact"), (192, 128, "lean"), (192, 128, "exact")}


@pytest.mark.parametrize("entry", CASES, ids=lambda e: e["name"])
def test_descriptor_is_computed_from_the_program(entry, abi_header):
    abi = parse_abi_header(abi_header)
    var = Variant.from_dict(entry)
    text = generate("mfma_fp8", var, abi)
    prog = build_program(var, abi)
    res = resources(prog)
    d = descriptor_fields(text)
    assert d["accum_offset"] % 4 == 0 and d["accum_offset"] >= prog.vgprs
    assert d["next_free_vgpr"] == res.next_free_vgpr == d["accum_offset"] + prog.agprs
    assert d["next_free_sgpr"] == prog.sgprs
    assert d["kernarg_size"] == kernarg_end(abi, var.layout)
    assert d["group_segment_fixed_size"] == 2 * 64 * (var.d_qk + var.d_v)  # two K/V buffers
    assert (
        d["system_sgpr_workgroup_id_x"],
        d["system_sgpr_workgroup_id_y"],
        d["system_sgpr_workgroup_id_z"],
    ) == (1, 1, 1)
    # register budget: the MFMA operands of K and V in AGPRs (8 per MFMA), the rest in VGPRs:
    # Q 8 per 64 of d_qk, S^T 32, P 8, O^T accumulators d_v / 2, and the fixed block
    opts = Options()
    ones = opts.row_sum_on_mfma(var.p_mode, var.d_qk)  # the ones operand of the row-sum MFMA
    halves = 1 if opts.shares_k_operand(var.p_mode, var.d_qk) else 2  # K operands of S^T
    assert prog.agprs == 8 * (halves * var.d_qk // 64 + var.d_v // 32 + ones)
    assert prog.vgprs + prog.agprs <= 256, "two waves per SIMD: at most 256 registers per lane"
    assert var.d_qk // 8 + 32 + 8 + var.d_v // 2 < prog.vgprs <= 200
    assert prog.sgprs <= 96
    assert f".name:           {var.name}" in text and f".symbol:         {var.name}.kd" in text
    assert ".size:           192" in text and f".max_flat_workgroup_size: {var.threads}" in text
    if var.layout != "dense":  # zyfa_varlen_args, the second by-value parameter
        assert ".name:           varlen\n        .offset:         192\n        .size:           80" in text


def kernarg_end(abi, layout: str) -> int:
    """The kernarg segment's size: zyfa_fwd_args (192 bytes), then zyfa_varlen_args for a packed build."""
    assert abi.size == 192
    return abi.size if layout == "dense" else abi.varlen_offset() + abi.varlen.size


@pytest.mark.parametrize("entry", CASES, ids=lambda e: e["name"])
def test_kernarg_loads_hit_abi_fields(entry, abi_header):
    abi = parse_abi_header(abi_header)
    var = Variant.from_dict(entry)
    text = generate("mfma_fp8", var, abi)
    loads = re.findall(r"s_load_dword(?:x(\d+))?\s+\S+,\s*s\[0:1\],\s*(0x[0-9a-f]+)", text)
    starts = {f.offset for f in abi.fields}
    if var.layout != "dense":
        starts |= {abi.varlen_offset() + f.offset for f in abi.varlen.fields}
    assert loads
    for width, off in loads:
        end = int(off, 16) + 4 * int(width or 1)
        assert int(off, 16) in starts and end <= kernarg_end(abi, var.layout)


def test_offsets_follow_the_header(abi_header):
    """An edited header (one int inserted before batch) moves where the kernel reads d_qk from."""
    text = re.sub(r"/\*.*?\*/", "", abi_header.read_text(), flags=re.S)
    text = text.replace("int32_t batch;", "int32_t pad;\n  int32_t batch;").replace("== 192", "== 196")
    var = Variant.from_dict(CASES[0])
    moved = generate("mfma_fp8", var, parse_abi_text(text))
    orig = generate("mfma_fp8", var, parse_abi_header(abi_header))

    def d_qk_sgpr(asm: str) -> int:
        return int(re.search(rf"s_cmp_eq_u32 s(\d+), {var.d_qk}\b", asm).group(1))

    assert d_qk_sgpr(moved) == d_qk_sgpr(orig) + 1  # 4 bytes further into the struct
    assert ".amdhsa_kernarg_size 196" in moved


@pytest.mark.parametrize(
    "change",
    [
        {"p_mode": "f16"},
        {"tile_m": 32},
        {"threads": 192, "tile_m": 96},
        {"dtype": "bf16"},
        {"d_v": 100},
        {"tile_n": 32},
        {"tile_order": "ascending"},
        {"stale_tau": 0.8},  # lean codes could pass 126 and exact P e4m3's 448
        {"stale_tau": -0.25},
        {"layout": "ragged"},
    ],
)
def test_unimplemented_variants_are_refused(change, abi_header):
    with pytest.raises(VariantError):
        generate("mfma_fp8", Variant.from_dict({**CASES[0], **change}), parse_abi_header(abi_header))


# What the stale running max replaces in the tau-0 program: the row max reduced straight into the
# running max of S, m_ref = C max S, the rescale's test of alpha and its label (the rescale itself moves
# under the "no row moved" branch, as does the VALU row sum's l * alpha, now commented), the lean clamp's
# threshold (2^20 -> 2^16) and its test's comment, the header's mode line and the register counts.
STALE_REPLACES = re.compile(
    r"v_max_f32_e32 v\d+, v\d+, v\d+$|m_ref = m_new = max\(m, C max_j S_j\)|clamp at 126 can act|"
    r"v_cmp_neq_f32_e32 vcc, 1.0, v\d+$|s_cbranch_vccz .Lno_rescale_\w+$|^.Lno_rescale_\w+:$|"
    r"-- 8. rescale .* unless no row's max moved|v_mul_f32_e32 v\d+, v\d+, v\d+$|"
    r"\|m_ref\| > 2\^20|p_mode \w+, SHIFT 8\.$|VGPRs \d+|next_free_vgpr|accum_offset|vgpr_count"
)


@pytest.mark.parametrize("entry", CASES, ids=lambda e: e["name"])
def test_stale_tau_zero_is_the_exact_running_max_kernel(entry, abi_header):
    """stale_tau 0 builds exactly the kernel of a row without the field (the exact running max), and a
    positive tau changes only the running-max update: every other line of the tau-0 program is still
    in the tau program (the rescale and the VALU row sum's l * alpha move under one branch)."""
    abi = parse_abi_header(abi_header)
    row = {k: v for k, v in entry.items() if k != "stale_tau"}
    exact = generate("mfma_fp8", Variant.from_dict(row), abi)
    assert generate("mfma_fp8", Variant.from_dict({**row, "stale_tau": 0.0}), abi) == exact
    assert "stale_tau" not in exact
    stale = generate("mfma_fp8", Variant.from_dict({**row, "stale_tau": 0.5}), abi)
    dropped = Counter(exact.splitlines()) - Counter(stale.splitlines())
    assert dropped and not [line for line in dropped if not STALE_REPLACES.search(line)]
    assert "stale_tau 0.5" in stale and stale.count("v_cmp_gt_f32_e32 vcc") >= 4


def _encoded_bytes(tc, asm) -> int:
    out = subprocess.run([*tc.clang, "-cc1as", "-triple", "amdgcn-amd-amdhsa", "-target-cpu", "gfx950",
                          "-filetype", "asm", "-show-encoding", str(asm), "-o", "-"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return sum(len(m.split(",")) for m in re.findall(r"encoding: \[([^\]]*)\]", out))


@pytest.mark.parametrize("entry", CASES, ids=lambda e: e["name"])
def test_assembles_links_and_fits(entry, abi_header, toolchain, tmp_path):
    abi = parse_abi_header(abi_header)
    var = Variant.from_dict(entry)
    asm = tmp_path / f"{var.name}.s"
    asm.write_text(generate("mfma_fp8", var, abi))
    hsaco = build_hsaco(asm, tmp_path / f"{var.name}.hsaco", toolchain)
    elf = hsaco.read_bytes()
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 0xE0  # EM_AMDGPU
    assert var.name.encode() + b".kd" in elf
    d = descriptor_fields(asm.read_text())
    assert d["next_free_vgpr"] <= MAX_UNIFIED_VGPRS and d["group_segment_fixed_size"] <= MAX_LDS_BYTES
    # the builder's branch-range check relies on its size bound never being below the real size
    assert build_program(var, abi).max_code_bytes >= _encoded_bytes(toolchain, asm)


def test_output_is_deterministic_and_commented_by_phase(abi_header):
    abi = parse_abi_header(abi_header)
    var = Variant.from_dict(CASES[0])
    text = generate("mfma_fp8", var, abi)
    assert text == generate("mfma_fp8", var, abi)
    p_phase = "-- 6. lean P" if var.p_mode == "lean" else "-- 6. exact P"
    phases = ["-- 1. block kb", "-- 2. prefetch", "-- 3. S^T = K Q^T", "-- 4. mask", "-- 5. row max", p_phase]
    for phase in [*phases, "-- 8. rescale", "---- epilogue"]:
        assert f"// {phase}" in text, phase
