"""GEMM ceilings (zyfa_bench.ceilings): the burst and the sustained rate of one GEMM, timed on the CPU here
with a stand-in call (the GPU test in test_peers_gpu.py runs the real GEMMs)."""

from __future__ import annotations

import math
import time

import torch

from zyfa_bench.ceilings import MAX_TIMED_CALLS, SUSTAINED_TIMED_S, ceilings, gemm_rates

FAST_S, SLOW_S = 0.0005, 0.003


class SlowingCall:
    """A 'GEMM' that takes 0.5 ms for its first `fast` calls and 3 ms after: a card that clocks down once it
    has run a while."""

    def __init__(self, fast: int) -> None:
        self.calls, self.fast = 0, fast

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(FAST_S if self.calls <= self.fast else SLOW_S)


def test_burst_then_sustained():
    call, flops, repeats = SlowingCall(fast=20), 2e9, 5
    rates = gemm_rates(call, flops, device=torch.device("cpu"), repeats=repeats, sustain_s=0.2)
    assert set(rates) == {"burst_tflops", "tflops"}  # no sampler: no clocks
    # The burst (3 warm-up + 5 timed calls) ran on the fast calls, the sustained figure on the slow ones.
    assert rates["burst_tflops"] > 1.5 * rates["tflops"]
    assert rates["tflops"] <= flops / SLOW_S / 1e12
    # The sustained timing covered SUSTAINED_TIMED_S at the burst's pace, and the hold came before it.
    burst_ms = flops / (rates["burst_tflops"] * 1e12) * 1e3
    timed = max(repeats, min(MAX_TIMED_CALLS, math.ceil(SUSTAINED_TIMED_S * 1e3 / burst_ms)))
    held = call.calls - (3 + repeats) - (1 + timed)  # the sustained timing warms one call first
    assert held >= 32 and held % 32 == 0, held


def test_no_gpu_no_ceilings():
    assert ceilings(torch.device("cpu")) == {"note": "no GPU: no GEMM ceilings"}
