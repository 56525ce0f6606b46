"""`zyfa-bench`: throughput | accuracy | serving | clocks | capture | report | peers.

`zyfa-bench COMMAND --help` explains each option.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from zyfa_bench import __version__
from zyfa_bench import argtypes as T
from zyfa_bench.peers import all_peers, select
from zyfa_bench.results import failure_reason
from zyfa_bench.spec import PRESETS, Spec, parse_shape, specs_for_tokens

__all__ = ["build_parser", "main"]

IMPL_HELP = (
    "comma-separated implementations: peer names (zyfa-bf16, zyfa-fp8-exact, zyfa-fp8-lean, zyfa-fp8-f16, "
    "zyfa-varlen-bf16, zyfa-varlen-fp8, fa3-bf16, fa3-fp8, fa4-bf16, cudnn-bf16, cudnn-fp8, sdpa-flash, "
    "sdpa-cudnn, sdpa-efficient, sdpa-math, flashinfer-bf16, aiter-bf16, aiter-fp8, triton-amd-bf16, "
    "triton-amd-fp8), families (zyfa, zyfa-varlen, fa3, fa4, cudnn, torch-sdpa, flashinfer, aiter, "
    "triton-amd), 'all' (unavailable ones then appear as skipped rows with the reason) or 'available'"
)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


CLOCK_SOURCES = ("auto", "nvml", "nvidia-smi", "amd-smi", "rocm-smi", "none")
PRECISIONS = ("bf16", "fp8")


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _add_problem_args(
    p: argparse.ArgumentParser, seqlens: str, tokens: int | None, batch: int | None
) -> None:
    p.add_argument(
        "--shape",
        type=T.shape_list,
        default="gqa128,mla192",
        help="comma-separated head shapes: presets "
        + ", ".join(f"{k} (heads {v[0]}/{v[1]}, d_qk {v[2]}, d_v {v[3]})" for k, v in PRESETS.items())
        + ", or HQxHKVxDQKxDV such as 32x8x128x128 (default: %(default)s)",
    )
    p.add_argument(
        "--seqlens",
        type=T.positive_int_list,
        default=seqlens,
        help="comma-separated sequence lengths, each >= 1 (default: %(default)s)",
    )
    grp = p.add_mutually_exclusive_group()
    grp.add_argument(
        "--tokens",
        type=T.positive_int,
        default=tokens,
        help="tokens per call: batch = tokens // seqlen (default: %(default)s)",
    )
    grp.add_argument(
        "--batch", type=T.positive_int, default=batch, help="a fixed batch size instead of --tokens"
    )
    p.add_argument(
        "--non-causal", action="store_true", help="full (non-causal) attention; ZYFA kernels are causal"
    )


def _add_common(p: argparse.ArgumentParser, impl_default: str) -> None:
    p.add_argument("--impl", default=impl_default, help=IMPL_HELP + " (default: %(default)s)")
    p.add_argument(
        "--device",
        type=T.device,
        default=_default_device(),
        help="torch device: cpu, cuda or cuda:N (default: %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="base seed of all random inputs (default: %(default)s)"
    )
    p.add_argument(
        "--json",
        type=T.existing_parent,
        metavar="OUT",
        help="write the results (schema zyfa-bench/1) to this JSON file (its directory must exist)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `zyfa-bench` (one subcommand per task)."""
    parser = argparse.ArgumentParser(
        prog="zyfa-bench",
        description="ZYFA's benchmark and accuracy harness: ZYFA and its peers side by side, in one process.",
    )
    parser.add_argument("--version", action="version", version=f"zyfa-bench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _throughput_parser(sub)
    _accuracy_parser(sub)
    _serving_parser(sub)
    _clocks_parser(sub)
    _capture_parser(sub)
    _report_parser(sub)
    _peers_parser(sub)
    return parser


def _throughput_parser(sub: Any) -> None:
    """The `throughput` subcommand and its options."""
    t = sub.add_parser(
        "throughput",
        help="TFLOP/s and ms of every implementation on every problem",
        description="Median time of repeated calls (device events, after warm-up, input sets rotated so "
        "caches do not flatter, implementations interleaved in rounds so clock swings hit all alike), "
        "TFLOP/s with causal FLOPs 2*B*H*S^2*(d_qk+d_v)/2, a float64 check of "
        "each output slice, host overhead per call (eager and CUDA-graph replay), GPU clocks during "
        "each measurement and clock-normalised TFLOP/s, and the BF16/FP8 GEMM ceilings of the same run.",
    )
    _add_problem_args(t, "2048,4096,8192,16384,32768", 32768, None)
    _add_common(t, "available")
    t.add_argument(
        "--precision",
        type=T.choice_list(PRECISIONS),
        default="bf16,fp8",
        help="comma-separated input precisions to run: bf16, fp8 (default: %(default)s)",
    )
    t.add_argument(
        "--workload", default="gaussian", help="gaussian, model-like, or captured:PATH (default: %(default)s)"
    )
    t.add_argument(
        "--warmup",
        type=T.non_negative_int,
        default=3,
        help="untimed calls before the first round (later rounds make one each; default: %(default)s)",
    )
    t.add_argument(
        "--repeats",
        type=T.positive_int,
        default=20,
        help="timed calls per implementation, over all rounds; the median is reported (default: %(default)s)",
    )
    t.add_argument(
        "--rounds",
        type=T.positive_int,
        default=3,
        help="interleaved timing rounds: every implementation of a problem is prepared, then each round "
        "times a share of its repeats, in an order rotated every round, so that the clock swings of a "
        "power-capped GPU hit all implementations alike (1: each one timed back to back, the old way; "
        "at most --repeats rounds are used; default: %(default)s)",
    )
    t.add_argument(
        "--max-sets",
        type=T.positive_int,
        default=8,
        help="at most this many input sets rotated against L2 (default: %(default)s)",
    )
    t.add_argument("--rotate", action="store_true", help="rotate q and k (Hadamard) before FP8 quantisation")
    t.add_argument(
        "--baseline-kernels",
        type=T.kernel_dir,
        default=None,
        metavar="DIR",
        help="also time each chosen ZYFA implementation on the kernel build in DIR (a manifest.json and its "
        "code objects), as <impl>-baseline in the same rounds: a before/after comparison in one run",
    )
    t.add_argument(
        "--no-graph", action="store_true", help="skip the CUDA-graph replay host-overhead measurement"
    )
    t.add_argument("--no-check", action="store_true", help="skip the float64 check of each output slice")
    t.add_argument("--no-clocks", action="store_true", help="do not sample GPU clocks")
    t.add_argument(
        "--clock-interval-ms",
        type=T.positive_float,
        default=20.0,
        help="clock sampling period (default: %(default)s)",
    )
    t.add_argument(
        "--no-ceilings",
        action="store_true",
        help="skip the BF16/FP8 GEMM ceilings (each timed in a burst and after 3 s of calls: ~8 s)",
    )
    t.add_argument(
        "--time-budget",
        type=T.non_negative_float,
        default=None,
        metavar="SECONDS",
        help="stop starting new measurements after this many seconds (rows left say so)",
    )
    t.set_defaults(func=cmd_throughput)


def _accuracy_parser(sub: Any) -> None:
    """The `accuracy` subcommand and its options."""
    a = sub.add_parser(
        "accuracy",
        help="‖out − ref‖/‖ref‖ and max error vs float64 references",
        description="Errors of every implementation against a float64 reference on the dequantised FP8 "
        "inputs (its own error) and on the original BF16 inputs (what a user sees), per workload, per "
        "rotation setting; plus the floor set by input quantisation alone.",
    )
    _add_problem_args(a, "4096", None, 1)
    _add_common(a, "available")
    a.add_argument(
        "--workload",
        default="gaussian,model-like",
        help="comma-separated: gaussian, model-like, captured:PATH (default: %(default)s)",
    )
    a.add_argument(
        "--rotate",
        type=T.choice_list(("off", "on")),
        default="off,on",
        help="comma-separated Q/K rotation settings for FP8 inputs: off, on (default: %(default)s)",
    )
    a.add_argument(
        "--seeds",
        type=T.positive_int,
        default=1,
        help="fresh inputs per problem: seeds seed..seed+N-1 (default: %(default)s)",
    )
    a.set_defaults(func=cmd_accuracy)


def _serving_parser(sub: Any) -> None:
    """The `serving` subcommand: one packed prefill step of mixed prompt lengths (zyfa_bench.serving)."""
    from zyfa_bench.serving import IMPLEMENTATIONS

    s = sub.add_parser(
        "serving",
        help="a serving engine's prefill step: packed prompts, with and without a shared prefix in pages",
        description="Times one packed prefill step of --prompts prompts (long-tailed lengths summing to "
        "--tokens) per head shape, precision and prefix, with ZYFA varlen, FlashAttention-3 varlen and ZYFA "
        "dense at the same token count (zyfa_bench.serving explains each).",
    )
    s.add_argument(
        "--prompts", type=T.positive_int, default=64, help="prompts in the step (default: %(default)s)"
    )
    s.add_argument(
        "--tokens", type=T.positive_int, default=32768, help="new tokens in the step (default: %(default)s)"
    )
    s.add_argument(
        "--prefix",
        type=T.non_negative_int_list,
        default="0,4096",
        help="shared prefix lengths, 0 for none (default: %(default)s)",
    )
    s.add_argument(
        "--page-size", type=T.positive_int, default=64, help="keys per KV cache page (default: %(default)s)"
    )
    s.add_argument("--shape", type=T.shape_list, default="gqa128,mla192", help="head shapes (as throughput)")
    s.add_argument(
        "--precision",
        type=T.choice_list(PRECISIONS),
        default="bf16,fp8",
        help="bf16, fp8 (default: %(default)s)",
    )
    s.add_argument(
        "--impl", type=T.choice_list(tuple(IMPLEMENTATIONS)), default=",".join(IMPLEMENTATIONS),
        help="default: %(default)s",
    )  # fmt: skip
    s.add_argument("--seed", type=int, default=0, help="lengths and inputs seed (default: %(default)s)")
    s.add_argument(
        "--repeats", type=T.positive_int, default=20, help="timed calls per row (default: %(default)s)"
    )
    s.add_argument(
        "--rounds",
        type=T.positive_int,
        default=3,
        help="interleaved timing rounds: the step's implementations are prepared, then each round times a "
        "share of every one's repeats, in an order rotated every round (1: each one's repeats back to "
        "back; at most --repeats rounds are used; default: %(default)s)",
    )
    s.add_argument(
        "--baseline-kernels",
        type=T.kernel_dir,
        default=None,
        metavar="DIR",
        help="also time zyfa-varlen on the kernel build in DIR (a manifest.json and its code objects), as "
        "zyfa-varlen-baseline, next to it in the rounds: a before/after comparison in one run",
    )
    s.add_argument("--device", type=T.device, default=_default_device(), help="default: %(default)s")
    s.add_argument(
        "--json",
        type=T.existing_parent,
        metavar="OUT",
        help="write the rows to this JSON file (its directory must exist)",
    )
    s.set_defaults(func=cmd_serving)


def cmd_serving(args: argparse.Namespace) -> int:
    """zyfa-bench serving."""
    from zyfa_bench.results import ResultWriter, environment
    from zyfa_bench.serving import ServingStep, format_table, long_tailed_lengths, measure
    from zyfa_bench.spec import parse_shape

    if args.prompts > args.tokens:
        raise SystemExit(f"--prompts {args.prompts} exceeds --tokens {args.tokens}: every prompt has a token")
    device = torch.device(args.device)
    lens = tuple(long_tailed_lengths(args.prompts, args.tokens, seed=args.seed))
    settings = {k: v for k, v in vars(args).items() if k != "func"}
    env = environment(device, baseline_kernels=args.baseline_kernels)
    writer = ResultWriter(args.json, "serving", {**env, "settings": settings})
    for shape in args.shape.split(","):
        _, (hq, hkv, dqk, dv) = parse_shape(shape.strip())
        for prefix in _ints(args.prefix):
            step = ServingStep(lens, prefix, args.page_size, hq, hkv, dqk, dv)
            for precision in _words(args.precision):
                for row in measure(
                    step,
                    _words(args.impl),
                    device=device,
                    precision=precision,
                    seed=args.seed,
                    repeats=args.repeats,
                    rounds=args.rounds,
                    baseline_kernels=args.baseline_kernels,
                ):
                    writer.add(row)
    print(format_table(writer.rows))
    return _measured(writer.rows, args)


def _clocks_parser(sub: Any) -> None:
    """The `clocks` subcommand and its options."""
    c = sub.add_parser(
        "clocks",
        help="GPU clock, power and temperature while kernels run",
        description="Runs each implementation back to back for --seconds while sampling the GPU (NVML or "
        "nvidia-smi; amd-smi or rocm-smi), and reports clock range, power, temperature, TFLOP/s and "
        "TFLOP/s per GHz: FP8 kernels can run at lower clocks than BF16 ones.",
    )
    c.add_argument(
        "--shape",
        type=T.one_shape,
        default="gqa128",
        help="one head shape, as for throughput (default: %(default)s)",
    )
    c.add_argument(
        "--seqlen", type=T.positive_int, default=16384, help="sequence length (default: %(default)s)"
    )
    c.add_argument(
        "--tokens", type=T.positive_int, default=32768, help="tokens per call (default: %(default)s)"
    )
    _add_common(c, "zyfa-bf16,zyfa-fp8-exact")
    c.add_argument(
        "--workload", default="gaussian", help="gaussian, model-like, captured:PATH (default: %(default)s)"
    )
    c.add_argument(
        "--seconds",
        type=T.positive_float,
        default=10.0,
        help="run time per implementation (default: %(default)s)",
    )
    c.add_argument(
        "--interval-ms", type=T.positive_float, default=20.0, help="sampling period (default: %(default)s)"
    )
    c.add_argument(
        "--source",
        choices=CLOCK_SOURCES,
        default="auto",
        help="where clocks come from: " + ", ".join(CLOCK_SOURCES) + " (default: %(default)s)",
    )
    c.set_defaults(func=cmd_clocks)


def _capture_parser(sub: Any) -> None:
    """The `capture` subcommand and its options."""
    k = sub.add_parser(
        "capture",
        help="record post-RoPE q, k, v of chosen layers of a local HF model",
        description="Runs a local Hugging Face causal LM (Mistral, Qwen3 or DeepSeek-V2 architecture) and "
        "writes the q, k, v its attention sees (post-RoPE) for the chosen layers to .safetensors, for "
        "`--workload captured:FILE`.  Needs `pip install zyfa-bench[capture]`; weights are never downloaded.",
    )
    k.add_argument("--model", required=True, help="local model directory (config.json + weights)")
    k.add_argument(
        "--layers",
        default="0,-1",
        help="comma-separated layer indices, negative from the end (default: %(default)s)",
    )
    k.add_argument(
        "--tokens",
        type=T.positive_int,
        default=2048,
        help="sequence length of the input (default: %(default)s)",
    )
    k.add_argument(
        "--batch", type=T.positive_int, default=1, help="batch size of the input (default: %(default)s)"
    )
    k.add_argument(
        "--text-file", help="text to tokenise with the model's tokenizer (default: random token ids)"
    )
    k.add_argument("--device", default=_default_device(), help="where the model runs (default: %(default)s)")
    k.add_argument(
        "--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"], help="model precision"
    )
    k.add_argument("--seed", type=int, default=0, help="seed of random token ids (default: %(default)s)")
    k.add_argument(
        "--out",
        type=T.existing_parent,
        required=True,
        help="output .safetensors file (its directory must exist)",
    )
    k.set_defaults(func=cmd_capture)


