"""The pins this package checks at run time agree with kernels/toolchains.bzl and pyproject.toml."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from asmgen_testlib import REPO

from zyfa_asmgen import assembler
from zyfa_asmgen.sim import decode


def test_pins_match_toolchains_bzl():
    bzl = REPO / "kernels" / "toolchains.bzl"
    if not bzl.exists():
        pytest.skip("not in the repository")
    tree = ast.parse(bzl.read_text())
    pins = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign))
    assert pins["ziglang"]["pip"] == f"ziglang=={assembler.PINNED_ZIGLANG}"
    assert pins["ziglang"]["clang_version"] == assembler.PINNED_CLANG


def test_pyproject_extra_uses_the_pin():
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert re.search(r'asm = \["ziglang==' + re.escape(assembler.PINNED_ZIGLANG) + r'"\]', text)


def test_decoder_tables_pin_agrees():
    """The decode extra, the simulator tests' requirements and the decoder name the same tinygrad."""
    here = Path(__file__).parent
    pin = f"tinygrad=={decode.PINNED_TINYGRAD}"
    assert f'decode = ["{pin}"]' in (here.parent / "pyproject.toml").read_text()
    assert pin in (here / "sim" / "requirements-test.txt").read_text().splitlines()
