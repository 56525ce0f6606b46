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


def generate(name: str, variant: Variant, abi: AbiLayout) -> str:
    """Run generator `name` for `variant`; VariantError names the known generators."""
    if name not in GENERATORS:
        raise VariantError(f"unknown generator {name!r}; known: {sorted(GENERATORS)}")
    return GENERATORS[name](variant, abi)