def _report_parser(sub: Any) -> None:
    """The `report` subcommand and its options."""
    r = sub.add_parser(
        "report",
        help="markdown tables and PNG plots from result JSON files",
        description="Writes OUT/report.md (headline, throughput pivots, targets, details, accuracy, "
        "clocks), OUT/throughput.png (TFLOP/s vs seqlen per implementation) and OUT/accuracy.png (errors "
        "per workload). A folder argument stands for its result files (throughput.json, "
        "throughput-*.json, accuracy*.json, clocks*.json). With --index, also writes the folder's "
        "block of a benchmark index page (zyfa_bench.index).",
    )
    r.add_argument("files", nargs="+", help="result JSON files written with --json, or a run folder")
    r.add_argument(
        "--out", default=None, help="output directory (default: the run folder when one is given, else .)"
    )
    r.add_argument(
        "--index",
        default=None,
        help="index page (markdown) to write the run folder's block into; needs one folder argument",
    )
    r.add_argument("--print", action="store_true", help="also print the summary tables")
    r.set_defaults(func=cmd_report)


def _peers_parser(sub: Any) -> None:
    """The `peers` subcommand and its options."""
    pe = sub.add_parser("peers", help="list the implementations and whether they are available here")
    pe.set_defaults(func=cmd_peers)


