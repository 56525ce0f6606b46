"""zyfa.flash_attn_varlen_func on the CPU: packed and paged batches against the float64 truth per sequence,
the dense path's bits, and the checks (zyfa_core's, shared with the GPU path).

Tolerances are the dense reference tests' (test_zyfa_reference.py states their derivation): relative L2 of
out against float64 on the same (dequantised) inputs, BF16 5e-3, FP8 exact P 0.04, lean P 0.06; lse within
0.02 (BF16) of the float64 log-sum-exp. Each case draws fresh Gaussian inputs; the packed output must also
equal, bit for bit, the dense reference run on each sequence alone (the varlen path adds no arithmetic).
"""

from __future__ import annotations

import math

import pytest
import torch
from zyfa_testutil import lse_err, rel_err
from zyfa_varlen_testutil import call_packed, make_packed, offsets, page_cache

import zyfa
from zyfa import reference as R
from zyfa_bench.serving import long_tailed_lengths

BF16_TOL = 5e-3
FP8_TOL = {"exact": 0.04, "lean": 0.06}
LSE_TOL = 0.02

# (lens_q, lens_k, heads_q, heads_kv, d_qk): length 1, empty sequences (no queries; no keys), chunked
# prefill (len_q < len_k), len_q > len_k (leading rows see no key), GQA and MQA, both head shapes.
CASES = [
    ([1, 37, 0, 130, 64], [1, 37, 5, 200, 64], 4, 2, 128),
    ([7, 1, 90], [0, 300, 90], 2, 1, 192),
    ([129, 3], [65, 3], 6, 3, 128),
]


def _ids(case) -> str:
    lens_q, lens_k, hq, hkv, dqk = case
    return f"q{sum(lens_q)}-k{sum(lens_k)}-h{hq}x{hkv}-d{dqk}"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_bf16_packed_matches_f64(case, causal):
    lens_q, lens_k, hq, hkv, dqk = case
    p = make_packed(lens_q, lens_k, hq, hkv, dqk, seed=hash((tuple(lens_q), causal)) % 2**31, q_scale=2.0)
    out, lse = call_packed(p, causal=causal, return_attn_probs=True)
    ref, ref_lse = R.attention_varlen_dense_f64(p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k, causal=causal)
    assert (
        out.dtype == torch.bfloat16 and out.shape == (sum(lens_q), hq, 128) and lse.shape == (hq, sum(lens_q))
    )
    assert rel_err(out, ref) < BF16_TOL
    assert lse_err(lse, ref_lse) < LSE_TOL


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_packed_equals_the_dense_path_per_sequence(case):
    """The packed call's bits are the dense call's on each sequence alone."""
    lens_q, lens_k, hq, hkv, dqk = case
    p = make_packed(lens_q, lens_k, hq, hkv, dqk, seed=11)
    out, lse = call_packed(p, causal=True, return_attn_probs=True)
    cq, ck = p.cu_seqlens_q.tolist(), p.cu_seqlens_k.tolist()
    for b, (nq, nk) in enumerate(zip(lens_q, lens_k, strict=True)):
        if nq == 0 or nk == 0:
            continue
        rows = slice(cq[b], cq[b + 1])
        dense, dense_lse, _ = zyfa.flash_attn_func(
            p.q[rows][None],
            p.k[ck[b] : ck[b + 1]][None],
            p.v[ck[b] : ck[b + 1]][None],
            causal=True,
            return_attn_probs=True,
        )
        assert torch.equal(out[rows], dense[0]) and torch.equal(lse[:, rows], dense_lse[0])


def test_rows_without_keys_and_outside_sequences():
    """Sequences without keys and rows of q before and after every sequence: out 0, lse +inf."""
    p = make_packed([4, 3, 5], [0, 6, 2], 2, 2, seed=3, q_pad=(5, 7))
    out, lse = call_packed(p, causal=True, return_attn_probs=True)
    assert out.shape[0] == 5 + 12 + 7
    for rows in (slice(0, 5), slice(5, 9), slice(17, 24)):
        assert torch.equal(out[rows], torch.zeros_like(out[rows])) and bool(torch.isinf(lse[:, rows]).all())
    # Sequence 2 has 5 queries over 2 keys: its first 3 rows see no key (bottom-right causal).
    assert bool(torch.isinf(lse[:, 12:15]).all()) and bool(torch.isfinite(lse[:, 15:17]).all())
    ref, ref_lse = R.attention_varlen_dense_f64(p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k)
    assert rel_err(out, ref) < BF16_TOL and lse_err(lse, ref_lse) < LSE_TOL


