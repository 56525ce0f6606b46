"""Side-by-side tables from Nsight Compute CSV exports (tools/device/data_dependence.sh's ncu.tgz).

Three views, one per export of `ncu -i REPORT --csv`:

    python3 tools/ncu_compare.py details details.csv [--metrics REGEX] [--sections REGEX]
        --page details: one row per (section, metric), one column per profiled kernel launch.
    python3 tools/ncu_compare.py raw raw.csv --metrics REGEX
        --page raw: the metrics whose names match, one column per launch.
    python3 tools/ncu_compare.py source source.csv [--top 15] [--base I --other J]
        --page source --print-source sass: per launch, the stall-reason totals of the warp-state samples and
        the SASS lines with the most samples; with --base / --other (launch indices as listed), the lines
        whose samples grew most from one launch to the other (same kernel: lines matched by offset).

Launches are numbered in the order of the export (workload_cycles.py prints which call each one is).
"""

from __future__ import annotations

import argparse
import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass, field


def read_rows(path: str) -> list[list[str]]:
    """All CSV rows of a file, ncu's "==PROF==" / "==WARNING==" lines dropped."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if not line.startswith("==")]
    return list(csv.reader(lines))


def number(text: str) -> float | None:
    """ncu's value text ("1,234.5", "12") as a float; None for anything else."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def print_table(title: str, columns: list[str], rows: Iterable[tuple[str, list[str]]]) -> None:
    """A plain-text table: a label column, then one right-aligned column per launch."""
    rows = list(rows)
    width = max([len(title)] + [len(label) for label, _ in rows])
    widths = [max([len(c)] + [len(values[k]) for _, values in rows]) for k, c in enumerate(columns)]
    print(f"{title:<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    for label, values in rows:
        print(f"{label:<{width}}  " + "  ".join(f"{v:>{w}}" for v, w in zip(values, widths, strict=True)))


def details(path: str, metrics: str, sections: str) -> None:
    """--page details (long format: one row per launch, section and metric) as one wide table."""
    rows = read_rows(path)
    start = next(n for n, r in enumerate(rows) if "ID" in r and "Metric Name" in r)  # after any app output
    head, rows = rows[start], rows[start:]
    col = {name: i for i, name in enumerate(head)}
    launches: dict[str, str] = {}
    values: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows[1:]:
        if len(r) != len(head):
            continue
        launch, section, metric = r[col["ID"]], r[col["Section Name"]], r[col["Metric Name"]]
        launches.setdefault(launch, r[col["Kernel Name"]])
        if re.search(sections, section) and re.search(metrics, metric):
            unit = r[col["Metric Unit"]]
            values.setdefault((section, f"{metric} [{unit}]" if unit else metric), {})[launch] = r[
                col["Metric Value"]
            ]
    for launch, kernel in launches.items():
        print(f"launch {launch}: {kernel}")
    ids = list(launches)
    print_table("metric", ids, ((f"{s}: {m}", [v.get(i, "-") for i in ids]) for (s, m), v in values.items()))


def raw(path: str, metrics: str) -> None:
    """--page raw (wide format: one row per launch; row 2 holds the units) filtered by metric name."""
    rows = read_rows(path)
    head, units, launches = rows[0], rows[1], [r for r in rows[2:] if len(r) == len(rows[0])]
    keep = [i for i, name in enumerate(head) if re.search(metrics, name)]
    kernel = head.index("Kernel Name") if "Kernel Name" in head else None
    for n, r in enumerate(launches):
        print(f"launch {n}: {r[kernel] if kernel is not None else '?'}")
    label = [f"{head[i]} [{units[i]}]" if units[i] else head[i] for i in keep]
    print_table(
        "metric",
        [str(n) for n in range(len(launches))],
        ((label[k], [r[i] for r in launches]) for k, i in enumerate(keep)),
    )


@dataclass
class Launch:
    """One kernel launch of a --page source export: its SASS lines with their counters."""

    kernel: str
    head: list[str] = field(default_factory=list)
    lines: list[list[str]] = field(default_factory=list)

    def column(self, name: str) -> int:
        """Index of a counter column."""
        return self.head.index(name)

    def samples(self, line: list[str]) -> float:
        """Warp-state samples of one SASS line (all samples, issued or not)."""
        return number(line[self.column("Warp Stall Sampling (All Samples)")]) or 0.0

    def offset(self, line: list[str]) -> int:
        """The line's address relative to the launch's first instruction (same binary: same offset)."""
        return int(line[0], 16) - int(self.lines[0][0], 16)

    def stall_totals(self) -> dict[str, float]:
        """Sum over lines of each stall_<reason> column (issued and not), largest first."""
        cols = [(i, n) for i, n in enumerate(self.head) if n.startswith("stall_") and "(Not Issued)" not in n]
        totals = {n: sum(number(line[i]) or 0.0 for line in self.lines) for i, n in cols}
        return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def source_launches(path: str) -> list[Launch]:
    """Split a --page source export into its launches (each starts with a "Kernel Name" row)."""
    launches: list[Launch] = []
    for r in read_rows(path):
        if not r:
            continue
        if r[0] == "Kernel Name":
            launches.append(Launch(kernel=r[1]))
        elif launches and r[0] == "Address":
            launches[-1].head = r
        elif launches and launches[-1].head and r[0].startswith("0x"):
            launches[-1].lines.append(r)
    return [launch for launch in launches if launch.lines]


def source(path: str, top: int, base: int | None, other: int | None) -> None:
    """Stall totals and the hottest SASS lines of every launch, or the lines that grew from base to other."""
    launches = source_launches(path)
    for n, launch in enumerate(launches):
        total = sum(launch.samples(line) for line in launch.lines)
        print(f"\nlaunch {n}: {launch.kernel}: {len(launch.lines)} SASS lines, {total:.0f} samples")
        stalls = launch.stall_totals()
        print(
            "  stalls: " + ", ".join(f"{k[6:]} {v / max(total, 1):.1%}" for k, v in list(stalls.items())[:8])
        )
        if base is None:
            hot = sorted(launch.lines, key=launch.samples, reverse=True)[:top]
            for line in hot:
                print(f"  {launch.offset(line):#07x} {launch.samples(line):8.0f}  {line[1].strip()}")
    if base is None or other is None:
        return
    a, b = launches[base], launches[other]
    if a.kernel != b.kernel or len(a.lines) != len(b.lines):
        raise SystemExit(f"launches {base} and {other} are different kernels: lines cannot be matched")
    ta = sum(a.samples(line) for line in a.lines)
    tb = sum(b.samples(line) for line in b.lines)
    print(f"\nlines whose samples grew most, launch {base} ({ta:.0f}) -> {other} ({tb:.0f}):")
    pairs = sorted(zip(a.lines, b.lines, strict=True), key=lambda p: a.samples(p[0]) - b.samples(p[1]))
    for la, lb in pairs[:top]:
        print(f"  {a.offset(la):#07x} {a.samples(la):8.0f} -> {b.samples(lb):8.0f}  {la[1].strip()}")


def main() -> None:
    """Parse the arguments and print the chosen view."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="view", required=True)
    d = sub.add_parser("details")
    d.add_argument("csv")
    d.add_argument("--metrics", default=".")
    d.add_argument("--sections", default=".")
    r = sub.add_parser("raw")
    r.add_argument("csv")
    r.add_argument("--metrics", required=True)
    s = sub.add_parser("source")
    s.add_argument("csv")
    s.add_argument("--top", type=int, default=15)
    s.add_argument("--base", type=int)
    s.add_argument("--other", type=int)
    a = p.parse_args()
    if a.view == "details":
        details(a.csv, a.metrics, a.sections)
    elif a.view == "raw":
        raw(a.csv, a.metrics)
    else:
        source(a.csv, a.top, a.base, a.other)


if __name__ == "__main__":
    main()
