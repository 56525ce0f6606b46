"""Outputs of two kernel directories compared bit for bit, on fixed inputs (dense, packed and paged calls).

A kernel change that claims "the same bits" (a schedule, a load path, a skipped empty warpgroup) is checked
here against the build it replaces: run `save` once per kernel directory (`ZYFA_KERNEL_DIR`), then `compare`.

    ZYFA_KERNEL_DIR=A python3 tools/device/bits_compare.py save a.pt
    ZYFA_KERNEL_DIR=B python3 tools/device/bits_compare.py save b.pt
    python3 tools/device/bits_compare.py compare a.pt b.pt      # exit status 1 if any case differs

The cases: both head shapes (d=128 GQA 32/8, 192/128 with 16 heads), BF16 and FP8 (lean P, unit descales);
dense batches whose last tile is partial (2 x 3000) and whole (1 x 8192); a packed batch with empty, length-1
and partial-tile sequences; a paged chunked-prefill batch (300 cached keys per sequence, pages of 64 in a
shuffled table). Inputs come from fixed seeds, so both runs see the same bytes.
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
PAGED_PREFIX = 300
PAGE_SIZE = 64
FP8 = {"q_descale": 1.0, "k_descale": 1.0, "v_descale": 1.0}


def _cumulative(lens: Any) -> Any:
    import torch

    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lens, 0)
    return cu


def _page_table(lens_k: Any) -> tuple[Any, int]:
    """A shuffled page table covering lens_k keys per sequence, and the number of pages."""
    import torch

    pages = [(int(n) + PAGE_SIZE - 1) // PAGE_SIZE for n in lens_k]
    table = torch.zeros(len(pages), max(pages), dtype=torch.int32)
    order = torch.randperm(sum(pages), generator=torch.Generator().manual_seed(7))
    at = 0
    for b, count in enumerate(pages):
        table[b, :count] = order[at : at + count]
        at += count
    return table, sum(pages)


def cases(device: str) -> Iterator[tuple[str, Any, Any]]:
    """(name, out, lse) of every case, in a fixed order, computed by the installed zyfa."""
    import torch

    import zyfa

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
        lens = torch.tensor(PACKED_LENS, dtype=torch.int32)
        cu, m, total = _cumulative(lens).to(device), int(lens.max()), int(lens.sum())
        q, k, v = draw(total, hq, dqk), draw(total, hkv, dqk), draw(total, hkv, dv)
        for tag, ins, extra in (("bf16", (q, k, v), {}), ("fp8", fp8(q, k, v), FP8)):
            out = zyfa.flash_attn_varlen_func(
                *ins, cu, cu, m, m, causal=True, return_attn_probs=True, **extra
            )
            yield (f"varlen-{tag}-{name}", *out[:2])
        lens_q = torch.tensor(PAGED_LENS, dtype=torch.int32)
        lens_k = lens_q + PAGED_PREFIX
        table, n_pages = _page_table(lens_k)
        q = draw(int(lens_q.sum()), hq, dqk)
        k_cache, v_cache = draw(n_pages, PAGE_SIZE, hkv, dqk), draw(n_pages, PAGE_SIZE, hkv, dv)
        for tag, ins, extra in (("bf16", (q, k_cache, v_cache), {}), ("fp8", fp8(q, k_cache, v_cache), FP8)):
            out = zyfa.flash_attn_varlen_func(
                *ins, _cumulative(lens_q).to(device), _cumulative(lens_k).to(device), int(lens_q.max()),
                int(lens_k.max()), seqused_k=lens_k.to(device), page_table=table.to(device), causal=True,
                return_attn_probs=True, **extra,
            )  # fmt: skip
            yield (f"paged-{tag}-{name}", *out[:2])


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
