"""The pieces every report of result rows shares: the performance targets, row filters, markdown tables and
number formats, and the target and worst-seqlen evaluations (zyfa_bench.report and zyfa_bench.headline both
build on them; neither imports the other's internals).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

__all__ = [
    "TARGETS",
    "VERSION_KEYS",
    "fmt",
    "impl_order",
    "md_table",
    "ok_rows",
    "panel",
    "ratio_text",
    "sides_text",
    "spread",
    "target_results",
    "workload_of",
    "workloads",
    "worst_seqlens",
]

# (description, shape, precision, seqlen, numerator, denominator, threshold); numerator/denominator are an
# implementation name, "zyfa-best" (fastest ZYFA variant of that precision), "peer-best" (fastest peer of
# that precision, whichever won the cell: FlashAttention-3, FlashAttention-4, cuDNN, ...), "zyfa-bf16", or
# a ceiling key.
TARGETS: list[tuple[str, str, str, int, str, str, float]] = [
    ("FP8 d128 GQA vs the fastest FP8 peer", "gqa128", "fp8", 16384, "zyfa-best", "peer-best", 1.10),
    ("FP8 d128 GQA vs cuDNN FP8 (FP8 out)", "gqa128", "fp8", 16384, "zyfa-best", "cudnn-fp8", 1.15),
    ("FP8 d128 GQA vs FP8 GEMM ceiling", "gqa128", "fp8", 16384, "zyfa-best", "fp8_gemm_tflops", 0.80),
    ("BF16 d128 GQA vs the fastest BF16 peer", "gqa128", "bf16", 16384, "zyfa-best", "peer-best", 1.05),
    ("FP8 192/128 vs the fastest FP8 peer", "mla192", "fp8", 16384, "zyfa-best", "peer-best", 1.10),
    ("FP8 192/128 vs cuDNN FP8 (FP8 out)", "mla192", "fp8", 16384, "zyfa-best", "cudnn-fp8", 1.30),
    ("BF16 192/128 vs the fastest BF16 peer", "mla192", "bf16", 16384, "zyfa-best", "peer-best", 1.05),
    ("ZYFA FP8 / ZYFA BF16, d128 GQA", "gqa128", "fp8", 16384, "zyfa-best", "zyfa-bf16", 1.60),
    ("ZYFA FP8 / ZYFA BF16, 192/128", "mla192", "fp8", 16384, "zyfa-best", "zyfa-bf16", 1.60),
]


# The versions a report and an index block name, where a result file has them (the peers' libraries included).
VERSION_KEYS = (
    "zyfa-torch",
    "zyfa-core",
    "torch",
    "fa3-fwd",
    "flash-attn-4",
    "nvidia-cudnn-frontend",
    "cudnn-library",
)


def ok_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if x != 0 and (abs(x) < 1e-2 or abs(x) >= 1e5):
            return f"{x:.2e}"
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.1f}"
    return str(x)


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def workload_of(r: dict[str, Any]) -> str:
    return r.get("workload") or "gaussian"


def workloads(rows: list[dict[str, Any]]) -> list[str]:
    """The workloads of `rows`, Gaussian first, then by name."""
    return sorted({workload_of(r) for r in rows}, key=lambda w: (w != "gaussian", w))


def panel(r: dict[str, Any]) -> str:
    """A throughput row's shape, with its workload when that is not the Gaussian default."""
    shape = r.get("shape", r.get("label", "?"))
    return shape if workload_of(r) == "gaussian" else f"{shape} {workload_of(r)}"


def impl_order(rows: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r["impl"] not in seen:
            seen.append(r["impl"])
    return seen


def spread(vals: list[float]) -> tuple[float, float, float] | None:
    vals = [v for v in vals if isinstance(v, (int, float)) and not math.isnan(v)]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals)


def _is_zyfa(impl: str) -> bool:
    return impl.startswith("zyfa")


