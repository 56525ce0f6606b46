"""The sm90 kernel's ZYFA_WS_MASK_FROM closed form against its per-block mask test.

fa_fwd_wgmma.cu's consumer asks, for KV block j (keys j T .. j T + T - 1), whether the block needs the
tail or causal mask:
    need(j) = (j + 1) T > seqlen_k  or  (causal and (j + 1) T - 1 > row0 + diag)
With ZYFA_WS_MASK_FROM it computes, once per item, the first such block and tests j >= it:
    mask_from = seqlen_k // T
    if causal: L = row0 + diag + 1; mask_from = 0 if L < 0 else min(mask_from, L // T)
The kernel claims both agree for every block the item walks (j in [0, ceil(seqlen_k / T))). Python's
integers stand in for the kernel's int / int64 (its divisions only see non-negative operands).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

TILES = (128, 176, 192)


def need_mask(j: int, tile_n: int, seqlen_k: int, causal: bool, row0: int, diag: int) -> bool:
    """The kernel's per-block test (the default build)."""
    key0 = j * tile_n
    return key0 + tile_n > seqlen_k or (causal and key0 + tile_n - 1 > row0 + diag)


def mask_from(tile_n: int, seqlen_k: int, causal: bool, row0: int, diag: int) -> int:
    """The ZYFA_WS_MASK_FROM closed form."""
    first = seqlen_k // tile_n
    if causal:
        last_row_key = row0 + diag + 1
        first = 0 if last_row_key < 0 else min(first, last_row_key // tile_n)
    return first


@settings(max_examples=3000, deadline=None)
@given(
    tile_n=st.sampled_from(TILES),
    seqlen_k=st.integers(0, 40_000),
    causal=st.booleans(),
    row0=st.integers(0, 40_000),
    diag=st.integers(-(2**40), 2**40) | st.integers(-40_000, 40_000),
)
def test_closed_form_matches_per_block_test(
    tile_n: int, seqlen_k: int, causal: bool, row0: int, diag: int
) -> None:
    first = mask_from(tile_n, seqlen_k, causal, row0, diag)
    n_blocks = -(-seqlen_k // tile_n)
    for j in range(n_blocks + 1):
        assert need_mask(j, tile_n, seqlen_k, causal, row0, diag) == (j >= first), (j, first)


def test_boundaries() -> None:
    # Exact multiples of the tile, one key past it, and the causal diagonal landing on a block edge.
    for tile_n in TILES:
        for seqlen_k in (0, 1, tile_n - 1, tile_n, tile_n + 1, 4 * tile_n, 4 * tile_n + 1):
            for row0 in (0, 64, tile_n - 1, tile_n, 3 * tile_n):
                for diag in (-row0 - 2, -row0 - 1, -row0, 0, seqlen_k - row0 - 1, seqlen_k):
                    for causal in (False, True):
                        first = mask_from(tile_n, seqlen_k, causal, row0, diag)
                        for j in range(-(-seqlen_k // tile_n) + 1):
                            assert need_mask(j, tile_n, seqlen_k, causal, row0, diag) == (j >= first)
