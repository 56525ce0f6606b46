"""kernels/gfx950/fa_fwd_bf16.hip compiles for every hip variant of variants.bzl (dense and packed
builds), uses MFMA, fits, and takes the ABI header's kernel parameters."""

from __future__ import annotations

import re

import pytest
from asmgen_testlib import REPO, read_variants

from zyfa_asmgen.abi import parse_abi_header
from zyfa_asmgen.assembler import compile_hip, descriptor_fields, link

HIP = [v for v in read_variants() if v["kind"] == "hip"]


def _defines(v: dict) -> dict[str, str | int]:
    return {"ZYFA_KERNEL_NAME": v["name"], "ZYFA_DTYPE_E4M3": int(v["dtype"] == "e4m3fn"),
            "ZYFA_D_QK": v["d_qk"], "ZYFA_D_V": v["d_v"], "ZYFA_TILE_M": v["tile_m"],
            "ZYFA_TILE_N": v["tile_n"],
            "ZYFA_THREADS": v["threads"], "ZYFA_SMEM_BYTES": v["smem_bytes"],
            "ZYFA_LEAN_P": int(v["p_mode"] == "lean"),
            "ZYFA_TILE_DESCENDING": int(v.get("tile_order") == "descending"),
            "ZYFA_VARLEN": {"varlen": 1, "paged": 2}.get(v.get("layout", "dense"), 0)}  # fmt: skip


def test_variant_list_has_both_hip_kernels():
    for layout in ("dense", "varlen", "paged"):
        shapes = {(v["d_qk"], v["d_v"]) for v in HIP if v.get("layout", "dense") == layout}
        assert shapes >= {(128, 128), (192, 128)}, layout


@pytest.mark.parametrize("var", HIP, ids=lambda v: v["name"])
def test_hip_kernel_compiles_and_fits(var, toolchain, tmp_path):
    asm = compile_hip(
        REPO / "kernels" / var["src"], tmp_path / "k.s", _defines(var), [REPO / "kernels"], toolchain
    )
    text = asm.read_text()
    assert f"{var['name']}:" in text
    assert text.count("v_mfma_f32_32x32x16_bf16") >= var["d_qk"] // 16 + 2 * var["d_v"] // 32
    assert "scratch" not in text.split(".amdhsa_kernel")[0]  # no spills
    d = descriptor_fields(text)
    # zyfa_fwd_args, then (packed builds) zyfa_varlen_args at the header's offset for it.
    abi = parse_abi_header(REPO / "kernels/abi/zyfa_abi.h")
    packed = var.get("layout", "dense") != "dense"
    assert d["kernarg_size"] == (abi.varlen_offset() + abi.varlen.size if packed else abi.size)
    args = re.findall(r"- \.offset:\s+(\d+)\s+\.size:\s+(\d+)", text)
    want = [(0, abi.size)] + ([(abi.varlen_offset(), abi.varlen.size)] if packed else [])
    assert [(int(o), int(n)) for o, n in args] == want
    assert d["private_segment_fixed_size"] == 0
    # Three K and three V stages of 64 rows, each row padded by 16 bytes (static LDS).
    assert d["group_segment_fixed_size"] == 3 * 64 * (2 * var["d_qk"] + 16) + 3 * 64 * (2 * var["d_v"] + 16)
    # Eight waves must fit two per SIMD: at most 256 VGPR + AGPR per lane.
    assert d["next_free_vgpr"] <= 256
    obj = tmp_path / "k.o"
    from zyfa_asmgen.assembler import assemble

    assemble(asm, obj, toolchain)
    assert link(obj, tmp_path / "k.hsaco", toolchain).read_bytes()[:4] == b"\x7fELF"


def test_hip_kernel_rejects_wrong_config(toolchain, tmp_path):
    var = {**HIP[0], "tile_m": 64}
    from zyfa_asmgen.assembler import ToolError

    with pytest.raises(ToolError, match="eight waves of 32 query rows: tile_m = 256"):
        compile_hip(
            REPO / "kernels" / var["src"], tmp_path / "k.s", _defines(var), [REPO / "kernels"], toolchain
        )
