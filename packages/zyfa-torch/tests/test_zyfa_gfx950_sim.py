"""The simulated gfx950 kernels against zyfa.reference, the contract's numerics (block_n = tile_n).

zyfa-asmgen's simulator compares a launch with its own numpy float64 softmax only (it sits below
zyfa-torch and never imports it); this file, above both, adds the contract. Each kernel's assembly
comes from kernels/variants.bzl (the HIP source compiled by the pinned clang, or the generator run),
so the tests skip without ziglang. Tolerances: bf16 2^-7 * max(1, |ref|) (same operations in the
same order; only exp2 and the MFMA accumulation order differ, and out is rounded to bf16 once);
FP8 0.07 * max(1, |ref|): one e4m3 step of P (2^-4 relative) moved by a different fp32 rounding.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from zyfa import reference as R

REPO = Path(__file__).resolve().parents[3]
VARIANTS = REPO / "kernels" / "variants.bzl"
ABI_HEADER = REPO / "kernels" / "abi" / "zyfa_abi.h"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ziglang") is None or not VARIANTS.is_file(),
    reason="needs ziglang (the pinned clang) and kernels/variants.bzl",
)

# (kernel, (batch, seqlen_q, seqlen_k, heads_q, heads_kv), query tiles): tiny, ragged, GQA, and
# seqlen_q > seqlen_k (rows without keys) for the bf16 kernel.
CASES = [
    ("fa_fwd_bf16_hd128_causal_gfx950", (1, 70, 70, 2, 1), "all"),
    ("fa_fwd_bf16_hd128_causal_gfx950", (1, 100, 40, 1, 1), "all"),
    ("fa_fwd_bf16_hd192x128_causal_gfx950", (1, 40, 72, 2, 2), "all"),
    ("fa_fwd_e4m3fn_hd128_causal_gfx950", (1, 96, 96, 2, 1), "0,1"),
]


def _torch(x: np.ndarray, fp8: bool) -> torch.Tensor:
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    return torch.from_numpy(np.ascontiguousarray(x).view(np.uint8 if fp8 else np.int16)).view(dtype)


@pytest.mark.parametrize(("name", "dims", "tiles"), CASES, ids=lambda c: str(c))
def test_simulated_kernel_matches_the_contract(name, dims, tiles):
    from zyfa_asmgen.abi import parse_abi_header
    from zyfa_asmgen.sim import cli

    src = cli.locate_kernel(name, None, VARIANTS)
    entry = src.entry
    seed = sum(dims) + len(name)
    launch = cli.simulate(
        src,
        parse_abi_header(ABI_HEADER),
        cli.Shape(*dims),
        np.random.default_rng(seed),
        (0.5, 0.25, 2.0),
        tiles,
    )
    assert not launch.res.findings, "\n".join(str(f) for f in launch.res.findings)
    fp8 = entry["dtype"] == "e4m3fn"
    q, k, v = (_torch(x, fp8) for x in launch.inp.raw)
    ds = launch.inp.descales
    want, want_lse = R.attention(
        q,
        k,
        v,
        softmax_scale=launch.inp.scale,
        causal=bool(entry["causal"]),
        q_descale=ds[0],
        k_descale=ds[1],
        v_descale=ds[2],
        p_mode=entry.get("p_mode") or "exact",
        block_n=entry["tile_n"],
    )
    rows = launch.rows
    got = launch.inp.out.astype(np.float64)[:, rows]
    ref = want.double().numpy()[:, rows]
    assert not np.isnan(got).any(), "unwritten output rows"
    tol = (0.07 if fp8 else 2.0**-7) * max(1.0, float(np.abs(ref).max()))
    assert np.abs(got - ref).max() <= tol
    lse, ref_lse = launch.inp.lse.astype(np.float64)[:, :, rows], want_lse.double().numpy()[:, :, rows]
    assert np.array_equal(np.isinf(lse), np.isinf(ref_lse))
    finite = np.isfinite(ref_lse)
    assert np.abs(lse[finite] - ref_lse[finite]).max() <= 2e-2
