"""THE timer: device events (CUDA/HIP) or the wall clock (CPU), warm-up, median of repeats, rotated inputs.

Every throughput figure of zyfa-bench comes from `time_calls`:
- warm-up calls first (module load, JIT compiles, cuDNN plan selection stay out of the numbers);
- then `repeats` calls, each bracketed by its own pair of device events, all enqueued back to back and
  synchronised once at the end, so the host never stalls the device between calls;
- the calls cycle over several input sets (one callable per set) so that a small problem cannot be
  served from the L2 cache by the previous call (`buffer_sets` picks how many);
- the median is the figure; min, max and the 10th/90th percentiles show the spread.

`call_times` is the same timer returning the raw per-call times (`CallTimes`); `summarise_runs` turns one
or several such runs into one `Timing`. `interleaved_call_times` times several implementations in
interleaved rounds, the order rotated every round (the throughput sweep and the serving step), so that a
power-capped GPU's clock swings between seconds-long states hit every implementation alike; each one is
then summarised over all its calls.

`host_overhead` measures what a call costs the host in eager mode and under CUDA-graph replay, where the
launch work is done once at capture.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

__all__ = [
    "CallTimes",
    "GraphUnsupported",
    "HostOverhead",
    "Timing",
    "buffer_sets",
    "call_times",
    "host_overhead",
    "interleaved_call_times",
    "l2_bytes",
    "round_repeats",
    "summarise_runs",
    "synchronize",
    "time_calls",
]


@dataclass
class Timing:
    """Per-call times of one measured callable, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int
    warmup: int
    sets: int
    method: str  # "device-events" or "wall-clock"
    t_start: float  # time.monotonic() bounds of the timed region (to match clock samples)
    t_end: float
    rounds: int = 1  # timed runs the figures pool (interleaved rounds; t_start/t_end span all of them)
    # Each round's own median, in round order: a spread between rounds (clock states) shows here, one
    # inside every round does not.
    round_median_ms: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, float | int | str | list[float]]:
        """Fields as a plain dict (for JSON rows)."""
        return asdict(self)


@dataclass
class CallTimes:
    """Raw per-call times (milliseconds) of one timed run, before they are summarised into a Timing."""

    times_ms: list[float]
    warmup: int  # warm-up calls asked for (the per-set minimum of `call_times` may add more)
    sets: int
    method: str  # "device-events" or "wall-clock"
    t_start: float  # time.monotonic() bounds of this run's timed region
    t_end: float


@dataclass
class HostOverhead:
    """Host time per call, microseconds: eager launch, and CUDA-graph replay (None where not measurable)."""

    eager_us: float | None
    graph_us: float | None
    graph_device_ms: float | None  # device time of one replay (events), comparable with Timing.median_ms
    graph_error: str | None

    def as_dict(self) -> dict[str, float | str | None]:
        """Fields as a plain dict (for JSON rows)."""
        return asdict(self)


class GraphUnsupported(RuntimeError):
    """The callable cannot be captured into a CUDA graph (host syncs, stream mismatch, ...)."""


def _is_device(device: torch.device) -> bool:
    return device.type == "cuda"  # ROCm builds of torch also report "cuda"


def synchronize(device: torch.device) -> None:
    """Wait for all work on `device` (no-op on CPU)."""
    if _is_device(device):
        torch.cuda.synchronize(device)


def l2_bytes(device: torch.device) -> int:
    """L2 cache size of the device in bytes (0 for CPU or when torch does not report it)."""
    if not _is_device(device):
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)


def buffer_sets(bytes_per_set: int, l2: int, *, max_sets: int = 8, factor: int = 4) -> int:
    """How many input sets to rotate so that one call's inputs were evicted by the calls in between.

    Rotating n sets means each set's bytes were last touched n-1 calls ago; with (n-1)·bytes >= factor·L2
    nothing of it is left in L2.  One set suffices when a single set already exceeds factor·L2.
    """
    if l2 <= 0 or bytes_per_set <= 0:
        return 1
    need = 1 + math.ceil(factor * l2 / bytes_per_set)
    return max(1, min(max_sets, need if bytes_per_set < factor * l2 else 1))


