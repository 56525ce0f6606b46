"""`emit`: write the assembly of one variant (the build tools call exactly this)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..abi import parse_abi_header
from ..generators import GENERATORS, generate
from ..variant import Variant, VariantError


def add_generator_args(p: argparse.ArgumentParser) -> None:
    """The arguments `emit` and `build` share."""
    p.add_argument("generator", choices=sorted(GENERATORS), help="generator name (variants.bzl 'src')")
    p.add_argument("--variant-json", required=True, help="one variants.bzl entry as JSON")
    p.add_argument("--abi-header", required=True, type=Path, help="kernels/abi/zyfa_abi.h")


def emit_text(args: argparse.Namespace) -> str:
    """Parse the inputs and run the generator."""
    variant = Variant.from_json(args.variant_json)
    if variant.src != args.generator:
        raise VariantError(
            f"variant {variant.name!r} names generator {variant.src!r}, not {args.generator!r}"
        )
    return generate(args.generator, variant, parse_abi_header(args.abi_header))


def run(args: argparse.Namespace) -> int:
    """Write the assembly file."""
    args.output.write_text(emit_text(args))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `emit` subcommand."""
    p = sub.add_parser("emit", help="write the gfx950 assembly of one variant")
    add_generator_args(p)
    p.add_argument("-o", "--output", required=True, type=Path, help="output .s file")
    p.set_defaults(func=run)
