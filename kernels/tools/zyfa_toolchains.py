"""ZYFA toolchains: found and version-checked here and nowhere else; commands run through `run_tool`.

Pins live in kernels/toolchains.bzl (a pure literal). Each finder returns a `Toolchain` (the argv
prefix that runs it, extra flags and include dirs, the versions the manifest records) or raises
`ToolchainError` naming what was found against what is wanted. Standard library only.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ASMGEN_SRC = "packages/zyfa-asmgen/src"


class BuildError(Exception):
    """A variant could not be built; the message says which command failed and shows its output."""


class ToolchainError(BuildError):
    """A toolchain is absent or has the wrong version; the message names found vs wanted."""


# ---------------------------------------------------------------------------------------------
# The variant list and the pins: pure literals, read with ast so no Starlark runtime is needed.


def load_literal(path: Path, name: str) -> Any:
    """The value of the top-level assignment `name = <literal>` in a .bzl file.

    Raises:
        BuildError: the file has no such assignment or its value is not a pure literal.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                return ast.literal_eval(node.value)
            except ValueError as exc:
                raise BuildError(f"{path}: {name} must be a pure literal ({exc})") from None
    raise BuildError(f"{path}: no top-level assignment to {name}")


# ---------------------------------------------------------------------------------------------
# Toolchains: found and version-checked here and nowhere else.


@dataclass(frozen=True)
class Toolchain:
    """A checked toolchain: the argv prefix that runs it and the versions the manifest records."""

    name: str
    command: tuple[str, ...]
    versions: dict[str, str]
    flags: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def version_tuple(text: str) -> tuple[int, ...]:
    """'13.0.88' -> (13, 0, 88); non-numeric parts end the tuple."""
    parts = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def pinned_version(pip_spec: str) -> str:
    """'ziglang==0.17.0' -> '0.17.0'."""
    _name, sep, version = pip_spec.partition("==")
    if not sep:
        raise BuildError(f"kernels/toolchains.bzl: pin {pip_spec!r} is not of the form name==version")
    return version


