"""Shared fixtures of the simulator tests: the oracle folder and a cached HIP -> asm compiler."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[3]
ORACLES = Path(os.environ.get("ZYFA_ORACLES", REPO.parent / "shared" / "oracles"))
KERNELS = HERE / "kernels"


def _oracle(rel: str) -> Path:
    p = ORACLES / rel
    if not p.exists():
        pytest.skip(f"oracle {p} not available")
    return p


@pytest.fixture(scope="session")
def oracle():
    """oracle(relative path) -> Path in ../shared/oracles; skips the test when it is absent."""
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


@pytest.fixture(scope="session")
def hip_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-session directory for compiled kernels."""
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
