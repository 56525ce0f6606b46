"""The timer: median of repeats, rotation over input sets, buffer-set choice, CPU fallbacks."""

from __future__ import annotations

import time

import pytest
import torch

from zyfa_bench.timing import buffer_sets, host_overhead, time_calls


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
