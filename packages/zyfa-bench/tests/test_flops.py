"""The FLOP formula: docs/architecture.md's causal convention; bottom-right aligned if Sq != Sk."""

from __future__ import annotations

import pytest
import torch

from zyfa_bench.flops import attention_flops, visible_pairs
from zyfa_bench.spec import Spec


def _mask_pairs(sq: int, sk: int) -> int:
    """Visible pairs counted from an explicit bottom-right causal mask (independent of flops.py)."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    return int((j <= i + (sk - sq)).sum())


def test_square_causal_is_the_design_formula():
    spec = Spec(batch=3, seqlen_q=4096, seqlen_k=4096, heads_q=32, heads_kv=8, d_qk=128, d_v=128)
    assert attention_flops(spec) == 2 * 3 * 32 * 4096**2 * (128 + 128) / 2


def test_mla_head_dims_enter_as_sum():
    spec = Spec(1, 1024, 1024, 16, 16, 192, 128)
    assert attention_flops(spec) == 2 * 16 * 1024**2 * (192 + 128) / 2


def test_non_causal_counts_the_full_rectangle():
    spec = Spec(2, 100, 300, 4, 4, 64, 64, causal=False)
    assert attention_flops(spec) == 2 * 2 * 4 * 100 * 300 * 128


@pytest.mark.parametrize(("sq", "sk"), [(1, 1), (7, 7), (5, 9), (9, 5), (1, 50), (50, 1), (33, 64), (64, 33)])
def test_exact_count_matches_the_mask(sq, sk):
    assert visible_pairs(sq, sk, True, exact=True) == _mask_pairs(sq, sk)


@pytest.mark.parametrize(("sq", "sk"), [(64, 64), (32, 96), (96, 32), (1000, 1000), (17, 1000)])
def test_convention_differs_from_exact_by_half_the_diagonal(sq, sk):
    # The convention drops half of the diagonal band: exact - convention = min(sq, sk) / 2.
    conv = visible_pairs(sq, sk, True)
    assert visible_pairs(sq, sk, True, exact=True) - conv == pytest.approx(min(sq, sk) / 2)


def test_rows_without_keys_cost_nothing():
    # seqlen_q > seqlen_k: the first sq - sk rows see no key; only the last sk rows' triangle counts.
    assert visible_pairs(100, 10, True) == visible_pairs(10, 10, True)