def _percentile(sorted_vals: list[float], q: float) -> float:
    pos = (len(sorted_vals) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def _summarise(
    times: list[float], warmup: int, sets: int, method: str, t0: float, t1: float, round_medians: list[float]
) -> Timing:
    s = sorted(times)
    return Timing(
        median_ms=statistics.median(s),
        min_ms=s[0],
        max_ms=s[-1],
        p10_ms=_percentile(s, 0.1),
        p90_ms=_percentile(s, 0.9),
        repeats=len(s),
        warmup=warmup,
        sets=sets,
        method=method,
        t_start=t0,
        t_end=t1,
        rounds=len(round_medians),
        round_median_ms=round_medians,
    )


def summarise_runs(runs: Sequence[CallTimes]) -> Timing:
    """One Timing over every call of `runs` (e.g. the interleaved rounds of one implementation).

    median/min/max/p10/p90 pool all calls; repeats is their total; warmup the sum of the warm-ups asked
    for; t_start/t_end span the first run's start to the last run's end (the runs themselves are the
    timed intervals: pass them to `ClockSampler.windows` for clocks); rounds is len(runs), round_median_ms
    each run's own median.
    """
    if not runs:
        raise ValueError("summarise_runs needs at least one run")
    times = [t for run in runs for t in run.times_ms]
    warmup = sum(run.warmup for run in runs)
    first, last = runs[0], runs[-1]
    round_medians = [statistics.median(run.times_ms) for run in runs]
    return _summarise(times, warmup, first.sets, first.method, first.t_start, last.t_end, round_medians)


def time_calls(
    calls: Sequence[Callable[[], object]], *, device: torch.device, warmup: int = 3, repeats: int = 20
) -> Timing:
    """Median time of one call, cycling over `calls` (one per input set).

    Args:
        calls: zero-argument callables, each launching exactly the work to be timed on one input set.
        device: where the work runs: CUDA/HIP devices are timed with events, CPU with the wall clock.
        warmup: untimed calls first (at least one per set is made anyway, so each set is resident).
        repeats: timed calls.
    """
    return summarise_runs([call_times(calls, device=device, warmup=warmup, repeats=repeats)])


def call_times(
    calls: Sequence[Callable[[], object]],
    *,
    device: torch.device,
    warmup: int = 3,
    repeats: int = 20,
    warm_every_set: bool = True,
) -> CallTimes:
    """The per-call times of `repeats` calls cycling over `calls` (what `time_calls` summarises).

    Args:
        calls: zero-argument callables, each launching exactly the work to be timed on one input set.
        device: where the work runs: CUDA/HIP devices are timed with events, CPU with the wall clock.
        warmup: untimed calls first.
        repeats: timed calls.
        warm_every_set: make at least one untimed call per set (so each set is resident) even when
            `warmup` is smaller; False for a later run on sets that were already warmed.

    The timed calls continue the warm-up's cycle over the sets, so the first timed call never reuses the
    set the last warm-up call just pulled into L2.
    """
    if not calls:
        raise ValueError("time_calls needs at least one callable")
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    warm = max(warmup, len(calls)) if warm_every_set else max(warmup, 0)
    for i in range(warm):
        calls[i % len(calls)]()
    synchronize(device)
    order = [calls[(warm + i) % len(calls)] for i in range(repeats)]
    if _is_device(device):
        return _time_events(order, device, warmup, len(calls))
    times = []
    t0 = time.monotonic()
    for call in order:
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return CallTimes(times, warmup, len(calls), "wall-clock", t0, time.monotonic())


def round_repeats(repeats: int, rounds: int) -> list[int]:
    """Timed calls of each round: `repeats` split as evenly as possible, earlier rounds taking the rest.

    The total is exactly `repeats` (so `--repeats` keeps its meaning); more rounds than repeats are cut to
    one call per round.
    """
    if repeats < 1 or rounds < 1:
        raise ValueError(f"repeats and rounds must be >= 1, got {repeats}, {rounds}")
    rounds = min(rounds, repeats)
    return [repeats // rounds + (1 if r < repeats % rounds else 0) for r in range(rounds)]


def interleaved_call_times(
    impls: Sequence[Sequence[Callable[[], object]]],
    *,
    device: torch.device,
    warmup: int = 3,
    repeats: int = 20,
    rounds: int = 3,
) -> list[list[CallTimes] | Exception]:
    """`repeats` timed calls of every implementation (impls[i]: its callables, one per input set), split over
    `rounds` rounds; each round times every implementation's share in turn, the order rotated by one per
    round (A B C, B C A, C A B).

    Round 0 warms each implementation up fully (`warmup`, and every input set once). Later rounds make one
    untimed call first: the sets are resident already, but an implementation's first launch after the
    others' kernels (cold instruction cache and TLB entries) would otherwise be a timed call. Returns, per
    implementation, its runs (one `CallTimes` per round, for `summarise_runs`), or the exception one of its
    calls raised; it then takes no part in the later rounds.
    """
    results: list[list[CallTimes] | Exception] = [[] for _ in impls]
    for r, count in enumerate(round_repeats(repeats, rounds)):
        shift = r % len(impls) if impls else 0
        for i in [*range(shift, len(impls)), *range(shift)]:
            runs = results[i]
            if isinstance(runs, Exception):
                continue
            try:
                runs.append(
                    call_times(
                        impls[i],
                        device=device,
                        warmup=warmup if r == 0 else min(1, warmup),
                        repeats=count,
                        warm_every_set=r == 0,
                    )
                )
            except Exception as exc:  # one implementation's failure is its result, not the end of the rounds
                results[i] = exc
    return results


def _time_events(
    order: Sequence[Callable[[], object]], device: torch.device, warmup: int, sets: int
) -> CallTimes:
    starts = [torch.cuda.Event(enable_timing=True) for _ in order]
    ends = [torch.cuda.Event(enable_timing=True) for _ in order]
    stream = torch.cuda.current_stream(device)
    t0 = time.monotonic()
    for start, call, end in zip(starts, order, ends, strict=True):
        start.record(stream)
        call()
        end.record(stream)
    torch.cuda.synchronize(device)
    t1 = time.monotonic()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    return CallTimes(times, warmup, sets, "device-events", t0, t1)


def host_overhead(
    call: Callable[[], object], *, device: torch.device, calls: int = 20, graph: bool = True
) -> HostOverhead:
    """Host microseconds per call in eager mode and under CUDA-graph replay.

    Eager: the wall time of `calls` back-to-back calls without synchronising, divided by `calls` (the
    device queue is deep enough that the host does not block for these few calls).  Graph: `call` is
    captured once into a torch.cuda.CUDAGraph; then the host time per replay, and the device time of a
    replay (events).  A callable that cannot be captured reports why in graph_error.
    """
    if not _is_device(device):
        return HostOverhead(None, None, None, "CPU: no device launches")
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    eager_us = (time.perf_counter() - start) * 1e6 / calls
    synchronize(device)
    if not graph:
        return HostOverhead(eager_us, None, None, "graph replay not requested")
    try:
        replay = _capture(call, device)
    except GraphUnsupported as exc:
        return HostOverhead(eager_us, None, None, str(exc))
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        replay()
    graph_us = (time.perf_counter() - start) * 1e6 / calls
    synchronize(device)
    timing = time_calls([replay], device=device, warmup=1, repeats=max(3, calls // 2))
    return HostOverhead(eager_us, graph_us, timing.median_ms, None)


def _capture(call: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """Capture `call` into a CUDA graph (after a warm-up on a side stream, as torch requires)."""
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            call()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        torch.cuda.synchronize(device)
    except Exception as exc:  # any failure inside capture means "not graph-safe"
        # A failed capture can leave the device with a sticky error only in rare driver states;
        # synchronising here surfaces it at this row rather than the next one.
        with contextlib.suppress(Exception):  # the first error is the one worth reporting
            torch.cuda.synchronize(device)
        raise GraphUnsupported(f"{type(exc).__name__}: {_first_line(exc)}") from exc
    return graph.replay


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
