"""ZYFA demo (`nox -s demo`): causal attention on the best device present, checked against float64.

The best device is a GPU whose architecture the installed manifest serves (sm90a or gfx950), where
`zyfa.flash_attn_func` launches ZYFA's kernels through zyfa_core; otherwise the CPU, where the same
call runs `zyfa.reference`. For each head-dim configuration and mode (BF16, FP8 with exact P, FP8
with lean P) the demo times the call and measures the relative error ‖out − ref‖ / ‖ref‖ against a
float64 dense softmax on the very inputs the kernel saw (dequantised for FP8). On a GPU it also
compares the kernel with `zyfa.reference` run on the CPU. It exits 1 when an error passes its bound.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.table import Table

import zyfa
from zyfa import reference
from zyfa_bench.timing import time_calls

# Bounds on ‖out − ref64‖ / ‖ref64‖ for Gaussian inputs at the demo's shapes. BF16: out is rounded
# to bf16 (relative step 2^-8) and P to bf16 for P·V, so errors sit near 2^-9..2^-8 ~ 0.2-0.4%;
# 1% leaves room without hiding a real bug (a wrong mask or scale gives errors of order 1).
# FP8: P has 3 mantissa bits (relative step 2^-3 before averaging over keys), measured ~1.5-3% here;
# 6% catches a broken path (f16 P, 11 bits, sits at the BF16 level; the FP8 bound holds it). Kernel vs
# reference: same numerics up to fp32 summation order and one bf16 rounding of out, so 2% of ‖ref‖ is
# already loose.
BOUND_VS_F64 = {"bf16": 1e-2, "fp8": 6e-2}
BOUND_VS_REFERENCE = 2e-2
MODES = (("bf16", None), ("fp8", "exact"), ("fp8", "lean"), ("fp8", "f16"))
HEAD_DIMS = ((128, 128), (192, 128))


@dataclass
class Target:
    """Where the demo runs: a torch device, its name for the table, and the arch the manifest uses."""

    device: torch.device
    label: str
    arch: str | None  # None: the CPU reference


@dataclass
class Row:
    """One line of the report."""

    mode: str
    dims: str
    kernel: str
    ms: float
    err_f64: float
    err_orig: float | None  # FP8: against float64 on the original (unquantised) bf16 inputs
    err_ref: float | None
    bound: float

    @property
    def ok(self) -> bool:
        in_bound = self.err_f64 <= self.bound
        return in_bound and (self.err_ref is None or self.err_ref <= BOUND_VS_REFERENCE)


def pick_target(console: Console, wanted: str) -> Target:
    """The GPU if one is present and the manifest has kernels for its arch, else the CPU (saying why)."""
    cpu = Target(torch.device("cpu"), f"CPU ({torch.get_num_threads()} threads)", None)
    if wanted == "cpu":
        return cpu
    if not torch.cuda.is_available():
        why = "torch sees no CUDA/ROCm device"
    else:
        try:
            import zyfa_core

            arch = zyfa_core.device_arch(0)
            if arch in zyfa_core.default_manifest().arches():
                return Target(torch.device("cuda", 0), f"{torch.cuda.get_device_name(0)} ({arch})", arch)
            why = f"the installed manifest has no {arch} kernels"
        except Exception as exc:  # any failure to reach the kernels means: fall back, and say why
            why = f"{type(exc).__name__}: {exc}"
    if wanted == "gpu":
        raise SystemExit(f"--device gpu: no usable GPU ({why})")
    console.print(f"[yellow]Running the CPU reference: {why}.[/yellow]")
    return cpu


def describe_build(console: Console) -> None:
    """Say what the installed zyfa-core was built with: code objects per arch, and what was skipped."""
    try:
        import zyfa_core

        manifest = zyfa_core.default_manifest()
    except Exception as exc:  # the CPU path does not need kernels; say why there are none
        console.print(f"zyfa_core kernels: none found ({type(exc).__name__}: {exc})")
        return
    per_arch = Counter(spec.arch for spec in manifest.kernels)
    built = ", ".join(f"{n} {arch}" for arch, n in sorted(per_arch.items())) or "none"
    tools = ", ".join(f"{k} {v}" for k, v in sorted(manifest.toolchains.items()))
    console.print(f"zyfa_core kernels in {manifest.directory}: {built} (built with {tools})")
    for row in manifest.skipped:
        console.print(f"  skipped {row.name}: {row.reason}")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (Frobenius norms)."""
    out64, ref64 = out.double().cpu(), ref.double().cpu()
    return float((out64 - ref64).norm() / ref64.norm())


def kernel_name(target: Target, q: torch.Tensor, d_v: int, p_mode: str | None) -> str:
    """The code object the call runs on a GPU, or which reference path runs on the CPU."""
    if target.arch is None:
        return "zyfa.reference (CPU)"
    import zyfa_core

    return zyfa_core.select(target.arch, q.dtype, q.shape[3], d_v, True, p_mode=p_mode).name


def served(console: Console, target: Target, dims: tuple[int, int], mode: str, p_mode: str | None) -> bool:
    """Whether the target has a kernel for (head dims, mode); says so when it has none (f16-P: sm90 only)."""
    if target.arch is None:
        return True  # the CPU reference serves every mode
    import zyfa_core

    dtype = torch.float8_e4m3fn if mode == "fp8" else torch.bfloat16
    try:
        zyfa_core.select(target.arch, dtype, dims[0], dims[1], True, p_mode=p_mode)
    except zyfa_core.KernelNotFoundError:
        console.print(f"  no {target.arch} kernel for {mode} p_mode={p_mode} d={dims[0]}x{dims[1]}: not run")
        return False
    return True


