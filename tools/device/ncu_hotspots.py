"""Print the SASS instructions with the most warp-stall samples from an `ncu --page source --csv` export.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > src.csv
    python3 tools/device/ncu_hotspots.py src.csv [TOP]
    python3 tools/device/ncu_hotspots.py src.csv --executed TRYWAIT   # executions of matching SASS


Each line: the share of samples, the instruction's offset from the kernel's first instruction (as in
`cuobjdump -sass` of the same cubin), its text, and for a branch the instruction before it (for a
spin-wait, the barrier it polls).

Columns are found by name (Nsight Compute versions differ): the address, the SASS text and every
"Warp Stall Sampling" column; rows are ranked by the all-samples column.
"""

from __future__ import annotations

import csv
import gzip
import sys


def main(path: str, top: int = 40, executed: str | None = None) -> int:
    """Rank the instructions of one ncu source export (.csv or .csv.gz) by their stall samples, or with
    `executed`, count the executions of the instructions whose SASS contains that text."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
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
    if executed is not None:
        return _executed(path, head, body, src, executed, num)
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


def _executed(path: str, head: list[str], body: list[list[str]], src: int, text: str, num) -> int:  # noqa: ANN001
    """Warp-level executions of the instructions matching `text`, against all, and the top five sites."""
    col = next((i for i, c in enumerate(head) if c.strip() == "Instructions Executed"), None)
    if col is None:
        print(f"{path}: no 'Instructions Executed' column")
        return 1
    total = sum(num(r, col) for r in body)
    hits = sorted((r for r in body if text in r[src]), key=lambda r: -num(r, col))
    base = _address(body[0][0]) if body else 0
    matched = sum(num(r, col) for r in hits)
    print(f"{matched / 1e6:.1f}M of {total / 1e6:.1f}M warp instructions executed match {text!r}")
    for r in hits[:5]:
        print(f"{num(r, col) / 1e6:9.2f}M  {_address(r[0]) - base:#8x}  {r[src].strip()[:80]}")
    return 0


def _address(text: str) -> int:
    """An address column's value (hex or decimal); 0 when it is neither."""
    try:
        return int(text.strip(), 0)
    except ValueError:
        return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[1] == "--executed":
        sys.exit(main(args[0], executed=args[2]))
    sys.exit(main(args[0], int(args[1]) if len(args) > 1 else 40))
