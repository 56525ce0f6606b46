"""`modelled`: the gfx950 scoreboard (ours and AITER's kernels, MODELLED) and the model's calibration."""

from __future__ import annotations

import argparse

from ..sim import board


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `modelled` subcommand (its logic lives in zyfa_asmgen.sim.board)."""
    p = sub.add_parser("modelled", help="gfx950 scoreboard: our kernels and AITER's in the calibrated timing "
                       "model (every figure MODELLED)")  # fmt: skip
    board.add_arguments(p)
    p.set_defaults(func=board.run)
