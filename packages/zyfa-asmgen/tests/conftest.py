"""Fixtures of the zyfa-asmgen tests: repository paths, the variant list, the pinned toolchain."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ABI_HEADER = REPO / "kernels" / "abi" / "zyfa_abi.h"
VARIANTS_BZL = REPO / "kernels" / "variants.bzl"
HAVE_ZIGLANG = importlib.util.find_spec("ziglang") is not None


def read_variants() -> list[dict]:
    """VARIANTS from kernels/variants.bzl (a pure literal), or [] outside the repository."""
    if not VARIANTS_BZL.exists():
        return []
    tree = ast.parse(VARIANTS_BZL.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "VARIANTS":
            return ast.literal_eval(node.value)
    raise AssertionError("no VARIANTS list in variants.bzl")


@pytest.fixture(scope="session")
def abi_header() -> Path:
    """kernels/abi/zyfa_abi.h; skips outside the repository."""
    if not ABI_HEADER.exists():
        pytest.skip(f"{ABI_HEADER} not found (tests run from the repository)")
    return ABI_HEADER


@pytest.fixture(scope="session")
def toolchain():
    """The pinned ziglang clang/ld.lld; skips when ziglang is not installed."""
    if not HAVE_ZIGLANG:
        pytest.skip("ziglang (the pinned LLVM) is not installed: pip install 'ziglang==0.17.0'")
    from zyfa_asmgen.assembler import find_toolchain

    return find_toolchain()
