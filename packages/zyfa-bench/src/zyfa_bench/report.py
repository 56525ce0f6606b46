"""Reports from result files: a markdown document and at most two PNG figures.

- headline: the three tables of zyfa_bench.headline (what the benchmark index shows);
- throughput: one table per (shape, workload, precision) with seqlen down and implementations across
  (TFLOP/s), ZYFA's ratio to the best peer of the same precision, and a detail table (ms, TFLOP/s per GHz,
  clock, host overhead, check error, status); the figure `throughput.png` plots TFLOP/s against seqlen,
  one line per implementation, one panel per (shape, workload, precision). Gaussian rows are named by
  their shape alone, rows of any other workload by "shape workload" (kernel speed can depend on the data);
- accuracy: relative L2 errors per workload and implementation (median over seeds and problems, min–max
  in brackets), against the dequantised inputs and against the BF16 inputs; the figure `accuracy.png`
  shows them as bars with min–max error bars, one group per workload;
- the performance targets (zyfa_bench.tables.TARGETS) evaluated from whatever rows are present (a target
  without data says so), once per workload (the non-Gaussian ones named in the target);
- clocks: the summary of each `zyfa-bench clocks` run.
matplotlib is imported only when figures are drawn (Agg backend, no display needed).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from zyfa_bench.headline import headline
from zyfa_bench.results import load_results
from zyfa_bench.tables import (
    TARGETS,
    VERSION_KEYS,
    fmt,
    impl_order,
    md_table,
    ok_rows,
    panel,
    ratio_text,
    sides_text,
    spread,
    target_results,
    workload_of,
    worst_seqlens,
)

__all__ = [
    "TARGETS",
    "build_report",
    "report_markdown",
    "summary_text",
    "target_results",
    "write_report",
]


# ---------------------------------------------------------------- throughput
def throughput_tables(rows: list[dict[str, Any]]) -> str:
    """Pivot tables (TFLOP/s) per (shape, workload, precision) with ZYFA's ratio to the best peer."""
    ok = ok_rows(rows)
    blocks = []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in ok:
        groups[(panel(r), r["precision"])].append(r)
    for (shape, precision), grp in sorted(groups.items()):
        impls = impl_order(grp)
        zyfa = [i for i in impls if i.startswith("zyfa")]
        peers = [i for i in impls if not i.startswith("zyfa")]
        by = {(r["seqlen_q"], r["impl"]): r for r in grp}
        header = ["seqlen", "batch", *impls] + (["zyfa / best peer"] if zyfa and peers else [])
        body = []
        for s in sorted({r["seqlen_q"] for r in grp}):
            cells = [by.get((s, i), {}).get("tflops") for i in impls]
            batch = next(r["batch"] for r in grp if r["seqlen_q"] == s)
            line: list[Any] = [s, batch, *cells]
            if zyfa and peers:
                best_z = max((by[(s, i)]["tflops"] for i in zyfa if (s, i) in by), default=None)
                best_p = max((by[(s, i)]["tflops"] for i in peers if (s, i) in by), default=None)
                line.append(f"{best_z / best_p:.2f}×" if best_z and best_p else None)
            body.append(line)
        notes = {r["impl"]: r.get("note") for r in grp if r.get("note")}
        foot = "".join(f"\n\n- {impl}: {note}" for impl, note in notes.items())
        blocks.append(
            f"### {shape}, {precision.upper()} — TFLOP/s (causal FLOPs)\n\n" + md_table(header, body) + foot
        )
    return "\n\n".join(blocks)


def throughput_details(rows: list[dict[str, Any]]) -> str:
    """Every row: time, TFLOP/s, clock-normalised rate, host overhead, check error, status."""
    header = [
        "impl",
        "problem",
        "ms",
        "TFLOP/s",
        "TFLOP/s/GHz",
        "SM MHz",
        "host µs",
        "graph µs",
        "check",
        "status",
    ]
    body = []
    for r in rows:
        host = r.get("host") or {}
        clocks = r.get("clocks") or {}
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('reason', '')[:90]}"
        body.append(
            [
                r["impl"],
                r.get("label") if workload_of(r) == "gaussian" else f"{r.get('label')} {workload_of(r)}",
                r.get("ms"),
                r.get("tflops"),
                r.get("tflops_per_ghz"),
                clocks.get("sm_mhz_mean"),
                host.get("eager_us"),
                host.get("graph_us") if host.get("graph_us") is not None else host.get("graph_error"),
                r.get("check_rel_l2"),
                status,
            ]
        )
    return md_table(header, body)


