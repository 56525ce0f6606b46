"""AITER's gfx950 BF16 attention kernels (fmha_v3_fwd, d=128 and d=192/128, causal and not) loaded
from their shipped code objects and run in the simulator with AITER's own kernel arguments
(zyfa_asmgen.sim.aiter), against the float64 reference.

Inputs come from the pinned wheel (aiter_inputs.py); without it the tests skip with the reason.
Tolerance: FA3's rule as for our own kernels (error at most twice that of a numpy emulation of bf16
P and output, plus 1e-3); LSE (natural log) to 1e-4. K and V are mapped unpadded, as a GPU caller
passes them. The waves of a workgroup run interleaved (one instruction each in turn), the order
nearest the hardware's: these kernels rely on it (docs/simulator.md, "AITER's kernels in the
simulator").

The checker's findings on these kernels are each resolved in docs/simulator.md; the ones that stay
are AITER's deviations from LLVM's gfx950 wait states and two patterns protected only by timing.
The tests allow exactly those and nothing else.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from zyfa_asmgen.sim import ops_memory
from zyfa_asmgen.sim.aiter import AiterKernel, AiterRun, run_aiter, run_aiter_group
from zyfa_asmgen.sim.codeobject import load_code_object
from zyfa_asmgen.sim.errors import MemoryFault

from .aiter_inputs import V3_FIELDS, V3_KERNARG_BYTES
from .test_kernels import attention_reference

pytest.importorskip("tinygrad", reason="the decoder's CDNA4 tables: pip install 'zyfa-asmgen[decode]'")

# AITER's hand-written code keeps fewer wait states than LLVM's GCNHazardRecognizer asks for at
# these three rules (one short each); the rules are LLVM's, so they stay and these are listed.
LLVM_WAIT_STATE_DEVIATIONS = {
    "hazard:checkReadM0Hazards",  # s_mov_b32 m0 then buffer_load ... lds (1 asked, 0 kept)
    "hazard:checkPermlaneHazards:valu-writes-vgpr",  # v_permlane32_swap then v_permlane16_swap (2, 1)
    "hazard:checkVALUHazards:valu-writes-sgpr-valu-reads",  # v_cmp_*_e64 s[..] then v_cndmask (2, 1)
}
# Protected by timing only: the next tile's LDS-DMA lands on bytes another wave reads or writes
# with no s_barrier between (causal kernels), and d=192's PV MFMA reads ds_read_b64_tr_b16 results about
# 100 instructions after issue with no lgkmcnt wait covering them.
TIMING_PROTECTED = (
    re.compile(
        r"^LDS-DMA of line \d+ landing writes LDS byte \d+ (read|written) by wave \d+ "
        r"(\(line \d+\) )?with no s_barrier"
    ),
    re.compile(
        r"^reads a\d+ while 'ds_read_b64_tr_b16 a\[\d+:\d+\], v\d+ offset:\d+' \(line \d+\) is outstanding"
    ),
)


def _documented(f) -> bool:
    if f.kind in LLVM_WAIT_STATE_DEVIATIONS:
        return True
    kinds = {"lds_race": TIMING_PROTECTED[0], "waitcnt": TIMING_PROTECTED[1]}
    return f.kind in kinds and kinds[f.kind].match(f.message) is not None


def _path(aiter: dict, d: int, causal: bool):
    return aiter[AiterKernel(d, causal).file_name]


def check(r: AiterRun, causal: bool) -> None:
    unexpected = [str(f) for f in r.res.findings if not _documented(f)]
    assert not unexpected, "\n".join(unexpected)
    ref, lref, emul = attention_reference(r.q, r.k, r.v, causal=causal)
    got = r.out.astype(np.float64)
    assert not np.isnan(got).any(), "unwritten output rows"
    err = np.abs(got - ref).max()
    assert err <= 2 * np.abs(emul - ref).max() + 1e-3, err
    np.testing.assert_allclose(r.lse.astype(np.float64), lref, rtol=0, atol=1e-4)


def test_kernarg_layout_is_the_metadata(aiter) -> None:
    """Our packing of fmha_fwd_v3_args lands every field on a slot the kernel's metadata names."""
    for name in ("fwd_hd128_bf16.co", "fwd_hd128_bf16_causal.co", "fwd_hd192_hd128_bf16_causal.co"):
        meta = load_code_object(aiter[name]).kernel().metadata
        assert meta[".kernarg_segment_size"] == V3_KERNARG_BYTES
        named = [a[".offset"] for a in meta[".args"] if a.get(".name") != "pad"]
        assert named == [16 * i for i in range(len(V3_FIELDS))]


