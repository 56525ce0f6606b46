"""Whole kernels compiled by the pinned clang, run in the simulator, checked against numpy.

fa_mini.hip is a small causal BF16 attention kernel written for these tests (the product HIP kernel
is tested the same way in test_fa_fwd_bf16.py once it exists). Tolerance rule (FA3's): the
kernel's error against a float64 reference must be at most twice the error of a numpy emulation
of the same bf16 rounding points (P and the output rounded to bf16), plus 1e-3.
"""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

from zyfa_asmgen.sim import GlobalMemory, Simulator

BF16 = ml_dtypes.bfloat16


def pack_args(ptrs: list[int], tensors: list[np.ndarray], ints: list[int], flags: int, scale: float) -> bytes:
    """zyfa_fwd_args (kernels/abi/zyfa_abi.h): 5 pointers, 12 int64 strides, 7 int32, flags, 4 floats."""
    strides = [s // t.itemsize for t in tensors for s in t.strides[:3]]
    out = struct.pack("<5Q12q7iI4fQ", *ptrs, *strides, *ints, flags, scale, 1.0, 1.0, 1.0, 0)
    assert len(out) == 192
    return out


def attention_reference(q, k, v, causal=True):
    """float64 reference and a bf16-rounding emulation: (out64, lse64, out_emul).

    Rows that see no key get out 0 and lse +inf.
    """
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(d)
    qf, kf, vf = (x.astype(np.float64) for x in (q, k, v))
    out = np.zeros((b, sq, hq, v.shape[3]))
    emul = np.zeros_like(out)
    lse = np.full((b, hq, sq), np.inf)
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hkv)
            s = qf[bi, :, h] @ kf[bi, :, kh].T * scale
            if causal:
                s = np.where(np.arange(sk)[None] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
            mx = s.max(1, keepdims=True)
            seen = np.isfinite(mx[:, 0])
            mx = np.where(np.isfinite(mx), mx, 0)
            p = np.exp(s - mx)
            l_ = p.sum(1, keepdims=True)
            safe = np.where(l_ > 0, l_, 1)
            out[bi, :, h] = np.where(seen[:, None], (p / safe) @ vf[bi, :, kh], 0)
            pb = p.astype(np.float32).astype(BF16).astype(np.float64)
            e = np.where(seen[:, None], (pb @ vf[bi, :, kh]) / safe, 0)
            emul[bi, :, h] = e.astype(BF16).astype(np.float64)
            lse[bi, h] = np.where(seen, mx[:, 0] + np.log(safe[:, 0]), np.inf)
    return out, lse, emul


def run_attention(asm: str, b, sq, sk, hq, hkv, dqk, dv, rows=None, rng=None):
    """Launch the kernel (all or some query-row tiles); return (out, lse, tiles run, q, k, v)."""
    rng = rng or np.random.default_rng()
    q = rng.standard_normal((b, sq, hq, dqk)).astype(BF16)
    k = rng.standard_normal((b, sk, hkv, dqk)).astype(BF16)
    v = rng.standard_normal((b, sk, hkv, dv)).astype(BF16)
    out = np.full((b, sq, hq, dv), np.nan, dtype=BF16)  # poisoned: unwritten rows show up
    lse = np.full((b, hq, sq), np.nan, dtype=np.float32)
    mem = GlobalMemory()
    ptrs = [mem.map(x.view(np.uint16)) for x in (q, k, v, out)] + [mem.map(lse)]
    args = pack_args(ptrs, [q, k, v, out], [b, hq, hkv, sq, sk, dqk, dv], 3, 1.0 / np.sqrt(dqk))
    sim = Simulator(asm, "fa_mini")
    grid = ((sq + 31) // 32, hq, b)
    wgs = None if rows is None else [(t, h, bi) for t in rows for h in range(hq) for bi in range(b)]
    res = sim.launch(grid, (64, 1, 1), args, mem, workgroups=wgs)
    return res, out, lse, q, k, v


def check_attention(res, out, lse, q, k, v, tiles=None) -> None:
    assert not res.findings, "\n".join(str(f) for f in res.findings)
    ref, lref, emul = attention_reference(q, k, v)
    sel = (
        slice(None)
        if tiles is None
        else np.concatenate([np.arange(t * 32, min(t * 32 + 32, q.shape[1])) for t in tiles])
    )
    got = out.astype(np.float64)[:, sel]
    assert not np.isnan(got).any(), "unwritten output rows"
    err = np.abs(got - ref[:, sel]).max()
    budget = 2 * np.abs(emul[:, sel] - ref[:, sel]).max() + 1e-3
    assert err <= budget, (err, budget)
    lg = lse.astype(np.float64)[:, :, sel]
    lr = lref[:, :, sel]
    both_inf = np.isinf(lr) & (lg == lr)
    with np.errstate(invalid="ignore"):
        close = np.abs(lg - lr) <= 1e-4 * np.maximum(1, np.abs(lr))
    assert np.all(both_inf | close), lg[~(both_inf | close)]


@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv",
    [(1, 64, 64, 2, 1), (1, 40, 100, 1, 1), (1, 100, 40, 2, 2), (2, 33, 33, 2, 1)],
)
def test_fa_mini_small_shapes(hip, b, sq, sk, hq, hkv) -> None:
    asm = hip("fa_mini", FA_D_QK=128, FA_D_V=128)
    res, out, lse, q, k, v = run_attention(asm, b, sq, sk, hq, hkv, 128, 128)
    check_attention(res, out, lse, q, k, v)


def test_fa_mini_ragged_200_subset_of_tiles(hip) -> None:
    """seqlen 200 (ragged last tile), GQA 2:1; first and last query tiles only."""
    asm = hip("fa_mini", FA_D_QK=128, FA_D_V=128)
    tiles = [0, 6]
    res, out, lse, q, k, v = run_attention(asm, 1, 200, 200, 2, 1, 128, 128, rows=tiles)
    check_attention(res, out, lse, q, k, v, tiles)


def test_fa_mini_d192x128(hip) -> None:
    asm = hip("fa_mini", FA_D_QK=192, FA_D_V=128)
    res, out, lse, q, k, v = run_attention(asm, 1, 64, 96, 2, 1, 192, 128)
    check_attention(res, out, lse, q, k, v)


def test_one_workgroup_256_keys_is_fast(hip) -> None:
    """CI budget: one workgroup of d=128 attention over 256 keys well under 60 s (here < 15 s)."""
    import time

    asm = hip("fa_mini", FA_D_QK=128, FA_D_V=128)
    t0 = time.perf_counter()
    res, out, lse, q, k, v = run_attention(asm, 1, 256, 256, 1, 1, 128, 128, rows=[7])
    assert time.perf_counter() - t0 < 15
    check_attention(res, out, lse, q, k, v, [7])


def run_reduce(asm: str, n: int, blocks: int, wave_order: str = "forward", rng=None):
    rng = rng or np.random.default_rng()
    x = rng.standard_normal(blocks * n).astype(np.float32)
    out = np.full(blocks, np.nan, dtype=np.float32)
    mem = GlobalMemory()
    args = struct.pack("<QQi", mem.map(x), mem.map(out), n)
    res = Simulator(asm, "lds_reduce").launch((blocks, 1, 1), (256, 1, 1), args, mem, wave_order=wave_order)
    return res, x.reshape(blocks, n), out


@pytest.mark.parametrize("order", ["forward", "reverse", "interleaved"])
def test_lds_reduce_multiwave(hip, order) -> None:
    asm = hip("lds_reduce")
    res, x, out = run_reduce(asm, 1000, 2, order)
    assert not res.findings, "\n".join(str(f) for f in res.findings)
    np.testing.assert_allclose(out, x.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-4)


def test_unknown_wave_order_is_refused(hip) -> None:
    from zyfa_asmgen.sim.errors import LaunchError

    with pytest.raises(LaunchError, match="wave_order 'sideways': one of forward, reverse, interleaved"):
        run_reduce(hip("lds_reduce"), 64, 1, "sideways")
