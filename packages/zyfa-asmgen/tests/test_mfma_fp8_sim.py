"""mfma_fp8 (the gfx950 FP8 matrix-core kernel) run in zyfa_asmgen.sim against zyfa.reference.

The reference runs the contract's numerics with block_n = tile_n = 64 and the same p_mode, so the
kernel implements the same operations on the same values in the same order except where the
contract leaves an order free:

* S = q.k: the simulator's MFMA rounds the exact sum once; torch's fp32 matmul rounds along the way.
  S can differ in the last bit, which can flip a lean code (a rint landing within an ulp of a
  half-integer) or an exact P's e4m3 rounding, and moves m by an ulp.
* acc: the MFMA adds P.V to acc * alpha with one rounding, the reference with two; v_exp_f32 and
  v_log_f32 are exact-rounded in the simulator (torch's exp2/log2 within an ulp); 1/l by a Newton step.

Derived tolerances. Without a flip the differences are fp32 ulps, which move an output by at most
one bf16 ulp (2^-8 relative) when they straddle a bf16 rounding boundary: every element must be
within 2^-8 |ref| + 2^-133 of the reference except at most 0.1 % of the elements, or except in
flipped rows, at most 0.1 % of the rows and never fewer than one (a flip moves one P_j, and so every
output element of its row; about one run in a thousand of a 140-row case flips one row). A flipped
code moves one P_j by one e4m3 step, at most 16 (P <= 256, 3 mantissa bits), while l >= 256 (the row
max adds e4m3(2^8)); so no element may move more than 16 / 256 max|v8| v_descale = max|v| / 16, and
l by at most 16 in 256: lse within 1e-5 max(1, |lse|) except in the flipped rows (as above), all
within ln(1 + 16/256). Against the float64 truth (FA3's rule): error at most twice the reference's
own error plus 1e-3. Outputs start as NaN, lse as NaN, so unwritten rows fail.
"""

from __future__ import annotations

import math
import re
import struct
from functools import cache

import numpy as np
import pytest
from asmgen_testlib import ABI_HEADER

from zyfa_asmgen.abi import parse_abi_header
from zyfa_asmgen.generators.mfma_fp8 import MFMA, Options, generate_with_operands
from zyfa_asmgen.variant import Variant

torch = pytest.importorskip("torch")
reference = pytest.importorskip("zyfa.reference")
sim = pytest.importorskip("zyfa_asmgen.sim")

DESCALES = (0.5, 0.25, 2.0)
BF16_REL = 2.0**-8
FLIP_SHARE = 1e-3


def beyond_one_ulp_in_few_rows(got: torch.Tensor, ref: torch.Tensor) -> bool:
    """Elements further than one bf16 ulp from the reference are at most 0.1 % of all elements, or
    lie in at most max(1, 0.1 %) of the output rows (b, s, h): the rows a flipped P code moves."""
    off = (got - ref).abs() > BF16_REL * ref.abs() + 2.0**-133
    rows = off.any(dim=-1)
    return bool(off.float().mean() <= FLIP_SHARE) or int(rows.sum()) <= max(
        1, math.ceil(FLIP_SHARE * rows.numel())
    )


def variant(
    d_qk: int, p_mode: str, waves: int, d_v: int = 128, tile_order: str = "descending", stale_tau: float = 0.0
) -> Variant:
    return Variant.from_dict({"name": "k", "arch": "gfx950", "dtype": "e4m3fn", "d_qk": d_qk, "d_v": d_v,
                              "causal": True, "p_mode": p_mode, "kind": "asmgen", "src": "mfma_fp8",
                              "tile_m": 32 * waves, "tile_n": 64, "threads": 64 * waves,
                              "tile_order": tile_order, "stale_tau": stale_tau})  # fmt: skip


@cache
def kernel(
    d_qk: int,
    p_mode: str,
    waves: int = 2,
    opts: Options | None = None,
    tile_order: str = "descending",
    stale_tau: float = 0.0,
) -> tuple[str, dict[str, str]]:
    var = variant(d_qk, p_mode, waves, tile_order=tile_order, stale_tau=stale_tau)
    return generate_with_operands(var, parse_abi_header(ABI_HEADER), opts)


