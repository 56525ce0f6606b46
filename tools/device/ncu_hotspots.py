"""Print the SASS instructions with the most warp-stall samples from an `ncu --page source --csv` export.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > src.csv
    python3 tools/device/ncu_hotspots.py src.csv [TOP]

Each line: the share of samples, the instruction's offset from the kernel's first instruction (as in
`cuobjdump -sass` of the same cubin), its text, and for a branch the instruction before it (for a
spin-wait, the barrier it polls).

Columns are found by name (Nsight Compute versions differ): the address, the SASS text and every
"Warp Stall Sampling" column; rows are ranked by the all-samples column.
"""

from __future__ import annotations

import csv
import sys


def main(path: str, top: int = 40) -> int:
    """Rank the instructions of one ncu source export by their stall samples."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head_at = next((i for i, r in enumerate(rows) if any("Source" in c for c in r)), None)
    if head_at is None:
        print(f"{path}: no 'Source' header row; first lines: {rows[:3]}")
        return 1
    head = rows[head_at]
    src = next(i for i, c in enumerate(head) if c.strip() == "Source" or "Source" in c)
    stall = [i for i, c in enumerate(head) if "Stall Sampling" in c]
    if not stall:
        print(f"{path}: no stall-sampling column in {head}")
        return 1
    key = next((i for i in stall if "All" in head[i] and "Not" not in head[i]), stall[0])

    def num(r: list[str], i: int) -> float:
        try:
            return float(r[i].replace(",", ""))
        except (ValueError, IndexError):
            return 0.0

    body = rows[head_at + 1 :]
    total = sum(num(r, key) for r in body) or 1.0
    base = _address(body[0][0]) if body else 0
    print(f"{len(body)} instructions, {total:.0f} samples in '{head[key]}'; offsets from the first one")
    ranked = sorted(range(len(body)), key=lambda i: -num(body[i], key))[:top]
    for i in ranked:
        r = body[i]
        # A spin-wait's branch says nothing alone: the instruction before it names the barrier.
        before = f"   after: {body[i - 1][src].strip()[:70]}" if i > 0 and "BRA" in r[src] else ""
        offset = _address(r[0]) - base
        print(f"{100 * num(r, key) / total:5.1f}%  {offset:#8x}  {r[src].strip()[:80]}{before}")
    return 0


def _address(text: str) -> int:
    """An address column's value (hex or decimal); 0 when it is neither."""
    try:
        return int(text.strip(), 0)
    except ValueError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))
