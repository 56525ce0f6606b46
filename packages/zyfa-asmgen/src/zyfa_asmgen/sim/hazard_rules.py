"""Wait-state rules of gfx940/gfx950 (filled in from LLVM's GCNHazardRecognizer, see docs)."""

from __future__ import annotations


def default_rules() -> list:
    """The rule functions checked before every instruction."""
    return []
