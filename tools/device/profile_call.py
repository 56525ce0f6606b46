"""Make a few calls of one implementation on one problem, for a profiler to catch (ncu, nsys).

    python3 tools/device/profile_call.py dense --impl zyfa-bf16 --shape gqa128 --seqlen 16384
    python3 tools/device/profile_call.py serving --impl zyfa-varlen --precision bf16 --prefix 4096

`dense` runs a zyfa-bench implementation (`zyfa-bench peers` lists them) on the throughput command's problem
(batch = tokens / seqlen, causal); `serving` runs one implementation of `zyfa-bench serving` on its packed
step. The first call is the warm-up (a profiler skips it with --launch-skip); nothing is timed or checked
here: zyfa-bench's own commands do that.
"""

from __future__ import annotations

import argparse
import sys

import torch


def _dense(args: argparse.Namespace, device: torch.device) -> object:
    from zyfa_bench.inputs import make_inputs
    from zyfa_bench.peers import select
    from zyfa_bench.spec import PRESETS, specs_for_tokens
    from zyfa_bench.workloads import parse_workload

    (peer,) = select([args.impl])
    (spec,) = specs_for_tokens(PRESETS[args.shape], [args.seqlen], tokens=args.tokens, batch=None)
    (workload,) = parse_workload(args.workload)
    inputs = make_inputs(spec, workload, device=device, seed=0, fp8=peer.precision == "fp8")
    return peer.prepare(inputs).call


def _serving(args: argparse.Namespace, device: torch.device) -> object:
    from zyfa_bench.serving import ServingStep, build_step, long_tailed_lengths, prepare
    from zyfa_bench.spec import PRESETS

    hq, hkv, dqk, dv = PRESETS[args.shape]
    lens = tuple(long_tailed_lengths(args.prompts, args.tokens, seed=0))
    step = ServingStep(lens, args.prefix, args.page_size, hq, hkv, dqk, dv)
    inputs = build_step(step, device=device, precision=args.precision, seed=0)
    call, _ = prepare(args.impl, step, inputs)
    return call


def main(argv: list[str] | None = None) -> int:
    """Parse the problem, prepare the call, make it --calls times."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=("dense", "serving"))
    p.add_argument("--impl", required=True)
    p.add_argument("--shape", default="gqa128", choices=("gqa128", "mla192"))
    p.add_argument("--seqlen", type=int, default=16384)
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--workload", default="gaussian")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp8"))
    p.add_argument("--prefix", type=int, default=0)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--calls", type=int, default=2)
    args = p.parse_args(argv)
    device = torch.device("cuda")
    call = (_dense if args.kind == "dense" else _serving)(args, device)
    for i in range(args.calls):
        call()
        torch.cuda.synchronize(device)
        print(f"{args.impl}: call {i + 1}/{args.calls} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
