"""Command line: `python -m zyfa_asmgen <command> ...` (also the `zyfa-asmgen` script).

    emit  <generator> --variant-json JSON --abi-header H -o out.s       write the assembly
    build <generator> --variant-json JSON --abi-header H -o out.hsaco   emit + assemble + link
    sim   <kernel> [--seqlen-q N ...]                                   run a gfx950 kernel in the simulator
    codeobject FILE [--disassemble | --roundtrip]                       load a gfx950 code object

Each command lives in its own module under `zyfa_asmgen.commands` and registers itself through
`register(subparsers)`; add a module to COMMANDS to add a command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .commands import build, codeobject, emit, sim

COMMANDS = [emit, build, sim, codeobject]


def make_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per command module."""
    parser = argparse.ArgumentParser(prog="zyfa-asmgen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd in COMMANDS:
        cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status (errors print one message, exit 1)."""
    args = make_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, RuntimeError, OSError, KeyError) as e:
        print(f"zyfa-asmgen {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