@pytest.mark.parametrize("page_size", [16, 64, 128, 256])
def test_paged_matches_packed_bitwise_and_f64(page_size):
    lens = [1, 300, 45, 0, 257]
    p = make_packed([1, 20, 45, 0, 3], lens, 4, 2, seed=page_size)
    k_cache, v_cache, table = page_cache(p.k, p.v, lens, page_size, seed=page_size)
    seqused = torch.tensor(lens, dtype=torch.int32)
    out, lse = call_packed(
        p,
        k_cache,
        v_cache,
        cu_seqlens_k=None,
        seqused_k=seqused,
        page_table=table,
        causal=True,
        return_attn_probs=True,
    )
    packed, packed_lse = call_packed(p, causal=True, return_attn_probs=True)
    assert torch.equal(out, packed) and torch.equal(lse, packed_lse)
    ref, _ = R.attention_varlen_dense_f64(p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k)
    assert rel_err(out, ref) < BF16_TOL


def test_paged_shared_prefix_with_cu_seqlens_k():
    """Two sequences read the same prefix pages and their own suffix pages; key counts from cu_seqlens_k."""
    page, prefix_pages = 16, 3
    lens_k = [prefix_pages * page + 10, prefix_pages * page + 21]
    p = make_packed([10, 21], lens_k, 4, 1, seed=5)
    shared = p.k[: prefix_pages * page], p.v[: prefix_pages * page]
    # Both sequences' keys begin with the same prefix.
    k = torch.cat([shared[0], p.k[48:58], shared[0], p.k[106:127]])
    v = torch.cat([shared[1], p.v[48:58], shared[1], p.v[106:127]])
    cache_k = torch.zeros(8, page, 1, 128, dtype=torch.bfloat16)
    cache_v = torch.zeros_like(cache_k)
    cache_k[:3] = shared[0].reshape(3, page, 1, 128)
    cache_v[:3] = shared[1].reshape(3, page, 1, 128)
    cache_k[3, :10], cache_v[3, :10] = p.k[48:58], p.v[48:58]
    cache_k[5, :16], cache_v[5, :16] = p.k[106:122], p.v[106:122]
    cache_k[6, :5], cache_v[6, :5] = p.k[122:127], p.v[122:127]
    table = torch.tensor([[0, 1, 2, 3, -1], [0, 1, 2, 5, 6]], dtype=torch.int32)
    cu_k = offsets(lens_k)
    out = zyfa.flash_attn_varlen_func(
        p.q, cache_k, cache_v, p.cu_seqlens_q, cu_k, 21, max(lens_k), causal=True, page_table=table
    )
    ref, _ = R.attention_varlen_dense_f64(p.q, k, v, p.cu_seqlens_q, cu_k)
    assert rel_err(out, ref) < BF16_TOL


@pytest.mark.parametrize("p_mode", ["exact", "lean"])
@pytest.mark.parametrize("d_qk", [128, 192])
def test_fp8_per_sequence_and_head_descales(p_mode, d_qk):
    """FP8 with FlashAttention-3's (batch, heads_kv) descales: each sequence and kv head quantised with its
    own power-of-two scale, measured against float64 on the dequantised inputs."""
    lens_q, lens_k = [33, 1, 70], [40, 1, 130]
    p = make_packed(lens_q, lens_k, 4, 2, d_qk, seed=d_qk + len(p_mode))
    scales = torch.tensor([[0.5, 2.0], [1.0, 4.0], [0.25, 1.0]])
    cq, ck = p.cu_seqlens_q.tolist(), p.cu_seqlens_k.tolist()

    def quantise(x: torch.Tensor, cu: list[int], group: int) -> tuple[torch.Tensor, torch.Tensor]:
        x8 = torch.empty_like(x, dtype=torch.float8_e4m3fn)
        descale = torch.empty(3, 2)
        for b in range(3):
            for h in range(2):
                rows, heads = slice(cu[b], cu[b + 1]), slice(h * group, (h + 1) * group)
                x8[rows, heads], d = zyfa.fp8_quantize(x[rows, heads].float() * scales[b, h])
                descale[b, h] = d
        return x8, descale

    (q8, dq), (k8, dk), (v8, dv) = quantise(p.q, cq, 2), quantise(p.k, ck, 1), quantise(p.v, ck, 1)

    def attend(q_descale: object, k_descale: object, v_descale: object) -> torch.Tensor:
        descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
        cu_q, cu_k = p.cu_seqlens_q, p.cu_seqlens_k
        return zyfa.flash_attn_varlen_func(
            q8, k8, v8, cu_q, cu_k, 70, 130, causal=True, p_mode=p_mode, **descales
        )

    out = attend(dq, dk, dv)
    ref, _ = R.attention_varlen_dense_f64(
        q8, k8, v8, p.cu_seqlens_q, p.cu_seqlens_k, q_descale=dq, k_descale=dk, v_descale=dv
    )
    assert rel_err(out, ref) < FP8_TOL[p_mode]
    # A per-tensor float descale is the same as a table holding it everywhere.
    same = attend(0.5, torch.tensor(0.25), torch.full((3, 2), 2.0))
    floats = attend(0.5, 0.25, 2.0)
    assert torch.equal(same, floats)