CASES = [  # d_qk, causal, seqlen, hq, hkv: every case has 2+ workgroups
    (128, False, 256, 2, 2),
    (128, False, 300, 2, 2),  # ragged: a partial query and key tile
    (128, True, 512, 2, 2),  # a causal workgroup runs two query tiles
    (128, True, 200, 2, 2),
    (192, False, 200, 2, 2),
    (192, True, 384, 1, 1),  # three tiles: pairs (0, 2) and the middle tile alone
    (192, True, 256, 4, 1),  # GQA 4:1
]


@pytest.mark.parametrize(("d", "causal", "s", "hq", "hkv"), CASES, ids=lambda v: str(v))
def test_aiter_fmha_fwd(aiter, d, causal, s, hq, hkv) -> None:
    r = run_aiter(_path(aiter, d, causal), s, hq, np.random.default_rng(), heads_kv=hkv)
    assert len(r.res.workgroups) >= 2 and r.res.waves == len(r.res.workgroups) * r.kernel.threads // 64
    check(r, causal)


def test_range_check_without_soffset_breaks_aiter(aiter, monkeypatch) -> None:
    """The evidence for counting soffset in the raw-buffer range check: without it the d=192/128
    causal kernel's K prefetch past the last tile leaves the (unpadded) K tensor."""
    monkeypatch.setattr(ops_memory, "RANGE_CHECK_SOFFSET", False)
    with pytest.raises(MemoryFault, match="buffer_load_dwordx4 .* lds"):
        run_aiter(_path(aiter, 192, True), 256, 1, np.random.default_rng())


def test_forward_wave_order_exposes_the_two_tile_race(aiter) -> None:
    """Run wave by wave to each barrier, the causal two-tile kernel gives wrong rows: the next
    tile's LDS-DMA of one wave lands before another wave's reads of the current tile."""
    r = run_aiter(_path(aiter, 128, True), 512, 1, np.random.default_rng(), wave_order="forward")
    ref, _, _ = attention_reference(r.q, r.k, r.v, causal=True)
    assert np.abs(r.out.astype(np.float64) - ref).max() > 0.1
    assert any(f.kind == "lds_race" for f in r.res.findings)


GROUP_CASES = [  # d_qk, causal, sequence lengths, hq, hkv: variable-length batches, ragged tails
    (128, True, [512, 200], 2, 1),
    (192, False, [200, 128], 2, 1),
]


@pytest.mark.parametrize(("d", "causal", "lens", "hq", "hkv"), GROUP_CASES, ids=lambda v: str(v))
def test_aiter_fmha_fwd_group(aiter, d, causal, lens, hq, hkv) -> None:
    """The `_group` (variable-length) kernels: each packed sequence against its own reference."""
    r = run_aiter_group(
        aiter[AiterKernel(d, causal, True).file_name], lens, hq, np.random.default_rng(), heads_kv=hkv
    )
    unexpected = [str(f) for f in r.res.findings if not _documented(f)]
    assert not unexpected, "\n".join(unexpected)
    assert not np.isnan(r.out.astype(np.float64)).any(), "unwritten output rows"
    start = 0
    for n in lens:
        rows = slice(start, start + n)
        ref, lref, emul = attention_reference(*(x[None, rows] for x in (r.q, r.k, r.v)), causal=causal)
        err = np.abs(r.out[rows].astype(np.float64) - ref[0]).max()
        assert err <= 2 * np.abs(emul - ref).max() + 1e-3, (n, err)
        np.testing.assert_allclose(r.lse[:, rows].astype(np.float64), lref[0], rtol=0, atol=1e-4)
        start += n
