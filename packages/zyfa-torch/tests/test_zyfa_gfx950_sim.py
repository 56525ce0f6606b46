"""The simulated gfx950 kernels against zyfa.reference, the contract's numerics (block_n = tile_n).

zyfa-asmgen's simulator compares a launch with its own numpy float64 softmax only (it sits below
zyfa-torch and never imports it); this file, above both, adds the contract, on the numbers
`zyfa-asmgen sim --save-out` writes. Each kernel's assembly
comes from kernels/variants.bzl (the HIP source compiled by the pinned clang, or the generator run),
so the tests skip without ziglang. Tolerances: bf16 2^-7 * max(1, |ref|) (same operations in the
same order; only exp2 and the MFMA accumulation order differ, and out is rounded to bf16 once);
FP8 0.07 * max(1, |ref|): one e4m3 step of P (2^-4 relative) moved by a different fp32 rounding.
"""

from __future__ import annotations

import importlib.util
import json
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
def test_simulated_kernel_matches_the_contract(name, dims, tiles, tmp_path, capsys):
    """`zyfa-asmgen sim --save-out` gives the launch's numbers; zyfa.reference is the judge here."""
    from zyfa_asmgen.__main__ import main

    b, sq, sk, hq, hkv = dims
    saved = tmp_path / "launch.npz"
    argv = ["sim", name, "--variants", str(VARIANTS), "--abi-header", str(ABI_HEADER), "--no-timing"]
    argv += ["--batch", str(b), "--seqlen-q", str(sq), "--seqlen-k", str(sk), "--heads-q", str(hq)]
    argv += [
        "--heads-kv",
        str(hkv),
        "--workgroups",
        tiles,
        "--seed",
        str(sum(dims)),
        "--save-out",
        str(saved),
    ]
    rc = main(argv)
    report = capsys.readouterr().out
    assert rc == 0, report  # its own float64 check and the hazard checker passed
    run = np.load(saved)
    entry = json.loads(str(run["entry"]))
    fp8 = entry["dtype"] == "e4m3fn"
    q, k, v = (_torch(run[n], fp8) for n in ("q", "k", "v"))
    ds = [float(x) for x in run["descales"]]
    want, want_lse = R.attention(
        q,
        k,
        v,
        softmax_scale=float(run["scale"]),
        causal=bool(entry["causal"]),
        q_descale=ds[0],
        k_descale=ds[1],
        v_descale=ds[2],
        p_mode=entry.get("p_mode") or "exact",
        block_n=entry["tile_n"],
        stale_tau=float(entry.get("stale_tau", 0.0)),
    )
    rows = run["rows"]
    got = torch.from_numpy(run["out"].view(np.int16)).view(torch.bfloat16).double().numpy()[:, rows]
    ref = want.double().numpy()[:, rows]
    assert not np.isnan(got).any(), "unwritten output rows"
    tol = (0.07 if fp8 else 2.0**-7) * max(1.0, float(np.abs(ref).max()))
    assert np.abs(got - ref).max() <= tol
    lse, ref_lse = run["lse"].astype(np.float64)[:, :, rows], want_lse.double().numpy()[:, :, rows]
    assert np.array_equal(np.isinf(lse), np.isinf(ref_lse))
    finite = np.isfinite(ref_lse)
    assert np.abs(lse[finite] - ref_lse[finite]).max() <= 2e-2


PACKED = [
    "fa_fwd_bf16_hd128_causal_varlen_gfx950",
    "fa_fwd_bf16_hd192x128_causal_varlen_gfx950",
    "fa_fwd_bf16_hd128_causal_paged_gfx950",
    "fa_fwd_bf16_hd192x128_causal_paged_gfx950",
]


@pytest.mark.parametrize("name", PACKED)
def test_simulated_packed_kernel_matches_the_contract(name):
    """The packed builds (zyfa_varlen_args as the second kernel argument) on a ragged GQA 4:1 batch: one query
    over one key, an empty sequence, 3 queries over no key, 40 over 100 keys (bottom-right causal), and two
    q rows after the last sequence (packed); the paged builds without the padding rows, K / V on pages of 16
    keys in random order, cu_seqlens_k None and seqused_k the counts. zyfa.reference.attention_varlen is the
    judge (tolerances as above); the rows outside every sequence stay unwritten (the reference gives 0)."""
    from zyfa_asmgen.abi import parse_abi_header
    from zyfa_asmgen.sim import Simulator
    from zyfa_asmgen.sim.cli import locate_kernel
    from zyfa_asmgen.sim.varlen import launch_packed, make_packed, make_paged

    src = locate_kernel(name, None, VARIANTS)
    entry = src.entry
    rng = np.random.default_rng()
    if entry["layout"] == "paged":
        pb = make_paged(entry, [1, 0, 3, 40], [1, 7, 0, 100], 4, 1, 16, rng)
    else:
        pb = make_packed(entry, [1, 0, 3, 40], [1, 7, 0, 100], 4, 1, rng, pad_q=2)
    res = launch_packed(Simulator(src.asm, name), entry, parse_abi_header(ABI_HEADER), pb)
    assert not res.findings, "\n".join(str(f) for f in res.findings)
    q, k, v = (_torch(x, False) for x in (pb.q, pb.k, pb.v))
    index = {"seqused_k": None if pb.seqused_k is None else torch.from_numpy(pb.seqused_k)}
    if pb.page_table is not None:
        index["page_table"] = torch.from_numpy(pb.page_table)
    cu_k = None if pb.cu_seqlens_k is None else torch.from_numpy(pb.cu_seqlens_k)
    want, want_lse = R.attention_varlen(
        q,
        k,
        v,
        torch.from_numpy(pb.cu_seqlens_q),
        cu_k,
        **index,
        softmax_scale=pb.scale,
        causal=bool(entry["causal"]),
        block_n=entry["tile_n"],
        stale_tau=float(entry.get("stale_tau", 0.0)),
    )
    rows = int(pb.cu_seqlens_q[-1])
    got = pb.out.astype(np.float64)
    assert np.isnan(got[rows:]).all() and np.isnan(pb.lse[:, rows:]).all(), (
        "rows outside every sequence written"
    )
    got, ref = got[:rows], want.double().numpy()[:rows]
    assert not np.isnan(got).any(), "unwritten output rows"
    assert np.abs(got - ref).max() <= 2.0**-7 * max(1.0, float(np.abs(ref).max()))
    lse, ref_lse = pb.lse.astype(np.float64)[:, :rows], want_lse.double().numpy()[:, :rows]
    assert np.array_equal(np.isinf(lse), np.isinf(ref_lse))
    finite = np.isfinite(ref_lse)
    assert np.abs(lse[finite] - ref_lse[finite]).max() <= 2e-2
