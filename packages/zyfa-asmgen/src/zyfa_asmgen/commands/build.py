"""`build`: emit, assemble and link one variant into a code object with the pinned LLVM."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ..assembler import build_hsaco, find_toolchain
from .emit import add_generator_args, emit_text


def run(args: argparse.Namespace) -> int:
    """Write the .hsaco (and the .s when --asm is given)."""
    text = emit_text(args)
    tc = find_toolchain()
    with tempfile.TemporaryDirectory() as tmp:
        asm = args.asm or Path(tmp) / "kernel.s"
        asm.write_text(text)
        build_hsaco(asm, Path(tmp) / "kernel.hsaco", tc)
        args.output.write_bytes((Path(tmp) / "kernel.hsaco").read_bytes())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `build` subcommand."""
    p = sub.add_parser("build", help="emit + assemble + link one variant into a .hsaco")
    add_generator_args(p)
    p.add_argument("-o", "--output", required=True, type=Path, help="output .hsaco file")
    p.add_argument("--asm", type=Path, help="also keep the assembly here")
    p.set_defaults(func=run)
