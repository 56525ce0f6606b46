"""Shared fixtures of the simulator tests: the oracle files and a cached HIP -> asm compiler."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .aiter_inputs import aiter_code_objects

HERE = Path(__file__).parent
REPO = HERE.parents[3]
# The independent oracle data (data/oracles/README.md gives its provenance); ZYFA_ORACLES may name another
# copy of the same tree, plain or gzip-compressed.
ORACLES = Path(os.environ.get("ZYFA_ORACLES", HERE / "data" / "oracles"))
KERNELS = HERE / "kernels"


class OracleFile:
    """One oracle file, stored as is or gzip-compressed (`NAME.gz`); read back as text."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read_text(self) -> str:
        """The file's text (decompressed where it is stored as `.gz`)."""
        data = self.path.read_bytes()
        return (gzip.decompress(data) if self.path.suffix == ".gz" else data).decode()


def _oracle(rel: str) -> OracleFile:
    for p in (ORACLES / rel, ORACLES / f"{rel}.gz"):
        if p.is_file():
            return OracleFile(p)
    pytest.fail(f"oracle file {rel} is missing from {ORACLES} (data/oracles/README.md lists its files)")


@pytest.fixture(scope="session")
def oracle():
    """oracle(relative path) -> OracleFile in data/oracles (a missing file fails the test)."""
    return _oracle


_HAVE_ZIG = importlib.util.find_spec("ziglang") is not None


def compile_hip(src: Path, defines: dict[str, int | str], cache: Path) -> str:
    """Compile HIP device code for gfx950 to assembly with the pinned clang (ziglang); cached."""
    if not _HAVE_ZIG:
        pytest.skip("ziglang (pinned clang) not installed")
    args = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    key = hashlib.sha256(src.read_bytes() + " ".join(args).encode()).hexdigest()[:16]
    out = cache / f"{src.stem}-{key}.s"
    if not out.exists():
        cmd = [sys.executable, "-m", "ziglang", "clang", "-x", "hip", "--offload-arch=gfx950", "-nogpulib",
               "-nogpuinc", "--cuda-device-only", "-O3", "-S", f"-I{REPO / 'kernels'}", *args, str(src),
               "-o", str(out)]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.read_text()


@pytest.fixture(scope="module")
def aiter() -> dict[str, Path]:
    """AITER's gfx950 fmha_v3_fwd code objects by file name (aiter_inputs.py); skips with the reason
    when the pinned wheel cannot be had."""
    cos, reason = aiter_code_objects()
    if not cos:
        pytest.skip(reason)
    return cos


@pytest.fixture(scope="session")
def hip_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for the compiled kernels of the whole test run."""
    return tmp_path_factory.mktemp("hip")


@pytest.fixture(scope="session")
def hip(hip_cache: Path):
    """compile(name, **defines) -> assembly text of tests/sim/kernels/<name>.hip."""

    def compile_(name: str, **defines: int | str) -> str:
        return compile_hip(KERNELS / f"{name}.hip", defines, hip_cache)

    return compile_


@pytest.fixture(scope="session")
def hip_src(hip_cache: Path):
    """compile(path relative to the repository, **defines) -> assembly text."""

    def compile_(rel: str, **defines: int | str) -> str:
        src = REPO / rel
        if not src.exists():
            pytest.skip(f"{src} not found")
        return compile_hip(src, defines, hip_cache)

    return compile_
