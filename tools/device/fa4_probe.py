"""Probe FlashAttention-4 (flash-attn-4, CuTe DSL) on the device before a full zyfa-bench run.

    python3 tools/device/fa4_probe.py        # after .carry/fa4-site.tar.xz is unpacked on PYTHONPATH

Imports flash_attn.cute, runs BF16 causal forward at 16K (d=128 32q/8kv heads, and 192/128 16 heads,
32K tokens per call), checks the output against torch SDPA (math) on the first 512 queries of one head,
and prints TFLOP/s (causal FLOPs, median of CUDA-event timings). It is a smoke test of the carried
packages, not the benchmark: zyfa-bench throughput gives the figures we report.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch


def _time_ms(fn, repeats: int = 10) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main() -> int:
    t0 = time.time()
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as exc:  # report the import failure with its type: the point of the probe
        print(f"flash_attn.cute import FAILED: {type(exc).__name__}: {exc}")
        return 1
    print(f"flash_attn.cute imported in {time.time() - t0:.1f}s")
    rc = 0
    for name, hq, hkv, dqk, dv in (("d128 32q/8kv", 32, 8, 128, 128), ("192/128 16h", 16, 16, 192, 128)):
        s, b = 16384, 2
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, s, hq, dqk, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(b, s, hkv, dqk, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(b, s, hkv, dv, device="cuda", dtype=torch.bfloat16, generator=g)
        try:
            t1 = time.time()
            out = flash_attn_func(q, k, v, causal=True)
            out = out[0] if isinstance(out, tuple) else out
            torch.cuda.synchronize()
            first = time.time() - t1
            ms = _time_ms(lambda q=q, k=k, v=v: flash_attn_func(q, k, v, causal=True))
        except Exception as exc:
            print(f"{name}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
            rc = 1
            continue
        # Check: query rows [s-512, s) of head 0 of batch 0 (they see every key) against SDPA math in fp32.
        qs = q[0, s - 512 :, 0].float()
        kk, vv = k[0, :, 0].float(), v[0, :, 0].float()
        scores = (qs @ kk.T) / dqk**0.5
        mask = torch.arange(s, device="cuda")[None, :] > torch.arange(s - 512, s, device="cuda")[:, None]
        ref = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ vv
        err = ((out[0, s - 512 :, 0].float() - ref).norm() / ref.norm()).item()
        flops = 2 * b * hq * s * s * (dqk + dv) / 2
        rate = flops / ms / 1e9
        print(f"{name}: first call {first:.1f}s, {ms:.3f} ms, {rate:.0f} TFLOP/s, rel err {err:.2e}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
