"""Fixtures shared by the zyfa-core tests.

The tests run from an installed zyfa-core (where `zyfa_core._driver` was built by the pip build) or
from a source checkout: then `driver_dir` compiles csrc/driver.cpp once per test run into a temporary
directory and adds it to the package's search path, so `zyfa_core._driver` imports either way.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import zyfa_core
from zyfa_core import launcher

TESTS = Path(__file__).resolve().parent
CSRC = TESTS.parent / "csrc" / "driver.cpp"
FAKES = TESTS / "fake_drivers"


def find_compiler(kind: str) -> str | None:
    """The host C ("cc") or C++ ("c++") compiler on PATH, or None."""
    names = ("cc", "gcc", "clang") if kind == "c" else ("c++", "g++", "clang++")
    return next((path for name in names if (path := shutil.which(name))), None)


@pytest.fixture(scope="session")
def host_compiler() -> Callable[[str], str | None]:
    """find_compiler: kind "c" or "c++" -> path of a host compiler on PATH, or None."""
    return find_compiler


def _compile(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"compile failed: {' '.join(command)}\n{result.stderr}")


@pytest.fixture(scope="session")
def driver_dir(tmp_path_factory: pytest.TempPathFactory) -> str | None:
    """None if zyfa_core._driver is installed; else a temp dir holding a fresh build of it."""
    try:
        importlib.import_module("zyfa_core._driver")
        return None
    except ImportError:
        pass
    cxx = find_compiler("c++")
    try:
        import pybind11
    except ImportError:
        pybind11 = None
    if cxx is None or pybind11 is None:
        pytest.skip("zyfa_core._driver is not built and no C++ compiler + pybind11 to build it")
    out = tmp_path_factory.mktemp("driver")
    target = out / f"_driver{sysconfig.get_config_var('EXT_SUFFIX')}"
    includes = [f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}"]
    _compile([cxx, "-O1", "-std=c++17", "-shared", "-fPIC", *includes, str(CSRC), "-o", str(target), "-ldl"])
    zyfa_core.__path__.append(str(out))
    launcher._driver_import.cache_clear()  # an earlier test may have cached "not importable"
    return str(out)


@pytest.fixture(scope="session")
def fake_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Paths of the compiled driver test doubles: {"cuda": libfake_cuda.so, "hip": libfake_hip.so,
    "cuda_no_tma": the CUDA fake without cuTensorMapEncodeTiled (a pre-12.0 driver)}."""
    cc = find_compiler("c")
    if cc is None:
        pytest.skip("no host C compiler to build the fake drivers")
    out = tmp_path_factory.mktemp("fakes")
    libs = {}
    for backend, source, defines in (
        ("cuda", "cuda", []),
        ("hip", "hip", []),
        ("cuda_no_tma", "cuda", ["-DFAKE_WITHOUT_TENSOR_MAP"]),
    ):
        target = out / f"libfake_{backend}.so"
        _compile(
            [cc, "-O1", "-shared", "-fPIC", *defines, str(FAKES / f"fake_{source}.c"), "-o", str(target)]
        )
        libs[backend] = str(target)
    return libs


@pytest.fixture
def run_with_fake(
    driver_dir: str | None, fake_libs: dict[str, str], tmp_path: Path
) -> Callable[..., tuple[Any, list[str]]]:
    """Run a Python snippet in a fresh process whose GPU driver is a fake; return (its JSON, the call log).

    The snippet runs after `import zyfa_core`, must print one JSON value as its last line, and sees
    FAKE_LIB (path of the fake library) and KERNEL_DIR (ZYFA_KERNEL_DIR) as globals. A fresh process
    per call because the extension loads its driver once per process.
    """

    def run(backend: str, snippet: str, kernel_dir: Path | None = None, **env: str) -> tuple[Any, list[str]]:
        log = tmp_path / f"calls-{len(list(tmp_path.glob('calls-*')))}.log"
        variables = {
            "ZYFA_BACKEND": backend,
            "ZYFA_LIBCUDA" if backend == "cuda" else "ZYFA_LIBAMDHIP64": fake_libs[backend],
            "FAKE_GPU_LOG": str(log),
            "ZYFA_KERNEL_DIR": str(kernel_dir or ""),
            **env,
        }
        src = str(Path(zyfa_core.__file__).resolve().parent.parent)
        prelude = textwrap.dedent(f"""
            import json, os, sys
            sys.path.insert(0, {src!r})
            import zyfa_core
            if {driver_dir!r}:
                zyfa_core.__path__.append({driver_dir!r})
            FAKE_LIB = {fake_libs[backend]!r}
            KERNEL_DIR = {str(kernel_dir or "")!r}
        """)
        script = tmp_path / "snippet.py"
        script.write_text(prelude + textwrap.dedent(snippet))
        environment = {**_clean_env(), **variables}
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=environment
        )
        if result.returncode != 0:
            raise AssertionError(f"snippet failed:\n{result.stdout}\n{result.stderr}")
        calls = log.read_text().splitlines() if log.exists() else []
        return json.loads(result.stdout.strip().splitlines()[-1]), calls

    return run


def _clean_env() -> dict[str, str]:
    import os

    drop = ("ZYFA_", "FAKE_")
    return {key: value for key, value in os.environ.items() if not key.startswith(drop)}


def write_manifest(
    directory: Path,
    rows: list[dict[str, Any]],
    skipped: list[dict[str, str]] | None = None,
    abi_version: int = zyfa_core.ABI_VERSION,
    files: dict[str, bytes] | None = None,
) -> Path:
    """Write a manifest.json (and each row's file, content from `files` or a placeholder) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "abi_version": abi_version,
        "toolchains": {"nvcc": "13.0.88"},
        "kernels": rows,
        "skipped": skipped or [],
    }
    (directory / "manifest.json").write_text(json.dumps(data, indent=1))
    for row in rows:
        name = row.get("file")
        if isinstance(name, str) and "/" not in name:
            (directory / name).write_bytes((files or {}).get(name, b"placeholder"))
    return directory


def kernel_row(name: str, **overrides: Any) -> dict[str, Any]:
    """A valid manifest row for kernel `name`, parsed from the naming convention; overrides win."""
    parts = name.split("_")  # fa_fwd_<dtype>_hd<dims>_causal[_leanp|_pf16]_<arch>
    arch, dtype = parts[-1], parts[2]
    dims = parts[3][2:].split("x")
    cuda = arch.startswith("sm")
    row = {
        "name": name,
        "file": name + (".cubin" if cuda else ".hsaco"),
        "arch": arch,
        "dtype": dtype,
        "d_qk": int(dims[0]),
        "d_v": int(dims[-1]),
        "causal": True,
        "p_mode": None
        if dtype == "bf16"
        else ("lean" if "leanp" in parts else "f16" if "pf16" in parts else "exact"),
        "kind": "cuda" if cuda else "hip",
        "tile_m": 64,
        "tile_n": 64,
        "threads": 128,
        "smem_bytes": 49152,
        "registers": 168,
        "spill_bytes": 0,
        "abi_version": zyfa_core.ABI_VERSION,
        "source_sha256": "0" * 64,
        "toolchain": {"nvcc": "13.0.88"} if cuda else {"clang": "22.1.8"},
    }
    if not cuda:
        row["sgprs"] = 64
    row.update(overrides)
    return row


@pytest.fixture
def manifest_tools() -> Any:
    """write_manifest and kernel_row, for tests (test modules cannot import each other here)."""

    class Tools:
        write = staticmethod(write_manifest)
        row = staticmethod(kernel_row)

    return Tools
