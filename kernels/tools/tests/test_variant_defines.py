"""variant_defines.py: the name / -D lines the sm90 shell scripts compile with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import variant_defines as vd
import zyfa_kernel_build as kb
from kernel_build_testlib import TOOLS, make_root, variant

SIMPLE = variant(arch="sm90a", kind="cuda", src="sm90/simple.cu", d_qk=128, d_v=128, tag="simple")
WS = variant(arch="sm90a", kind="cuda", src="sm90/ws.cu", dtype="e4m3fn", p_mode="lean", d_qk=192, d_v=128)
HIP = variant()


def test_line_is_the_name_then_the_kernel_builds_defines() -> None:
    fields = vd.define_line(WS).split(" ")
    assert fields[0] == WS["name"]
    assert fields[1:] == kb.defines(WS)
    assert "-DZYFA_LEAN_P=1" in fields and "-DZYFA_DTYPE_E4M3=1" in fields


def test_persistent_variant_line_has_the_persistent_define(tmp_path: Path) -> None:
    persistent = variant(
        arch="sm90a", kind="cuda", src="sm90/fa_fwd_wgmma.cu", d_qk=128, d_v=128, grid="persistent"
    )
    (selected,) = vd.selected_variants(make_root(tmp_path, [persistent]))
    assert vd.define_line(selected).endswith(" -DZYFA_WS_PERSISTENT=1")
    assert "ZYFA_WS_PERSISTENT" not in vd.define_line(SIMPLE)


def test_filters_keep_file_order(tmp_path: Path) -> None:
    root = make_root(tmp_path, [WS, HIP, SIMPLE])
    assert [v["name"] for v in vd.selected_variants(root)] == [WS["name"], HIP["name"], SIMPLE["name"]]
    assert vd.selected_variants(root, src="sm90/simple.cu") == [SIMPLE]
    assert vd.selected_variants(root, arch="sm90a") == [WS, SIMPLE]
    assert vd.selected_variants(root, arch="sm90a", only="leanp") == [WS]
    assert vd.selected_variants(root, src="sm90/none.cu") == []


def test_an_invalid_variant_list_fails(tmp_path: Path) -> None:
    root = make_root(tmp_path, [dict(SIMPLE, name="wrong_name")])
    with pytest.raises(kb.BuildError, match="naming rule"):
        vd.selected_variants(root)


@pytest.mark.parametrize("src", ["sm90/fa_fwd_simple.cu", "sm90/fa_fwd_wgmma.cu"])
def test_cli_prints_the_real_sm90_variants(src: str) -> None:
    run = subprocess.run(
        [sys.executable, str(TOOLS / "variant_defines.py"), "--src", src],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    want = [v for v in kb.load_variants(kb.ROOT) if v["src"] == src]
    assert want, f"no variant with src {src} in kernels/variants.bzl"
    assert run.stdout.splitlines() == [vd.define_line(v) for v in want]


def test_cli_exits_1_when_nothing_matches() -> None:
    run = subprocess.run(
        [sys.executable, str(TOOLS / "variant_defines.py"), "--only", "^no such kernel$"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 1 and run.stdout == "" and "no variant" in run.stderr