# ------------------------------------------------------------------------------------------- helpers
@contextmanager
def _progress(total: int, quiet: bool) -> Iterator[Callable[[str], None]]:
    """A rich progress bar on stderr; yields a callback `step(description)`."""
    if quiet or total == 0:
        yield lambda _desc: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task("starting", total=total)
        first = [True]

        def step(desc: str) -> None:
            if not first[0]:
                bar.advance(task)
            first[0] = False
            bar.update(task, description=desc[:70])

        yield step
        bar.update(task, completed=total, description="done")


def _problems(args: argparse.Namespace) -> list[tuple[str, Spec]]:
    """(shape name, Spec) in seqlen-major order: every shape at the first seqlen given, then the next.

    So `--seqlens 16384,2048,...` measures the headline seqlen of every shape first, which matters when
    --time-budget cuts a sweep short.
    """
    shapes = [parse_shape(text) for text in _words(args.shape)]
    out = []
    for seqlen in _ints(args.seqlens):
        for name, shape in shapes:
            tokens = None if args.batch else args.tokens
            (spec,) = specs_for_tokens(
                shape, [seqlen], tokens=tokens, batch=args.batch, causal=not args.non_causal
            )
            out.append((name, spec))
    return out


def _header(device: torch.device, peers: list[Any], settings: dict[str, Any]) -> dict[str, Any]:
    from zyfa_bench.results import environment

    described = []
    for p in peers:
        ok, why = p.available()
        described.append({**p.describe(), "available": ok, "reason": why})
    env = environment(device, baseline_kernels=settings.get("baseline_kernels"))
    return {**env, "settings": settings, "peers": described}