def targets_table(rows: list[dict[str, Any]], ceilings: dict[str, Any]) -> str:
    """The performance targets with measured ratios (and 'no data' where a side is missing), once per workload
    (Gaussian first; the others name their workload in the target)."""
    body = []
    results = target_results(rows, ceilings)
    first = results[0]["workload"]
    for t in results:
        name = t["target"] if t["workload"] == "gaussian" else f"{t['target']} ({t['workload']})"
        need = f"≥ {t['need']:.2f}×"
        if t["ratio"] is not None:
            shown = ratio_text(t["ratio"], t["need"]) + sides_text(t)
            body.append([name, t["seqlen"], shown, need, "met" if t["ratio"] >= t["need"] else "MISSED"])
        elif t["workload"] == first:
            body.append([name, t["seqlen"], "no data", need, "–"])
    for w in worst_seqlens(rows):
        verdict = "met" if w["ratio"] >= 1.0 else "MISSED"
        name = f"{panel(w)} {w['precision']}: ZYFA vs best peer, worst seqlen"
        body.append([name, w["seqlen"], ratio_text(w["ratio"], 1.0), "≥ 1.00×", verdict])
    return md_table(["target", "seqlen", "measured", "needed", ""], body)


# ---------------------------------------------------------------- accuracy
def _problem(r: dict[str, Any]) -> str:
    """'workload shape' of an accuracy row (the x groups of the figure, the first column of the table)."""
    shape = r.get("shape") or f"{r['heads_q']}x{r['heads_kv']}x{r['d_qk']}x{r['d_v']}"
    return f"{r['workload']} {shape}"


def _acc_groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str, Any], list[dict[str, Any]]]:
    """Rows by (workload + shape, impl, rotate); several seeds (or captured layers) share a group."""
    groups: dict[tuple[str, str, Any], list[dict[str, Any]]] = defaultdict(list)
    for r in ok_rows(rows):
        groups[(_problem(r), r["impl"], r.get("rotate"))].append(r)
    return groups


def accuracy_tables(rows: list[dict[str, Any]]) -> str:
    """Per workload: median (min–max) rel L2 vs dequantised and vs BF16 inputs, and max abs error."""
    groups = _acc_groups(rows)
    header = [
        "workload, shape",
        "impl",
        "rotate",
        "rel L2 vs dequant",
        "rel L2 vs BF16",
        "max abs vs BF16",
        "n",
    ]
    body = []
    for (wl, impl, rot), grp in groups.items():
        cells = []
        for key in ("rel_l2_vs_dequant", "rel_l2_vs_bf16", "max_abs_vs_bf16"):
            sp = spread([r.get(key) for r in grp])
            cells.append(None if sp is None else f"{fmt(sp[0])} ({fmt(sp[1])}–{fmt(sp[2])})")
        body.append([wl, impl, "–" if rot is None else ("on" if rot else "off"), *cells, len(grp)])
    failed: dict[tuple[str, str, str], int] = defaultdict(int)
    for r in rows:
        if r.get("status") != "ok":
            failed[(r["impl"], r["status"], str(r.get("reason", ""))[:150])] += 1
    text = md_table(header, body)
    if failed:
        text += "\n\nNot measured:\n\n" + md_table(
            ["impl", "status", "reason", "rows"], [[*k, n] for k, n in failed.items()]
        )
    return text


def _error_ratio(
    prob: str, impl: str, z: float | None, ref: float | None, ref_name: str, need: float
) -> list[Any]:
    """One accuracy-target line: `impl`'s median error `z` over `ref_name`'s `ref`, at most `need`."""
    label, needed = f"{impl} / {ref_name} (vs dequant)", f"≤ {need:.2f}×"
    if z is None or not ref:
        return [prob, label, "no data", needed, "–"]
    return [prob, label, f"{z / ref:.2f}×", needed, "met" if z / ref <= need else "MISSED"]


