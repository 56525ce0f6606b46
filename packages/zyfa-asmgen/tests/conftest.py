"""Fixtures of the zyfa-asmgen tests: repository paths, the variant list, the pinned toolchain."""

from __future__ import annotations

from pathlib import Path

import pytest
from asmgen_testlib import ABI_HEADER, HAVE_ZIGLANG


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
