"""Clock and per-clock ratios of ZYFA against its peer, over every committed product sweep (Gaussian inputs).

Each throughput row carries the mean SM clock its timed calls ran at (NVML samples inside the timed region)
and TFLOP/s per GHz. On a power-capped H200 a kernel that does more work per cycle can be clocked lower, so
TFLOP/s = (TFLOP/s per GHz) x clock; this splits each TFLOP/s ratio into those two factors, per seqlen.
A second table does the same for ZYFA's best d=128 kernel of each precision at 16K against the run's GEMM
ceiling of that precision (each run's ceiling was a 10-call burst, at the top clock).
Run from the repository root: python3 docs/benchmarks/2026-12-05/session21_cpu/clock_ratios.py [FIRST]
(FIRST: the first run folder to include, e.g. 2026-12-03/session12_call3; default: every sweep).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2]
PAIRS = [
    ("zyfa-bf16", "fa4-bf16", "gqa128"),
    ("zyfa-bf16", "fa4-bf16", "mla192"),
    ("zyfa-fp8-lean", "cudnn-fp8", "gqa128"),
    ("zyfa-fp8-lean", "cudnn-fp8", "mla192"),
]
SEQLENS = (2048, 4096, 8192, 16384, 32768)


def sweeps(first: str = "") -> list[tuple[str, dict, dict]]:
    """(run folder, {(impl, shape, seqlen): row}, ceilings) of every Gaussian sweep with clock samples, from
    `first` on (folders in name order: dated folders, then sessionN_callM)."""
    out = []
    for path in sorted(BENCH.glob("2026-12-*/*/throughput.json"), key=_order):
        if first and _order(path) < _order(BENCH / first / "throughput.json"):
            continue
        doc = json.loads(path.read_text())
        ok = {
            (r["impl"], r["shape"], r["seqlen_q"]): r
            for r in doc["rows"]
            if r["status"] == "ok" and r.get("workload", "gaussian") == "gaussian" and r.get("tflops_per_ghz")
        }
        if ok:
            out.append((f"{path.parent.parent.name}/{path.parent.name}", ok, doc.get("ceilings") or {}))
    return out


def _order(path: Path) -> tuple[str, int, int]:
    """A run folder's place in time: its date, then session and call numbers (session16 after session5)."""
    digits = [int("".join(c for c in part if c.isdigit()) or 0) for part in path.parent.name.split("_")]
    return (path.parent.parent.name, *(digits + [0, 0])[:2])


def main() -> None:
    runs = sweeps(sys.argv[1] if len(sys.argv) > 1 else "")
    print(f"{len(runs)} sweeps: {', '.join(name for name, _, _ in runs)}")
    print(
        "pair | seqlen | runs | clock ratio mean (min-max) | runs with a lower clock "
        "| per-GHz ratio mean (min-max) | TFLOP/s ratio mean (min-max)"
    )
    for zyfa, peer, shape in PAIRS:
        for s in SEQLENS:
            got = [
                (t[(zyfa, shape, s)], t[(peer, shape, s)])
                for _, t, _ in runs
                if (zyfa, shape, s) in t and (peer, shape, s) in t
            ]
            if not got:
                continue
            clock = [a["clocks"]["sm_mhz_mean"] / b["clocks"]["sm_mhz_mean"] for a, b in got]
            per_ghz = [a["tflops_per_ghz"] / b["tflops_per_ghz"] for a, b in got]
            tflops = [a["tflops"] / b["tflops"] for a, b in got]
            cells = [
                f"{statistics.mean(x):.3f} ({min(x):.3f}-{max(x):.3f})" for x in (clock, per_ghz, tflops)
            ]
            lower = sum(c < 1 for c in clock)
            print(
                f"{zyfa} / {peer} {shape} | {s} | {len(got)} | {cells[0]} | {lower} | {cells[1]} | {cells[2]}"
            )

    print()
    print(
        "run | kernel at 16K | TFLOP/s | its clock | GEMM TFLOP/s | GEMM clock | TFLOP/s ratio "
        "| per-GHz ratio"
    )
    for name, t, ceil in runs:
        for impl, dtype in (("zyfa-fp8-lean", "fp8"), ("zyfa-bf16", "bf16")):
            row, gemm, mhz = (
                t.get((impl, "gqa128", 16384)),
                ceil.get(f"{dtype}_gemm_tflops"),
                ceil.get(f"{dtype}_gemm_sm_mhz"),
            )
            if row is None or not isinstance(gemm, float) or not mhz:
                continue
            per_ghz = row["tflops_per_ghz"] / (gemm / mhz * 1e3)
            print(
                f"{name} | {impl} | {row['tflops']:.0f} | {row['clocks']['sm_mhz_mean']:.0f} | {gemm:.0f} "
                f"| {mhz:.0f} | {row['tflops'] / gemm:.3f} | {per_ghz:.3f}"
            )


if __name__ == "__main__":
    main()
