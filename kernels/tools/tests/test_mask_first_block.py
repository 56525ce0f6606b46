"""The sm90 kernel's mask decision per KV block (ZYFA_WS_MASK_FIRST) against the per-block test it replaces.

fa_fwd_wgmma.cu's consumer masks KV block j (keys key0 = j tile_n .. key0 + tile_n - 1) when the block runs
past seqlen_k or, causal, past the last key its warpgroup's first row sees (row0 + diag, diag = seqlen_k -
seqlen_q; later rows of the warpgroup see more keys). ZYFA_WS_MASK_FIRST replaces that per-block test by
j >= j_mask, with

    key_end = min(seqlen_k, row0 + diag + 1)   (causal; seqlen_k otherwise)
    j_mask  = 0 if key_end <= 0 else key_end // tile_n      (C++ division of a positive int64)

computed once per item. The claim: the two agree for every block index, including negative diag (seqlen_q >
seqlen_k: rows that see nothing) and seqlens that are not multiples of tile_n. Exhaustive over small ranges,
and randomly over the kernel's full int range.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

TILE_NS = (128, 160, 176, 192)  # the variants' and experiments' tile_n


def need_mask_per_block(j: int, tile_n: int, seqlen_k: int, row0: int, diag: int, causal: bool) -> bool:
    """The per-block test (ZYFA_WS_MASK_FIRST = 0), as the kernel writes it."""
    key0 = j * tile_n
    return key0 + tile_n > seqlen_k or (causal and key0 + tile_n - 1 > row0 + diag)


def first_masked_block(tile_n: int, seqlen_k: int, row0: int, diag: int, causal: bool) -> int:
    """j_mask (ZYFA_WS_MASK_FIRST = 1), as the kernel computes it once per item."""
    key_end = min(seqlen_k, row0 + diag + 1) if causal else seqlen_k
    return 0 if key_end <= 0 else key_end // tile_n


def _agree(tile_n: int, seqlen_k: int, row0: int, diag: int, causal: bool) -> None:
    j_mask = first_masked_block(tile_n, seqlen_k, row0, diag, causal)
    for j in range(0, seqlen_k // tile_n + 3):
        want = need_mask_per_block(j, tile_n, seqlen_k, row0, diag, causal)
        assert (j >= j_mask) == want, (j, tile_n, seqlen_k, row0, diag, causal)


def test_exhaustive_small_problems() -> None:
    # seqlen_q = seqlen_k - diag >= 1, row0 a multiple of 64 below seqlen_q (a warpgroup's first row).
    for tile_n, causal in itertools.product(TILE_NS, (True, False)):
        for seqlen_k in range(0, 3 * tile_n + 2, 7):
            for seqlen_q in range(1, 3 * tile_n + 2, 13):
                for row0 in range(0, seqlen_q, 64):
                    _agree(tile_n, seqlen_k, row0, seqlen_k - seqlen_q, causal)


@settings(max_examples=400, deadline=None)
@given(
    tile_n=st.sampled_from(TILE_NS),
    seqlen_k=st.integers(0, 2**31 - 1),
    seqlen_q=st.integers(1, 2**31 - 1),
    row_tile=st.integers(0, 2**25),
    causal=st.booleans(),
)
def test_large_problems(tile_n: int, seqlen_k: int, seqlen_q: int, row_tile: int, causal: bool) -> None:
    row0 = min(64 * row_tile, seqlen_q - 1) // 64 * 64
    diag = seqlen_k - seqlen_q
    j_mask = first_masked_block(tile_n, seqlen_k, row0, diag, causal)
    # Near the boundary is where an off-by-one would show; far blocks agree trivially.
    for j in {0, max(j_mask - 1, 0), j_mask, j_mask + 1, seqlen_k // tile_n}:
        want = need_mask_per_block(j, tile_n, seqlen_k, row0, diag, causal)
        assert (j >= j_mask) == want, (j, j_mask, tile_n, seqlen_k, row0, diag, causal)
