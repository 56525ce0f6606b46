"""Build of zyfa-core: the pybind11 extension `zyfa_core._driver` (csrc/: the GPU driver, the launch plan and
its C API zyfa_core_api.h, which zyfa-torch's C++ op calls), and the kernels of kernels/variants.bzl.

The kernels are built by kernels/tools/zyfa_kernel_build.py, the same tool Bazel runs, reading the same
variant list: `build-all` compiles every variant the present toolchains allow into zyfa_core/kernels/
of the build (so into the wheel) and writes manifest.json there, listing skipped variants with the
reason. This needs the repository around the package (pip >= 21.3 builds in place, so
`pip install packages/zyfa-core` works from a checkout); set ZYFA_REPO_ROOT to build from elsewhere.

Environment:
  ZYFA_SKIP_KERNELS=1   compile no kernel; manifest.json lists every variant as skipped
  ZYFA_BUILD_JOBS=N     parallel kernel compiles (default: min(2, cores))
  ZYFA_REPO_ROOT=DIR    the repository root (default: two levels above this file)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
TOOL = Path("kernels") / "tools" / "zyfa_kernel_build.py"
ASMGEN_SRC = Path("packages") / "zyfa-asmgen" / "src"


def repo_root() -> Path:
    """The ZYFA repository root, checked to hold the kernel sources and the build tool."""
    root = Path(os.environ.get("ZYFA_REPO_ROOT") or HERE.parent.parent).resolve()
    if not (root / "kernels" / "variants.bzl").is_file() or not (root / TOOL).is_file():
        raise SystemExit(
            f"zyfa-core builds its kernels from the ZYFA repository's kernels/ directory, but "
            f"{root / 'kernels'} has no variants.bzl and tools/zyfa_kernel_build.py (setup.py is at "
            f"{HERE}). Install from a checkout (`pip install packages/zyfa-core`) or set ZYFA_REPO_ROOT."
        )
    return root


class BuildPyWithKernels(build_py):
    """build_py, then the code objects and manifest.json into zyfa_core/kernels/."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            # An editable install imports zyfa_core from src/, so its kernels go there, git-ignored.
            out = HERE / "src" / "zyfa_core" / "kernels"
            build_kernels(out)
            (out / ".gitignore").write_text("*\n")
        else:
            build_kernels(Path(self.build_lib).resolve() / "zyfa_core" / "kernels")


def build_kernels(out: Path) -> None:
    """Run the shared build tool's build-all into `out`; a failed kernel build stops the install."""
    root = repo_root()
    cmd = [sys.executable, str(root / TOOL), "--root", str(root), "build-all", "--out", str(out)]
    if os.environ.get("ZYFA_SKIP_KERNELS", "") not in ("", "0"):
        cmd += ["--skip-all", "ZYFA_SKIP_KERNELS was set at build time"]
    # zyfa-core build-depends on zyfa-asmgen through its sources: the generator runs from the checkout.
    pythonpath = os.pathsep.join(filter(None, [str(root / ASMGEN_SRC), os.environ.get("PYTHONPATH")]))
    print(f"zyfa-core: building kernels: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": pythonpath})
    if proc.returncode != 0:
        raise SystemExit(f"zyfa-core: the kernel build failed (exit {proc.returncode}); its error is above")


def readme() -> str:
    """README.md as the long description (empty if the file is absent)."""
    path = HERE / "README.md"
    return path.read_text(encoding="utf-8") if path.is_file() else ""


setup(
    long_description=readme(),
    long_description_content_type="text/markdown",
    ext_modules=[
        Pybind11Extension(
            "zyfa_core._driver",
            # driver loading, the shared checks, the launch plan, its C API and the Python module
            [f"csrc/{name}.cpp" for name in ("driver", "checks", "plan", "c_api", "module")],
            include_dirs=[str(repo_root() / "kernels" / "abi")],  # zyfa_abi.h: the argument struct
            cxx_std=17,
            libraries=["dl"],  # dlopen of libcuda.so.1 / libamdhip64.so at run time; no GPU SDK to build
        )
    ],
    cmdclass={"build_py": BuildPyWithKernels},
)
