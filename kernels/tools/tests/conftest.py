"""pytest setup of the build-tool tests: the tool modules and the helper module on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# kernels/tools (the tool's modules) and this directory (kernel_build_testlib); also under
# --import-mode=importlib, which puts neither on sys.path.
for _path in (Path(__file__).resolve().parent.parent, Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


@pytest.fixture
def real_pins() -> dict[str, Any]:
    """kernels/toolchains.bzl as the tool reads it."""
    import zyfa_toolchains

    return zyfa_toolchains.load_literal(
        Path(__file__).resolve().parents[3] / "kernels" / "toolchains.bzl", "TOOLCHAINS"
    )
