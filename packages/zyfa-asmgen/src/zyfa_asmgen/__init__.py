"""zyfa_asmgen: gfx950 assembly generator for ZYFA kernels, its assembler driver and (in `sim`) simulator.

The generator takes one variants.bzl entry and the kernel ABI parsed from kernels/abi/zyfa_abi.h
and writes a complete gfx950 assembly file (code, kernel descriptor, metadata) that the pinned
LLVM (`ziglang==0.17.0`) assembles and links into a code object. No torch, no zyfa_core.
"""

from __future__ import annotations

from .abi import AbiLayout, parse_abi_header, parse_abi_text
from .generators import GENERATORS, generate
from .kernel import Kernel, Program
from .variant import Variant

__version__ = "0.3.1"

__all__ = [
    "GENERATORS",
    "AbiLayout",
    "Kernel",
    "Program",
    "Variant",
    "__version__",
    "generate",
    "parse_abi_header",
    "parse_abi_text",
]