def test_long_tailed_batch_up_to_4k():
    """A serving-like step: lengths from zyfa-bench's long-tailed draw (1 to about 4K), paged with 64-key
    pages."""
    lens = long_tailed_lengths(12, 6000, seed=7)
    assert min(lens) >= 1 and max(lens) <= 4096 and sum(lens) == 6000
    p = make_packed(lens, lens, 2, 1, seed=8)
    k_cache, v_cache, table = page_cache(p.k, p.v, lens, 64, seed=9)
    out = zyfa.flash_attn_varlen_func(
        p.q,
        k_cache,
        v_cache,
        p.cu_seqlens_q,
        p.cu_seqlens_k,
        max(lens),
        max(lens),
        causal=True,
        page_table=table,
    )
    ref, _ = R.attention_varlen_dense_f64(p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k)
    assert rel_err(out, ref) < BF16_TOL


def test_non_causal_dense_call():
    q, k, v = (torch.randn(1, n, 2, 128).bfloat16() for n in (50, 90, 90))
    out = zyfa.flash_attn_func(q, k, v, causal=False)
    ref, _ = R.attention_dense_f64(q, k, v, causal=False)
    assert rel_err(out, ref) < BF16_TOL


def test_empty_batches():
    p = make_packed([0, 0], [3, 0], 2, 2, seed=1)
    out, lse = call_packed(p, causal=True, return_attn_probs=True)
    assert out.shape == (0, 2, 128) and lse.shape == (2, 0)
    q = torch.randn(4, 2, 128).bfloat16()
    none = zyfa.flash_attn_varlen_func(q, p.k, p.v, offsets([]), offsets([]), 0, 0, causal=True)
    assert torch.equal(none, torch.zeros_like(none))


def _bad_call(**changes):
    p = make_packed([3, 5], [3, 9], 4, 2, seed=2)
    kwargs = dict(
        q=p.q,
        k=p.k,
        v=p.v,
        cu_seqlens_q=p.cu_seqlens_q,
        cu_seqlens_k=p.cu_seqlens_k,
        max_seqlen_q=5,
        max_seqlen_k=9,
        causal=True,
    )
    kwargs.update({name: (f(p) if callable(f) else f) for name, f in changes.items()})
    return zyfa.flash_attn_varlen_func(**kwargs)


@pytest.mark.parametrize(
    ("changes", "exc", "match"),
    [
        ({"cu_seqlens_q": lambda p: p.cu_seqlens_q.long()}, TypeError, "cu_seqlens_q must be a torch.int32"),
        ({"cu_seqlens_k": lambda p: p.cu_seqlens_k[:2]}, ValueError, r"cu_seqlens_k must have shape \(3,\)"),
        ({"cu_seqlens_q": torch.tensor([0, 4, 3], dtype=torch.int32)}, ValueError, "non-decreasing"),
        ({"cu_seqlens_q": torch.tensor([1, 4, 9], dtype=torch.int32)}, ValueError, "exceeds the 8 rows of q"),
        ({"max_seqlen_q": 4}, ValueError, "more than max_seqlen_q = 4"),
        ({"max_seqlen_k": 8}, ValueError, "more than max_seqlen_k = 8"),
        ({"max_seqlen_k": 2**31}, ValueError, r"max_seqlen_k = 2147483648 must be in 0\.\.2147483647"),
        ({"max_seqlen_q": 5.0}, TypeError, "max_seqlen_q must be an int"),
        ({"q": lambda p: p.q[None]}, ValueError, r"q must be 3-D \[total_q, heads_q, head_dim\]"),
        ({"k": lambda p: p.k[:, :, :64]}, ValueError, "q and k need the same head_dim"),
        ({"v": lambda p: p.v[:5]}, ValueError, "k and v need the same shape"),
        ({"q": lambda p: p.q[:, :3]}, ValueError, r"heads_q \(3\) must be a positive multiple of heads_kv"),
        ({"cu_seqlens_k": None}, ValueError, "cu_seqlens_k is required unless page_table and seqused_k"),
        (
            {"seqused_k": torch.tensor([3, 10], dtype=torch.int32), "max_seqlen_k": 10},
            ValueError,
            "exceeds the 9 rows",
        ),
        ({"seqused_k": torch.tensor([3, 10], dtype=torch.int32)}, ValueError, "exceeds max_seqlen_k = 9"),
        ({"seqused_q": torch.tensor([3, 5], dtype=torch.int32)}, NotImplementedError, "seqused_q"),
        ({"window_size": (8, 0)}, NotImplementedError, "window_size"),
        ({"q_descale": 1.0}, ValueError, "apply to float8_e4m3fn inputs only"),
        ({"page_table": torch.zeros(2, 1, dtype=torch.int32)}, ValueError, "a paged cache, with page_table"),
    ],
)
def test_bad_inputs(changes, exc, match):
    with pytest.raises(exc, match=match):
        _bad_call(**changes)