def accuracy_targets(rows: list[dict[str, Any]]) -> str:
    """The accuracy targets (ZYFA FP8's own error <= 0.5x cuDNN FP8's, and <= the most accurate FP8 peer's),
    and what the Q/K rotation recovers against the BF16 truth."""
    groups = _acc_groups(rows)
    med = {k: spread([r.get("rel_l2_vs_dequant") for r in g]) for k, g in groups.items()}
    truth = {k: spread([r.get("rel_l2_vs_bf16") for r in g]) for k, g in groups.items()}
    problems = list(dict.fromkeys(k[0] for k in groups))
    zyfa_fp8 = sorted({k[1] for k in groups if k[1].startswith("zyfa-fp8")})
    # Median own error of every FP8 row group with rotation off (BF16 rows have rotate None).
    fp8 = {(k[0], k[1]): m[0] for k, m in med.items() if k[2] is False and m}
    body = []
    for prob in problems:
        ours = [(i, fp8.get((prob, i))) for i in zyfa_fp8]
        body += [_error_ratio(prob, i, z, fp8.get((prob, "cudnn-fp8")), "cudnn-fp8", 0.5) for i, z in ours]
        peers = [
            (e, i) for (p, i), e in fp8.items() if p == prob and not i.startswith(("zyfa", "exact-attention"))
        ]
        if peers:
            err, name = min(peers)
            body += [_error_ratio(prob, i, z, err, f"most accurate FP8 peer, {name}", 1.0) for i, z in ours]
    rot = []
    for prob in problems:
        for impl in ("exact-attention-on-fp8-inputs", *zyfa_fp8):
            off, on = truth.get((prob, impl, False)), truth.get((prob, impl, True))
            if off and on:
                rot.append([prob, impl, off[0], on[0], f"{off[0] / on[0]:.2f}×" if on[0] > 0 else "–"])
    text = md_table(["workload, shape", "target", "measured", "needed", ""], body) if body else ""
    if rot:
        text += "\n\nQ/K rotation, rel L2 vs the BF16 truth:\n\n" + md_table(
            ["workload, shape", "impl", "rotation off", "rotation on", "off / on"], rot
        )
    return text


