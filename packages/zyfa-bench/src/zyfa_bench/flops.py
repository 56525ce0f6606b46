"""THE FLOP count of an attention forward: one formula, used by every throughput figure.

Each visible (query, key) pair costs 2·d_qk FLOPs for q·k and 2·d_v for p·v.  Causal prefill halves the
square (docs/architecture.md, flash-attn's convention): FLOPs = 2·B·H·S²·(d_qk + d_v)/2 for
seqlen_q == seqlen_k
(the diagonal's S/2 extra pairs are not counted, as FA2/FA3/cuDNN benchmarks do not count them).

With seqlen_q != seqlen_k the mask is bottom-right aligned (query i sees key j iff j <= i + Sk - Sq),
and the same convention gives the visible "area":
    Sq <= Sk: the rectangle Sq·(Sk - Sq) the queries all see, plus the triangle Sq²/2;
    Sq >  Sk: the first Sq - Sk rows see nothing; the last Sk rows form the triangle Sk²/2.
`exact=True` counts the visible pairs exactly instead (the diagonal included).
"""

from __future__ import annotations

from zyfa_bench.spec import Spec

__all__ = ["attention_flops", "packed_flops", "visible_pairs"]


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool, *, exact: bool = False) -> float:
    """Number of (query, key) pairs one head computes: Sq·Sk without mask, the causal area with it."""
    if not causal:
        return float(seqlen_q) * seqlen_k
    if exact:
        # Row i sees clamp(i + Sk - Sq + 1, 0, Sk) keys.
        offset = seqlen_k - seqlen_q
        return float(sum(min(max(i + offset + 1, 0), seqlen_k) for i in range(seqlen_q)))
    if seqlen_q <= seqlen_k:
        return float(seqlen_q) * (seqlen_k - seqlen_q) + seqlen_q * seqlen_q / 2.0
    return seqlen_k * seqlen_k / 2.0


def attention_flops(spec: Spec, *, exact: bool = False) -> float:
    """FLOPs of one forward call: 2·B·H_q·pairs·(d_qk + d_v)."""
    pairs = visible_pairs(spec.seqlen_q, spec.seqlen_k, spec.causal, exact=exact)
    return 2.0 * spec.batch * spec.heads_q * pairs * (spec.d_qk + spec.d_v)


def packed_flops(
    lens_q: list[int],
    lens_k: list[int],
    heads_q: int,
    d_qk: int,
    d_v: int,
    causal: bool,
    *,
    exact: bool = False,
) -> float:
    """FLOPs of one packed (variable-length) call: the sum over its sequences of 2·H_q·pairs·(d_qk + d_v),
    each sequence's pairs by `visible_pairs` (bottom-right causal per sequence)."""
    pairs = sum(visible_pairs(nq, nk, causal, exact=exact) for nq, nk in zip(lens_q, lens_k, strict=True))
    return 2.0 * heads_q * pairs * (d_qk + d_v)
