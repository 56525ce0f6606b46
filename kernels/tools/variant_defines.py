#!/usr/bin/env python3
"""The -D defines of kernels/variants.bzl entries, one line each: `NAME -DZYFA_...=... ...`.

For the shell scripts that compile a kernel or its self-test outside the kernel build
(kernels/sm90/build_check.sh, tools/device/sm90_selftest.sh, tools/device/sm90_wgmma_selftest.sh):
the variants and their defines come from zyfa_kernel_build.py itself, so every build of a variant
sees the same macros. Standard library only.

    variant_defines.py [--src sm90/fa_fwd_simple.cu] [--arch sm90a] [--only REGEX]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Siblings in kernels/tools/ (this file runs as a script, so its directory is on sys.path).
from zyfa_kernel_build import ROOT, defines, load_variants


def selected_variants(
    root: Path = ROOT, src: str | None = None, arch: str | None = None, only: str | None = None
) -> list[dict[str, Any]]:
    """The checked VARIANTS entries, in file order, with this src and arch and a name matching `only`."""
    pattern = re.compile(only) if only else None
    return [
        v
        for v in load_variants(root)
        if (src is None or v["src"] == src)
        and (arch is None or v["arch"] == arch)
        and (pattern is None or pattern.search(v["name"]))
    ]


def define_line(v: dict[str, Any]) -> str:
    """`NAME -D... -D...`: a variant's name and the defines every build of it uses."""
    return " ".join([v["name"], *defines(v)])


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per selected variant; exit 1 when none is selected."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="only variants with this src (path under kernels/)")
    parser.add_argument("--arch", help="only variants of this arch (sm90a, gfx950)")
    parser.add_argument("--only", help="only variants whose name matches this regular expression")
    args = parser.parse_args(argv)
    variants = selected_variants(ROOT, args.src, args.arch, args.only)
    for v in variants:
        print(define_line(v))
    if not variants:
        print(f"no variant in kernels/variants.bzl matches {vars(args)}", file=sys.stderr)
    return 0 if variants else 1


if __name__ == "__main__":
    sys.exit(main())
