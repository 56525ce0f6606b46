"""The timer: median of repeats, rotation over input sets, buffer-set choice, CPU fallbacks."""

from __future__ import annotations

import time

import pytest
import torch

from zyfa_bench.timing import (
    buffer_sets,
    call_times,
    host_overhead,
    interleaved_call_times,
    round_repeats,
    summarise_runs,
    time_calls,
)


def test_buffer_sets_defeat_l2():
    l2 = 50 * 2**20
    assert buffer_sets(10 * l2, l2) == 1  # one set is already far bigger than L2
    assert buffer_sets(0, l2) == 1 and buffer_sets(1000, 0) == 1  # unknown sizes: no rotation
    n = buffer_sets(l2, l2, max_sets=100)
    assert (n - 1) * l2 >= 4 * l2  # the sets between two uses of one set fill 4x L2
    assert buffer_sets(1024, l2, max_sets=8) == 8  # capped


def test_time_calls_rotates_sets_and_takes_the_median():
    counts = [0, 0, 0]
    delays = [0.002, 0.002, 0.002]

    def make(i):
        def call():
            counts[i] += 1
            time.sleep(delays[i])

        return call

    t = time_calls([make(0), make(1), make(2)], device=torch.device("cpu"), warmup=2, repeats=9)
    # warm-up touches every set once (3 calls, not 2), then 9 timed calls round-robin.
    assert counts == [4, 4, 4]
    assert t.method == "wall-clock" and t.repeats == 9 and t.sets == 3
    assert t.min_ms <= t.p10_ms <= t.median_ms <= t.p90_ms <= t.max_ms
    assert t.median_ms >= 2.0  # the sleeps really were inside the timed region
    assert t.t_end >= t.t_start


def test_timed_calls_continue_the_warm_up_cycle():
    order: list[int] = []
    calls = [lambda i=i: order.append(i) for i in range(2)]
    run = call_times(calls, device=torch.device("cpu"), warmup=3, repeats=4)
    # warm-up 0 1 0, then the timed calls go on with 1: set 0 was not just pulled into the cache.
    assert order == [0, 1, 0, 1, 0, 1, 0] and len(run.times_ms) == 4 and run.warmup == 3
    order.clear()
    call_times(calls, device=torch.device("cpu"), warmup=1, repeats=2, warm_every_set=False)
    assert order == [0, 1, 0]  # one warm-up call, not one per set
    order.clear()
    call_times(calls, device=torch.device("cpu"), warmup=0, repeats=2, warm_every_set=False)
    assert order == [0, 1]


def test_summarise_runs_pools_every_call():
    cpu = torch.device("cpu")
    runs = [
        call_times([lambda: time.sleep(0.001)], device=cpu, warmup=w, repeats=r) for w, r in ((2, 3), (1, 2))
    ]
    t = summarise_runs(runs)
    pooled = sorted(runs[0].times_ms + runs[1].times_ms)
    assert t.repeats == 5 and t.rounds == 2 and t.warmup == 3 and t.sets == 1
    assert t.median_ms == pooled[2] and t.min_ms == pooled[0] and t.max_ms == pooled[-1]
    assert t.t_start == runs[0].t_start and t.t_end == runs[1].t_end
    assert t.round_median_ms == [sorted(runs[0].times_ms)[1], sum(runs[1].times_ms) / 2]  # each run's own
    single = summarise_runs(runs[:1])
    assert single.rounds == 1 and single.repeats == 3 and single.median_ms == sorted(runs[0].times_ms)[1]
    with pytest.raises(ValueError):
        summarise_runs([])


def test_interleaved_rounds_rotate_and_split_the_repeats():
    """Three implementations, 8 repeats in 3 rounds (3 + 3 + 2): orders A B C, B C A, C A B; round 0 warms
    each up fully (warm-up 2 on one set), later rounds make one untimed call; B raises in round 1 and is left
    out after that, its result the exception."""
    log: list[str] = []
    fail = {"B": 1}  # B's call number that raises (0-based, warm-up included)
    made: dict[str, int] = {}

    def make(name: str):
        def call():
            n = made.get(name, 0)
            made[name] = n + 1
            if fail.get(name) is not None and n == 2 + 3 + fail[name]:
                raise RuntimeError(f"{name} broke")
            log.append(name)

        return call

    cpu = torch.device("cpu")
    results = interleaved_call_times([[make(n)] for n in "ABC"], device=cpu, warmup=2, repeats=8, rounds=3)
    runs = [name for i, name in enumerate(log) if i == 0 or log[i - 1] != name]
    # Round 1: B's untimed call passes, its first timed call raises; round 2 is C A without B.
    assert runs == ["A", "B", "C", "B", "C", "A", "C", "A"]
    a, b, c = results
    assert isinstance(b, RuntimeError) and str(b) == "B broke"
    assert isinstance(a, list) and [len(r.times_ms) for r in a] == [3, 3, 2]
    assert isinstance(c, list) and [r.warmup for r in c] == [2, 1, 1]
    assert made["A"] == made["C"] == 2 + 3 + (1 + 3) + (1 + 2)
    assert round_repeats(20, 3) == [7, 7, 6] and round_repeats(2, 3) == [1, 1]
    with pytest.raises(ValueError):
        round_repeats(0, 3)
    with pytest.raises(ValueError):
        interleaved_call_times([[lambda: None]], device=cpu, rounds=0)


def test_time_calls_rejects_bad_arguments():
    with pytest.raises(ValueError):
        time_calls([], device=torch.device("cpu"))
    with pytest.raises(ValueError):
        time_calls([lambda: None], device=torch.device("cpu"), repeats=0)


def test_host_overhead_is_not_measured_on_cpu():
    h = host_overhead(lambda: None, device=torch.device("cpu"))
    assert h.eager_us is None and h.graph_us is None and "CPU" in h.graph_error


@pytest.mark.gpu
def test_device_events_and_graph_replay_on_gpu():
    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    t = time_calls([lambda: a @ a], device=dev, warmup=2, repeats=5)
    assert t.method == "device-events" and t.median_ms > 0
    h = host_overhead(lambda: a @ a, device=dev, calls=5)
    assert h.eager_us > 0 and h.graph_error is None and h.graph_device_ms > 0
