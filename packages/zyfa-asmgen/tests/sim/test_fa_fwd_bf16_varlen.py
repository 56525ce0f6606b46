"""The packed builds (layout "varlen" and "paged") of kernels/gfx950/fa_fwd_bf16.hip in the simulator: both
kernel parameters (zyfa_fwd_args, then zyfa_varlen_args at the ABI header's offset), random packed batches.

Each sequence is checked on its own against the float64 reference of test_kernels.py with the dense tests'
rule (FA3's: error at most twice that of a numpy emulation of the contract's bf16 rounding points, plus
1e-3), its LSE to 1e-4 relative, causal bottom-right per sequence; a sequence with no keys writes 0 and
lse +inf; q / out rows after the last sequence stay unwritten (NaN); the checker finds no hazard. Lengths
cover 1, 0 (no query or no key), a sequence longer than a query tile (two tiles, the second ragged) and
seqused_k; heads GQA 4:1 and MQA; both head shapes; paged K / V with page sizes 16, 64, 128 and 256
(pages in random order, spare pages no sequence uses). zyfa-torch's tests hold the same kernels to
zyfa.reference from above (zyfa-asmgen never imports zyfa).
"""

from __future__ import annotations

import numpy as np
import pytest

from zyfa_asmgen.abi import parse_abi_header
from zyfa_asmgen.sim import Simulator
from zyfa_asmgen.sim.cli import HIP_LAYOUT_DEFINES, TILE_ORDER_DEFINES, load_variants, workgroup_of
from zyfa_asmgen.sim.varlen import PackedBatch, launch_packed, make_packed, make_paged, packed_grid

from .conftest import REPO
from .test_kernels import attention_reference

SRC = "kernels/gfx950/fa_fwd_bf16.hip"
VARIANTS_BZL = REPO / "kernels" / "variants.bzl"
PACKED = (
    [v for v in load_variants(VARIANTS_BZL) if v["kind"] == "hip" and v.get("layout") in ("varlen", "paged")]
    if VARIANTS_BZL.is_file()
    else []
)


def _defines(v: dict) -> dict:
    return {"ZYFA_KERNEL_NAME": v["name"], "ZYFA_DTYPE_E4M3": 0, "ZYFA_D_QK": v["d_qk"], "ZYFA_D_V": v["d_v"],
            "ZYFA_TILE_M": v["tile_m"], "ZYFA_TILE_N": v["tile_n"], "ZYFA_THREADS": v["threads"],
            "ZYFA_SMEM_BYTES": v["smem_bytes"], "ZYFA_LEAN_P": 0,
            "ZYFA_TILE_DESCENDING": TILE_ORDER_DEFINES.get(v.get("tile_order"), 0),
            "ZYFA_STALE_TAU": f"{v['stale_tau']!r}f",
            "ZYFA_VARLEN": HIP_LAYOUT_DEFINES[v["layout"]]}  # fmt: skip


def _variant(d_qk: int, layout: str = "varlen") -> dict:
    v = next((x for x in PACKED if x["d_qk"] == d_qk and x["layout"] == layout), None)
    if v is None:
        pytest.skip(f"no {layout} d_qk={d_qk} hip variant in kernels/variants.bzl")
    return v


@pytest.fixture(scope="module")
def abi():
    return parse_abi_header(REPO / "kernels/abi/zyfa_abi.h")


def check_packed(res, pb: PackedBatch, pad_q: int = 0) -> None:
    """Every sequence against the reference; rows past the last sequence unwritten; no hazard."""
    assert not res.findings, "\n".join(str(f) for f in res.findings)
    cq = pb.cu_seqlens_q
    for b in range(pb.batch):
        q0, q1 = int(cq[b]), int(cq[b + 1])
        keys, values = pb.keys(b)  # the ABI's rows of the sequence, with its clamps
        nk = len(keys)
        if q1 == q0:
            continue
        got = pb.out[q0:q1].astype(np.float64)[None]
        lg = pb.lse[:, q0:q1].astype(np.float64)[None]
        assert not np.isnan(got).any() and not np.isnan(lg).any(), f"sequence {b}: unwritten rows"
        if nk == 0:  # no key: every row writes 0 and lse +inf
            assert (got == 0).all() and np.isposinf(lg).all(), f"sequence {b}"
            continue
        ref, lref, emul = attention_reference(pb.q[None, q0:q1], keys[None], values[None])
        err = np.abs(got - ref).max()
        assert err <= 2 * np.abs(emul - ref).max() + 1e-3, (b, err)
        same_inf = np.isinf(lref) & (lg == lref)
        with np.errstate(invalid="ignore"):
            close = np.abs(lg - lref) <= 1e-4 * np.maximum(1.0, np.abs(lref))
        assert (same_inf | close).all(), f"sequence {b}: lse"
    if pad_q:
        assert np.isnan(pb.out[-pad_q:].astype(np.float32)).all(), "rows outside every sequence were written"
        assert np.isnan(pb.lse[:, -pad_q:]).all()


def _run(hip_src, abi, v, lens_q, lens_k, hq, hkv, seqused_k=None, pad_q=0, rng=None, **launch):
    pb = make_packed(v, lens_q, lens_k, hq, hkv, rng or np.random.default_rng(), seqused_k, pad_q)
    res = launch_packed(Simulator(hip_src(SRC, **_defines(v)), v["name"]), v, abi, pb, **launch)
    check_packed(res, pb, pad_q)
    return res, pb


