"""Host overhead of an eager `zyfa.flash_attn_func` call, layer by layer (needs a GPU).

    python -m zyfa.overhead            # prints µs per call of each layer, BF16 and FP8

Each timed loop first queues a spin kernel (`torch.cuda._sleep`) long enough to outlast it, so the
device never paces the host: the wall time of N back-to-back calls, taken before the final
synchronisation, divided by N is what one call costs the host alone. N stays below the driver's
launch-queue depth (about 1,000 pending launches), where a launch would start to block. (Timing N calls
of a tiny kernel up to the synchronisation instead gives the device's time per launch, about 12 µs on
an H200, once the host is faster than that.) Each layer is timed on its own, from the outside in:

    flash_attn_func      option checks (+ the Python tensor checks on the Python path) + the op
    torch.ops.zyfa.fwd   the op through torch's dispatcher: the C++ hot path where it is active
    zyfa._C.fwd_cuda     the C++ op body without the dispatcher (checks, allocation, packing, launch);
                         only where the C++ hot path is active (called through pybind11)
    _forward             the Python op body (the Python path's; timed on either path for comparison)
    zyfa_core.launch     zyfa_core's launch plan (argument checks, grid, launch), with ready-made arguments

Above about 15 µs per call the host, not the kernel, would pace short prefill calls, so the hot path
lives in C++, zyfa._C (`pip install --no-build-isolation packages/zyfa-torch`); `hot_path()` and the
printed table say which path is active, and ZYFA_NO_CPP=1 measures the Python one for comparison.
Without a GPU, `python -m zyfa.overhead` says so and exits with status 2.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from zyfa import _ops
from zyfa.interface import flash_attn_func

__all__ = ["host_overhead", "hot_path"]


def hot_path() -> str:
    """The path CUDA/ROCm calls of zyfa::fwd take: "C++ (zyfa._C)" or "Python (<why>)"."""
    return _ops.hot_path()


_SPIN_CYCLES_PER_CALL = 400_000
"""Device spin queued per timed call: 200 µs at 2 GHz, far more than any host cost per call."""
_MAX_CALLS = 900
"""Timed calls per loop stay below the launch-queue depth, beyond which a launch blocks the host."""


def _per_call_us(call: Callable[[], object], calls: int, device: torch.device) -> float:
    if not 0 < calls <= _MAX_CALLS:
        raise ValueError(f"calls must be in 1..{_MAX_CALLS} (the launch-queue depth), got {calls}")
    for _ in range(min(50, calls)):  # warm-up: kernel load, allocator blocks, caches
        call()
    torch.cuda.synchronize(device)
    # Keep the device busy for longer than the loop takes, so the loop times the host alone.
    torch.cuda._sleep(_SPIN_CYCLES_PER_CALL * calls)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize(device)
    return elapsed * 1e6 / calls


def host_overhead(
    *, fp8: bool = False, calls: int = 200, seqlen: int = 128, device: torch.device | str | None = None
) -> dict[str, float]:
    """Host µs per eager call of each layer of the call path (see the module docstring).

    Args:
        fp8: time the e4m3fn path (float descales, the no-sync path) instead of BF16.
        calls: calls per layer after 50 warm-up calls.
        seqlen: seqlen_q = seqlen_k of the tiny problem (batch 1, 1 head, d 128).
        device: a CUDA/ROCm device (default: the current one).

    Returns:
        {"flash_attn_func": µs, "torch.ops.zyfa.fwd": µs, ["zyfa._C.fwd_cuda": µs,] "_forward": µs,
        "zyfa_core.launch": µs}; "zyfa._C.fwd_cuda" where the C++ hot path is active (`hot_path()`).
    """
    device = torch.device(device if device is not None else "cuda")
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("zyfa.overhead.host_overhead needs a CUDA or ROCm GPU")
    g = torch.Generator(device="cpu").manual_seed(0)
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    q, k, v = (torch.randn(1, seqlen, 1, 128, generator=g).to(device=device, dtype=dtype) for _ in range(3))
    return _measure(q, k, v, (0.5, 0.25, 2.0) if fp8 else (1.0, 1.0, 1.0), calls, device)


def _measure(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    descales: tuple[float, float, float],
    calls: int,
    device: torch.device,
) -> dict[str, float]:
    scale = q.shape[-1] ** -0.5
    fp8 = q.dtype == torch.float8_e4m3fn
    kw = dict(zip(("q_descale", "k_descale", "v_descale"), descales, strict=True)) if fp8 else {}
    us = {
        "flash_attn_func": _per_call_us(lambda: flash_attn_func(q, k, v, causal=True, **kw), calls, device),
        "torch.ops.zyfa.fwd": _per_call_us(
            lambda: torch.ops.zyfa.fwd.default(q, k, v, scale, True, *descales, False, None), calls, device
        ),
    }
    native = _ops._NATIVE
    if native is not None and q.is_cuda:
        us["zyfa._C.fwd_cuda"] = _per_call_us(
            lambda: native.fwd_cuda(q, k, v, scale, True, *descales, False, None), calls, device
        )
    us["_forward"] = _per_call_us(
        lambda: _ops._forward(q, k, v, scale, True, descales, False, None), calls, device
    )
    us["zyfa_core.launch"] = _per_call_us(_launch_only(q, k, v, scale, descales), calls, device)
    return us


def _launch_only(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, descales: tuple[float, float, float]
) -> Callable[[], None]:
    """zyfa_core.launch with arguments filled once (into one preallocated output)."""
    core = _ops._core()
    spec = _ops.select_kernel(q, k, v, True, None)
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    args = _ops._fill_args(core.abi, q, k, v, out, None, scale, True, descales)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    workspace = _ops.launch_workspace(spec, q.shape[0], k.shape[2], k.shape[1], q.device)  # once, like out
    extra = {"workspace": workspace.data_ptr()} if workspace is not None else {}

    # args hold only addresses: the default argument keeps out and the workspace alive with the callable.
    def launch(_buffers: tuple[object, ...] = (out, workspace)) -> None:
        core.launcher.launch(spec, args, stream=stream, device=index, **extra)

    return launch


def main() -> None:
    """Print the hot path, then the table for BF16 and FP8 on the current GPU; without one, say so and
    exit with status 2."""
    if not torch.cuda.is_available():
        print(
            "zyfa.overhead times the GPU call path and needs a CUDA or ROCm GPU; torch sees none here "
            f"(torch {torch.__version__}). CPU tensors run zyfa's reference, which has no launch to time.",
            file=sys.stderr,
        )
        raise SystemExit(2)
    print(f"hot path: {hot_path()}")
    for fp8 in (False, True):
        us = host_overhead(fp8=fp8)
        print(("FP8 " if fp8 else "BF16") + "  " + "  ".join(f"{name} {t:.1f} µs" for name, t in us.items()))


if __name__ == "__main__":
    main()
