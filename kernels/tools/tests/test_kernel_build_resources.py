"""Resources read back from the tools: ptxas -v lines, and the gfx950 descriptor + metadata of a .s."""

from __future__ import annotations

import random
import re

import pytest
from kernel_build_testlib import FIXTURES
from zyfa_resources import parse_ptxas, read_gfx950_resources, serialized_wgmma
from zyfa_toolchains import BuildError

PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'other_kernel' for 'sm_90a'
ptxas info    : Function properties for other_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'fa_fwd_bf16_hd128_causal_sm90a' for 'sm_90a'
ptxas info    : Function properties for fa_fwd_bf16_hd128_causal_sm90a
    {stack} bytes stack frame, {spill} bytes spill stores, {loads} bytes spill loads
ptxas info    : Used {regs} registers, used 1 barriers, {smem} bytes smem, 400 bytes cmem[0]
"""


def test_ptxas_lines_of_the_right_entry() -> None:
    rng = random.Random()
    regs, spill, smem = rng.randint(1, 255), rng.randrange(0, 4096, 4), rng.randrange(0, 1024, 16)
    text = PTXAS.format(stack=spill, spill=spill, loads=spill + 8, regs=regs, smem=smem)
    res = parse_ptxas(text, "fa_fwd_bf16_hd128_causal_sm90a")
    assert res == {"registers": regs, "spill_bytes": spill, "static_smem": smem}
    assert parse_ptxas(text, "other_kernel") == {"registers": 32, "spill_bytes": 0, "static_smem": 0}


def test_ptxas_without_the_entry_names_what_it_saw() -> None:
    text = PTXAS.format(stack=0, spill=0, loads=0, regs=1, smem=0)
    with pytest.raises(
        BuildError,
        match=r"no entry 'fa_fwd_x' \(entries: \['fa_fwd_bf16_hd128_causal_sm90a', 'other_kernel'\]\)",
    ):
        parse_ptxas(text, "fa_fwd_x")


def test_serialised_wgmma_notes_of_the_right_entry() -> None:
    note = (
        "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized "
        "due to insufficient register resources for the wgmma pipeline in the function '{name}'\n"
    )
    injected = (
        "ptxas info    : (C7519) warpgroup.arrive is injected in around line 946 by compiler "
        "in function 'k'\n"
    )
    text = PTXAS.format(stack=0, spill=0, loads=0, regs=1, smem=0)
    text += note.format(name="other_kernel") + injected
    assert serialized_wgmma(text, "fa_fwd_bf16_hd128_causal_sm90a") == []
    assert serialized_wgmma(text, "other_kernel") == [
        "C7511 due to insufficient register resources for the wgmma pipeline"
    ]


def fixture(name: str = "k") -> str:
    return (FIXTURES / "tiny_gfx950.s").read_text().replace("KERNEL_NAME", name)


def test_fixture_resources() -> None:
    res = read_gfx950_resources(fixture(), "k")
    assert res == {"lds_bytes": 2048, "registers": 12, "vgprs": 8, "agprs": 4, "sgprs": 8, "scratch_bytes": 0}


def retarget(text: str, lds: int, vgprs: int, agprs: int, sgprs: int) -> str:
    """The fixture with other resource numbers, consistently in descriptor and metadata."""
    accum = (vgprs + 3) // 4 * 4
    subs = {
        r"(\.amdhsa_next_free_vgpr )\d+": accum + agprs if agprs else vgprs,
        r"(\.amdhsa_accum_offset )\d+": accum,
        r"(\.amdhsa_group_segment_fixed_size )\d+": lds,
        r"(\.group_segment_fixed_size: )\d+": lds,
        r"(\.vgpr_count: )\d+": accum + agprs if agprs else vgprs,
        r"(\.agpr_count: )\d+": agprs,
        r"(\.sgpr_count: )\d+": sgprs,
    }
    for pattern, value in subs.items():
        text, n = re.subn(pattern, rf"\g<1>{value}", text)
        assert n == 1, pattern
    return text


def test_random_resources_read_back() -> None:
    rng = random.Random()
    for _ in range(20):
        lds, vgprs, agprs, sgprs = (
            rng.randrange(0, 160 * 1024, 128),
            rng.randint(1, 256),
            rng.choice([0, 4, 64, 128]),
            rng.randint(6, 100),
        )
        res = read_gfx950_resources(retarget(fixture(), lds, vgprs, agprs, sgprs), "k")
        unified = (vgprs + 3) // 4 * 4 + agprs if agprs else vgprs
        assert res["lds_bytes"] == lds
        assert res["registers"] == unified
        assert res["agprs"] == agprs
        assert res["vgprs"] == unified - agprs
        assert res["sgprs"] == sgprs


def test_descriptor_and_metadata_must_agree() -> None:
    text = fixture().replace(".group_segment_fixed_size: 2048", ".group_segment_fixed_size: 1024")
    with pytest.raises(
        BuildError, match="group_segment_fixed_size = 2048 but metadata .group_segment_fixed_size = 1024"
    ):
        read_gfx950_resources(text, "k")


def test_descriptor_alone_is_enough() -> None:
    text = re.sub(r"\.amdgpu_metadata.*\.end_amdgpu_metadata", "", fixture(), flags=re.S)
    res = read_gfx950_resources(text, "k")
    assert res == {"lds_bytes": 2048, "registers": 12, "vgprs": 8, "agprs": 4, "sgprs": 6, "scratch_bytes": 0}


def test_symbolic_descriptor_falls_back_to_metadata() -> None:
    # LLVM may write resource counts as expressions of .set symbols; the metadata has plain numbers.
    text = fixture().replace(
        ".amdhsa_next_free_vgpr 12", ".amdhsa_next_free_vgpr max(totalnumvgprs(k.num_agpr, k.num_vgpr), 1, 0)"
    )
    assert read_gfx950_resources(text, "k")["registers"] == 12


def test_missing_kernel_names_the_ones_present() -> None:
    with pytest.raises(BuildError, match=r"no `.amdhsa_kernel fa_fwd_y` \(found \['k'\]\)"):
        read_gfx950_resources(fixture(), "fa_fwd_y")


def test_compiler_style_metadata_block() -> None:
    # Block-style YAML as clang writes it, with nested .args entries at a deeper indent.
    text = fixture().split(".amdgpu_metadata")[0] + (
        ".amdgpu_metadata\n---\namdhsa.kernels:\n"
        "  - .agpr_count:     4\n    .args:\n      - .offset:         0\n        .size:           192\n"
        "    .group_segment_fixed_size: 2048\n    .name:           k\n    .sgpr_count:     14\n"
        "    .vgpr_count:     12\n  - .agpr_count:     0\n    .name:           other\n    .sgpr_count: 3\n"
        "...\n.end_amdgpu_metadata\n"
    )
    res = read_gfx950_resources(text, "k")
    assert (res["sgprs"], res["agprs"], res["registers"]) == (14, 4, 12)
