"""tools/device/ncu_compare.py and ncu_hotspots.py on Nsight Compute exports made up here (no GPU, no ncu).

The committed profiler evidence (docs/benchmarks/*/ncu-vs-fa3.md) is these tools' output, so they must read
the numbers from the right columns: a raw-page export's unit row and thousands separators, a source-page
export's address and execution columns, gzip or not; and rank by the right values.
"""

from __future__ import annotations

import csv
import gzip
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DEVICE = REPO / "tools" / "device"
sys.path.insert(0, str(DEVICE))
import ncu_compare  # noqa: E402

STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def _raw(path: Path, name: str, metrics: dict[str, float]) -> None:
    head = ["ID", "Kernel Name", *metrics]
    units = ["", "", *("" for _ in metrics)]
    with path.open("w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerows([head, units, ["0", name, *(f"{v:,.3f}" for v in metrics.values())]])


def test_side_by_side_reads_and_ranks(tmp_path: Path) -> None:
    rng = random.Random()
    # Values as the export writes them (three decimals), so the expected cells round the same numbers the tool
    # reads. Times in nanoseconds, with thousands separators.
    time_a, time_b = round(rng.uniform(1e6, 9e6), 3), round(rng.uniform(1e6, 9e6), 3)
    wait, long_sb = round(rng.uniform(1.0, 3.0), 3), round(rng.uniform(0.1, 0.9), 3)
    _raw(tmp_path / "a.raw.csv", "kernel_a", {"gpu__time_duration.sum": time_a, STALL.format("wait"): wait,
                                               STALL.format("long_scoreboard"): long_sb})  # fmt: skip
    _raw(tmp_path / "b.raw.csv", "kernel_b", {"gpu__time_duration.sum": time_b, STALL.format("wait"): 0.01})
    table = ncu_compare.table([tmp_path / "a.raw.csv", tmp_path / "b.raw.csv"]).splitlines()
    assert table[0] == "| metric | a | b |"
    assert "| kernel | kernel_a | kernel_b |" in table
    assert f"| kernel time (us) | {time_a / 1e3:.1f} | {time_b / 1e3:.1f} |" in table
    stalls = [line for line in table if line.startswith("| stall:")]
    # Largest first over the columns; a reason a profile lacks prints "-"; tiny reasons are left out.
    assert stalls[0] == f"| stall: wait (cycles per issue) | {wait:.2f} | 0.01 |"
    assert stalls[1] == f"| stall: long_scoreboard (cycles per issue) | {long_sb:.2f} | - |"
    assert len(stalls) == 2


def _source(path: Path, rows: list[tuple[int, str, int, int]]) -> None:
    samples = ["Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)"]
    head = ["Address", "Source", *samples, "Instructions Executed"]
    body = [[hex(a), s, str(samples), "0", f"{ex:,}"] for a, s, samples, ex in rows]
    with gzip.open(path, "wt", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows([head, *body])


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(DEVICE / "ncu_hotspots.py"), *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_hotspots_rank_offsets_and_barrier(tmp_path: Path) -> None:
    base = 0x7F0000000000 + 16 * random.randrange(1 << 20)
    polls = random.randrange(10**6, 10**8)
    rows = [
        (base, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24", 50, 1000),
        (base + 0x10, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5+0x28038], R2", 10, polls),
        (base + 0x20, "@!P0 BRA 0x10", 900, polls),
        (base + 0x30, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5+0x28008], R2", 40, 7),
    ]
    src = tmp_path / "k.source.csv.gz"
    _source(src, rows)
    out = _run(str(src), "2").splitlines()
    assert out[0].startswith("4 instructions, 1000 samples")
    # The spin branch first, at its offset from the kernel's first instruction, with the barrier it polls.
    assert out[1].split()[:2] == ["90.0%", "0x20"] and out[1].endswith(
        "after: SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5+0x28038], R2"
    )
    assert out[2].split()[:2] == ["5.0%", "0x0"]
    executed = _run(str(src), "--executed", "TRYWAIT").splitlines()
    total = 1000 + 2 * polls + 7
    assert (
        executed[0]
        == f"{(polls + 7) / 1e6:.1f}M of {total / 1e6:.1f}M warp instructions executed match 'TRYWAIT'"
    )
    assert executed[1].split()[:2] == [f"{polls / 1e6:.2f}M", "0x10"]
    assert executed[2].split()[:2] == ["0.00M", "0x30"]
