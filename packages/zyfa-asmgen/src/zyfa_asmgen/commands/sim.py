"""`sim`: run one gfx950 kernel of the build in the simulator (result error, hazards, modelled timing)."""

from __future__ import annotations

import argparse

from ..sim import cli


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `sim` subcommand (its logic lives in zyfa_asmgen.sim.cli)."""
    p = sub.add_parser("sim", help="run a gfx950 kernel in the simulator: error, hazards, modelled timing")
    cli.add_arguments(p)
    p.set_defaults(func=cli.run)