def launch(asm, q8, k8, v8, flags, waves=2, workgroups=None, simulator=None, order="forward", scale=None):
    """Run the kernel on fp8 tensors [b, s, h, d]; returns (result, out as float64, lse)."""
    b, sq, hq, d_qk = q8.shape
    sk, hkv, d_v = k8.shape[1], k8.shape[2], v8.shape[3]
    out = np.full((b, sq, hq, d_v), 0x7FC0, dtype=np.uint16)  # bf16 NaN
    lse = np.full((b, hq, sq), np.nan, dtype=np.float32)
    mem = sim.GlobalMemory()
    # a [b, h, s, d] tensor seen as [b, s, h, d] (permuted view) is mapped through its contiguous base
    bufs = [x if x.is_contiguous() else x.permute(0, 2, 1, 3) for x in (q8, k8, v8)]
    assert all(x.is_contiguous() for x in bufs)
    ptrs = [mem.map(x.view(torch.uint8).numpy()) for x in bufs] + [mem.map(out), mem.map(lse)]
    strides = [s for t in (q8, k8, v8) for s in t.stride()[:3]] + [s // 2 for s in out.strides[:3]]
    ints = (b, hq, hkv, sq, sk, d_qk, d_v, flags)
    scale = 1.0 / math.sqrt(d_qk) if scale is None else scale
    args = struct.pack("<5Q12q7iI4fQ", *ptrs, *strides, *ints, scale, *DESCALES, 0)
    simulator = simulator or sim.Simulator(asm, "k")
    tile_m = 32 * waves
    res = simulator.launch(((sq + tile_m - 1) // tile_m, hq, b), (64 * waves, 1, 1), args, mem,
                           workgroups=workgroups, wave_order=order)  # fmt: skip
    got = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16).double()
    return res, got, torch.from_numpy(lse).double()


def fp8_inputs(rng, b, sq, sk, hq, hkv, d_qk, d_v=128):
    return [(torch.from_numpy(rng.standard_normal(s)) * 3).to(torch.float8_e4m3fn)
            for s in ((b, sq, hq, d_qk), (b, sk, hkv, d_qk), (b, sk, hkv, d_v))]  # fmt: skip


def _kw(d_qk: int, flags: int) -> dict:
    return dict(softmax_scale=1.0 / math.sqrt(d_qk), causal=bool(flags & 1), q_descale=DESCALES[0],
                k_descale=DESCALES[1], v_descale=DESCALES[2])  # fmt: skip


@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv,d_qk,p_mode,flags,waves,order",
    [
        (1, 100, 170, 4, 1, 128, "lean", 3, 2, "forward"),  # GQA 4:1, ragged, seqlen_q < seqlen_k
        (1, 70, 40, 2, 2, 128, "exact", 3, 2, "reverse"),  # seqlen_q > seqlen_k: rows with no key (0 / +inf)
        (2, 33, 97, 4, 1, 192, "lean", 3, 2, "forward"),  # MQA, batch 2, d_qk 192; the second wave idle
        (1, 130, 130, 2, 2, 192, "exact", 1, 2, "forward"),  # d_qk 192 exact, no lse
        (1, 200, 300, 1, 1, 128, "exact", 3, 2, "reverse"),  # several unmasked blocks before the diagonal
        (1, 64, 200, 1, 1, 128, "lean", 2, 2, "forward"),  # not causal: only the tail block is masked
        (1, 96, 96, 8, 2, 192, "lean", 3, 2, "reverse"),  # GQA 4:1 at 192/128
        (1, 100, 170, 4, 1, 128, "lean", 3, 1, "forward"),  # one wave per workgroup
        (1, 70, 130, 2, 1, 192, "exact", 3, 1, "forward"),
    ],
)
def test_matches_reference(b, sq, sk, hq, hkv, d_qk, p_mode, flags, waves, order):
    rng = np.random.default_rng()
    q8, k8, v8 = fp8_inputs(rng, b, sq, sk, hq, hkv, d_qk)
    res, got, lse = launch(kernel(d_qk, p_mode, waves)[0], q8, k8, v8, flags, waves, order=order)
    assert not res.findings, "\n".join(map(str, res.findings))
    assert not torch.isnan(got).any(), "unwritten output rows"
    kw = _kw(d_qk, flags)
    ref, ref_lse = (x.double() for x in reference.attention(q8, k8, v8, p_mode=p_mode, block_n=64, **kw))
    truth, _ = reference.attention_dense_f64(q8, k8, v8, **kw)
    _check_against_reference(got, lse, ref, ref_lse, truth, v8, with_lse=bool(flags & 2))