# ---------------------------------------------------------------- figures
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_throughput(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """TFLOP/s vs seqlen, one line per implementation, a panel per (shape, workload, precision), two a row."""
    ok = ok_rows(rows)
    panels = sorted({(panel(r), r["precision"]) for r in ok})
    if not panels:
        return None
    plt = _pyplot()
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.4 * nrows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (shape, prec) in zip(axes.flat, panels, strict=False):
        grp = [r for r in ok if panel(r) == shape and r["precision"] == prec]
        for impl in impl_order(grp):
            pts = sorted((r["seqlen_q"], r["tflops"]) for r in grp if r["impl"] == impl)
            style = "-o" if impl.startswith("zyfa") else "--s"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=impl, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("seqlen (tokens per call fixed: batch = tokens / seqlen)")
        ax.set_ylabel("TFLOP/s (causal FLOPs)")
        ax.set_title(f"{shape} {prec.upper()}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_accuracy(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Bars of rel L2 error per workload and implementation (median, min–max error bars), log scale."""
    groups = _acc_groups(rows)
    if not groups:
        return None
    plt = _pyplot()
    workloads = list(dict.fromkeys(k[0] for k in groups))  # "workload shape" groups
    series = list(dict.fromkeys((k[1], k[2]) for k in groups))
    colors = plt.get_cmap("tab20").colors
    fig, axes = plt.subplots(1, 2, figsize=(max(10.0, 0.35 * len(workloads) * len(series) + 6), 4.8))
    width = 0.8 / max(1, len(series))
    panels = (
        ("rel_l2_vs_dequant", "vs dequantised inputs (own error)"),
        ("rel_l2_vs_bf16", "vs original BF16 inputs"),
    )
    for ax, (key, title) in zip(axes, panels, strict=True):
        for j, (impl, rot) in enumerate(series):
            xs, ys, lo, hi = [], [], [], []
            for i, wl in enumerate(workloads):
                sp = spread([r.get(key) for r in groups.get((wl, impl, rot), [])])
                if sp is None or sp[0] <= 0:
                    continue  # zero (the floor vs itself) cannot sit on a log axis
                xs.append(i + j * width)
                ys.append(sp[0])
                lo.append(sp[0] - sp[1])
                hi.append(sp[2] - sp[0])
            label = impl if rot is None else f"{impl} rot={'on' if rot else 'off'}"
            ax.bar(xs, ys, width, yerr=[lo, hi], label=label, capsize=2, color=colors[j % len(colors)])
        ax.set_yscale("log")
        ax.set_xticks([i + (len(series) - 1) * width / 2 for i in range(len(workloads))])
        ax.set_xticklabels(workloads, fontsize=8)
        ax.set_ylabel("‖out − ref‖ / ‖ref‖ (median; bars: min–max)")
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    axes[1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- documents
def _header(doc: dict[str, Any]) -> str:
    dev = doc.get("device", {})
    v = doc.get("versions", {})
    keep = ", ".join(f"{k} {v[k]}" for k in VERSION_KEYS if v.get(k))
    return (
        f"- `{doc['kind']}` measured {doc.get('created')}: `{' '.join(doc.get('command', []))}`\n"
        f"- device: {dev.get('name')} ({dev.get('backend')}, driver {dev.get('driver')})\n"
        f"- versions: {keep}"
    )


def build_report(paths: list[str | Path]) -> tuple[str, dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """(markdown, rows by kind, merged ceilings) for the result files `paths`; where several files give a
    GEMM ceiling, the first one's."""
    docs = [load_results(p) for p in paths]
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ceilings: dict[str, Any] = {}
    for d in docs:
        rows[d["kind"]] += d["rows"]
        for key, value in (d.get("ceilings") or {}).items():
            ceilings.setdefault(key, value)  # the first file's (h200_run.sh measures them once, first)
    parts = ["# zyfa-bench report", "\n".join(_header(d) for d in docs)]
    if rows["throughput"] or rows["accuracy"]:
        parts += ["## Headline", headline(rows, ceilings)]
    if rows["throughput"]:
        parts += ["## Throughput", throughput_tables(rows["throughput"])]
        if ceilings:
            parts.append(
                "GEMM ceilings in the same run: " + ", ".join(f"{k} {fmt(v)}" for k, v in ceilings.items())
            )
        parts += ["## Targets", targets_table(rows["throughput"], ceilings)]
        parts += ["## Throughput details", throughput_details(rows["throughput"])]
    if rows["accuracy"]:
        parts += ["## Accuracy", accuracy_tables(rows["accuracy"])]
        parts += ["## Accuracy targets", accuracy_targets(rows["accuracy"]) or "no FP8 rows"]
    if rows["clocks"]:
        parts += ["## Clocks", clocks_table(rows["clocks"])]
    return "\n\n".join(parts) + "\n", rows, ceilings


def clocks_table(rows: list[dict[str, Any]]) -> str:
    """One line per clocks run: implementation, problem, clock range, power, temperature, TFLOP/s."""
    header = [
        "impl",
        "problem",
        "SM MHz mean (min–max)",
        "power W mean/max",
        "temp °C max",
        "TFLOP/s",
        "per GHz",
    ]
    body = []
    for r in rows:
        c = r.get("clocks") or {}
        if r.get("status") != "ok":
            clock = f"{r.get('status')}: {str(r.get('reason', ''))[:80]}"
        elif not c.get("samples"):
            clock = f"no samples ({c.get('error') or c.get('source')})"
        else:
            clock = f"{fmt(c.get('sm_mhz_mean'))} ({fmt(c.get('sm_mhz_min'))}–{fmt(c.get('sm_mhz_max'))})"
        power = f"{fmt(c.get('power_w_mean'))}/{fmt(c.get('power_w_max'))}" if c.get("samples") else None
        body.append(
            [
                r.get("impl"),
                r.get("label"),
                clock,
                power,
                c.get("temp_c_max"),
                r.get("tflops"),
                r.get("tflops_per_ghz"),
            ]
        )
    return md_table(header, body)


def _figures(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The figures a report of `rows` has: one per kind with measured rows, as plot_* draw them."""
    return [kind for kind in ("throughput", "accuracy") if ok_rows(rows[kind])]


def report_markdown(paths: list[str | Path]) -> str:
    """report.md's text for the result files `paths`: build_report's markdown, then its figures."""
    text, rows, _ = build_report(paths)
    figures = [f"![{kind}]({kind}.png)" for kind in _figures(rows)]
    return text + ("\n" + "\n\n".join(figures) + "\n" if figures else "")


def write_report(paths: list[str | Path], out_dir: str | Path) -> dict[str, Path]:
    """Write report.md, throughput.png and accuracy.png (those with data) into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _, rows, _ = build_report(paths)
    written = {"markdown": out / "report.md"}
    plots = {"throughput": plot_throughput, "accuracy": plot_accuracy}
    for kind in _figures(rows):
        if (p := plots[kind](rows[kind], out / f"{kind}.png")) is not None:
            written[f"{kind}_png"] = p
    written["markdown"].write_text(report_markdown(paths))
    return written


def summary_text(paths: list[str | Path]) -> str:
    """The short console summary: throughput pivots, targets, accuracy (no detail table)."""
    _, rows, ceilings = build_report(paths)
    parts = []
    if rows["throughput"]:
        parts += [throughput_tables(rows["throughput"]), targets_table(rows["throughput"], ceilings)]
    if rows["accuracy"]:
        parts += [accuracy_tables(rows["accuracy"]), accuracy_targets(rows["accuracy"])]
    if rows["clocks"]:
        parts.append(clocks_table(rows["clocks"]))
    if rows["throughput"] or rows["accuracy"]:
        parts.append(headline(rows, ceilings))  # last: a console that keeps only the tail still shows it
    return "\n\n".join(p for p in parts if p)