@pytest.mark.parametrize("d_qk", [128, 192])
def test_ragged_batch_gqa(hip_src, abi, d_qk) -> None:
    """GQA 4:1 over four sequences: one query over one key, an empty sequence (no query), a sequence whose
    queries see no key (0 keys), and a chunked-prefill one (40 queries over 100 keys: bottom-right causal);
    two q rows after the last sequence belong to none."""
    _run(hip_src, abi, _variant(d_qk), [1, 0, 3, 40], [1, 7, 0, 100], 4, 1, pad_q=2)


@pytest.mark.parametrize("d_qk", [128, 192])
def test_sequence_longer_than_a_tile(hip_src, abi, d_qk) -> None:
    """A 260-query sequence over 300 keys (two query tiles, the second 4 rows long over five key blocks)
    beside a 5-query one: the grid has two tiles per sequence, and the short sequence's second-tile
    workgroup exits at once."""
    res, pb = _run(hip_src, abi, _variant(d_qk), [5, 260], [70, 300], 1, 1)
    assert packed_grid(_variant(d_qk), pb) == (2, 1, 2)
    assert len(res.workgroups) == 4


def test_seqused_k_and_mqa_reverse_wave_order(hip_src, abi) -> None:
    """seqused_k (each sequence uses fewer keys than its cu_seqlens_k range; the keys past it are scaled
    by 100, so reading them is a wrong answer), MQA (three query heads, one KV head), the simulator
    running each workgroup's waves in reverse order."""
    v = _variant(128)
    rng = np.random.default_rng()
    pb = make_packed(v, [33, 2, 17], [80, 64, 20], 3, 1, rng, seqused_k=[50, 64, 17])
    for b, used in enumerate(pb.seqused_k):
        k0, k1 = int(pb.cu_seqlens_k[b]), int(pb.cu_seqlens_k[b + 1])
        pb.k[k0 + int(used) : k1] = (pb.k[k0 + int(used) : k1].astype(np.float32) * 100).astype(pb.k.dtype)
    res = launch_packed(Simulator(hip_src(SRC, **_defines(v)), v["name"]), v, abi, pb, wave_order="reverse")
    check_packed(res, pb)


def test_global_tile_order_maps_each_workgroup_once(hip_src, abi) -> None:
    """Under tile_order "global_descending" the launch's workgroups in dispatch order compute the last query
    tile of every (head, sequence) first: each (tile, head, sequence) runs once. Launching only the
    workgroups of tile 1 leaves the rows of tile 0 unwritten and computes those of tile 1."""
    v = _variant(128)
    pb = make_packed(v, [300, 260], [300, 260], 2, 1, np.random.default_rng())
    grid = packed_grid(v, pb)
    wgs = [workgroup_of(1, h, b, grid, v) for b in range(2) for h in range(2)]
    res = launch_packed(Simulator(hip_src(SRC, **_defines(v)), v["name"]), v, abi, pb, workgroups=wgs)
    assert not res.findings
    for b in range(2):
        q0, q1 = int(pb.cu_seqlens_q[b]), int(pb.cu_seqlens_q[b + 1])
        assert np.isnan(pb.out[q0 : q0 + 256].astype(np.float32)).all()
        assert not np.isnan(pb.out[q0 + 256 : q1].astype(np.float32)).any()


def test_counts_past_the_tensors_are_clamped(hip_src, abi) -> None:
    """cu_seqlens_k claiming 500 keys for the last sequence where k has 20 rows after its start: the kernel
    clamps the count to the rows of k (zyfa_abi.h), reads nothing past them and attends over those 20."""
    v = _variant(128)
    pb = make_packed(v, [8, 30], [10, 20], 2, 1, np.random.default_rng())
    pb.cu_seqlens_k[-1] = 510
    res = launch_packed(Simulator(hip_src(SRC, **_defines(v)), v["name"]), v, abi, pb)
    check_packed(res, pb)


@pytest.mark.parametrize(("d_qk", "page_size"), [(128, 16), (128, 64), (192, 128), (128, 256)])
def test_paged_cache(hip_src, abi, d_qk, page_size) -> None:
    """K / V through the page table (the paged build, cu_seqlens_k NULL, seqused_k the counts): GQA 4:1, a
    one-key sequence, an empty one, a chunked-prefill one (40 queries over 150 keys, crossing pages and key
    blocks), the pages in random order with spare pages between them."""
    v = _variant(d_qk, "paged")
    pb = make_paged(v, [1, 0, 40], [1, 9, 150], 4, 1, page_size, np.random.default_rng())
    res = launch_packed(Simulator(hip_src(SRC, **_defines(v)), v["name"]), v, abi, pb)
    check_packed(res, pb)


def test_paged_long_sequence_and_bad_page_index(hip_src, abi) -> None:
    """A 260-query sequence over 300 paged keys (two query tiles) beside a short one, page size 16; then the
    same batch with one table entry out of range, which the kernel clamps to the last page (zyfa_abi.h):
    the answer is the reference's over the clamped pages, and nothing outside the cache is read."""
    v = _variant(128, "paged")
    rng = np.random.default_rng()
    sim = Simulator(hip_src(SRC, **_defines(v)), v["name"])
    pb = make_paged(v, [260, 3], [300, 20], 1, 1, 16, rng)
    check_packed(launch_packed(sim, v, abi, pb), pb)
    pb = make_paged(v, [260, 3], [300, 20], 1, 1, 16, rng)
    pb.page_table[0, 5] = 10_000
    check_packed(launch_packed(sim, v, abi, pb), pb)
