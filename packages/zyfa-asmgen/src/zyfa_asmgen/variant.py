"""One entry of kernels/variants.bzl, as the generators receive it (JSON on the command line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_REQUIRED = ("name", "arch", "dtype", "d_qk", "d_v", "causal", "p_mode", "kind", "src", "tile_m", "tile_n",
             "threads")  # fmt: skip


class VariantError(ValueError):
    """The variant entry is incomplete or asks for something the generator does not implement."""


@dataclass(frozen=True)
class Variant:
    """The fields of a variants.bzl entry the generators use."""

    name: str
    arch: str
    dtype: str
    d_qk: int
    d_v: int
    causal: bool
    p_mode: str | None
    src: str
    tile_m: int
    tile_n: int
    threads: int
    tile_order: str = "ascending"  # which query tile workgroup x computes (see zyfa_kernel_build.py)
    stale_tau: float = 0.0  # running-max staleness bound, log2 units (docs/numerics.md "Stale running max")
    layout: str = "dense"  # "varlen": a packed batch, zyfa_varlen_args the second parameter (zyfa_abi.h)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Variant:
        """Build from a parsed variants.bzl entry; extra keys (kind, smem_bytes, ...) are ignored."""
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise VariantError(f"variant {d.get('name', '?')!r} lacks {missing}")
        return Variant(
            name=str(d["name"]),
            arch=str(d["arch"]),
            dtype=str(d["dtype"]),
            d_qk=int(d["d_qk"]),
            d_v=int(d["d_v"]),
            causal=bool(d["causal"]),
            p_mode=d["p_mode"],
            src=str(d["src"]),
            tile_m=int(d["tile_m"]),
            tile_n=int(d["tile_n"]),
            threads=int(d["threads"]),
            tile_order=str(d.get("tile_order", "ascending")),
            stale_tau=float(d.get("stale_tau", 0.0)),
            layout=str(d.get("layout", "dense")),
        )

    @staticmethod
    def from_json(text: str) -> Variant:
        """Parse `--variant-json` text."""
        try:
            return Variant.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise VariantError(f"--variant-json is not valid JSON: {e}") from e
