"""Driver for the pinned LLVM in the `ziglang` wheel: assemble, link, compile HIP device code.

    python -m ziglang clang -target amdgcn-amd-amdhsa -mcpu=gfx950 -c x.s -o x.o
    python -m ziglang ld.lld -shared x.o -o x.hsaco

The pins live in kernels/toolchains.bzl; the copies below are what this package checks at run time
(a test compares them with toolchains.bzl). A tool of another version is refused with a message
naming both versions, and a failed tool run raises with its command line and its stderr.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PINNED_ZIGLANG = "0.17.0"
PINNED_CLANG = "22.1.8"
MCPU = "gfx950"


class ToolchainError(RuntimeError):
    """The pinned toolchain is missing or has another version."""


class ToolError(RuntimeError):
    """A tool ran and failed; the message has its command line and stderr."""


@dataclass(frozen=True)
class Toolchain:
    """How to call the pinned clang and ld.lld."""

    clang: tuple[str, ...]
    lld: tuple[str, ...]
    ziglang_version: str
    clang_version: str


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ToolError(
            f"{what} failed (exit {proc.returncode})\n  command: {' '.join(cmd)}\n{proc.stderr.strip()}"
        )
    return proc


def find_toolchain(check_version: bool = True) -> Toolchain:
    """Locate `python -m ziglang` and check its versions against the pins."""
    try:
        zig_version = importlib.metadata.version("ziglang")
    except importlib.metadata.PackageNotFoundError as e:
        raise ToolchainError(
            f"the pinned assembler is not installed: pip install 'ziglang=={PINNED_ZIGLANG}' "
            "(or the zyfa-asmgen[asm] extra)"
        ) from e
    base = (sys.executable, "-m", "ziglang")
    out = _run([*base, "clang", "--version"], "clang --version").stdout
    m = re.search(r"clang version (\d+\.\d+\.\d+)", out)
    clang_version = m.group(1) if m else "unknown"
    if check_version and (zig_version != PINNED_ZIGLANG or clang_version != PINNED_CLANG):
        raise ToolchainError(
            f"ziglang {zig_version} (clang {clang_version}) found; zyfa-asmgen is pinned to "
            f"ziglang {PINNED_ZIGLANG} (clang {PINNED_CLANG})"
        )
    return Toolchain((*base, "clang"), (*base, "ld.lld"), zig_version, clang_version)


def assemble(asm: Path, obj: Path, tc: Toolchain | None = None) -> Path:
    """Assemble a gfx950 .s file into a relocatable object."""
    tc = tc or find_toolchain()
    _run([*tc.clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={MCPU}", "-c", str(asm), "-o", str(obj)],
         f"assembling {asm}")  # fmt: skip
    return obj


def link(obj: Path, hsaco: Path, tc: Toolchain | None = None) -> Path:
    """Link an object into a loadable code object (.hsaco)."""
    tc = tc or find_toolchain()
    _run([*tc.lld, "-shared", str(obj), "-o", str(hsaco)], f"linking {obj}")
    return hsaco


def build_hsaco(asm: Path, hsaco: Path, tc: Toolchain | None = None) -> Path:
    """Assemble and link `asm` into `hsaco` (the object file sits beside it as .o)."""
    tc = tc or find_toolchain()
    obj = hsaco.with_suffix(".o")
    assemble(asm, obj, tc)
    return link(obj, hsaco, tc)


def compile_hip(src: Path, out_s: Path, defines: dict[str, str | int], include_dirs: list[Path],
                tc: Toolchain | None = None, opt: str = "-O3") -> Path:  # fmt: skip
    """Compile HIP device code without HIP headers to gfx950 assembly (clang -x hip -S)."""
    tc = tc or find_toolchain()
    cmd = [*tc.clang, "-x", "hip", f"--offload-arch={MCPU}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
           opt, "-S"]  # fmt: skip
    cmd += [f"-I{d}" for d in include_dirs]
    cmd += [f"-D{k}={v}" for k, v in defines.items()]
    cmd += [str(src), "-o", str(out_s)]
    _run(cmd, f"compiling {src}")
    return out_s


def descriptor_fields(asm_text: str) -> dict[str, int]:
    """The `.amdhsa_*` fields of the (first) kernel descriptor in an assembly file."""
    block = re.search(r"\.amdhsa_kernel\s+\S+(.*?)\.end_amdhsa_kernel", asm_text, re.S)
    if not block:
        raise ValueError("no .amdhsa_kernel block")
    return {k: int(v, 0) for k, v in re.findall(r"\.amdhsa_(\w+)\s+(\S+)", block.group(1))}
