"""The throughput sweep: every selected implementation on every problem, side by side, one process.

For each problem (shape preset × seqlen, batch = tokens // seqlen) fresh inputs are drawn once and
shared by all implementations (FP8 ones get the same quantised tensors).  Every implementation is
prepared first (outside the timer: layouts, plans, JIT compiles, one validation call); then they are
timed in `rounds` interleaved rounds (`zyfa_bench.timing.interleaved_call_times`): each round times a share
of the repeats of every implementation, in an order rotated by one per round (A B C, B C A, C A B), and each
implementation's figures pool all its calls (`summarise_runs`).  A power-capped GPU's clock swings
between states over seconds; timed back to back, each implementation could land in a different state
and the ratios between them would be off by the clock ratio (~10% seen on an H200); interleaved, every
implementation samples every state alike.  Then each is checked against a float64 reference on a slice
of its output and measured for host overhead (eager and CUDA-graph replay).  Clock samples taken during
its own timed rounds are attached to its row.  Any failure becomes a row with its reason as soon as it
is known; the sweep goes on.  With rounds = 1 each implementation is prepared, timed (one run of all
repeats), checked and measured in turn, before the next one is prepared.

The BF16 and FP8 GEMM rates the attention figures are compared with come from `zyfa_bench.ceilings`, in the
same run (the target: "≥ 80% of the FP8 GEMM rate measured in the same run").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from zyfa_bench.accuracy import attention_f64, errors
from zyfa_bench.clocks import ClockSampler, normalised_throughput
from zyfa_bench.flops import attention_flops
from zyfa_bench.inputs import Inputs, make_inputs, quantize_inputs
from zyfa_bench.peers.base import Peer, Prepared, Unsupported
from zyfa_bench.results import failure_reason
from zyfa_bench.spec import Spec
from zyfa_bench.timing import (
    CallTimes,
    buffer_sets,
    host_overhead,
    interleaved_call_times,
    l2_bytes,
    summarise_runs,
)
from zyfa_bench.workloads import Workload, describe

__all__ = ["Problem", "SweepOptions", "run_sweep"]


@dataclass
class Problem:
    """One problem of the sweep: a shape preset's name and its Spec."""

    shape: str
    spec: Spec


@dataclass
class SweepOptions:
    """How each implementation is measured (see `zyfa-bench throughput --help`)."""

    warmup: int = 3
    repeats: int = 20  # timed calls per implementation in all, split over the rounds
    rounds: int = 3  # interleaved timing rounds (at most `repeats`; 1 = each implementation back to back)
    max_sets: int = 8
    graph: bool = True
    check: bool = True
    check_rows: int = 256
    rotate: bool = False
    seed: int = 0
    time_budget_s: float | None = None
    host_calls: int = 20
    extra: dict[str, Any] = field(default_factory=dict)


def _seed_of(base: int, problem: int, inputs_set: int) -> int:
    """Seed of input set `inputs_set` of problem `problem` (recorded in rows)."""
    return base + 1000 * problem + inputs_set