@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv,d_qk,p_mode,order",
    [
        (2, 150, 170, 3, 1, 128, "lean", "forward"),  # three heads (not a power of two), two batches
        (3, 70, 130, 2, 2, 192, "exact", "reverse"),  # three batches, a second tile of 6 rows
    ],
)
def test_global_tile_order_matches_reference(b, sq, sk, hq, hkv, d_qk, p_mode, order):
    """tile_order "global_descending" over several query tiles, heads and batches: every output row and
    lse is written (they start as NaN) and matches the reference, hazard-free."""
    rng = np.random.default_rng()
    q8, k8, v8 = fp8_inputs(rng, b, sq, sk, hq, hkv, d_qk)
    asm = kernel(d_qk, p_mode, tile_order="global_descending")[0]
    res, got, lse = launch(asm, q8, k8, v8, 3, order=order)
    assert not res.findings, "\n".join(map(str, res.findings))
    assert not torch.isnan(got).any() and not torch.isnan(lse).any(), "unwritten output rows"
    ref, ref_lse = (
        x.double() for x in reference.attention(q8, k8, v8, p_mode=p_mode, block_n=64, **_kw(d_qk, 3))
    )
    assert beyond_one_ulp_in_few_rows(got, ref)
    assert (got - ref).abs().max() <= v8.float().abs().max().item() * DESCALES[2] / 16
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))


def test_global_tile_order_is_the_models_mapping():
    """Under "global_descending" workgroup w writes exactly the rows of the (query tile, head, batch)
    that zyfa_asmgen.sim.cli.tile_of assigns it (the mapping the modelled launch orders by), and the
    workgroups of the grid cover every (tile, head, batch) once. One workgroup per launch."""
    from zyfa_asmgen.sim.cli import tile_of, workgroup_of

    b, sq, sk, hq, hkv, tile_m = 2, 100, 100, 3, 1, 64
    grid = (-(-sq // tile_m), hq, b)
    entry = {"tile_order": "global_descending"}
    wgs = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    cells = [tile_of(w, grid, entry) for w in wgs]
    every = [(t, h, bi) for t in range(grid[0]) for h in range(hq) for bi in range(b)]
    assert sorted(cells) == sorted(every), "the workgroups do not cover each (tile, head, batch) once"
    assert all(workgroup_of(*c, grid, entry) == w for c, w in zip(cells, wgs, strict=True))
    assert cells[0] == (grid[0] - 1, 0, 0) and cells[-1][0] == 0, "the longest tiles go first"
    rng = np.random.default_rng()
    q8, k8, v8 = fp8_inputs(rng, b, sq, sk, hq, hkv, 128)
    asm = kernel(128, "lean", tile_order="global_descending")[0]
    simulator = sim.Simulator(asm, "k")
    for w, (tile, head, batch) in zip(wgs, cells, strict=True):
        res, got, _ = launch(asm, q8, k8, v8, 3, workgroups=[w], simulator=simulator)
        assert not res.findings, "\n".join(map(str, res.findings))
        want = torch.zeros(b, sq, hq, dtype=torch.bool)
        want[batch, tile * tile_m : (tile + 1) * tile_m, head] = True
        written = ~torch.isnan(got).all(dim=-1)
        assert torch.equal(written, want), f"workgroup {w} did not write exactly {(tile, head, batch)}"


@pytest.mark.parametrize(
    "p_mode,waves,opts,order",
    [
        ("lean", 2, Options(pipeline=True, setprio=True), "forward"),
        ("lean", 2, Options(mfma_row_sum=False), "reverse"),
        ("exact", 2, Options(pipeline=True, mfma_row_sum=True, share_k_operand=True), "forward"),
        ("lean", 8, Options(pipeline=True), "reverse"),  # the ping-pong of two groups of four waves
        ("exact", 8, Options(pingpong=False), "forward"),
    ],
)
def test_schedule_options_keep_the_numerics(p_mode, waves, opts, order):
    """The schedule switches the variants do not use still give the reference's output, hazard-free."""
    rng = np.random.default_rng()
    sq, sk = (150, 200) if waves == 2 else (300, 270)
    q8, k8, v8 = fp8_inputs(rng, 1, sq, sk, 2, 1, 128)
    res, got, lse = launch(kernel(128, p_mode, waves, opts)[0], q8, k8, v8, 3, waves, order=order)
    assert not res.findings, "\n".join(map(str, res.findings))
    ref, ref_lse = (
        x.double() for x in reference.attention(q8, k8, v8, p_mode=p_mode, block_n=64, **_kw(128, 3))
    )
    assert beyond_one_ulp_in_few_rows(got, ref) and not torch.isnan(got).any()
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))