def _value(
    rows: list[dict[str, Any]], ceil: dict[str, Any], shape: str, prec: str, s: int, key: str
) -> tuple[Any, str]:
    """(TFLOP/s, the implementation measured) for a target's side; "zyfa-best" and "peer-best" name the
    implementation they took, so a reader sees which ZYFA P mode and which peer a figure belongs to."""
    if key.endswith("_tflops"):
        return ceil.get(key), key
    pool = [r for r in ok_rows(rows) if r.get("shape") == shape and r.get("seqlen_q") == s]
    if key in ("zyfa-best", "peer-best"):
        ours = key == "zyfa-best"
        pool = [r for r in pool if _is_zyfa(r["impl"]) == ours and r["precision"] == prec]
        best = max(pool, key=lambda r: r["tflops"], default=None)
        return (best["tflops"], best["impl"]) if best else (None, key)
    return next((r["tflops"] for r in pool if r["impl"] == key), None), key


def target_results(rows: list[dict[str, Any]], ceilings: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of TARGETS once per workload present (Gaussian first): {"workload", "target", "seqlen", "need",
    "ratio" (None without data on either side), "impl" (the ZYFA variant a "zyfa-best" side took), "peer"
    (the peer a "peer-best" side took)}."""
    out = []
    for wl in workloads(rows) or ["gaussian"]:
        sub = [r for r in rows if workload_of(r) == wl]
        for desc, shape, prec, s, num, den, need in TARGETS:
            (a, a_impl), (b, b_impl) = (
                _value(sub, ceilings, shape, prec, s, num),
                _value(sub, ceilings, shape, prec, s, den),
            )
            ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0
            out.append(
                {
                    "workload": wl,
                    "target": desc,
                    "seqlen": s,
                    "need": need,
                    "ratio": a / b if ok else None,
                    "impl": a_impl if num == "zyfa-best" else None,
                    "peer": b_impl if den == "peer-best" and b is not None else None,
                }
            )
    return out


def worst_seqlens(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (shape, workload, precision): the seqlen where ZYFA's best variant stands lowest against the best
    peer, {"shape", "workload", "precision", "seqlen", "ratio"}, ordered by (shape [workload], precision)."""
    out = []
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in ok_rows(rows):
        groups[(r.get("shape", r.get("label", "?")), workload_of(r), r["precision"])].append(r)
    for (shape, wl, prec), grp in groups.items():
        worst = None
        for s in sorted({r["seqlen_q"] for r in grp}):
            z = max(
                (r["tflops"] for r in grp if r["seqlen_q"] == s and _is_zyfa(r["impl"])),
                default=None,
            )
            p = max(
                (r["tflops"] for r in grp if r["seqlen_q"] == s and not _is_zyfa(r["impl"])),
                default=None,
            )
            if z and p and (worst is None or z / p < worst[1]):
                worst = (s, z / p)
        if worst:
            out.append(
                {"shape": shape, "workload": wl, "precision": prec, "seqlen": worst[0], "ratio": worst[1]}
            )
    return sorted(out, key=lambda t: (panel(t), t["precision"]))


def sides_text(t: dict[str, Any]) -> str:
    """A target result's measured sides in brackets: " (zyfa-fp8-lean)", " (zyfa-fp8-lean / fa3-fp8)" where
    the denominator is the fastest peer, "" where neither side was chosen."""
    sides = " / ".join(filter(None, (t.get("impl"), t.get("peer"))))
    return f" ({sides})" if sides else ""


def ratio_text(ratio: float, need: float) -> str:
    """A measured ratio against a target: two decimals ("1.21×"), more where fewer would round it onto the
    other side of `need` (1.0466 against 1.05 reads "1.047×", not a "1.05×" that looks met)."""
    for digits in (2, 3, 4):
        text = f"{ratio:.{digits}f}"
        if (float(text) >= need) == (ratio >= need):
            break
    return text + "×"
