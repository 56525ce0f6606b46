"""Build of zyfa-torch: the pure-Python package `zyfa`, plus the C++ extension `zyfa._C` when it can.

`zyfa._C` is the CUDA/ROCm hot path of the op zyfa::fwd (csrc/zyfa_ops.cpp): a TORCH_LIBRARY_IMPL built
against the torch that is installed at build time, as flash-attn does, so install without build isolation:

    pip install --no-build-isolation packages/zyfa-torch

It needs torch's headers and a C++ compiler, nothing of CUDA or HIP: it checks and launches through
zyfa_core's C API (packages/zyfa-core/csrc/zyfa_core_api.h), found at run time in zyfa_core's extension.
Without torch at build time (e.g. an isolated build) the package builds without it and says why; `zyfa`
then runs its Python path, which works the same, with more host time per call (see zyfa.overhead).

Environment:
  ZYFA_NO_CPP_BUILD=1   build without the extension
  ZYFA_REPO_ROOT=DIR    the repository root, for kernels/abi/zyfa_abi.h and zyfa-core's zyfa_core_api.h
                        (default: two levels above this file)
  MAX_JOBS=N            torch's cpp_extension parallelism (one source file here)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
SOURCE = "csrc/zyfa_ops.cpp"
ABI_HEADER = Path("kernels") / "abi" / "zyfa_abi.h"
CORE_API_HEADER = Path("packages") / "zyfa-core" / "csrc" / "zyfa_core_api.h"


def _say(message: str) -> None:
    print(f"zyfa-torch: {message}", file=sys.stderr, flush=True)


def include_dirs() -> list[str] | None:
    """kernels/abi (the ABI header) and zyfa-core's csrc (its C API header) of the repository, where each
    header exists once; None when either is missing."""
    root = Path(os.environ.get("ZYFA_REPO_ROOT") or HERE.parent.parent).resolve()
    headers = [root / ABI_HEADER, root / CORE_API_HEADER]
    return [str(h.parent) for h in headers] if all(h.is_file() for h in headers) else None


def extension_kwargs() -> dict:
    """ext_modules + cmdclass for zyfa._C, or {} (after saying why) when it cannot be built."""
    if os.environ.get("ZYFA_NO_CPP_BUILD", "") not in ("", "0"):
        _say("ZYFA_NO_CPP_BUILD is set: building without the C++ hot path zyfa._C")
        return {}
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as exc:
        _say(
            f"torch is not importable at build time ({exc}): building without the C++ hot path zyfa._C. "
            "Install torch first, then `pip install --no-build-isolation packages/zyfa-torch`."
        )
        return {}
    include = include_dirs()
    if include is None:
        _say(
            f"{ABI_HEADER} or {CORE_API_HEADER} not found above {HERE} (set ZYFA_REPO_ROOT): "
            "building without zyfa._C"
        )
        return {}
    _say(f"building the C++ hot path zyfa._C against torch {torch.__version__}")
    ext = CppExtension(
        "zyfa._C",
        [SOURCE],
        include_dirs=include,
        libraries=["dl"],  # dlopen of zyfa_core's extension, for its C API
        extra_compile_args=["-O2", "-g0"],  # no debug info: a 10x smaller .so
    )

    class BuildOrSkip(BuildExtension.with_options(use_ninja=False)):
        """A failed compile leaves the package without zyfa._C (the Python path serves) instead of failing
        the install; the error is in the build log, and the nox tests session (ZYFA_REQUIRE_CPP=1) fails
        on a missing extension. (setuptools' `optional` misses torch's RuntimeError.)"""

        def build_extension(self, extension: object) -> None:
            try:
                super().build_extension(extension)
            except Exception as exc:
                _say(f"building zyfa._C failed, installing without the C++ hot path: {exc}")

    return {"ext_modules": [ext], "cmdclass": {"build_ext": BuildOrSkip}}


setup(**extension_kwargs())
