"""Outputs of two kernel directories compared bit for bit, on fixed inputs (dense, packed and paged calls).

A kernel change that claims "the same bits" (a schedule, a load path, a skipped empty warpgroup) is checked
here against the build it replaces: run `save` once per kernel directory (`ZYFA_KERNEL_DIR`), then `compare`.

    ZYFA_KERNEL_DIR=A python3 tools/device/bits_compare.py save a.pt
    ZYFA_KERNEL_DIR=B python3 tools/device/bits_compare.py save b.pt
    python3 tools/device/bits_compare.py compare a.pt b.pt      # exit status 1 if any case differs

The cases: both head shapes (d=128 GQA 32/8, 192/128 with 16 heads), BF16 and FP8; dense batches (FP8: lean
P, unit descales) whose last tile is partial (2 x 3000) and whole (1 x 8192); a packed batch with empty,
length-1 and partial-tile sequences and a paged chunked-prefill batch (a shared 320-key prefix, pages of 64 in
a shuffled table), both built by `zyfa_bench.serving.build_step` (FP8: power-of-two descales). Inputs come
from fixed seeds, so both runs see the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

SHAPES = (("d128", 32, 8, 128, 128), ("mla", 16, 16, 192, 128))
DENSE = ((2, 3000), (1, 8192))
PACKED_LENS = (1, 130, 0, 2049, 777, 4100, 64, 3)
PAGED_LENS = (1, 130, 0, 2049, 777, 64, 3)
PAGED_PREFIX = 320  # whole pages
PAGE_SIZE = 64
FP8 = {"q_descale": 1.0, "k_descale": 1.0, "v_descale": 1.0}


def cases(device: str) -> Iterator[tuple[str, Any, Any]]:
    """(name, out, lse) of every case, in a fixed order, computed by the installed zyfa."""
    import torch

    import zyfa
    from zyfa_bench.serving import ServingStep, build_step, zyfa_varlen_call

    g = torch.Generator(device=device).manual_seed(1234)

    def draw(*shape: int) -> Any:
        return torch.randn(*shape, device=device, generator=g).to(torch.bfloat16)

    def fp8(*xs: Any) -> list[Any]:
        return [x.to(torch.float8_e4m3fn) for x in xs]

    for name, hq, hkv, dqk, dv in SHAPES:
        for b, s in DENSE:
            q, k, v = draw(b, s, hq, dqk), draw(b, s, hkv, dqk), draw(b, s, hkv, dv)
            yield (
                f"dense-{name}-{b}x{s}",
                *zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)[:2],
            )
            out = zyfa.flash_attn_func(
                *fp8(q, k, v), causal=True, return_attn_probs=True, p_mode="lean", **FP8
            )
            yield (f"dense-fp8-lean-{name}-{b}x{s}", *out[:2])
        for kind, lens, prefix in (("varlen", PACKED_LENS, 0), ("paged", PAGED_LENS, PAGED_PREFIX)):
            step = ServingStep(lens, prefix, PAGE_SIZE, hq, hkv, dqk, dv)
            for precision in ("bf16", "fp8"):
                inputs = build_step(step, device=torch.device(device), precision=precision, seed=1234)
                out = zyfa_varlen_call(step, inputs, return_attn_probs=True)()
                yield (f"{kind}-{precision}-{name}", *out[:2])


def save(path: str, device: str) -> None:
    """Every case's (out, lse) on the CPU, in one torch file."""
    import torch

    results = {}
    for name, out, lse in cases(device):
        results[name] = (out.cpu(), lse.cpu())
        print(f"saved {name}", flush=True)
    torch.save(results, path)


def _bits(x: Any) -> Any:
    import torch

    return x.view(torch.int16) if x.element_size() == 2 else x.view(torch.int32)


def compare(path_a: str, path_b: str) -> int:
    """Print each case as bit-identical or DIFFERENT (how many elements); returns the number of cases that
    differ, a case present in one file only counting as one."""
    import torch

    a, b = torch.load(path_a), torch.load(path_b)
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {path_a if name in a else path_b}")
            bad += 1
            continue
        differ = sum(
            int((_bits(x) != _bits(y)).sum()) if x.shape == y.shape else x.numel()
            for x, y in zip(a[name], b[name], strict=True)
        )
        print(f"{name}: {'bit-identical' if differ == 0 else f'DIFFERENT ({differ} elements)'}")
        bad += differ != 0
    print("bits:", "all identical" if bad == 0 else f"{bad} of {len(set(a) | set(b))} cases differ")
    return bad


def main(argv: list[str] | None = None) -> int:
    """`save FILE [--device D]` or `compare A B`; compare exits 1 when any case differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_save = sub.add_parser("save", help="run the cases on the installed kernels and save their outputs")
    p_save.add_argument("file")
    p_save.add_argument("--device", default="cuda")
    p_cmp = sub.add_parser("compare", help="compare two saved files bit for bit")
    p_cmp.add_argument("a")
    p_cmp.add_argument("b")
    args = parser.parse_args(argv)
    if args.command == "save":
        save(args.file, args.device)
        return 0
    return 1 if compare(args.a, args.b) else 0


if __name__ == "__main__":
    sys.exit(main())