def _capture(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """stdout + stderr of a quick query command (versions); a failure raises ToolchainError."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    except OSError as exc:
        raise ToolchainError(f"cannot run {shlex.join(argv)}: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"{shlex.join(argv)} failed (exit {proc.returncode}):\n{proc.stderr}")
    return proc.stdout + proc.stderr


def _nvcc_path() -> tuple[str | None, list[str]]:
    """Where nvcc is, and the places looked at (for the error message)."""
    candidates = [
        ("$ZYFA_NVCC", os.environ.get("ZYFA_NVCC")),
        ("PATH", shutil.which("nvcc")),
        *[
            (f"${v}/bin", os.path.join(os.environ[v], "bin", "nvcc"))
            for v in ("CUDA_HOME", "CUDA_PATH")
            if os.environ.get(v)
        ],
        ("/usr/local/cuda/bin", "/usr/local/cuda/bin/nvcc"),
    ]
    for _, path in candidates:
        if path and os.access(path, os.X_OK):
            return path, []
    return None, [where for where, _ in candidates]


def find_nvcc(pins: dict[str, Any]) -> Toolchain:
    """nvcc >= pins['nvcc']['min_version'], plus the CUTLASS headers when the pinned wheel is installed."""
    wanted = pins["nvcc"]["min_version"]
    path, looked = _nvcc_path()
    if path is None:
        raise ToolchainError(
            f"nvcc not found (looked at {', '.join(looked)}); sm90a kernels need nvcc >= {wanted}"
        )
    match = re.search(r"release [\d.]+, V([\d.]+)", _capture([path, "--version"]))
    if not match:
        raise ToolchainError(f"{path} --version printed no 'release X, VX.Y.Z' line")
    found = match.group(1)
    if version_tuple(found) < version_tuple(wanted):
        raise ToolchainError(
            f"nvcc {found} found at {path}, but ZYFA needs nvcc >= {wanted} (kernels/toolchains.bzl)"
        )
    versions = {"nvcc": found}
    includes: tuple[str, ...] = ()
    cutlass = find_cutlass(pins)
    if cutlass:
        includes = (cutlass[0],)
        versions["cutlass"] = cutlass[1]
    return Toolchain("nvcc", (path,), versions, tuple(shlex.split(pins["nvcc"]["gencode"])), includes)


def find_cutlass(pins: dict[str, Any]) -> tuple[str, str] | None:
    """(include dir, version) of the pinned nvidia-cutlass wheel, None when it is not installed.

    Raises:
        ToolchainError: it is installed with another version than the pin.
    """
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    wanted = pinned_version(pins["cutlass"]["pip"])
    found = importlib.metadata.version("nvidia-cutlass")
    if found != wanted:
        raise ToolchainError(f"nvidia-cutlass {found} is installed, but ZYFA pins nvidia-cutlass=={wanted}")
    include = Path(list(spec.submodule_search_locations)[0]) / "source" / "include"
    if not include.is_dir():
        raise ToolchainError(f"nvidia-cutlass {found}: no headers at {include}")
    return str(include), found


def find_ziglang(pins: dict[str, Any]) -> Toolchain:
    """The pinned ziglang wheel in this interpreter, and its clang at the pinned version."""
    spec = pins["ziglang"]["pip"]
    wanted, wanted_clang = pinned_version(spec), pins["ziglang"]["clang_version"]
    try:
        found = importlib.metadata.version("ziglang")
    except importlib.metadata.PackageNotFoundError:
        raise ToolchainError(
            f"ziglang is not installed for {sys.executable}; gfx950 kernels need `pip install {spec}`"
        ) from None
    if found != wanted:
        raise ToolchainError(f"ziglang {found} is installed, but ZYFA pins {spec} (LLVM {wanted_clang})")
    command = (sys.executable, "-m", "ziglang")
    env = tool_env(Path(tempfile.gettempdir()))
    match = re.search(r"clang version ([\d.]+)", _capture([*command, "clang", "--version"], env))
    clang = match.group(1) if match else "unknown"
    if clang != wanted_clang:
        raise ToolchainError(f"ziglang {found} runs clang {clang}, but ZYFA pins clang {wanted_clang}")
    return Toolchain("ziglang", command, {"ziglang": found, "clang": clang})


def find_asmgen(pins: dict[str, Any], root: Path) -> Toolchain:
    """ziglang (to assemble) plus the zyfa_asmgen CLI, importable from <root>/packages/zyfa-asmgen/src."""
    zig = find_ziglang(pins)
    env = {"PYTHONPATH": prepend_path(str(root / ASMGEN_SRC), os.environ.get("PYTHONPATH"))}
    # The build runs `python -m zyfa_asmgen`: look its __main__ up without executing it.
    probe = (
        "import importlib.util as u, zyfa_asmgen as z\n"
        "assert u.find_spec('zyfa_asmgen.__main__'), 'zyfa_asmgen has no __main__.py (no CLI)'\n"
        "print(getattr(z, '__version__', ''))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, **env}
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise ToolchainError(
            f"zyfa_asmgen CLI not usable by {sys.executable} (from {ASMGEN_SRC} of the repository, "
            f"or installed): {last}"
        )
    version = proc.stdout.strip()
    versions = {**zig.versions, **({"zyfa_asmgen": version} if version else {})}
    return Toolchain("asmgen", zig.command, versions, env=env)


def find_toolchain(kind: str, pins: dict[str, Any], root: Path) -> Toolchain:
    """The checked toolchain a kind of kernel needs; raises ToolchainError naming found vs wanted."""
    if kind == "cuda":
        return find_nvcc(pins)
    if kind == "hip":
        return find_ziglang(pins)
    if kind == "asmgen":
        return find_asmgen(pins, root)
    raise BuildError(f"unknown kind {kind!r}")


class ToolchainCache:
    """Finds each kind's toolchain once per process and remembers failures as well."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pins = load_literal(root / "kernels" / "toolchains.bzl", "TOOLCHAINS")
        self._found: dict[str, Toolchain | ToolchainError] = {}

    def get(self, kind: str) -> Toolchain:
        """The toolchain for `kind`, or the ToolchainError that finding it raised."""
        if kind not in self._found:
            try:
                self._found[kind] = find_toolchain(kind, self.pins, self.root)
            except ToolchainError as exc:
                self._found[kind] = exc
        result = self._found[kind]
        if isinstance(result, ToolchainError):
            raise result
        return result


# ---------------------------------------------------------------------------------------------
# Running the tools.


def prepend_path(entry: str, rest: str | None) -> str:
    """`entry` in front of a PATH-like list (which may be unset)."""
    return entry if not rest else f"{entry}{os.pathsep}{rest}"


def tool_env(work: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every compiler run: scratch and caches inside `work`.

    Bazel's sandbox makes $HOME read-only (and may not set it), so zig's caches, nvcc's temporaries
    and HOME itself point into the action's own scratch directory.
    """
    env = dict(os.environ)
    env.update(extra or {})
    env["TMPDIR"] = str(work)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("HOME", str(work))
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(work / "zig-global-cache"))
    env.setdefault("ZIG_LOCAL_CACHE_DIR", str(work / "zig-local-cache"))
    return env


def run_tool(argv: Sequence[str], env: dict[str, str], what: str) -> str:
    """Run one build command; return its stdout + stderr, or raise BuildError showing both."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=env)
    except OSError as exc:
        raise BuildError(f"{what}: cannot run {shlex.join(argv)}: {exc}") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BuildError(
            f"{what} failed (exit {proc.returncode}):\n  $ {shlex.join(argv)}\n{output.rstrip()}"
        )
    return output