def _workload(text: str) -> Any:
    from zyfa_bench.workloads import parse_workload

    found = parse_workload(text)
    if len(found) != 1:
        raise SystemExit(f"--workload {text}: one workload needed here, the file holds {len(found)} layers")
    return found[0]


# ------------------------------------------------------------------------------------------- commands
def cmd_throughput(args: argparse.Namespace) -> int:
    """zyfa-bench throughput."""
    from zyfa_bench.ceilings import ceilings
    from zyfa_bench.clocks import ClockSampler
    from zyfa_bench.report import throughput_tables
    from zyfa_bench.results import ResultWriter
    from zyfa_bench.throughput import Problem, SweepOptions, run_sweep

    device = torch.device(args.device)
    peers = select(
        _words(args.impl), precisions=tuple(_words(args.precision)), baseline_kernels=args.baseline_kernels
    )
    problems = [Problem(n, s) for n, s in _problems(args)]
    workload = _workload(args.workload)
    opts = SweepOptions(
        warmup=args.warmup,
        repeats=args.repeats,
        rounds=args.rounds,
        max_sets=args.max_sets,
        graph=not args.no_graph,
        check=not args.no_check,
        rotate=args.rotate,
        seed=args.seed,
        time_budget_s=args.time_budget,
    )
    settings = {**vars(args), "func": None}
    writer = ResultWriter(
        args.json,
        "throughput",
        {
            **_header(device, peers, settings),
            "seeds": {"base": args.seed, "rule": "seed + 1000*problem + set"},
        },
    )
    use_clocks = device.type == "cuda" and not args.no_clocks
    sampler = (
        ClockSampler(device.index or 0, interval_s=args.clock_interval_ms / 1000) if use_clocks else None
    )
    with sampler or _null():
        if sampler is not None:
            writer.set("clocks", {"source": sampler.source, "error": sampler.error})
        if device.type == "cuda" and not args.no_ceilings:
            writer.set("ceilings", ceilings(device, sampler=sampler))
        with _progress(len(problems) * len(peers), args.quiet) as step:
            run_sweep(
                problems,
                peers,
                workload,
                device=device,
                options=opts,
                add_row=writer.add,
                sampler=sampler,
                progress=step,
            )
        if sampler is not None:
            writer.set(
                "clocks", {"source": sampler.source, "error": sampler.error, "max_sm_mhz": sampler.max_sm_mhz}
            )
    print(throughput_tables(writer.rows) or "no successful measurement")
    _print_failures(writer.rows)
    return _measured(writer.rows, args)


