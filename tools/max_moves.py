"""How often the sm90a kernels leave their fast paths: O rescales, or the integer max's fallback (--max3).

The sm90a wgmma kernels skip a warp's O rescale when none of its 16 rows raised its running max in a block
(the rescale skip), and the BF16 kernels keep a stale max until a block's max exceeds it by more than
tau = 8 (log2 units; FP8 uses 0). How often that skip fails depends on the data and on the order in which the
blocks are visited: the kernels walk from key 0 towards the diagonal ("forward"). This counts, from the
float32 scores of a few heads (in log2 units, as the kernels see them), the share of (warp, block) pairs
after a row's first visible block in which some row of the warp moved its max by more than tau:

    python3 tools/max_moves.py --seqlen 4096

With --max3 it counts instead how often the kernels' integer row max (VIMNMX3 on the float bits) leaves its
fast path: the share of (warp, row half, block) triples in which some thread's 32 values of its row are all
negative (where the integer max is only a lower bound), and in which that also happens while the row's
running max is still negative (the exact int-min path, the only case where a lower bound is not enough).

Needs torch and zyfa-bench's workloads (packages/zyfa-bench/src is put on the path); no GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "zyfa-bench" / "src"))
from zyfa_bench.spec import Spec  # noqa: E402
from zyfa_bench.workloads import parse_workload  # noqa: E402

TILE = 128  # rows per q tile and keys per KV block (tile_m, tile_n of the d128 kernels)
WARP_ROWS = 16  # rows per consumer warp


def scores_log2(q: torch.Tensor, k: torch.Tensor, head: int, group: int) -> torch.Tensor:
    """Causal scores of one q head in log2 units (softmax scale 1/sqrt(d)), -inf above the diagonal."""
    qh, kh = q[0, :, head].float(), k[0, :, head // group].float()
    t = (qh @ kh.T) * (math.log2(math.e) / math.sqrt(q.shape[-1]))
    return t.masked_fill_(torch.ones_like(t, dtype=torch.bool).triu(1), -math.inf)


def walk_blocks(
    t: torch.Tensor, tau: float, forward: bool = True
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield (i, block, block_max, m) for every (q tile, key block) pair in the kernels' visiting order
    (i: the block's place in its tile's walk; block_max: each row's max in the block), m being each row's
    running max before the block: the kernels' max, kept stale until a block's max exceeds it by more than
    tau (BF16 8, FP8 0)."""
    for qt in range(t.shape[0] // TILE):
        rows = t[qt * TILE : (qt + 1) * TILE]
        m = torch.full((TILE,), -math.inf)
        for i, j in enumerate(range(qt + 1) if forward else range(qt, -1, -1)):
            block = rows[:, j * TILE : (j + 1) * TILE]
            block_max = block.amax(1)
            yield i, block, block_max, m
            new = torch.maximum(m, block_max)
            m = torch.where((new > m + tau) | torch.isinf(m), new, m)


def move_share(t: torch.Tensor, tau: float, forward: bool) -> float:
    """Share of (warp, block) pairs, after the first block, where some row raised its max by more than tau."""
    moves = pairs = 0
    for i, _, block_max, m in walk_blocks(t, tau, forward):
        if i > 0:
            moved = block_max > m + tau
            moves += int(moved.reshape(-1, WARP_ROWS).any(-1).sum())
            pairs += TILE // WARP_ROWS
    return moves / max(pairs, 1)


def max3_fallback_share(t: torch.Tensor, tau: float) -> tuple[float, float]:
    """Shares of (warp, row half, block) triples: all-negative values, and of those the exact int-min path.

    A thread holds keys 8 j + 2 tig + x (j < 16, x < 2) of rows g and g + 8 of its warp's 16 (tig, g: the
    lane's quad index and quad); the triple takes the fallback when any of its 32 threads does (the branch
    diverges). The running max is the kernel's: stale by up to tau (BF16 8, FP8 0)."""
    old = new = triples = 0
    for _, block, _, m in walk_blocks(t, tau):
        # (row, j, tig, x) -> all negative (or masked) per (row, tig)
        all_neg = (block.reshape(TILE, 16, 4, 2) < 0).all(dim=3).all(dim=1)
        need = all_neg & (m < 0)[:, None]
        # rows as (warp, half, g): the half's 8 rows x 4 tig are one branch
        old += int(all_neg.reshape(-1, 2, 8 * 4).any(-1).sum())
        new += int(need.reshape(-1, 2, 8 * 4).any(-1).sum())
        triples += TILE // WARP_ROWS * 2
    return old / max(triples, 1), new / max(triples, 1)


def main() -> None:
    """Print the share per workload, order and tau."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--heads", default="0,9,17,30", help="q heads to sample (32 q / 8 kv heads)")
    p.add_argument("--workloads", default="gaussian,model-like")
    p.add_argument("--max3", action="store_true", help="count the integer max's fallbacks instead")
    a = p.parse_args()
    spec = Spec(batch=1, seqlen_q=a.seqlen, seqlen_k=a.seqlen, heads_q=32, heads_kv=8, d_qk=128, d_v=128)
    heads = [int(h) for h in a.heads.split(",")]
    for name in a.workloads.split(","):
        q, k, _ = parse_workload(name)[0].generate(spec, device=torch.device("cpu"), seed=0)
        ts = [scores_log2(q, k, h, spec.heads_q // spec.heads_kv) for h in heads]
        if a.max3:
            for tau in (0.0, 8.0):
                shares = [max3_fallback_share(t, tau) for t in ts]
                old, new = (sum(x[i] for x in shares) / len(shares) for i in (0, 1))
                print(f"{name:11s} seqlen {a.seqlen} tau {tau:3}: all negative {old:.3f}, int min {new:.4f}")
            continue
        for forward in (True, False):
            for tau in (0.0, 0.75, 8.0):
                share = sum(move_share(t, tau, forward) for t in ts) / len(ts)
                order = "forward (the kernels')" if forward else "backward"
                print(f"{name:11s} seqlen {a.seqlen} {order:22s} tau {tau:4}: {share:.3f} rescale")


if __name__ == "__main__":
    main()
