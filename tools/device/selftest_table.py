"""The self-test's compact timing tables, from the test programs' bench logs (sm90_wgmma_selftest.sh).

    python3 tools/device/selftest_table.py INPUT LOG1 LOG2 "NAME NAME ..."

LOG1 / LOG2 are the two timing passes' log paths with NAME in place of the build name. One table of ws
TFLOP/s per build and shape (pass 1 / pass 2), then the same for TFLOP/s per GHz of SM clock where the
logs have `bench clock` lines (the test program's NVML samples while each launch runs): the H200 runs
power-capped and its clock moves by 10-25% between launches, most of the pass-to-pass spread, so an
instruction-level change reads clearer per cycle. A change that costs power shows in TFLOP/s, not per
GHz: read both.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

BENCH = re.compile(
    r"^bench \S+\s+b(\d+) s(\d+)\s+hq(\d+)\s+hkv(\d+)\s+\| ws\s+\S+ ms\s+([\d.]+) TFLOP/s"
    r".*?contract \(16 rows\) out (\S+) lse max (\S+) \| repeat (\S+)"
)
CLOCK = re.compile(r"^bench clock ws\s+(\d+) MHz\s+([\d.]+) Mcycles\s+([\d.]+) TFLOP/s/GHz")


@dataclass
class Row:
    """One shape's figures in one log."""

    tflops: float
    contract: str  # "out/lse" errors against the contract
    repeat: str
    per_ghz: float = 0.0  # 0: no clock line


Build = tuple[str, dict[str, Row], dict[str, Row]]  # name, pass 1, pass 2


def read_log(path: str) -> dict[str, Row]:
    """Shape key ("b2s16384h32") -> Row, in log order; a clock line belongs to the bench line before it."""
    rows: dict[str, Row] = {}
    if not os.path.exists(path):
        return rows
    key = None
    with open(path) as f:
        for line in f:
            if m := BENCH.match(line):
                key = f"b{m[1]}s{m[2]}h{m[3]}"
                rows[key] = Row(float(m[5]), f"{m[6]}/{m[7]}", m[8])
            elif (m := CLOCK.match(line)) and key is not None:
                rows[key].per_ghz = float(m[3])
    return rows


def table(title: str, builds: list[Build], metric: str) -> list[str]:
    """The table of one metric ("tflops" or "per_ghz") over every build, as lines."""
    shapes: list[str] = []
    for _, p1, p2 in builds:
        for s in [*p1, *p2]:
            if s not in shapes:
                shapes.append(s)

    def value(rows: dict[str, Row], s: str) -> float:
        return getattr(rows[s], metric) if s in rows else 0.0

    width = max([len(name) for name, _, _ in builds] + [10])
    head = f"{'build':<{width}} " + " ".join(f"{s:>22}" for s in shapes)
    out = [title, head + "  16K: contract out/lse, repeat"]
    for name, p1, p2 in builds:
        cells = [f"{value(p1, s):6.1f}/{value(p2, s):6.1f}" for s in shapes]
        last = p1.get(shapes[-1]) if shapes else None
        tail = f"  {last.contract}, {last.repeat}" if last else "  (no bench lines)"
        out.append(f"{name:<{width}} " + " ".join(f"{c:>22}" for c in cells) + tail)
    return out


def main(argv: list[str]) -> int:
    """Print the TFLOP/s table, and the per-GHz one when the logs hold clock lines."""
    inp, log1, log2, spec = argv
    builds: list[Build] = []
    for name in spec.split():
        logs = (read_log(log.replace("NAME", name)) for log in (log1, log2))
        builds.append((name, *logs))
    what = "(pass 1/pass 2)"
    print("\n".join(table(f"== TFLOP/s per build and shape, {inp} inputs {what} ==", builds, "tflops")))
    if any(row.per_ghz for _, p1, p2 in builds for row in [*p1.values(), *p2.values()]):
        title = f"== TFLOP/s per GHz of SM clock per build and shape, {inp} inputs {what} =="
        print("\n".join(table(title, builds, "per_ghz")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
