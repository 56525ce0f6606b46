"""Is a kernel's speed data-dependent? One problem on Gaussian and on model-like inputs, timed and profiled.

The sixteenth session's sweep (docs/benchmarks/2026-12-04/session16_call4) measured ZYFA's lean FP8 and
BF16 d=128 kernels 7-15% slower on model-like inputs than on Gaussian ones, exact FP8 and cuDNN unchanged. On
a power-capped card that can be the kernel doing more work (data-dependent paths: O rescales) or the same work
at lower effective clocks (data-dependent energy). This script separates the two:

    python3 tools/device/workload_cycles.py time       # CUDA-event medians, both workloads, interleaved
    ncu --profile-from-start off --csv --metrics gpc__cycles_elapsed.max,sm__inst_executed.sum \\
        python3 tools/device/workload_cycles.py profile  # one launch per (workload, impl)

Cycles and instruction counts do not depend on the clock: equal counts on both workloads put the gap on the
clock / power side, different counts on the kernel (session16_call6: the kernel). To find which structure of
model-like data does it, change one ModelLike knob at a time:

    python3 tools/device/workload_cycles.py time --workloads \
        gaussian,model-like,model-like:sink_tokens=0,model-like:k_outlier_channels=0,model-like:rope_dims=0

or with q and k rotated (`model-like+rot`: the same scores from other S operands), and where the kernel waits
on each workload (ncu's stall reasons and pipe utilisation, one kernel at a time):

    ncu --clock-control none --profile-from-start off --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis \
        python3 tools/device/workload_cycles.py profile --impls zyfa-fp8-lean

Needs zyfa and zyfa-bench installed and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch

import zyfa
from zyfa_bench.inputs import make_inputs, quantize_inputs
from zyfa_bench.peers import select
from zyfa_bench.spec import parse_shape, specs_for_tokens
from zyfa_bench.workloads import ModelLike, Workload, parse_workload

IMPLS = "zyfa-bf16,zyfa-fp8-exact,zyfa-fp8-lean"
WORKLOADS = "gaussian,model-like"
# Workload suffix: q and k (bf16) rotated by one Hadamard rotation before anything else. The scores, P and V
# stay the same (up to bf16 rounding of q R, k R), only the S = Q K^T operands change: if a kernel's time
# follows the rotation, the cost is in those operands' values; if not, it is on the P / V / softmax side.
ROTATED = "+rot"


def workload(text: str) -> Workload:
    """'gaussian', 'model-like', or 'model-like:FIELD=VALUE:...' (ModelLike with those knobs changed, e.g.
    'model-like:sink_tokens=0' or 'model-like:k_outlier_channels=0': one structure of the data at a time).
    A '+rot' suffix is handled by `prepared` (q and k rotated), not here."""
    name, *knobs = text.removesuffix(ROTATED).split(":")
    base = parse_workload(name)[0]
    if not knobs:
        return base
    if not isinstance(base, ModelLike):
        raise SystemExit(f"{text}: only model-like takes knobs")
    fields = {f.name: f.type for f in dataclasses.fields(ModelLike)}
    changes: dict[str, object] = {}
    for knob in knobs:
        key, _, value = knob.partition("=")
        if key not in fields or key == "name":
            raise SystemExit(f"{text}: {key!r} is not a ModelLike knob ({', '.join(fields)})")
        changes[key] = None if value == "None" else type(getattr(base, key) or 0)(float(value))
    return dataclasses.replace(base, name=text, **changes)


def prepared(
    shape: str, seqlen: int, tokens: int, workloads: str, impls: str
) -> dict[tuple[str, str], object]:
    """(workload, impl) -> a ready call on that workload's inputs."""
    _, dims = parse_shape(shape)
    spec = specs_for_tokens(dims, [seqlen], tokens=tokens, batch=None)[0]
    calls = {}
    for w in workloads.split(","):
        inputs = make_inputs(spec, workload(w), device=torch.device("cuda"), seed=0)
        if w.endswith(ROTATED):
            inputs.q, inputs.k = zyfa.rotate_qk(inputs.q, inputs.k, seed=0)
        quantize_inputs(inputs, seed=0)
        for peer in select(impls.split(",")):
            ok, why = peer.available()
            if not ok:
                print(f"skipped {peer.name}: {why}")
                continue
            calls[(w, peer.name)] = peer.prepare(inputs).call
    return calls


def time_all(calls: dict[tuple[str, str], object], rounds: int, reps: int) -> None:
    """Median ms per (workload, impl), rounds interleaved so clock swings hit every entry alike."""
    times: dict[tuple[str, str], list[float]] = {k: [] for k in calls}
    for call in calls.values():
        call()
    for _ in range(rounds):
        for key, call in calls.items():
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(reps):
                start.record()
                call()
                stop.record()
                stop.synchronize()
                times[key].append(start.elapsed_time(stop))
    for (w, impl), t in times.items():
        print(f"{impl:16s} {w:11s} median {statistics.median(t):.3f} ms  min {min(t):.3f} ms  n {len(t)}")


def profile_all(calls: dict[tuple[str, str], object]) -> None:
    """One profiled call per (workload, impl), in the printed order (ncu --profile-from-start off)."""
    for key, call in calls.items():
        call()
        torch.cuda.synchronize()
        print(f"profiled: {key[1]} {key[0]}", flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def main() -> None:
    """Time or profile the kernels on both workloads."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["time", "profile"])
    p.add_argument("--shape", default="gqa128")
    p.add_argument("--seqlen", type=int, default=16384)
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--workloads", default=WORKLOADS, help="comma-separated; see workload() for knobs")
    p.add_argument("--impls", default=IMPLS)
    a = p.parse_args()
    calls = prepared(a.shape, a.seqlen, a.tokens, a.workloads, a.impls)
    if a.mode == "time":
        time_all(calls, a.rounds, a.reps)
    else:
        profile_all(calls)


if __name__ == "__main__":
    main()
