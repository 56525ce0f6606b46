"""`zyfa-asmgen modelled`: write the gfx950 scoreboard (JSON, a markdown table, a plot) and the
timing model's calibration against AITER's published MI355X speeds. Every figure is MODELLED.

    zyfa-asmgen modelled --aiter-dir DIR [--variants kernels/variants.bzl | --manifest-dir DIR]
                         [--seqlens 2048,4096,...] [--tokens 32768] [--out DIR] [--calibrate]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from . import cli
from .modelled import SEQLENS, TOKENS, Contender, aiter_contender, describe_fits, score, zyfa_contender

AITER_BOARD = ("fwd_hd128_bf16_causal.co", "fwd_hd192_hd128_bf16_causal.co")
HEADER = ("Every figure is MODELLED by zyfa_asmgen.sim (timing.py, steady.py), calibrated against "
          "AITER's published MI355X speeds (docs/simulator.md); none is a measurement.")  # fmt: skip


def gfx950_kernels(manifest_dir: Path | None, variants: Path | None) -> list[str]:
    """Names of the dense gfx950 kernels of the build (manifest.json) or of kernels/variants.bzl."""
    if manifest_dir is not None:
        rows = json.loads((manifest_dir / "manifest.json").read_text()).get("kernels", [])
    else:
        repo = cli.find_repo(Path.cwd())
        vpath = variants or (repo / "kernels" / "variants.bzl" if repo else None)
        if vpath is None or not vpath.is_file():
            raise FileNotFoundError("no kernels/variants.bzl found: pass --variants or --manifest-dir")
        rows = cli.load_variants(vpath)
    # Dense rows: the board compares dense launches with AITER's (a packed build adds none of its own).
    return [r["name"] for r in rows if r.get("arch") == "gfx950" and r.get("layout", "dense") == "dense"]


def progress(msg: str) -> None:
    """A long step's progress line (stderr; not part of the scoreboard's notes)."""
    print(msg, file=sys.stderr, flush=True)


def contenders(args: argparse.Namespace, log) -> list[Contender]:
    """Every kernel present: ours (fitted now), AITER's (fitted on first use). Missing ones are logged."""
    out: list[Contender] = []
    names = args.kernels.split(",") if args.kernels else gfx950_kernels(args.manifest_dir, args.variants)
    for name in names:
        try:
            out.append(
                zyfa_contender(
                    name, args.manifest_dir, args.variants, args.abi_header, args.fit_seqlen, log=progress
                )
            )
            if args.fit_seqlen is not None:
                log(f"{name}: {out[-1].fit}")
        except (OSError, KeyError, ValueError, RuntimeError) as e:
            log(f"{name}: skipped ({e})")
    for file in AITER_BOARD:
        path = args.aiter_dir / file if args.aiter_dir else None
        if path is None or not path.is_file():
            log(f"aiter {file}: skipped (not found{' in ' + str(args.aiter_dir) if args.aiter_dir else ''}; "
                "pass --aiter-dir with the fmha_v3_fwd code objects of the amd-aiter wheel)")  # fmt: skip
            continue
        out.append(aiter_contender(path))
    return out


