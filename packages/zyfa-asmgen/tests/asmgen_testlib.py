"""Paths and helpers shared by the zyfa-asmgen tests (a uniquely named module: in one pytest run over
every package, `conftest` may resolve to another package's conftest)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

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