def run_sweep(
    problems: list[Problem],
    peers: list[Peer],
    workload: Workload,
    *,
    device: torch.device,
    options: SweepOptions,
    add_row: Callable[[dict[str, Any]], None],
    sampler: ClockSampler | None = None,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Measure every peer on every problem; each row goes to `add_row` as soon as it exists.

    Rows of peers that are skipped, unsupported or fail to prepare come out while the others are being
    prepared; measured rows (and timing failures) follow the timing rounds, in peer order.
    """
    if options.rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {options.rounds}")
    if options.repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {options.repeats}")
    t_begin = time.monotonic()
    availability = {p.name: p.available() for p in peers}
    need_fp8 = any(p.precision == "fp8" and availability[p.name][0] for p in peers)
    # One round: each peer on its own (prepare, time, check, host overhead, then the next peer), as before
    # rounds existed.  Several: all peers of the problem are prepared, then timed together.
    groups = [[p] for p in peers] if options.rounds == 1 else [peers]
    for n, problem in enumerate(problems):
        over = options.time_budget_s is not None and time.monotonic() - t_begin > options.time_budget_s
        sets: list[Inputs] = []
        if not over:
            sets = _input_sets(problem.spec, workload, device, options, n, need_fp8)
        for group in groups:
            ready: list[_Ready] = []
            for peer in group:
                if progress:
                    progress(f"{problem.spec.label} {peer.name}")
                row = _base_row(problem, peer, workload, options, n)
                over = (
                    options.time_budget_s is not None and time.monotonic() - t_begin > options.time_budget_s
                )
                if over:
                    add_row(
                        {
                            **row,
                            "status": "skipped",
                            "reason": f"time budget of {options.time_budget_s:.0f} s spent",
                        }
                    )
                    continue
                prepared = _prepare(peer, availability[peer.name], sets, device)
                if isinstance(prepared, dict):  # skipped, unsupported or error: the row is complete
                    add_row({**row, **prepared})
                    continue
                ready.append(_Ready(peer, row, prepared))
            _time_rounds(ready, device, options)
            for r in ready:
                add_row({**r.row, **_finish(r, sets, device, options, sampler)})
            del ready
        del sets


@dataclass
class _Ready:
    """A prepared peer of the current problem, and its timing rounds so far."""

    peer: Peer
    row: dict[str, Any]
    prepared: list[Prepared]
    runs: list[CallTimes] = field(default_factory=list)
    error: str | None = None


def _time_rounds(ready: list[_Ready], device: torch.device, options: SweepOptions) -> None:
    """Time every ready peer in interleaved rounds (`interleaved_call_times`)."""
    results = interleaved_call_times(
        [[p.call for p in item.prepared] for item in ready],
        device=device,
        warmup=options.warmup,
        repeats=options.repeats,
        rounds=options.rounds,
    )
    for item, result in zip(ready, results, strict=True):
        if isinstance(result, Exception):  # a peer's failure is a row, not the end of the sweep
            item.error = f"timing failed: {failure_reason(result)}"
        else:
            item.runs = result


def _input_sets(
    spec: Spec, workload: Workload, device: torch.device, options: SweepOptions, n: int, fp8: bool
) -> list[Inputs]:
    """Enough independent input sets that rotating them defeats the L2 cache (see timing.buffer_sets)."""

    def one(j: int) -> Inputs:
        seed = _seed_of(options.seed, n, j)
        inputs = make_inputs(spec, workload, device=device, seed=seed)
        if fp8:
            try:
                quantize_inputs(inputs, rotate=options.rotate, seed=seed)
            except Exception as exc:  # FP8 peers then report this instead of running
                inputs.meta["fp8_error"] = f"FP8 inputs could not be made: {failure_reason(exc)}"
        return inputs

    first = one(0)
    count = buffer_sets(first.nbytes("bf16"), l2_bytes(device), max_sets=options.max_sets)
    return [first, *(one(j) for j in range(1, count))]


def _base_row(
    problem: Problem, peer: Peer, workload: Workload, options: SweepOptions, n: int
) -> dict[str, Any]:
    spec = problem.spec
    return {
        **peer.describe(),
        "impl": peer.name,
        "shape": problem.shape,
        "label": spec.label,
        **spec.as_dict(),
        "workload": workload.name,
        "workload_params": describe(workload),
        "seed": _seed_of(options.seed, n, 0),
        "rotate": options.rotate if peer.precision == "fp8" else None,
        "flops": attention_flops(spec),
    }


def _prepare(
    peer: Peer, availability: tuple[bool, str], sets: list[Inputs], device: torch.device
) -> list[Prepared] | dict[str, Any]:
    """The peer's prepared calls, one per input set, or the row fields saying why there are none."""
    ok, why = availability
    spec = sets[0].spec
    if ok:
        ok, why = peer.supports(spec, device)
    if not ok:
        return {"status": "skipped", "reason": why}
    if peer.precision == "fp8" and not sets[0].has_fp8:
        return {"status": "skipped", "reason": str(sets[0].meta.get("fp8_error", "no FP8 inputs"))}
    try:
        return [peer.prepare(s) for s in sets]
    except Unsupported as exc:
        return {"status": "unsupported", "reason": str(exc)}
    except Exception as exc:  # a peer's failure is a row, not the end of the sweep
        return {"status": "error", "reason": failure_reason(exc)}


def _finish(
    item: _Ready,
    sets: list[Inputs],
    device: torch.device,
    options: SweepOptions,
    sampler: ClockSampler | None,
) -> dict[str, Any]:
    """The row fields of a timed peer: figures over all its rounds, clocks, check and host overhead."""
    if item.error is not None:
        return {"status": "error", "reason": item.error}
    prepared, spec = item.prepared, sets[0].spec
    timing = summarise_runs(item.runs)
    flops = attention_flops(spec)
    tflops = flops / (timing.median_ms * 1e-3) / 1e12
    row: dict[str, Any] = {
        "status": "ok",
        "reason": "",
        "notes": prepared[0].notes,
        "ms": timing.median_ms,
        "tflops": tflops,
        "timing": timing.as_dict(),
    }
    if sampler is not None:
        # Only the peer's own rounds: the other peers' rounds in between ran other kernels.
        row["clocks"] = sampler.windows([(run.t_start, run.t_end) for run in item.runs])
        row.update(normalised_throughput(tflops, row["clocks"]["sm_mhz_mean"], sampler.max_sm_mhz))
    if options.check:
        row["check_rel_l2"] = _check(prepared[0], sets[0], item.peer.precision, options.check_rows)
    # Host overhead needs few calls of a long kernel: keep this part near 0.3 s of device time per mode.
    calls = max(3, min(options.host_calls, int(300 / max(timing.median_ms, 1e-3))))
    host = host_overhead(prepared[0].call, device=device, calls=calls, graph=options.graph)
    row["host"] = host.as_dict()
    return row


def _check(prepared: Prepared, inputs: Inputs, precision: str, rows: int) -> float | str:
    """rel L2 error of the last `rows` query rows, batch 0, the q heads of kv head 0, vs float64."""
    try:
        out = prepared.output()
    except Exception as exc:
        return f"check failed: {failure_reason(exc)}"
    spec = inputs.spec
    r = min(rows, spec.seqlen_q)
    group = spec.heads_q // spec.heads_kv
    if precision == "fp8":
        q, k, v = inputs.dequantized()
    else:
        q, k, v = inputs.q, inputs.k, inputs.v
    ref = attention_f64(
        q[:1, -r:, :group],
        k[:1, :, :1],
        v[:1, :, :1],
        softmax_scale=inputs.softmax_scale,
        causal=spec.causal,
        q_row0=spec.seqlen_q - r,
        seqlen_q_total=spec.seqlen_q,
    )
    return errors(out[:1, -r:, :group], ref)["rel_l2"]