@contextmanager
def _null() -> Iterator[None]:
    yield None


def _measured(rows: list[dict[str, Any]], args: argparse.Namespace) -> int:
    """0 when at least one row was measured; else 1, saying so on stderr (the rows say why)."""
    if any(r.get("status") == "ok" for r in rows):
        return 0
    print(
        f"zyfa-bench {args.command}: nothing was measured ({len(rows)} row(s), none ok); "
        "see the reasons above",
        file=sys.stderr,
    )
    return 1


def _check_device(text: str) -> str | None:
    """Why the --device cannot run here (None: it can)."""
    if not text.startswith("cuda"):
        return None
    if not torch.cuda.is_available():
        return f"--device {text}: no CUDA or ROCm GPU is visible to torch here; use --device cpu"
    index = int(text.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        return f"--device {text}: torch sees {torch.cuda.device_count()} GPU(s) (cuda:0..)"
    return None


def _print_failures(rows: list[dict[str, Any]]) -> None:
    seen = set()
    for r in rows:
        if r.get("status") != "ok" and (r["impl"], r.get("reason")) not in seen:
            seen.add((r["impl"], r.get("reason")))
            print(f"  {r['impl']}: {r['status']}: {str(r.get('reason', ''))[:200]}")


def cmd_accuracy(args: argparse.Namespace) -> int:
    """zyfa-bench accuracy."""
    from zyfa_bench.accuracy import run_accuracy
    from zyfa_bench.report import accuracy_tables
    from zyfa_bench.results import ResultWriter
    from zyfa_bench.workloads import parse_workload

    device = torch.device(args.device)
    peers = select(_words(args.impl))
    workloads = [w for text in _words(args.workload) for w in parse_workload(text)]
    specs = [s for _, s in _problems(args)]
    rotations = tuple(x == "on" for x in _words(args.rotate))
    seeds = list(range(args.seed, args.seed + args.seeds))
    settings = {**vars(args), "func": None}
    writer = ResultWriter(
        args.json, "accuracy", {**_header(device, peers, settings), "seeds": {"list": seeds}}
    )
    n_fp8 = sum(p.precision == "fp8" for p in peers)
    total = len(workloads) * len(specs) * len(seeds) * (len(peers) - n_fp8 + n_fp8 * len(rotations))
    with _progress(total, args.quiet) as step:
        for row in run_accuracy(
            peers, workloads, specs, device=device, seeds=seeds, rotations=rotations, progress=step
        ):
            writer.add(row)
    print(accuracy_tables(writer.rows))
    _print_failures(writer.rows)
    return _measured(writer.rows, args)


def cmd_clocks(args: argparse.Namespace) -> int:
    """zyfa-bench clocks."""
    from zyfa_bench.clocks import ClockSampler
    from zyfa_bench.inputs import make_inputs, quantize_inputs
    from zyfa_bench.report import clocks_table
    from zyfa_bench.results import ResultWriter

    device = torch.device(args.device)
    peers = select(_words(args.impl))
    name, shape = parse_shape(args.shape)
    spec = specs_for_tokens(shape, [args.seqlen], tokens=args.tokens, batch=None)[0]
    inputs = make_inputs(spec, _workload(args.workload), device=device, seed=args.seed)
    if any(p.precision == "fp8" for p in peers):
        quantize_inputs(inputs, seed=args.seed)
    settings = {**vars(args), "func": None}
    writer = ResultWriter(args.json, "clocks", _header(device, peers, settings))
    with ClockSampler(device.index or 0, interval_s=args.interval_ms / 1000, source=args.source) as sampler:
        for peer in peers:
            row = {
                "impl": peer.name,
                "precision": peer.precision,
                "shape": name,
                "label": spec.label,
                **spec.as_dict(),
            }
            writer.add({**row, **_clock_run(peer, inputs, args.seconds, sampler)})
    writer.set("clocks", {"source": sampler.source, "error": sampler.error, "max_sm_mhz": sampler.max_sm_mhz})
    print(clocks_table(writer.rows))
    _print_failures(writer.rows)
    if sampler.error:
        print(f"clock sampling: {sampler.error}")
    return _measured(writer.rows, args)


def _clock_run(peer: Any, inputs: Any, seconds: float, sampler: Any) -> dict[str, Any]:
    """Run one implementation back to back for `seconds`; its TFLOP/s and the clocks meanwhile."""
    from zyfa_bench.clocks import normalised_throughput
    from zyfa_bench.flops import attention_flops
    from zyfa_bench.timing import time_calls

    ok, why = peer.available()
    if not ok:
        return {"status": "skipped", "reason": why}
    try:
        call = peer.prepare(inputs).call
        t0, medians = time.monotonic(), []
        while time.monotonic() - t0 < seconds:
            medians.append(time_calls([call], device=inputs.device, warmup=1, repeats=10).median_ms)
        t1 = time.monotonic()
    except Exception as exc:  # one implementation's failure is its row
        return {"status": "error", "reason": failure_reason(exc)}
    ms = sorted(medians)[len(medians) // 2]
    tflops = attention_flops(inputs.spec) / (ms * 1e-3) / 1e12
    clocks = sampler.window(t0, t1)
    extra = normalised_throughput(tflops, clocks["sm_mhz_mean"], sampler.max_sm_mhz)
    return {
        "status": "ok",
        "reason": "",
        "ms": ms,
        "tflops": tflops,
        "seconds": t1 - t0,
        "clocks": clocks,
        **extra,
    }


def cmd_capture(args: argparse.Namespace) -> int:
    """zyfa-bench capture."""
    try:
        from zyfa_bench.capture import capture
    except ImportError as exc:  # pragma: no cover - capture.py itself imports lazily
        raise SystemExit(f"capture needs transformers: pip install 'zyfa-bench[capture]' ({exc})") from exc
    text = Path(args.text_file).read_text() if args.text_file else None
    try:
        result = capture(
            args.model,
            args.out,
            layers=_ints(args.layers),
            n_tokens=args.tokens,
            batch=args.batch,
            text=text,
            device=args.device,
            dtype=getattr(torch, args.dtype),
            seed=args.seed,
        )
    except ModuleNotFoundError as exc:
        raise SystemExit(
            f"capture needs transformers and safetensors: pip install 'zyfa-bench[capture]' ({exc})"
        ) from exc
    print(f"wrote {result.path}: layers {result.layers}")
    for layer in result.layers:
        shapes = result.shapes[str(layer)]
        scale = result.scales[str(layer)]
        print(f"  layer {layer}: q {shapes['q']} k {shapes['k']} v {shapes['v']} scale {scale:.5g}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """zyfa-bench report."""
    from zyfa_bench.index import expand_paths, update_index
    from zyfa_bench.report import summary_text, write_report

    folders = [Path(p) for p in args.files if Path(p).is_dir()]
    single = folders[0] if len(folders) == 1 and len(args.files) == 1 else None
    out = Path(args.out) if args.out is not None else (single or Path("."))
    if args.index and (single is None or out.resolve() != single.resolve()):
        raise ValueError("--index needs one run folder as the only input, with --out that folder or none")
    files = expand_paths(args.files)
    written = write_report(files, out)
    if args.index:
        written["index"] = update_index(args.index, single)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    if args.print:
        print(summary_text(files))
    return 0


def cmd_peers(args: argparse.Namespace) -> int:
    """zyfa-bench peers."""
    for p in all_peers():
        ok, why = p.available()
        print(f"{p.name:18} {p.precision:5} {'yes' if ok else 'no ':3}  {why}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `zyfa-bench` console script."""
    args = build_parser().parse_args(argv)
    problem = _check_device(args.device) if isinstance(getattr(args, "device", None), str) else None
    if problem:
        print(f"zyfa-bench {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:  # bad option values: one line, not a traceback
        print(f"zyfa-bench {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # e.g. a time limit's SIGINT: the result file already holds every finished row
        where = f"; rows so far are in {args.json}" if getattr(args, "json", None) else ""
        print(f"zyfa-bench {args.command}: interrupted{where}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