def test_bad_pages():
    p = make_packed([3, 5], [20, 40], 2, 2, seed=4)
    k_cache, v_cache, table = page_cache(p.k, p.v, [20, 40], 16, seed=4)
    call = dict(
        q=p.q,
        k=k_cache,
        v=v_cache,
        cu_seqlens_q=p.cu_seqlens_q,
        cu_seqlens_k=p.cu_seqlens_k,
        max_seqlen_q=5,
        max_seqlen_k=40,
        causal=True,
    )
    bad = table.clone()
    bad[1, 2] = k_cache.shape[0]
    with pytest.raises(ValueError, match=r"page_table\[1, 2\] = 8 is not a page of the cache \(0\.\.7\)"):
        zyfa.flash_attn_varlen_func(**call, page_table=bad)
    with pytest.raises(ValueError, match="more than the 2 pages x 16 keys"):
        zyfa.flash_attn_varlen_func(**call, page_table=table[:, :2].contiguous())
    with pytest.raises(ValueError, match="page_table must be contiguous in its last dim"):
        zyfa.flash_attn_varlen_func(**call, page_table=table.t().contiguous().t())
    with pytest.raises(
        ValueError, match="v_descale must be a float, a 1-element tensor or a tensor of shape"
    ):
        q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (p.q, k_cache, v_cache))
        zyfa.flash_attn_varlen_func(
            q8,
            k8,
            v8,
            p.cu_seqlens_q,
            p.cu_seqlens_k,
            5,
            40,
            causal=True,
            page_table=table,
            q_descale=1.0,
            k_descale=1.0,
            v_descale=torch.ones(3),
        )


def test_descale_table_values_are_checked_on_the_cpu():
    p = make_packed([3], [3], 2, 2, seed=6)
    q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (p.q, p.k, p.v))
    bad = torch.tensor([[1.0, math.inf]])
    with pytest.raises(ValueError, match="k_descale must be finite and > 0, got inf"):
        zyfa.flash_attn_varlen_func(
            q8, k8, v8, p.cu_seqlens_q, p.cu_seqlens_k, 3, 3, q_descale=1.0, k_descale=bad, v_descale=1.0
        )


def test_opcheck():
    """The op's schema, fake implementation and dispatch agree (torch.library.opcheck)."""
    p = make_packed([3, 0, 6], [5, 2, 6], 4, 2, seed=10)
    args = (
        p.q,
        p.k,
        p.v,
        p.cu_seqlens_q,
        p.cu_seqlens_k,
        None,
        None,
        6,
        6,
        0.1,
        True,
        1.0,
        1.0,
        1.0,
        None,
        True,
    )
    torch.library.opcheck(torch.ops.zyfa.fwd_varlen.default, args, kwargs={"p_mode": None})


@pytest.mark.parametrize("paged", [False, True])
def test_torch_compile_fullgraph(paged):
    """One graph, no break, eager's bits: the index tensors are graph inputs and max_seqlen plain ints, and
    (batch, heads_kv) tensor descales become the device table inside the graph (no host read)."""
    from torch._dynamo.testing import CompileCounter

    p = make_packed([5, 0, 40, 1], [9, 3, 40, 1], 4, 2, seed=13)
    k, v, table, seqused = p.k, p.v, None, None
    if paged:
        k, v, table = page_cache(p.k, p.v, p.lens_k, 16, seed=13)
        seqused = torch.tensor(p.lens_k, dtype=torch.int32)
    q8, k8, v8 = (zyfa.fp8_quantize(x, as_float=True)[0] for x in (p.q, k, v))
    dk = torch.full((4, 2), 0.5)

    def step(q, k, v, cu_q, cu_k, seqused_k, page_table, dk):
        return zyfa.flash_attn_varlen_func(
            q,
            k,
            v,
            cu_q,
            cu_k,
            40,
            40,
            seqused_k=seqused_k,
            causal=True,
            q_descale=1.0,
            k_descale=dk,
            v_descale=2.0,
            page_table=page_table,
            return_attn_probs=True,
        )

    args = (q8, k8, v8, p.cu_seqlens_q, p.cu_seqlens_k, seqused, table, dk)
    counter = CompileCounter()
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    out, lse = compiled(*args)
    want, want_lse = step(*args)
    assert counter.frame_count == 1 and torch.equal(out, want) and torch.equal(lse, want_lse)
