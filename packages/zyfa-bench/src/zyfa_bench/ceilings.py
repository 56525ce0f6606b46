"""The GEMM ceilings of a run: the BF16 and FP8 GEMM rates the attention figures are compared with.

The FP8 target asks for attention at >= 80% of "the FP8 GEMM rate measured in the same run". On a power-capped
card (an H200 at 700 W) that rate depends on how long the GEMM has been running: a few calls from a cool
start run at the top clock (1980 MHz), while the sweep's attention rows, interleaved for minutes, run at
the clock the power cap allows (1650-1900 MHz in an H200 sweep). So each GEMM is measured
twice: a burst (`repeats` calls after a short warm-up, what earlier runs reported) and sustained (timed
over at least SUSTAINED_TIMED_S after `sustain_s` seconds of back-to-back calls). The sustained figure is
`<dtype>_gemm_tflops`, the targets' denominator; the burst one stays in the JSON as
`<dtype>_gemm_burst_tflops`; each with the mean SM clock of its timed calls when a sampler runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from zyfa_bench.clocks import ClockSampler
from zyfa_bench.results import failure_reason
from zyfa_bench.timing import Timing, synchronize, time_calls

__all__ = ["MAX_TIMED_CALLS", "SUSTAINED_TIMED_S", "ceilings", "gemm_rates"]

# How long the sustained figure's timed calls last at the least (the sweep's rows time ~0.1-0.2 s each),
# in at most MAX_TIMED_CALLS calls (an 8192³ GEMM takes ~0.7-1.4 ms; a small one in a test would take
# tens of thousands).
SUSTAINED_TIMED_S = 0.5
MAX_TIMED_CALLS = 2000


def _hold(call: Callable[[], object], device: torch.device, seconds: float) -> int:
    """Run `call` back to back for `seconds`, synchronising every 32 calls (a short queue, so the time
    bound holds); the number of calls made."""
    calls, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(32):
            call()
        calls += 32
        synchronize(device)
    return calls


def gemm_rates(
    call: Callable[[], object],
    flops: float,
    *,
    device: torch.device,
    repeats: int,
    sustain_s: float,
    sampler: ClockSampler | None = None,
) -> dict[str, float]:
    """{"burst_tflops", "tflops"} (and "burst_sm_mhz", "sm_mhz" with a sampler) of one GEMM `call`."""

    def rate(t: Timing, key: str) -> None:
        out[f"{key}tflops"] = flops / (t.median_ms * 1e-3) / 1e12
        if sampler is not None:
            out[f"{key}sm_mhz"] = sampler.window(t.t_start, t.t_end)["sm_mhz_mean"]

    out: dict[str, float] = {}
    burst = time_calls([call], device=device, warmup=3, repeats=repeats)
    rate(burst, "burst_")
    _hold(call, device, sustain_s)
    timed = max(
        repeats, min(MAX_TIMED_CALLS, math.ceil(SUSTAINED_TIMED_S * 1e3 / max(burst.median_ms, 1e-3)))
    )
    rate(time_calls([call], device=device, warmup=0, repeats=timed), "")
    return out


def ceilings(
    device: torch.device,
    *,
    n: int = 8192,
    repeats: int = 10,
    sustain_s: float = 3.0,
    sampler: ClockSampler | None = None,
) -> dict[str, Any]:
    """BF16 (torch.matmul) and FP8 (torch._scaled_mm, e4m3fn, BF16 out) GEMM TFLOP/s at n×n×n, random data,
    burst and sustained (module docstring).

    Random, not zero, operands: zeros run measurably faster on this hardware.  Each entry is a number or
    the reason it could not be measured.
    """
    if device.type != "cuda":
        return {"note": "no GPU: no GEMM ceilings"}
    out: dict[str, Any] = {"n": n, "sustain_s": sustain_s}
    gen = torch.Generator(device=device).manual_seed(1234)
    a = torch.randn(n, n, device=device, generator=gen).bfloat16()
    b = torch.randn(n, n, device=device, generator=gen).bfloat16()
    flops = 2.0 * n**3
    kw = {"device": device, "repeats": repeats, "sustain_s": sustain_s, "sampler": sampler}
    try:
        rates = gemm_rates(lambda: a @ b, flops, **kw)
        out.update({f"bf16_gemm_{k}": v for k, v in rates.items()})
    except Exception as exc:
        out["bf16_gemm_tflops"] = f"failed: {failure_reason(exc)}"
    try:
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=device, dtype=torch.float32)

        def mm() -> torch.Tensor:
            return torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        out.update({f"fp8_gemm_{k}": v for k, v in gemm_rates(mm, flops, **kw).items()})
    except Exception as exc:
        out["fp8_gemm_tflops"] = f"failed: {failure_reason(exc)}"
    return out
