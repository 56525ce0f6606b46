"""Helpers of the build-tool tests (a uniquely named module: several packages have a conftest.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent.parent
REPO = TOOLS.parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import zyfa_kernel_build as kb  # noqa: E402  (needs TOOLS on sys.path)


def variant(**overrides: Any) -> dict[str, Any]:
    """A valid variant (bf16 hd64 hip for gfx950) with `overrides` applied; the name follows them."""
    v = {
        "name": "", "arch": "gfx950", "dtype": "bf16", "d_qk": 64, "d_v": 64, "causal": True,
        "p_mode": None, "kind": "hip", "src": "gfx950/tiny.hip", "tile_m": 32, "tile_n": 32,
        "threads": 64, "smem_bytes": 0, "tag": "",
    }  # fmt: skip
    v.update(overrides)
    if "name" not in overrides:
        v["name"] = kb.expected_name(v)
    return v


def make_root(tmp: Path, variants: list[dict[str, Any]], pins: dict[str, Any] | None = None) -> Path:
    """A minimal repository root: the real ABI header, these variants, the real (or given) pins."""
    (tmp / "kernels" / "abi").mkdir(parents=True)
    shutil.copy(REPO / "kernels" / "abi" / "zyfa_abi.h", tmp / "kernels" / "abi")
    (tmp / "kernels" / "variants.bzl").write_text(f"VARIANTS = {variants!r}\n")
    if pins is None:
        shutil.copy(REPO / "kernels" / "toolchains.bzl", tmp / "kernels")
    else:
        (tmp / "kernels" / "toolchains.bzl").write_text(f"TOOLCHAINS = {pins!r}\n")
    return tmp