@pytest.mark.parametrize("d_qk,d_v,p_mode", [(64, 64, "lean"), (256, 128, "exact"), (256, 64, "lean")])
def test_other_head_dims_the_generator_accepts(d_qk, d_v, p_mode):
    """Head dims no variant uses yet (d_qk 64 / 256, d_v 64) are built and correct too."""
    rng = np.random.default_rng()
    q8, k8, v8 = fp8_inputs(rng, 1, 90, 130, 2, 1, d_qk, d_v)
    asm = generate_with_operands(variant(d_qk, p_mode, 2, d_v), parse_abi_header(ABI_HEADER))[0]
    res, got, lse = launch(asm, q8, k8, v8, 3)
    assert not res.findings, "\n".join(map(str, res.findings))
    ref, ref_lse = (
        x.double() for x in reference.attention(q8, k8, v8, p_mode=p_mode, block_n=64, **_kw(d_qk, 3))
    )
    assert beyond_one_ulp_in_few_rows(got, ref) and not torch.isnan(got).any()
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))


def test_head_major_strides():
    """q, k, v laid out [b, h, s, d] in memory and passed as [b, s, h, d] views: the kernel follows
    the strides of the kernel arguments (stride_seq = d, stride_head = s d)."""
    rng = np.random.default_rng()
    q8, k8, v8 = (x.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
                  for x in fp8_inputs(rng, 2, 100, 130, 4, 2, 192))  # fmt: skip
    assert not q8.is_contiguous() and q8.stride()[1] == 192
    res, got, lse = launch(kernel(192, "lean")[0], q8, k8, v8, 3)
    assert not res.findings, "\n".join(map(str, res.findings))
    ref, ref_lse = (
        x.double() for x in reference.attention(q8, k8, v8, p_mode="lean", block_n=64, **_kw(192, 3))
    )
    assert beyond_one_ulp_in_few_rows(got, ref) and not torch.isnan(got).any()
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))


def test_huge_logits_take_the_clamped_path():
    """Scores of 2^20 and more in log2 units: the lean kernel runs its clamp at code 126 (skipped
    below |m| = 2^20, where it cannot act) and still matches the reference."""
    rng = np.random.default_rng()
    q8, k8, v8 = fp8_inputs(rng, 1, 64, 100, 1, 1, 128)
    scale = 2.0**16
    res, got, lse = launch(kernel(128, "lean")[0], q8, k8, v8, 3, scale=scale)
    assert not res.findings, "\n".join(map(str, res.findings))
    kw = {**_kw(128, 3), "softmax_scale": scale}
    ref, ref_lse = (x.double() for x in reference.attention(q8, k8, v8, p_mode="lean", block_n=64, **kw))
    assert ref_lse.abs().max() > 2.0**20 * math.log(2.0)
    assert (got - ref).abs().max() <= v8.float().abs().max().item() * DESCALES[2] / 16
    assert beyond_one_ulp_in_few_rows(got, ref)


