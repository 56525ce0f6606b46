"""A run's headline: the three tables a report opens with and the benchmark index shows.

From one run's rows (every workload's sweep and the accuracy run):
- TFLOP/s at the targets' seqlen, one line per (shape, workload), ZYFA's FP8 P modes in one column;
- the performance targets (zyfa_bench.tables.TARGETS) with one column per workload and a verdict across
  them (a target met on Gaussian inputs only says so);
- the FP8 kernels' own error (relative L2 vs float64 on the dequantised inputs, rotation off) per workload,
  with its ratio to cuDNN FP8's (the target is <= 0.5x) and to the most accurate FP8 peer's (<= 1x).
"""

from __future__ import annotations

import re
from typing import Any

from zyfa_bench.tables import (
    md_table,
    ok_rows,
    ratio_text,
    sides_text,
    spread,
    target_results,
    workload_of,
    workloads,
    worst_seqlens,
)

__all__ = ["fp8_errors", "headline", "tables_of", "targets_by_workload", "tflops_table"]


def _columns(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(title, impls) per column: ZYFA BF16, ZYFA's FP8 P modes together ("zyfa-fp8 exact / lean / f16"),
    then each peer, in the order the run measured them."""
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    zyfa_fp8 = [i for i in impls if i.startswith("zyfa-fp8-")]
    cols = [(i, [i]) for i in impls if i.startswith("zyfa") and i not in zyfa_fp8]
    if zyfa_fp8:
        cols.append(("zyfa-fp8 " + " / ".join(i.removeprefix("zyfa-fp8-") for i in zyfa_fp8), zyfa_fp8))
    return cols + [(i, [i]) for i in impls if not i.startswith("zyfa")]


def tflops_table(rows: list[dict[str, Any]], seqlen: int) -> str:
    """TFLOP/s (rounded) at `seqlen`: a line per (shape, workload), a column per implementation group."""
    ok = [r for r in ok_rows(rows) if r["seqlen_q"] == seqlen]
    tflops = {(r["shape"], workload_of(r), r["impl"]): r["tflops"] for r in ok}
    cols = _columns(ok)
    body = []
    for wl in workloads(ok):
        for shape in dict.fromkeys(r["shape"] for r in ok if workload_of(r) == wl):
            cells = [
                " / ".join(
                    f"{tflops[(shape, wl, i)]:.0f}" if (shape, wl, i) in tflops else "–" for i in impls
                )
                for _, impls in cols
            ]
            body.append([shape, wl, *cells])
    return md_table(["shape", "workload", *(title for title, _ in cols)], body)


def _verdict(met: dict[str, bool]) -> str:
    """'met', 'MISSED', or 'met on <workloads> only' when the workloads disagree."""
    if not met:
        return "no data"
    if all(met.values()):
        return "met"
    if not any(met.values()):
        return "MISSED"
    return "met on " + ", ".join(w for w, m in met.items() if m) + " only"


def targets_by_workload(rows: list[dict[str, Any]], ceilings: dict[str, Any]) -> str:
    """The performance targets, one ratio column per workload (with the ZYFA variant behind it, and the peer
    where a target takes the fastest one), then ZYFA against the best peer at its worst seqlen per shape
    and precision."""
    wls = workloads(rows) or ["gaussian"]
    cells: dict[tuple[str, int, str], dict[str, Any]] = {}
    for t in target_results(rows, ceilings):
        cells.setdefault((t["target"], t["seqlen"], f"≥ {t['need']:.2f}×"), {})[t["workload"]] = t
    body = []
    for (target, seqlen, need), by_wl in cells.items():
        shown, met = [], {}
        for wl in wls:
            t = by_wl.get(wl)
            if t is None or t["ratio"] is None:
                shown.append("–")
                continue
            shown.append(ratio_text(t["ratio"], t["need"]) + sides_text(t))
            met[wl] = t["ratio"] >= t["need"]
        body.append([target, seqlen, *shown, need, _verdict(met)])
    worst: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for w in worst_seqlens(rows):
        worst.setdefault((w["shape"], w["precision"]), {})[w["workload"]] = w
    for (shape, prec), by_wl in worst.items():
        seqlens = sorted({r["seqlen_q"] for r in ok_rows(rows) if r.get("shape") == shape})
        span = f"{seqlens[0]}-{seqlens[-1]}" if len(seqlens) > 1 else str(seqlens[0])
        at = {wl: f"{ratio_text(w['ratio'], 1.0)} at {w['seqlen']}" for wl, w in by_wl.items()}
        shown = [at.get(wl, "–") for wl in wls]
        met = {wl: w["ratio"] >= 1.0 for wl, w in by_wl.items()}
        body.append(
            [f"{shape} {prec.upper()} vs the best peer, worst seqlen", span, *shown, "≥ 1.00×", _verdict(met)]
        )
    return md_table(["target", "seqlen", *wls, "needed", ""], body)


def _sci(x: float) -> str:
    """3 significant digits, the exponent without padding: 2.02e-2."""
    mantissa, exp = f"{x:.2e}".split("e")
    return f"{mantissa}e{int(exp)}"


def _most_accurate_peer(
    med: dict[tuple[str, str, str], float], shape: str, wl: str
) -> tuple[float, str] | None:
    """(error, name) of the FP8 peer with the lowest median error on (shape, workload), None without one."""
    return min(
        ((e, i) for (s, w, i), e in med.items() if s == shape and w == wl and not i.startswith("zyfa")),
        default=None,
    )


def fp8_errors(rows: list[dict[str, Any]]) -> str:
    """Per shape and FP8 implementation: median rel L2 vs float64 on the dequantised inputs (rotation off)
    per workload, its ratio to cuDNN FP8's, and ZYFA's ratio to the most accurate FP8 peer's (named)."""
    med: dict[tuple[str, str, str], float] = {}
    groups: dict[tuple[str, str, str], list[float]] = {}
    for r in ok_rows(rows):
        if (
            r.get("precision") == "fp8"
            and not r.get("rotate")
            and r["impl"] != "exact-attention-on-fp8-inputs"
        ):
            groups.setdefault((r["shape"], workload_of(r), r["impl"]), []).append(r.get("rel_l2_vs_dequant"))
    for key, vals in groups.items():
        if (sp := spread(vals)) is not None:
            med[key] = sp[0]
    wls = workloads(rows)
    impls = list(dict.fromkeys(k[2] for k in med))
    impls = [i for i in impls if i != "cudnn-fp8"] + [i for i in impls if i == "cudnn-fp8"]
    body = []
    for shape in dict.fromkeys(k[0] for k in med):
        for impl in impls:
            line: list[Any] = [shape, impl]
            for wl in wls:
                err, ref = med.get((shape, wl, impl)), med.get((shape, wl, "cudnn-fp8"))
                best = _most_accurate_peer(med, shape, wl)
                line.append(_sci(err) if err is not None else "–")
                line.append(f"{err / ref:.2f}×" if err is not None and ref and impl != "cudnn-fp8" else "–")
                ours = err is not None and best and best[0] > 0 and impl.startswith("zyfa")
                line.append(f"{err / best[0]:.2f}× {best[1]}" if ours else "–")
            body.append(line)
    per_wl = ("rel L2", "/ cudnn-fp8", "/ most accurate peer")
    header = ["shape", "impl"] + [f"{wl} {h}" for wl in wls for h in per_wl]
    return md_table(header, body)


def _ceiling(ceilings: dict[str, Any], name: str) -> str:
    """'FP8 1290 at 1750 MHz, sustained (burst 1471 at 1980 MHz)'; a run before zyfa_bench.ceilings measured
    both has one figure, from a burst."""
    key = f"{name.lower()}_gemm_"

    def fig(kind: str) -> str:
        value, mhz = ceilings.get(f"{key}{kind}tflops"), ceilings.get(f"{key}{kind}sm_mhz")
        if not isinstance(value, (int, float)):
            return ""
        return f"{value:.0f}" + (f" at {mhz:.0f} MHz" if isinstance(mhz, (int, float)) else "")

    sustained, burst = fig(""), fig("burst_")
    if not sustained:
        return ""
    return f"{name} {sustained}, sustained (burst {burst})" if burst else f"{name} {sustained}, one burst"


def headline(rows: dict[str, list[dict[str, Any]]], ceilings: dict[str, Any], seqlen: int = 16384) -> str:
    """The three tables with a line saying what each shows; rows by kind as report.build_report gives them."""
    parts = []
    thr, acc = rows.get("throughput") or [], rows.get("accuracy") or []
    if thr:
        gemm = "; ".join(filter(None, (_ceiling(ceilings, "BF16"), _ceiling(ceilings, "FP8"))))
        if any(r["seqlen_q"] == seqlen for r in ok_rows(thr)):
            caption = (
                f"TFLOP/s at seqlen {seqlen} (causal FLOPs; GEMM ceilings in the run: {gemm or 'none'}):"
            )
            parts += [caption, tflops_table(thr, seqlen)]
        else:
            parts.append(f"No throughput row at seqlen {seqlen}, the targets' seqlen.")
        parts.append(
            "Targets per workload (in brackets: the ZYFA variant behind each ratio, then the peer where a "
            "target takes the fastest one):"
        )
        parts.append(targets_by_workload(thr, ceilings))
    if acc:
        seqlens = sorted({r["seqlen_q"] for r in ok_rows(acc)})
        parts.append(
            f"FP8 error at seqlen {', '.join(map(str, seqlens))}: relative L2 vs float64 on the dequantised "
            "inputs, rotation off, median over seeds; the targets are <= 0.50x cuDNN FP8's and <= 1.00x the "
            "most accurate FP8 peer's:"
        )
        parts.append(fp8_errors(acc))
    return "\n\n".join(parts)


def tables_of(text: str) -> list[str]:
    """The markdown tables in text, each as its lines joined (for a verbatim comparison)."""
    return [m.group(0).strip() for m in re.finditer(r"(?m)(^\|.*\|\n?)+", text)]
