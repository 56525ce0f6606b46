"""Kernel generators, by the name variants.bzl gives in an asmgen entry's `src` field."""

from __future__ import annotations

from collections.abc import Callable

from ..abi import AbiLayout
from ..variant import Variant, VariantError
from . import mfma_fp8

# name -> generate(variant, abi) returning the complete assembly text.
GENERATORS: dict[str, Callable[[Variant, AbiLayout], str]] = {
    "mfma_fp8": mfma_fp8.generate,
}


# Generators whose workgroup x computes query tile (tiles - 1 - x): the longest causal tiles are
# dispatched first, so the short ones fill the tail of a launch.
LONGEST_FIRST = frozenset({"mfma_fp8"})


def tile_of_workgroup(entry: dict, x: int, ntiles: int) -> int:
    """The query tile workgroup x of a variants.bzl / manifest entry computes (and, the map being
    its own inverse, the workgroup that computes tile x)."""
    if entry.get("kind") == "asmgen" and entry.get("src") in LONGEST_FIRST:
        return ntiles - 1 - x
    return x


def generate(name: str, variant: Variant, abi: AbiLayout) -> str:
    """Run generator `name` for `variant`; VariantError names the known generators."""
    if name not in GENERATORS:
        raise VariantError(f"unknown generator {name!r}; known: {sorted(GENERATORS)}")
    return GENERATORS[name](variant, abi)
