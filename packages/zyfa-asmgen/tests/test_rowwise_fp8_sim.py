"""rowwise_fp8 run in zyfa_asmgen.sim against zyfa.reference (block_n = tile_n = 1, p_mode exact).

Tolerances: the kernel implements the reference's operations in the same order, so the outputs
agree to the last bf16 bit when the simulator's v_exp_f32 is exact; to stay valid if it models the
hardware's 1-ulp exp2, the test allows one e4m3 rounding step of P to flip per element (relative
0.07 of the largest output) and requires FA3's rule against the float64 truth: error at most twice
the reference's own error plus 1e-3. Outputs start as NaN so unwritten rows fail.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from test_generator import HD192

from zyfa_asmgen.abi import parse_abi_header
from zyfa_asmgen.generators import generate
from zyfa_asmgen.variant import Variant

torch = pytest.importorskip("torch")
reference = pytest.importorskip("zyfa.reference")
sim = pytest.importorskip("zyfa_asmgen.sim")


def _run(abi_header, b, sq, sk, hq, hkv, d_qk, d_v, flags, descales, rng):
    var = Variant.from_dict({**HD192, "name": "k", "d_qk": d_qk, "d_v": d_v})
    asm = generate("rowwise_fp8", var, parse_abi_header(abi_header))
    q8, k8, v8 = (
        (torch.from_numpy(rng.standard_normal(shape)) * 3).to(torch.float8_e4m3fn)
        for shape in ((b, sq, hq, d_qk), (b, sk, hkv, d_qk), (b, sk, hkv, d_v))
    )
    out = np.full((b, sq, hq, d_v), 0x7FC0, dtype=np.uint16)  # bf16 NaN
    lse = np.full((b, hq, sq), np.nan, dtype=np.float32)
    mem = sim.GlobalMemory()
    ptrs = [mem.map(x.view(torch.uint8).numpy()) for x in (q8, k8, v8)] + [mem.map(out), mem.map(lse)]
    strides = [s for t in (q8, k8, v8) for s in t.stride()[:3]] + [s // 2 for s in out.strides[:3]]
    scale = 1.0 / math.sqrt(d_qk)
    ints = (b, hq, hkv, sq, sk, d_qk, d_v, flags)
    args = struct.pack("<5Q12q7iI4fQ", *ptrs, *strides, *ints, scale, *descales, 0)
    res = sim.Simulator(asm, "k").launch(((sq + 63) // 64, hq, b), (64, 1, 1), args, mem)
    kw = dict(softmax_scale=scale, causal=bool(flags & 1), q_descale=descales[0], k_descale=descales[1],
              v_descale=descales[2])  # fmt: skip
    ref, ref_lse = reference.attention(q8, k8, v8, p_mode="exact", block_n=1, **kw)
    truth, _ = reference.attention_dense_f64(q8, k8, v8, **kw)
    got = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16).double()
    return res, got, torch.from_numpy(lse).double(), ref.double(), ref_lse.double(), truth


@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv,d_qk,flags",
    [
        (1, 70, 90, 2, 1, 128, 3),  # ragged second tile, GQA 2:1, lse
        (1, 100, 40, 2, 2, 128, 3),  # seqlen_q > seqlen_k: rows with no key (0 / +inf)
        (2, 33, 33, 4, 2, 192, 1),  # d_qk 192, batch 2, no lse
        (1, 64, 80, 1, 1, 128, 2),  # not causal
    ],
)
def test_matches_reference(abi_header, b, sq, sk, hq, hkv, d_qk, flags):
    rng = np.random.default_rng()
    descales = (0.5, 0.25, 2.0)
    res, got, lse, ref, ref_lse, truth = _run(abi_header, b, sq, sk, hq, hkv, d_qk, 128, flags, descales, rng)
    assert not res.findings, "\n".join(map(str, res.findings))
    assert not torch.isnan(got).any(), "unwritten output rows"
    assert (got - ref).abs().max() <= 0.07 * ref.abs().max()
    assert (got - truth).abs().max() <= 2 * (ref - truth).abs().max() + 1e-3
    if flags & 2:
        assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
        fin = torch.isfinite(ref_lse)
        assert (lse[fin] - ref_lse[fin]).abs().max() <= 1e-4 * max(1.0, ref_lse[fin].abs().max().item())
