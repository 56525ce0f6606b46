"""Side-by-side table of Nsight Compute profiles: one column per `ncu --page raw --csv` export.

    python3 tools/device/ncu_compare.py A.raw.csv B.raw.csv ...      # markdown table on stdout
    python3 tools/device/ncu_compare.py --brief A.raw.csv            # one line: kernel, time, clock

Rows: time, clock and cycles, launch shape and registers, the tensor pipe's and the issue slots' busy
shares, instructions per pipe (per tile of work they are comparable between two kernels on one problem),
memory traffic, and the warp-stall reasons (cycles per issued instruction), largest first. Metrics a
profile lacks print as "-"; column names are the file names without `.raw.csv`.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

_PCT = "{}.avg.pct_of_peak_sustained_active"
_SUFFIX = "_per_issue_active.ratio"
# (label, metric, scale, format): the fixed rows.
_ROWS = [
    ("kernel time (us)", "gpu__time_duration.sum", 1e-3, "{:.1f}"),
    ("SM clock (MHz)", "sm__cycles_elapsed.avg.per_second", 1e-6, "{:.0f}"),
    ("SM cycles (M)", "sm__cycles_elapsed.max", 1e-6, "{:.2f}"),
    ("grid", "launch__grid_size", 1, "{:.0f}"),
    ("registers / thread", "launch__registers_per_thread", 1, "{:.0f}"),
    ("tensor pipe busy (% of active)", _PCT.format("sm__pipe_tensor_op_hmma_cycles_active"), 1, "{:.1f}"),
    (
        "tensor pipe busy, GMMA (% of active)",
        _PCT.format("sm__pipe_tensor_op_gmma_cycles_active"),
        1,
        "{:.1f}",
    ),
    ("issue slots busy (% of active)", _PCT.format("smsp__issue_active"), 1, "{:.1f}"),
    ("warps per scheduler", "smsp__warps_active.avg.per_cycle_active", 1, "{:.2f}"),
    ("instructions (M)", "smsp__inst_executed.sum", 1e-6, "{:.1f}"),
    ("  FMA pipe (M)", "sm__inst_executed_pipe_fma.sum", 1e-6, "{:.1f}"),
    ("  FMA heavy (M)", "sm__inst_executed_pipe_fmaheavy.sum", 1e-6, "{:.1f}"),
    ("  ALU pipe (M)", "sm__inst_executed_pipe_alu.sum", 1e-6, "{:.1f}"),
    ("  XU / MUFU pipe (M)", "sm__inst_executed_pipe_xu.sum", 1e-6, "{:.1f}"),
    ("  FP16 pipe (M)", "sm__inst_executed_pipe_fp16.sum", 1e-6, "{:.1f}"),
    ("  uniform pipe (M)", "sm__inst_executed_pipe_uniform.sum", 1e-6, "{:.1f}"),
    ("  LSU pipe (M)", "sm__inst_executed_pipe_lsu.sum", 1e-6, "{:.1f}"),
    ("  ADU pipe (M)", "sm__inst_executed_pipe_adu.sum", 1e-6, "{:.1f}"),
    ("  CBU (branch) pipe (M)", "sm__inst_executed_pipe_cbu.sum", 1e-6, "{:.1f}"),
    ("FMA pipe busy (% of active)", _PCT.format("sm__pipe_fma_cycles_active"), 1, "{:.1f}"),
    ("ALU pipe busy (% of active)", _PCT.format("sm__pipe_alu_cycles_active"), 1, "{:.1f}"),
    ("XU pipe busy (% of active)", _PCT.format("sm__inst_executed_pipe_xu"), 1, "{:.1f}"),
    ("DRAM read (MB)", "dram__bytes_read.sum", 1e-6, "{:.0f}"),
    ("L2 hit rate (%)", "lts__t_sector_hit_rate.pct", 1, "{:.1f}"),
    ("L2 -> SM read (MB)", "lts__t_sectors_srcunit_tex_op_read.sum", 32e-6, "{:.0f}"),
    ("shared memory wavefronts (M)", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1e-6, "{:.1f}"),
]
_STALL_RATIO = "smsp__average_warps_issue_stalled_"


def read_raw(path: Path) -> dict[str, float | str]:
    """The first kernel row of a raw-page export, as metric -> value (numbers parsed where they parse)."""
    with path.open(newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r or "ID" in r[:1]), None)
    if head_at is None:
        raise ValueError(f"{path}: no header row with 'Kernel Name'")
    head = rows[head_at]
    data = next((r for r in rows[head_at + 1 :] if r and r[0].strip().isdigit()), None)
    if data is None:
        raise ValueError(f"{path}: no kernel row")
    out: dict[str, float | str] = {}
    for k, v in zip(head, data, strict=False):
        try:
            out[k] = float(v.replace(",", ""))
        except ValueError:
            out[k] = v
    return out


def _cell(prof: dict[str, float | str], metric: str, scale: float, fmt: str) -> str:
    v = prof.get(metric)
    return fmt.format(v * scale) if isinstance(v, float) else "-"


def stall_rows(profs: list[dict[str, float | str]]) -> list[tuple[str, str]]:
    """(reason, metric) of the warp-stall ratios present, by their largest value over the profiles."""
    names = {k for p in profs for k in p if k.startswith(_STALL_RATIO) and k.endswith(_SUFFIX)}

    def peak(m: str) -> float:
        return max((v for p in profs if isinstance(v := p.get(m), float)), default=0.0)

    ranked = sorted(names, key=peak, reverse=True)
    return [(m[len(_STALL_RATIO) :].removesuffix(_SUFFIX), m) for m in ranked if peak(m) >= 0.05]


def table(paths: list[Path]) -> str:
    """The markdown side-by-side table of these exports."""
    profs = [read_raw(p) for p in paths]
    cols = [p.name.removesuffix(".raw.csv") for p in paths]
    lines = ["| metric | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines.append("| kernel | " + " | ".join(str(p.get("Kernel Name", "?"))[:60] for p in profs) + " |")
    for label, metric, scale, fmt in _ROWS:
        lines.append(f"| {label} | " + " | ".join(_cell(p, metric, scale, fmt) for p in profs) + " |")
    for reason, metric in stall_rows(profs):
        cells = " | ".join(_cell(p, metric, 1, "{:.2f}") for p in profs)
        lines.append(f"| stall: {reason} (cycles per issue) | {cells} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the table, or with --brief one line per file."""
    if not argv:
        print(__doc__)
        return 2
    if argv[0] == "--brief":
        for p in map(Path, argv[1:]):
            prof = read_raw(p)
            t = _cell(prof, "gpu__time_duration.sum", 1e-3, "{:.1f}")
            mhz = _cell(prof, "sm__cycles_elapsed.avg.per_second", 1e-6, "{:.0f}")
            print(f"{p.name}: {str(prof.get('Kernel Name', '?'))[:60]} {t} us at {mhz} MHz")
        return 0
    print(table([Path(a) for a in argv]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