def run_mode(
    target: Target, args: argparse.Namespace, dims: tuple[int, int], mode: str, p_mode: str | None
) -> Row:
    """Fresh Gaussian inputs, one timed call, errors against float64 (and the reference on a GPU)."""
    d_qk, d_v = dims
    gen = torch.Generator().manual_seed(args.seed)
    shape_q = (args.batch, args.seqlen, args.heads, d_qk)
    shape_kv = (args.batch, args.seqlen, args.heads_kv)
    q = torch.randn(shape_q, generator=gen).bfloat16()
    k = torch.randn((*shape_kv, d_qk), generator=gen).bfloat16()
    v = torch.randn((*shape_kv, d_v), generator=gen).bfloat16()
    orig = q, k, v
    descales = {}
    if mode == "fp8":
        (q, dq), (k, dk), (v, dv) = zyfa.fp8_quantize(q), zyfa.fp8_quantize(k), zyfa.fp8_quantize(v)
        descales = {"q_descale": float(dq), "k_descale": float(dk), "v_descale": float(dv)}
    qd, kd, vd = (x.to(target.device) for x in (q, k, v))

    def call() -> torch.Tensor:
        return zyfa.flash_attn_func(qd, kd, vd, causal=True, p_mode=p_mode, **descales)

    ms = time_calls([call], device=target.device, warmup=1, repeats=args.repeats).median_ms
    out = call()
    ref64, _ = reference.attention_dense_f64(q, k, v, causal=True, **descales)
    err_ref = None
    if target.arch is not None:
        ref_cpu = zyfa.flash_attn_func(q, k, v, causal=True, p_mode=p_mode, **descales)
        err_ref = rel_err(out, ref_cpu)
    err_orig = rel_err(out, reference.attention_dense_f64(*orig, causal=True)[0]) if descales else None
    return Row(
        mode=mode if p_mode is None else f"{mode} {p_mode}-P",
        dims=f"{d_qk}" if d_qk == d_v else f"{d_qk}x{d_v}",
        kernel=kernel_name(target, q, d_v, p_mode),
        ms=ms,
        err_f64=rel_err(out, ref64),
        err_orig=err_orig,
        err_ref=err_ref,
        bound=BOUND_VS_F64[mode],
    )


def report(console: Console, target: Target, args: argparse.Namespace, rows: list[Row]) -> None:
    """Print the table: one row per (head dims, mode); a TFLOP/s column only for GPU kernels (the CPU
    reference's rate says nothing about a kernel)."""
    flops = 2 * args.batch * args.heads * args.seqlen**2 / 2  # causal: half the scores, x (d_qk + d_v)
    title = (
        f"ZYFA demo on {target.label}: batch {args.batch}, seqlen {args.seqlen}, "
        f"heads {args.heads}/{args.heads_kv} (GQA), causal"
    )
    rate = target.arch is not None
    table = Table(title=title)
    columns = (
        "mode",
        "d",
        "kernel",
        "time ms",
        *(("TFLOP/s",) if rate else ()),
        "err",
        "err (bf16 in)",
        "err vs ref",
        "",
    )
    for col in columns:
        table.add_column(col, justify="right" if col in ("time ms", "TFLOP/s") else "left", no_wrap=True)
    for r in rows:
        d_qk, d_v = (int(x) for x in (r.dims.split("x") * 2)[:2])
        tflops = (f"{flops * (d_qk + d_v) / (r.ms * 1e-3) / 1e12:.3f}",) if rate else ()
        verdict = "[green]ok[/green]" if r.ok else f"[red]over bound {r.bound:.0e}[/red]"
        errs = (f"{e:.2e}" if e is not None else "-" for e in (r.err_f64, r.err_orig, r.err_ref))
        table.add_row(r.mode, r.dims, r.kernel, f"{r.ms:.2f}", *tflops, *errs, verdict)
    console.print(table)
    console.print(
        "err = ‖out − ref‖ / ‖ref‖, ref = float64 dense softmax on the inputs the call saw (dequantised "
        "for FP8); 'err (bf16 in)': FP8 against float64 on the original bf16 inputs; 'err vs ref': "
        "a GPU kernel against zyfa.reference on the CPU. "
        f"Bounds: bf16 {BOUND_VS_F64['bf16']:.0e}, fp8 {BOUND_VS_F64['fp8']:.0e}, "
        f"kernel vs reference {BOUND_VS_REFERENCE:.0e}. Times: median of {args.repeats} runs "
        "(a CPU reference time is not a kernel time)."
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; defaults are a small GQA shape that runs in seconds on a CPU."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seqlen", type=int, default=512)
    p.add_argument("--heads", type=int, default=8, help="query heads")
    p.add_argument("--heads-kv", type=int, default=2, help="key/value heads (GQA)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=int(time.time()) % 100_000, help="default: fresh each run")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run every (head dims, mode), print the report, return 0 if every error is within its bound."""
    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)  # logs (CI): keep each table row on one line
    describe_build(console)
    target = pick_target(console, args.device)
    console.print(
        f"torch {torch.__version__}, zyfa {zyfa.__version__}, seed {args.seed}, device {target.label}"
    )
    runs = [(dims, mode, p_mode) for dims in HEAD_DIMS for mode, p_mode in MODES]
    rows = [run_mode(target, args, *run) for run in runs if served(console, target, *run)]
    report(console, target, args, rows)
    bad = [r for r in rows if not r.ok or not math.isfinite(r.err_f64)]
    if bad:
        console.print(f"[red]{len(bad)} of {len(rows)} results over their bound[/red]")
        return 1
    console.print(f"[green]all {len(rows)} results within their bounds[/green]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
