"""AITER's gfx950 BF16 attention kernels (fmha_v3_fwd, d=128) loaded from their shipped code objects
and run in the simulator with AITER's own kernel arguments, against the float64 reference.

Inputs come from the pinned wheel (aiter_inputs.py); without it the tests skip with the reason.
Launch as AITER's host code launches (codegen.py in the wheel): 512 threads, grid
(ceil(s / 256) / (2 if causal), heads, batch). Tolerance: FA3's rule as for our own kernels (error
at most twice that of a numpy emulation of bf16 P and output, plus 1e-3); LSE (natural log) to 1e-4.

Two things the harness does that a GPU caller does not, each for a reason stated in
docs/simulator.md ("AITER's kernels in the simulator"):
  * K and V are followed by one zero tile of rows: the kernels load the tile after the last one
    through a buffer resource whose range check, as the simulator models gfx9 (soffset excluded),
    does not stop them; and
  * the checker's findings on these kernels are not yet resolved (each is a false positive of a
    rule or a latent hazard in AITER: the table there lists them); these tests hold the numerics
    and allow only the finding kinds that table lists.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from zyfa_asmgen.sim import GlobalMemory, Simulator
from zyfa_asmgen.sim.codeobject import load_code_object

from .aiter_inputs import V3_FIELDS, V3_KERNARG_BYTES, aiter_code_objects, fmha_fwd_v3_kernarg
from .test_kernels import BF16, attention_reference

pytest.importorskip("tinygrad", reason="the decoder's CDNA4 tables: pip install 'zyfa-asmgen[decode]'")

D = 128
TS_QO, TS_KV, THREADS = 256, 64, 512  # the d=128 kernels' tiles and block (AITER's codegen.py)
# The finding kinds of the open table in docs/simulator.md.
OPEN_FINDINGS = {
    "hazard:checkReadM0Hazards",  # SALU writes M0, then buffer_load ... lds reads it at once
    "hazard:checkPermlaneHazards:valu-writes-vgpr",  # v_permlane16_swap right after another
    "hazard:checkVALUHazards:valu-writes-sgpr-valu-reads",  # v_cmp -> SGPR mask -> v_cndmask (causal)
}
# ...and, of the waitcnt findings, only an LDS read overwriting the registers of an older, unwaited
# LDS read (LDS returns in order).
LDS_WAW = re.compile(r"^ds_read\w* .*overwrites v\d+ while 'ds_read\w* ")


def _open(f) -> bool:
    return f.kind in OPEN_FINDINGS or (
        f.kind == "waitcnt" and LDS_WAW.match(f"{f.text} {f.message}") is not None
    )


@pytest.fixture(scope="module")
def aiter() -> dict:
    cos, reason = aiter_code_objects()
    if not cos:
        pytest.skip(reason)
    return cos


def _map_padded(mem: GlobalMemory, x: np.ndarray, pad_rows: int) -> int:
    """Map x (B, S, H, D bf16) followed by pad_rows zero rows of H*D elements."""
    flat = x.view(np.uint16).reshape(-1)
    buf = np.zeros(flat.size + pad_rows * x.shape[2] * x.shape[3], dtype=np.uint16)
    buf[: flat.size] = flat
    return mem.map(buf)


def run_aiter(co_path, causal: bool, s: int, h: int, rng: np.random.Generator):
    """Run one d=128 fmha_v3_fwd kernel on batch 1, `h` heads (no GQA), seqlen s; return what check needs."""
    co = load_code_object(co_path)
    (name, kernel), = co.kernels.items()  # fmt: skip
    q, k, v = (rng.standard_normal((1, s, h, D)).astype(BF16) for _ in range(3))
    out = np.full((1, s, h, D), np.nan, dtype=BF16)
    lse = np.full((1, h, s), np.nan, dtype=np.float32)
    mem = GlobalMemory()
    ptr_o, ptr_q, ptr_lse = mem.map(out.view(np.uint16)), mem.map(q.view(np.uint16)), mem.map(lse)
    ptr_k, ptr_v = (_map_padded(mem, x, TS_KV) for x in (k, v))
    row = h * D * 2  # bytes between consecutive rows of one head (BSHD)
    per_tensor = (("Seqs", row), ("Hs", D * 2), ("Bs", s * row))  # row, head and batch strides in bytes
    strides = {f"s_{t}{key}": val for t in ("", "k_", "v_", "o_") for key, val in per_tensor}
    args = fmha_fwd_v3_kernarg({
        "ptr_o": ptr_o, "ptr_q": ptr_q, "ptr_k": ptr_k, "ptr_v": ptr_v, "ptr_lse": ptr_lse,
        "scalar": 1.0 / np.sqrt(D), "s_seq_len": s, "s_Ts": TS_QO * row, "s_gqa": 1, "s_opt": 5, "s_lse": 1,
        "s_kv_seq_len": s, "s_qk_head_dim": D, "s_v_head_dim": D, "s_q_head_num": h, "s_lse_Hs": s * 4,
        **strides,
    })  # fmt: skip
    tiles, per_group = (s + TS_QO - 1) // TS_QO, 2 if causal else 1  # causal: a workgroup runs two tiles
    grid = ((tiles + per_group - 1) // per_group, h, 1)
    res = Simulator(co.program, name).launch(grid, (THREADS, 1, 1), args, mem)
    return kernel, res, q, k, v, out, lse


def check(res, q, k, v, out, lse, causal: bool) -> None:
    unexpected = [str(f) for f in res.findings if not _open(f)]
    assert not unexpected, "\n".join(unexpected)
    ref, lref, emul = attention_reference(q, k, v, causal=causal)
    got = out.astype(np.float64)
    assert not np.isnan(got).any(), "unwritten output rows"
    err = np.abs(got - ref).max()
    assert err <= 2 * np.abs(emul - ref).max() + 1e-3, err
    np.testing.assert_allclose(lse.astype(np.float64), lref, rtol=0, atol=1e-4)


def test_kernarg_layout_is_the_metadata(aiter) -> None:
    """Our packing of fmha_fwd_v3_args lands every field on a slot the kernel's metadata names."""
    for name in ("fwd_hd128_bf16.co", "fwd_hd128_bf16_causal.co"):
        meta = load_code_object(aiter[name]).kernel().metadata
        assert meta[".kernarg_segment_size"] == V3_KERNARG_BYTES
        named = [a[".offset"] for a in meta[".args"] if a.get(".name") != "pad"]
        assert named == [16 * i for i in range(len(V3_FIELDS))]


# A causal workgroup runs two query tiles; with the simulator's forward wave order (each wave runs
# until it blocks) rows 192-255 come out wrong and the checker reports LDS races between the next
# tile's LDS-DMA and the transposing reads; reverse order gives the right answer. Open (see docs).
RACY = pytest.mark.xfail(strict=True, reason="cross-wave LDS race in the simulator's schedule, open")


@pytest.mark.parametrize(
    ("causal", "s", "h"),
    [(False, 256, 2), (False, 512, 1), (True, 256, 2), pytest.param(True, 512, 2, marks=RACY)],
    ids=["noncausal-s256-h2", "noncausal-s512", "causal-s256-h2", "causal-s512-h2"],
)
def test_aiter_fmha_fwd_hd128(aiter, causal, s, h) -> None:
    name = f"fwd_hd128_bf16{'_causal' if causal else ''}.co"
    kernel, res, q, k, v, out, lse = run_aiter(aiter[name], causal, s, h, np.random.default_rng())
    assert len(res.workgroups) >= 2 and res.waves == len(res.workgroups) * THREADS // 64
    check(res, q, k, v, out, lse, causal)
