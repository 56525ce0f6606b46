"""How often the sm90a kernels must rescale O: running-max moves per warp and KV block, by workload (CPU).

The sm90a wgmma kernels skip a warp's O rescale when none of its 16 rows raised its running max in a block
(ZYFA_WS_RESCALE_SKIP), and the BF16 kernels keep a stale max until a block's max exceeds it by more than
tau = 8 (log2 units; FP8 uses 0). How often that skip fails depends on the data and on the order in which the
blocks are visited: the kernels walk from key 0 towards the diagonal ("forward"). This counts, from the
float32 scores of a few heads (in log2 units, as the kernels see them), the share of (warp, block) pairs
after a row's first visible block in which some row of the warp moved its max by more than tau:

    python3 tools/max_moves.py --seqlen 4096

Needs torch and zyfa-bench's workloads (packages/zyfa-bench/src is put on the path); no GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
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


def move_share(t: torch.Tensor, tau: float, forward: bool) -> float:
    """Share of (warp, block) pairs, after the first block, where some row raised its max by more than tau."""
    n_tiles = t.shape[0] // TILE
    moves = pairs = 0
    for qt in range(n_tiles):
        block_max = t[qt * TILE : (qt + 1) * TILE, : (qt + 1) * TILE].reshape(TILE, qt + 1, TILE).amax(-1)
        order = range(qt + 1) if forward else range(qt, -1, -1)
        m = torch.full((TILE,), -math.inf)
        for i, j in enumerate(order):
            new = torch.maximum(m, block_max[:, j])
            moved = new > m + tau
            if i > 0:
                moves += int(moved.reshape(-1, WARP_ROWS).any(-1).sum())
                pairs += TILE // WARP_ROWS
            m = torch.where(moved | torch.isinf(m), new, m)
    return moves / max(pairs, 1)


def main() -> None:
    """Print the share per workload, order and tau."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--heads", default="0,9,17,30", help="q heads to sample (32 q / 8 kv heads)")
    p.add_argument("--workloads", default="gaussian,model-like")
    a = p.parse_args()
    spec = Spec(batch=1, seqlen_q=a.seqlen, seqlen_k=a.seqlen, heads_q=32, heads_kv=8, d_qk=128, d_v=128)
    heads = [int(h) for h in a.heads.split(",")]
    for name in a.workloads.split(","):
        q, k, _ = parse_workload(name)[0].generate(spec, device=torch.device("cpu"), seed=0)
        ts = [scores_log2(q, k, h, spec.heads_q // spec.heads_kv) for h in heads]
        for forward in (True, False):
            for tau in (0.0, 0.75, 8.0):
                share = sum(move_share(t, tau, forward) for t in ts) / len(ts)
                order = "forward (the kernels')" if forward else "backward"
                print(f"{name:11s} seqlen {a.seqlen} {order:22s} tau {tau:4}: {share:.3f} rescale")


if __name__ == "__main__":
    main()