def markdown(rows: list[dict], notes: list[str]) -> str:
    """The scoreboard as markdown: one table per head-dim configuration."""
    lines = ["# gfx950 (MI355X) attention scoreboard: MODELLED", "", HEADER, ""]
    for d in sorted({r["d_qk"] for r in rows}):
        sub = [r for r in rows if r["d_qk"] == d]
        hq, hkv = sub[0]["heads_q"], sub[0]["heads_kv"]
        lines += [f"## d_qk={d}, d_v=128, {hq}/{hkv} heads, causal, {TOKENS} tokens per call", "",
                  "| kernel | dtype | seqlen | batch | ms (MODELLED) | TFLOP/s (MODELLED) | % of MFMA peak |",
                  "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in sorted(sub, key=lambda r: (r["kernel"], r["seqlen"])):
            lines.append(f"| `{r['kernel']}` | {r['dtype']} | {r['seqlen']} | {r['batch']} | {r['ms']:.3f} | "
                         f"{r['tflops']:.0f} | {r['pct_peak']:.1f}% of {r['peak_tflops']:.0f} |")  # fmt: skip
        lines.append("")
    lines += ["## How each kernel was fitted", ""] + [f"* {n}" for n in notes] + [""]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> str:
    """TFLOP/s against seqlen, one panel per head dim; returns what was done (matplotlib optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed"
    dims = sorted({r["d_qk"] for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(6 * len(dims), 4.5), squeeze=False)
    for ax, d in zip(axes[0], dims, strict=True):
        sub = [r for r in rows if r["d_qk"] == d]
        for name in sorted({r["kernel"] for r in sub}):
            pts = sorted((r["seqlen"], r["tflops"]) for r in sub if r["kernel"] == name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("seqlen (causal, 32K tokens per call)")
        ax.set_ylabel("TFLOP/s (MODELLED)")
        ax.set_title(f"MI355X MODELLED: d_qk={d}, {sub[0]['heads_q']}/{sub[0]['heads_kv']} heads")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("gfx950 attention, every figure MODELLED (zyfa_asmgen.sim), not measured", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot written: {path}"


def run(args: argparse.Namespace) -> int:
    """The `modelled` command."""
    t0 = time.perf_counter()
    notes: list[str] = []

    def log(msg: str) -> None:
        notes.append(msg)
        print(msg, file=sys.stderr)

    if args.calibrate:
        from .anchors import calibrate, format_calibration

        if args.aiter_dir is None:
            raise ValueError("--calibrate needs --aiter-dir (AITER's fmha_v3_fwd code objects)")
        rows = calibrate(args.aiter_dir)
        print("\n".join(format_calibration(rows)))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "calibration.json").write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    seqlens = [int(s) for s in args.seqlens.split(",")]
    if not seqlens or min(seqlens) < 1 or any(args.tokens % s for s in seqlens):
        raise ValueError(f"--seqlens {args.seqlens!r}: positive divisors of --tokens {args.tokens}")
    board = contenders(args, log)
    rows = score(board, seqlens, args.tokens)
    for c in board:
        if c.source == "aiter" or args.fit_seqlen is None:
            for line in describe_fits(c):
                log(line)
    if not rows:
        raise RuntimeError("no kernel could be modelled: " + "; ".join(notes))
    for c in rows:
        c["tflops"], c["pct_peak"], c["ms"] = (round(c[k], 3) for k in ("tflops", "pct_peak", "ms"))
    doc = {"label": "MODELLED", "note": HEADER, "tokens_per_call": args.tokens, "seqlens": seqlens,
           "fits": notes, "rows": rows}  # fmt: skip
    md = markdown(rows, notes)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scoreboard.json").write_text(json.dumps(doc, indent=1) + "\n")
        (args.out / "scoreboard.md").write_text(md)
        log(plot(rows, args.out / "scoreboard.png"))
    print(md)
    print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0 if all(math.isfinite(r["tflops"]) for r in rows) else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `modelled` command's arguments."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--manifest-dir", type=Path, help="directory with manifest.json and NAME.s of the build")
    src.add_argument("--variants", type=Path, help="kernels/variants.bzl: compile/generate our kernels now")
    p.add_argument("--abi-header", type=Path, help="zyfa_abi.h (default <repo>/kernels/abi/zyfa_abi.h)")
    p.add_argument("--kernels", help="our kernels, comma-separated (default: every gfx950 kernel)")
    p.add_argument("--aiter-dir", type=Path, help="directory with AITER's fmha_v3_fwd .co files")
    p.add_argument("--seqlens", default=",".join(map(str, SEQLENS)), help="causal seqlens of the board")
    p.add_argument("--tokens", type=int, default=TOKENS, help="tokens per call (batch = tokens / seqlen)")
    p.add_argument(
        "--fit-seqlen",
        type=int,
        default=None,
        help="fit our kernels once, on a launch of this seqlen (default: each launch at its own seqlen)",
    )
    p.add_argument("--out", type=Path, help="write scoreboard.json, scoreboard.md, scoreboard.png here")
    p.add_argument("--calibrate", action="store_true", help="print modelled / published for AITER's anchors")