def _capture_p(simulator, p_reg: str, acc0: str) -> list[tuple[int, np.ndarray]]:
    """Wrap the first P.V MFMA of each block (srcB = the P operand, D = the first O^T tile) to record
    (wave, its P registers) every time it runs."""
    first, last = (int(x) for x in p_reg[2:-1].split(":"))
    seen: list[tuple[int, np.ndarray]] = []
    for op in simulator.ops:
        if op.inst.op == MFMA and op.inst.operands[2].text == p_reg and op.inst.operands[0].text == acc0:
            run = op.fn

            def fn(w, run=run):
                seen.append((w.wave_id, w.v[first : last + 1].copy()))
                run(w)

            op.fn = fn
    return seen


@pytest.mark.parametrize("d_qk,masked", [(128, True), (192, False)])
def test_lean_p_bytes_are_the_reference_codes(d_qk, masked):
    """The e4m3 bytes fed to the P.V MFMA for one block equal zyfa.reference.lean_p_codes bit for bit.

    q and k are small integers (exact in e4m3), so S = q.k is an exact integer in both the MFMA and
    torch's matmul, and the codes must be identical, not merely close.
    """
    rng = np.random.default_rng()
    sq, sk = (64, 64) if masked else (64, 160)
    small = (rng.integers(-4, 5, (1, s, 1, d_qk)).astype(np.float32) for s in (sq, sk))
    q8, k8 = (torch.from_numpy(x).to(torch.float8_e4m3fn) for x in small)
    v8 = fp8_inputs(rng, 1, sq, sk, 1, 1, d_qk)[2]
    asm, regs = kernel(d_qk, "lean")
    simulator = sim.Simulator(asm, "k")
    seen = _capture_p(simulator, regs["p"], regs["acc0"])
    # One query tile of 64 rows; wave 0 owns rows 0..31. Where the kernel defers each block's P.V by
    # one block (Options.pipeline) it runs a first P.V on P = 0, so wave 0's second P.V is block 0.
    res, _, _ = launch(asm, q8, k8, v8, 3, simulator=simulator)
    runs = [regs for wave, regs in seen if wave == 0]  # (8 registers, 64 lanes) each
    if Options().pipelined("lean", d_qk):
        assert len(runs) >= 2 and not runs[0].any(), "the first P.V of the pipelined kernel must see P = 0"
        runs = runs[1:]
    assert not res.findings and runs, "the P.V MFMA did not run"
    p = runs[0]
    row0 = 0
    s = q8[0, row0 : row0 + 32, 0].float() @ k8[0, :64, 0].float().T
    c = torch.tensor(_kw(d_qk, 1)["softmax_scale"], dtype=torch.float32) * DESCALES[0] * DESCALES[1]
    c = c * torch.tensor(math.log2(math.e), dtype=torch.float32)
    vis = torch.arange(64)[None, :] <= torch.arange(row0, row0 + 32)[:, None] + (sk - sq)
    t = torch.where(vis, s * c, -math.inf)
    m = t.amax(dim=1)
    m_ref = torch.where(m == -math.inf, 0.0, m)
    want = reference.lean_p_codes(s, 8.0 * c, (120.0 - 8.0 * m_ref)[:, None]).masked_fill(~vis, 0)
    got = np.zeros((32, 64), dtype=np.int64)
    for lane in range(64):
        g = lane // 32
        for byte in range(32):
            blk, r = divmod(byte, 16)
            key = 32 * blk + 8 * (r // 4) + 4 * g + r % 4
            got[lane % 32, key] = (int(p[byte // 4, lane]) >> (8 * (byte % 4))) & 0xFF
    assert bool(vis.all()) != masked
    assert np.array_equal(got, want.numpy()), "kernel P codes differ from zyfa.reference.lean_p_codes"
    assert (want > 0).sum() > 32 * 8, "too few non-zero codes for a meaningful comparison"


@pytest.mark.parametrize("bug", ["waitcnt", "barrier", "nop", "swap"])
def test_seeded_bugs_are_caught(bug):
    """Dropping the LDS-DMA waits or the barrier between the two waves, shortening the MFMA hazard
    padding, or swapping the S MFMA's operands is reported by the checker or gives a wrong answer
    (seqlen 160: both loops run)."""
    asm, _ = kernel(128, "lean")
    if bug == "waitcnt":
        bad = asm.replace("s_waitcnt vmcnt(0)", "s_nop 0")
    elif bug == "barrier":
        bad = asm.replace("s_barrier", "s_nop 0")
    elif bug == "nop":
        # every MFMA-result padding one wait state short
        bad = re.sub(
            r"s_nop ([1-9]\d*)(  // hazard: checkMAI)", lambda m: f"s_nop {int(m[1]) - 1}{m[2]}", asm
        )
    else:
        line = next(ln for ln in asm.splitlines() if ln.strip().startswith(MFMA) and ", 0" in ln)
        ops = line.split("//")[0].split(MFMA)[1].split(", ")
        bad = asm.replace(line, f"  {MFMA} {ops[0].strip()}, {ops[2]}, {ops[1]}, 0")
    assert bad != asm
    rng = np.random.default_rng()
    q8, k8, v8 = fp8_inputs(rng, 1, 160, 160, 1, 1, 128)
    try:
        res, got, _ = launch(bad, q8, k8, v8, 3)
    except sim.SimError:
        return  # an operand the simulator rejects is caught too
    ref, _ = reference.attention(q8, k8, v8, p_mode="lean", block_n=64, **_kw(128, 3))
    assert res.findings or not torch.allclose(got, ref.double(), rtol=2**-7, atol=1e-3)


def _check_against_reference(
    got, lse, ref, ref_lse, truth, v8, v_descale: float = DESCALES[2], with_lse: bool = True
) -> None:
    """The kernel against its reference: one bf16 ulp but in flipped rows, max|v| / 16 in any element,
    twice the reference's float64 error, and lse within 1e-5 but in flipped rows (with_lse: the launch
    had the lse flag; else lse must stay unwritten). v_descale: the largest that scaled v8."""
    err = (got - ref).abs()
    assert beyond_one_ulp_in_few_rows(got, ref), f"{int((err > BF16_REL * ref.abs()).sum())} elements off"
    assert err.max() <= v8.float().abs().max().item() * v_descale / 16
    assert (got - truth).abs().max() <= 2 * (ref - truth).abs().max() + 1e-3
    if not with_lse:
        assert torch.isnan(lse).all(), "lse written without ZYFA_FLAG_LSE"
        return
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    fin = torch.isfinite(ref_lse)
    d = (lse[fin] - ref_lse[fin]).abs()
    moved = int((d > 1e-5 * ref_lse[fin].abs().clamp(min=1)).sum())
    assert moved <= max(1, math.ceil(FLIP_SHARE * d.numel())), f"{moved} lse rows beyond 1e-5"
    assert d.max() <= math.log1p(16 / 256)


@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv,d_qk,p_mode,tau,waves,order",
    [
        (1, 100, 170, 4, 1, 128, "lean", 0.75, 2, "forward"),  # GQA 4:1, ragged, seqlen_q < seqlen_k
        (1, 200, 150, 2, 2, 128, "exact", 0.5, 2, "reverse"),  # rows with no key (0 / +inf)
        (2, 33, 97, 4, 1, 192, "lean", 0.5, 2, "forward"),  # MQA, batch 2, d_qk 192
        (1, 200, 300, 2, 1, 192, "exact", 0.75, 2, "reverse"),  # GQA 2:1, unmasked blocks first
        (1, 130, 250, 2, 1, 128, "lean", 0.25, 1, "forward"),  # one wave per workgroup
        (1, 300, 270, 2, 1, 128, "exact", 0.75, 8, "reverse"),  # the 8-wave ping-pong
    ],
)
def test_stale_tau_matches_reference(b, sq, sk, hq, hkv, d_qk, p_mode, tau, waves, order):
    """With stale_tau the kernel keeps a row's max unless a block raises it by more than tau, as
    zyfa.reference.attention(stale_tau=tau) does: same tolerances as test_matches_reference. With these
    scores (t about 1.6 per unit of the normal) a block's max passes the previous one by less than tau
    in many rows and by more in others, so both branches run. The exact running max's reference is not
    within those tolerances, so a kernel that ignored tau would fail."""
    rng = np.random.default_rng()
    q8, k8, v8 = fp8_inputs(rng, b, sq, sk, hq, hkv, d_qk)
    asm = kernel(d_qk, p_mode, waves, stale_tau=tau)[0]
    res, got, lse = launch(asm, q8, k8, v8, 3, waves, order=order)
    assert not res.findings, "\n".join(map(str, res.findings))
    assert not torch.isnan(got).any() and not torch.isnan(lse).any(), "unwritten output rows"
    kw = {**_kw(d_qk, 3), "p_mode": p_mode, "block_n": 64}
    ref, ref_lse = (x.double() for x in reference.attention(q8, k8, v8, stale_tau=tau, **kw))
    exact_max, _ = reference.attention(q8, k8, v8, **kw)
    assert not beyond_one_ulp_in_few_rows(exact_max.double(), ref), "tau changes too little to be tested"
    truth, _ = reference.attention_dense_f64(q8, k8, v8, **_kw(d_qk, 3))
    _check_against_reference(got, lse, ref, ref_lse, truth, v8)


def _stale_codes(s: torch.Tensor, c: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The lean codes of the second block of 64 keys of unmasked rows, and whether each row kept its
    max there, by the contract: m = max t over block 0, then kept unless block 1 raises it past m + tau."""
    t = s * c
    m0 = t[:, :64].amax(dim=1)
    m1 = torch.maximum(m0, t[:, 64:128].amax(dim=1))
    kept = ~(m1 > m0 + tau)
    m = torch.where(kept, m0, m1)
    codes = reference.lean_p_codes(s[:, 64:128], 8.0 * c, (120.0 - 8.0 * m)[:, None])
    return codes, kept


@pytest.mark.parametrize("d_qk", [128, 192])
def test_stale_lean_p_bytes_are_the_reference_codes(d_qk):
    """With stale_tau 0.75 the e4m3 bytes fed to the P.V MFMA for the second key block equal the
    contract's lean codes under the kept max bit for bit (integer q and k: S is exact in both), for rows
    that kept a smaller max (codes up to 126) and rows that moved it alike."""
    tau = 0.75
    rng = np.random.default_rng()
    sq, sk = 64, 192  # rows 0..31 see every key of blocks 0 and 1
    c = torch.tensor(_kw(d_qk, 1)["softmax_scale"], dtype=torch.float32) * DESCALES[0] * DESCALES[1]
    c2 = c * torch.tensor(math.log2(math.e), dtype=torch.float32)
    for _ in range(100):  # fresh draws until some rows keep a passed max and some move it (rule covered)
        small = (rng.integers(-4, 5, (1, s, 1, d_qk)).astype(np.float32) for s in (sq, sk))
        q8, k8 = (torch.from_numpy(x).to(torch.float8_e4m3fn) for x in small)
        s = q8[0, :32, 0].float() @ k8[0, :128, 0].float().T
        want, kept = _stale_codes(s, c2, tau)
        if bool((kept & (want > 120).any(dim=1)).any()) and bool((~kept).any()):
            break
    v8 = fp8_inputs(rng, 1, sq, sk, 1, 1, d_qk)[2]
    asm, regs = kernel(d_qk, "lean", stale_tau=tau)
    simulator = sim.Simulator(asm, "k")
    seen = _capture_p(simulator, regs["p"], regs["acc0"])
    res, _, _ = launch(asm, q8, k8, v8, 3, simulator=simulator)
    runs = [regs for wave, regs in seen if wave == 0]
    if Options().pipelined("lean", d_qk):
        runs = runs[1:]  # the pipelined kernel's first P.V runs on P = 0
    assert not res.findings and len(runs) >= 2, "the P.V MFMA did not run for two blocks"
    got = np.zeros((32, 64), dtype=np.int64)
    for lane in range(64):
        for byte in range(32):
            blk, r = divmod(byte, 16)
            key = 32 * blk + 8 * (r // 4) + 4 * (lane // 32) + r % 4
            got[lane % 32, key] = (int(runs[1][byte // 4, lane]) >> (8 * (byte % 4))) & 0xFF
    assert np.array_equal(got, want.numpy()), "kernel P codes differ from the contract's stale lean codes"
    above = (want > 120).any(dim=1)  # P above 2^8: the block's max passed the kept one
    assert bool((kept & above).any()) and bool((~kept).any()), "the data exercised too little of the rule"
