"""NaN and Inf in q, k or v: the CPU path (zyfa.reference) and the GPU kernels propagate them alike.

The rule (module docstring of zyfa.reference): a query row whose visible scores include a NaN -- a
NaN (or an e4m3fn NaN code) in its q row or in a key it sees, or an infinite score that meets an
infinite running max -- outputs NaN in every column and lse = NaN; every other row is untouched,
bitwise. Masked keys never reach a row. A row that sees no key outputs 0 and lse = +inf whatever its
q holds. Which rows must turn NaN is decided independently of zyfa: by a plain float64 softmax
attention (torch.softmax, SDPA's semantics) on the same dequantised inputs.

The GPU test runs every default kernel (both head shapes, BF16 and each FP8 p_mode) on the same
poisoned inputs and asks for the CPU path's NaN rows, lse included, and its finite rows within the
same-numerics tolerances of test_zyfa_gpu.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from zyfa_testutil import make_qkv, rel_err

import zyfa
from zyfa import reference as R

E4M3_NAN_CODE = 0x7F
F64_TOL = {None: 5e-3, "exact": 0.04, "lean": 0.06, "f16": 5e-3}  # derived in test_zyfa_reference.py
SAME_NUMERICS_TOL = {None: 5e-3, "exact": 2e-2, "lean": 2e-2, "f16": 2e-2}  # as in test_zyfa_gpu.py
# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, d_qk): GQA with seqlen_q < seqlen_k, and seqlen_q >
# seqlen_k, where the leading rows see no key.
SHAPES = [(2, 150, 200, 4, 2, 128), (1, 160, 96, 6, 2, 192)]


def _ids(shape: tuple[int, ...]) -> str:
    b, sq, sk, hq, hkv, d = shape
    return f"b{b}-sq{sq}-sk{sk}-h{hq}x{hkv}-d{d}"


def _fp8(x: torch.Tensor) -> torch.Tensor:
    return x.float().clamp(-448, 448).to(torch.float8_e4m3fn)


def _poison(x: torch.Tensor, index: tuple[int, ...], value: float) -> torch.Tensor:
    """A copy of x with one element set: a float value, or (FP8) math.nan as the e4m3fn NaN code."""
    x = x.clone()
    if x.dtype == torch.float8_e4m3fn and math.isnan(value):
        x.view(torch.uint8)[index] = E4M3_NAN_CODE
    else:
        x[index] = value
    return x


def _sdpa_nan_rows(q, k, v, descales=(1.0, 1.0, 1.0)) -> torch.Tensor:
    """[batch, seqlen_q, heads_q] bool: rows a plain softmax attention makes NaN in float64, masked keys
    removed from each row (masked_fill, as the kernels mask: SDPA's additive mask would let a NaN score
    of a masked key through)."""
    sq, sk, group = q.shape[1], k.shape[1], q.shape[2] // k.shape[2]
    qd, kd, vd = (x.double() * d for x, d in zip((q, k, v), descales, strict=True))
    kd, vd = kd.repeat_interleave(group, dim=2), vd.repeat_interleave(group, dim=2)
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    visible = j <= i + (sk - sq)
    scores = torch.einsum("bihd,bjhd->bhij", qd, kd).masked_fill(~visible, -math.inf)
    p = torch.softmax(scores, dim=-1).masked_fill(~visible, 0.0)  # masked keys contribute nothing
    out = torch.einsum("bhij,bjhd->bihd", p, vd)
    return torch.isnan(out).any(dim=-1) & visible.any(dim=-1)[None, :, None]  # keyless rows: 0, not NaN


def _cpu(q, k, v, descales, p_mode):
    kw = {} if p_mode is None else dict(zip(("q_descale", "k_descale", "v_descale"), descales, strict=True))
    out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, p_mode=p_mode, **kw)
    return out, lse


def _check_rows(out, lse, nan_rows, untouched, clean_out, clean_lse) -> None:
    """NaN rows are NaN in every column and in lse; rows the poison cannot reach equal the clean run
    bitwise."""
    row_nan = torch.isnan(out.float())
    lse_rows = lse.transpose(1, 2)  # [batch, seqlen_q, heads_q]
    assert torch.equal(row_nan.any(dim=-1), nan_rows), "NaN rows differ from SDPA's"
    assert torch.equal(row_nan.all(dim=-1), nan_rows), "a NaN row must be NaN in every column"
    assert torch.equal(torch.isnan(lse_rows), nan_rows), "lse must be NaN exactly on the NaN rows"
    assert torch.equal(out[untouched], clean_out[untouched])
    assert torch.equal(lse_rows[untouched], clean_lse.transpose(1, 2)[untouched])


def _reach(shape, where: str, index: tuple[int, ...]) -> torch.Tensor:
    """[batch, seqlen_q, heads_q] bool: the rows a poisoned q element or key can reach."""
    b, sq, sk, hq, hkv, _ = shape
    rows = torch.zeros(b, sq, hq, dtype=torch.bool)
    if where == "q":
        rows[index[:3]] = True
        return rows
    group = hq // hkv
    first_row = max(index[1] - (sk - sq), 0)  # row i sees key j iff j <= i + sk - sq
    rows[index[0], first_row:, index[2] * group : (index[2] + 1) * group] = True
    return rows


def _inputs(shape, fp8: bool, seed: int):
    b, sq, sk, hq, hkv, d = shape
    q, k, v = make_qkv(b, sq, sk, hq, hkv, d, 128, seed=seed, q_scale=2.0)
    if fp8:
        return (*(_fp8(x) for x in (q, k, v)), (0.5, 0.25, 2.0))
    return q, k, v, (1.0, 1.0, 1.0)


MODES = [None, "exact", "lean", "f16"]
MODE_IDS = ["bf16", "exact", "lean", "f16"]


# float8_e4m3fn has no infinity: FP8 modes take NaN only.
NONFINITE = [
    pytest.param(mode, value, id=f"{mid}-{vid}")
    for mode, mid in zip(MODES, MODE_IDS, strict=True)
    for value, vid in ((math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"))
    if mode is None or math.isnan(value)
]


@pytest.mark.parametrize("where", ["q", "k"])
@pytest.mark.parametrize(("p_mode", "value"), NONFINITE)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_cpu_nonfinite_q_or_k_follows_sdpa(shape, p_mode, value, where):
    q, k, v, ds = _inputs(shape, p_mode is not None, seed=sum(shape) + len(where))
    clean_out, clean_lse = _cpu(q, k, v, ds, p_mode)
    b, sq, sk, hq, hkv, _ = shape
    # One poisoned element of a late query row, or of a key halfway along (seen by some rows only).
    index = (b - 1, sq - 3, hq - 1, 5) if where == "q" else (b - 1, sk // 2, hkv - 1, 7)
    if where == "q":
        q = _poison(q, index, value)
    else:
        k = _poison(k, index, value)
    nan_rows = _sdpa_nan_rows(q, k, v, ds)
    assert nan_rows.any(), "the poisoned element must reach at least one row"
    out, lse = _cpu(q, k, v, ds, p_mode)
    reach = _reach(shape, where, index)
    assert not (nan_rows & ~reach).any()
    _check_rows(out, lse, nan_rows, ~reach, clean_out, clean_lse)
    # Reached rows that stay finite (a score of -inf: weight 0) hold the float64 answer.
    finite = reach & ~nan_rows
    if finite.any():
        truth, _ = R.attention_dense_f64(q, k, v, None, True, *ds)
        assert rel_err(out[finite], truth[finite]) <= F64_TOL[p_mode]


@pytest.mark.parametrize("p_mode", MODES, ids=MODE_IDS)
def test_cpu_nan_in_v_reaches_the_rows_that_see_it(p_mode):
    """A NaN in V reaches every row that sees its key; rows whose last visible key lies in an earlier KV
    block (the CPU path's block_n is 64) are untouched, lse everywhere."""
    shape = (1, 200, 200, 2, 1, 128)
    q, k, v, ds = _inputs(shape, p_mode is not None, seed=11)
    clean_out, clean_lse = _cpu(q, k, v, ds, p_mode)
    j = 150
    v = _poison(v, (0, j, 0, 3), math.nan)
    out, lse = _cpu(q, k, v, ds, p_mode)
    row_nan = torch.isnan(out.float()).any(dim=-1)[0]  # [seqlen_q, heads_q]
    assert row_nan[j:].all(), "every row that sees the key must be NaN"
    early = slice(0, 128)  # rows 0..127 see only keys of blocks 0 and 1 (keys < 128)
    assert not row_nan[early].any()
    assert torch.equal(out[:, early], clean_out[:, early]) and torch.equal(
        lse[..., early], clean_lse[..., early]
    )
    assert not torch.isnan(lse).any(), "V does not enter the row sums: lse stays finite"


@pytest.mark.parametrize("p_mode", MODES, ids=MODE_IDS)
def test_cpu_row_without_keys_stays_zero_even_with_nan_q(p_mode):
    """seqlen_q > seqlen_k: the leading rows see no key; a NaN in their q changes nothing (0, +inf)."""
    q, k, v, ds = _inputs((1, 100, 40, 2, 2, 128), p_mode is not None, seed=3)
    q = _poison(q, (0, 10, 1, 0), math.nan)  # row 10 sees no key (it needs j <= 10 - 60)
    out, lse = _cpu(q, k, v, ds, p_mode)
    assert torch.all(out[0, :60] == 0) and torch.all(lse[0, :, :60] == math.inf)
    assert not torch.isnan(out.float()).any()


def test_reference_lean_codes_of_nan_are_the_nan_code():
    """Lean P: a NaN sum gives e4m3fn's NaN code (the kernels' FMA path), never an arbitrary integer."""
    s = torch.tensor([[1.0, math.nan, -math.inf, math.inf]])
    codes = R.lean_p_codes(s, 8.0, torch.full_like(s, 120.0))
    assert codes.tolist() == [[126, 127, 0, 126]]
    assert torch.isnan(R.decode_e4m3fn(codes)[0, 1])


def test_dense_f64_nan_rows_read_nan():
    """The float64 truth gives NaN (not +inf) lse on a NaN row, and 0 / +inf on rows without keys."""
    q, k, v = make_qkv(1, 50, 20, 1, 1, seed=5)
    q = _poison(q, (0, 45, 0, 0), math.nan)
    out, lse = R.attention_dense_f64(q, k, v, causal=True)
    assert torch.isnan(out[0, 45]).all() and torch.isnan(lse[0, 0, 45])
    assert torch.all(out[0, :30] == 0) and torch.all(lse[0, 0, :30] == math.inf)
    assert not torch.isnan(lse[0, 0, 46:]).any()


# ---- the same inputs on a GPU -------------------------------------------------------------------------


def _gpu_kernel_or_skip(q, k, v, p_mode):
    pytest.importorskip("zyfa_core")
    from zyfa import _ops
    from zyfa_core.errors import KernelNotFoundError

    try:
        return _ops.select_kernel(q, k, v, True, p_mode)
    except KernelNotFoundError as exc:
        pytest.skip(str(exc).splitlines()[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("p_mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_gpu_nan_rows_match_the_cpu_path(shape, p_mode, where):
    """Each default kernel gives NaN on exactly the CPU path's NaN rows for a NaN in q or k (lse too), and
    its other rows agree with the CPU path of the same numerics. A NaN in V: every row that sees the key
    is NaN, lse stays finite, and rows whose whole tile ends before the key's block are untouched."""
    b, sq, sk, hq, hkv, _ = shape
    q, k, v, ds = _inputs(shape, p_mode is not None, seed=sum(shape) + 7)
    index = {"q": (b - 1, sq - 3, hq - 1, 5), "k": (b - 1, sk // 2, hkv - 1, 7), "v": (0, sk - 20, 0, 2)}[
        where
    ]
    poisoned = {"q": q, "k": k, "v": v}
    poisoned[where] = _poison(poisoned[where], index, math.nan)
    q, k, v = poisoned["q"], poisoned["k"], poisoned["v"]
    gq, gk, gv = (x.cuda() for x in (q, k, v))
    spec = _gpu_kernel_or_skip(gq, gk, gv, p_mode)
    kw = {} if p_mode is None else dict(zip(("q_descale", "k_descale", "v_descale"), ds, strict=True))
    out, lse, _ = zyfa.flash_attn_func(gq, gk, gv, causal=True, return_attn_probs=True, p_mode=p_mode, **kw)
    out, lse = out.cpu(), lse.cpu()
    want, want_lse = R.attention(
        q, k, v, **kw, p_mode=spec.p_mode or "exact", block_n=spec.tile_n, stale_tau=spec.stale_tau
    )
    got_nan = torch.isnan(out.float()).any(dim=-1)
    if where == "v":
        sees = torch.zeros_like(got_nan)
        sees[0, max(index[1] - (sk - sq), 0) :, : hq // hkv] = True
        assert (got_nan | ~sees).all(), f"{spec.name}: a row that sees the NaN in V is not NaN"
        assert not torch.isnan(lse).any(), spec.name
        block0 = index[1] // spec.tile_n * spec.tile_n  # the key's KV block starts here
        last_row = block0 - (sk - sq) - spec.tile_m  # a tile ending before this row never loads that block
        keep = torch.zeros_like(got_nan)
        keep[:, : max(last_row, 0)] = True
        keep[1:] = True  # other sequences
    else:
        nan_rows = torch.isnan(want.float()).any(dim=-1)
        assert nan_rows.any()
        assert torch.equal(got_nan, nan_rows), spec.name
        assert torch.equal(torch.isnan(out.float()).all(dim=-1), nan_rows), spec.name
        assert torch.equal(torch.isnan(lse), torch.isnan(want_lse)), spec.name
        keep = ~nan_rows
    assert not got_nan[keep].any(), spec.name
    if not keep.any():  # the poison may reach every row of this shape's tiles
        return
    assert rel_err(out[keep], want[keep]) <= SAME_NUMERICS_TOL[p_mode], spec.name
    lse_keep = keep.transpose(1, 2)
    got_lse, ref_lse = lse[lse_keep], want_lse[lse_keep]
    assert torch.equal(torch.isinf(got_lse), torch.isinf(ref_lse)), spec.name
    finite = torch.isfinite(ref_lse)
    if finite.any():
        assert (got_lse[finite] - ref_lse[finite]).abs().max().item() <= 8e-2, spec.name
