"""Does the FP8 kernels' speed depend on the input data?  (H200 diagnostic, issue 5.)

The kernel self-test (`sm90_wgmma_selftest.sh`) and `zyfa-bench throughput` disagree for FP8 at d=128,
b2 s16K 32/8 heads: lean P 783 against 668 TFLOP/s, exact 751 against 721 (session 3, runs 9 and 4).
The self-test feeds uniform values in [-1.7, 1.7] with descales 1; zyfa-bench feeds Gaussian values
through `zyfa.fp8_quantize` (power-of-two descales, codes up to 448).  This script times the SAME
product call, `zyfa.flash_attn_func`, on both kinds of input (and on a few in between), interleaved
(A B C ... A B C ...) so clock drift under the power cap hits every kind alike, and prints TFLOP/s with
the mean SM clock seen by nvidia-smi during each timed batch.

Timing: zyfa_bench.timing.time_calls (median of device events).  The fifth session's figures
(docs/benchmarks/2026-12-02/session5_run1) came from this script at 9139f17, whose own loop synchronised
after every call; the medians of both are per-call device times.

Usage (on the device, after zyfa and zyfa-bench are installed):
    python3 tools/device/fp8_input_probe.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Callable

import torch

import zyfa
from zyfa_bench.timing import time_calls

B, S, HQ, HKV, D = 2, 16384, 32, 8, 128
FLOPS = 2.0 * B * HQ * S * S * (D + D) / 2.0  # causal, flash-attn's convention


def sm_clock_mhz() -> float:
    """Current SM clock of GPU 0 (nvidia-smi; nan if it cannot be read)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return float("nan")


def uniform_codes(shape: tuple[int, ...], gen: torch.Generator) -> tuple[torch.Tensor, float]:
    """The self-test's inputs: uniform in [-1.7, 1.7] (unit variance), cast to e4m3, descale 1."""
    x = (torch.rand(shape, generator=gen, device="cuda") - 0.5) * 3.4
    return x.to(torch.float8_e4m3fn), 1.0


def gaussian_quantized(shape: tuple[int, ...], gen: torch.Generator) -> tuple[torch.Tensor, float]:
    """zyfa-bench's inputs: standard Gaussian through fp8_quantize (per-tensor power-of-two scale)."""
    x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)
    x8, descale = zyfa.fp8_quantize(x)
    return x8, float(descale)


def gaussian_unscaled(shape: tuple[int, ...], gen: torch.Generator) -> tuple[torch.Tensor, float]:
    """Gaussian cast to e4m3 directly (descale 1): separates the distribution from the scaling."""
    x = torch.randn(shape, generator=gen, device="cuda")
    return x.to(torch.float8_e4m3fn), 1.0


KINDS: dict[str, Callable[[tuple[int, ...], torch.Generator], tuple[torch.Tensor, float]]] = {
    "uniform, descale 1 (selftest)": uniform_codes,
    "gaussian, descale 1": gaussian_unscaled,
    "gaussian via fp8_quantize (zyfa-bench)": gaussian_quantized,
}


def main() -> None:
    """Time every (P mode, input kind) pair `--rounds` times, interleaved, and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = {}
    for name, make in KINDS.items():
        q, qd = make((B, S, HQ, D), gen)
        k, kd = make((B, S, HKV, D), gen)
        v, vd = make((B, S, HKV, D), gen)
        inputs[name] = (q, k, v, qd, kd, vd)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for p_mode in ("exact", "lean", "f16"):
            for name, (q, k, v, qd, kd, vd) in inputs.items():

                def call(q=q, k=k, v=v, qd=qd, kd=kd, vd=vd, p_mode=p_mode) -> object:
                    return zyfa.flash_attn_func(
                        q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd, p_mode=p_mode
                    )

                ms = time_calls([call], device=torch.device("cuda"), warmup=2, repeats=args.repeats).median_ms
                results.setdefault((p_mode, name), []).append((ms, sm_clock_mhz()))
    print(
        f"fp8_input_probe: zyfa.flash_attn_func FP8, b{B} s{S} hq{HQ} hkv{HKV} d{D} causal, "
        f"{args.rounds} interleaved rounds x {args.repeats} timed calls (median per round)"
    )
    print(f"{'p_mode':6} | {'inputs':40} | {'TFLOP/s per round':28} | SM MHz after each round")
    for (p_mode, name), rows in results.items():
        tf = " / ".join(f"{FLOPS / (ms * 1e-3) / 1e12:.1f}" for ms, _ in rows)
        mhz = " / ".join(f"{mhz:.0f}" for _, mhz in rows)
        print(f"{p_mode:6} | {name:40} | {tf:28} | {mhz}")


if __name__ == "__main__":
    main()
