"""mfma_fp8's packed builds (layout "varlen" and "paged" rows of kernels/variants.bzl) in zyfa_asmgen.sim, on
random packed FP8 batches, against zyfa.reference.attention_varlen (the contract's numerics per sequence,
block_n 64, the row's p_mode and stale_tau) and its float64 truth attention_varlen_dense_f64.

Tolerances are test_mfma_fp8_sim's, derived there: one bf16 ulp except in the few rows a flipped P code moves,
max|v| v_descale / 16 in any element, twice the reference's own float64 error plus 1e-3, lse within 1e-5
except in flipped rows. Both kernel parameters are packed at the ABI header's offsets (zyfa_varlen_args at
192); the grid is (ceil(max_seqlen_q / 64), heads_q, batch). Outputs start as NaN: a sequence's rows must all
be written, rows after the last sequence must stay NaN; the hazard checker must find nothing. Lengths cover
one query over one key, an empty sequence, queries with no key, queries before their first visible key
(more queries than keys), a sequence of two query tiles (the second ragged) and seqused_k; paged K / V on
pages of 16, 24, 64 and 256 keys in random order, and a table entry past the cache (clamped).
"""

from __future__ import annotations

from functools import cache

import ml_dtypes
import numpy as np
import pytest
from asmgen_testlib import ABI_HEADER, read_variants
from test_mfma_fp8_sim import DESCALES, _check_against_reference

from zyfa_asmgen.abi import parse_abi_header
from zyfa_asmgen.generators import generate
from zyfa_asmgen.variant import Variant

torch = pytest.importorskip("torch")
reference = pytest.importorskip("zyfa.reference")
sim = pytest.importorskip("zyfa_asmgen.sim")
from zyfa_asmgen.sim.varlen import PackedBatch, launch_packed, make_packed, make_paged, packed_grid  # noqa: E402

E4M3 = ml_dtypes.float8_e4m3fn
PACKED = [v for v in read_variants() if v["kind"] == "asmgen" and v.get("layout") in ("varlen", "paged")]


def _entry(d_qk: int, p_mode: str, layout: str = "varlen") -> dict:
    v = next((x for x in PACKED if (x["d_qk"], x["p_mode"], x["layout"]) == (d_qk, p_mode, layout)), None)
    if v is None:
        pytest.skip(f"no {layout} mfma_fp8 row with d_qk {d_qk}, p_mode {p_mode} in kernels/variants.bzl")
    return v


@cache
def _abi():
    return parse_abi_header(ABI_HEADER)


@cache
def _simulator(name: str):
    entry = next(v for v in PACKED if v["name"] == name)
    return sim.Simulator(generate("mfma_fp8", Variant.from_dict(entry), _abi()), name)


def fp8_batch(entry, lens_q, lens_k, hq, hkv, rng, seqused_k=None, pad_q=0, table=False, page_size=0):
    """make_packed's batch (make_paged's with a page size) with q, k, v as e4m3 of 3 N(0, 1) (as
    test_mfma_fp8_sim's inputs), per-tensor descales, or with `table` random descales per (sequence, kv
    head) in [1/8, 1)."""
    if page_size:
        pb = make_paged(entry, lens_q, lens_k, hq, hkv, page_size, rng)
    else:
        pb = make_packed(entry, lens_q, lens_k, hq, hkv, rng, seqused_k, pad_q)
    pb.q, pb.k, pb.v = ((x.astype(np.float32) * 3).astype(E4M3) for x in (pb.q, pb.k, pb.v))
    pb.descales = DESCALES
    if table:
        pb.descale_table = rng.uniform(0.125, 1.0, (3, pb.batch, hkv)).astype(np.float32)
    return pb


def _torch(x: np.ndarray):
    return torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn)


def reference_of(entry: dict, pb: PackedBatch):
    """(ref out, ref lse, float64 truth) of the batch from zyfa.reference, as torch float64."""
    if pb.descale_table is None:
        descales = dict(zip(("q_descale", "k_descale", "v_descale"), pb.descales, strict=True))
    else:
        descales = {n: torch.from_numpy(pb.descale_table[i]) for i, n in enumerate(("q", "k", "v"))}
        descales = {f"{n}_descale": t for n, t in descales.items()}
    cu_k = None if pb.cu_seqlens_k is None else torch.from_numpy(pb.cu_seqlens_k)
    index = (torch.from_numpy(pb.cu_seqlens_q), cu_k)
    table = None if pb.page_table is None else torch.from_numpy(pb.page_table)
    kw = dict(seqused_k=None if pb.seqused_k is None else torch.from_numpy(pb.seqused_k), page_table=table,
              softmax_scale=pb.scale, causal=True, **descales)  # fmt: skip
    qkv = (_torch(pb.q), _torch(pb.k), _torch(pb.v))
    ref, ref_lse = reference.attention_varlen(
        *qkv, *index, p_mode=entry["p_mode"], block_n=64, stale_tau=entry["stale_tau"], **kw
    )
    truth, _ = reference.attention_varlen_dense_f64(*qkv, *index, **kw)
    return ref.double(), ref_lse.double(), truth


def check(entry: dict, pb: PackedBatch, res, pad_q: int = 0) -> None:
    """The sequences' rows against the reference; rows after the last sequence unwritten; no hazard."""
    assert not res.findings, "\n".join(map(str, res.findings))
    owned = int(pb.cu_seqlens_q[-1])
    got = torch.from_numpy(pb.out.astype(np.float64))
    lse = torch.from_numpy(pb.lse.astype(np.float64))
    assert not torch.isnan(got[:owned]).any() and not torch.isnan(lse[:, :owned]).any(), "unwritten rows"
    assert torch.isnan(got[owned:]).all() and torch.isnan(lse[:, owned:]).all(), "rows of no sequence written"
    ref, ref_lse, truth = reference_of(entry, pb)
    vd = DESCALES[2] if pb.descale_table is None else float(pb.descale_table[2].max())
    rows = slice(0, owned)
    _check_against_reference(
        got[rows], lse[:, rows], ref[rows], ref_lse[:, rows], truth[rows], _torch(pb.v), vd
    )


def run(entry: dict, pb: PackedBatch, **launch):
    res = launch_packed(_simulator(entry["name"]), entry, _abi(), pb, **launch)
    return res


@pytest.mark.parametrize(
    "d_qk,p_mode,hq,hkv,table,order",
    [
        (128, "lean", 8, 2, False, "forward"),  # GQA 4:1, per-tensor descales
        (192, "exact", 2, 1, True, "reverse"),  # MQA, descales per (sequence, kv head)
        (128, "exact", 4, 1, True, "forward"),  # GQA 4:1 = MQA with four query heads
        (192, "lean", 8, 2, True, "forward"),
    ],
)
def test_ragged_batch(d_qk, p_mode, hq, hkv, table, order) -> None:
    """Five sequences: 1 query over 1 key, no query, 5 queries over no key (0 and +inf), 70 queries over 90
    keys (two query tiles, bottom-right causal), 20 queries over 12 keys (the first 8 rows see no key);
    three q rows after the last sequence belong to none."""
    entry = _entry(d_qk, p_mode)
    rng = np.random.default_rng()
    pb = fp8_batch(entry, [1, 0, 5, 70, 20], [1, 3, 0, 90, 12], hq, hkv, rng, pad_q=3, table=table)
    assert packed_grid(entry, pb) == (2, hq, 5)
    check(entry, pb, run(entry, pb, wave_order=order), pad_q=3)


@pytest.mark.parametrize("d_qk,p_mode", [(128, "lean"), (192, "exact")])
def test_seqused_k(d_qk, p_mode) -> None:
    """seqused_k: each sequence uses fewer keys than its cu_seqlens_k range; the keys past them are scaled by
    16 (clipped to e4m3's 448), so reading one changes the answer."""
    entry = _entry(d_qk, p_mode)
    rng = np.random.default_rng()
    pb = fp8_batch(entry, [33, 2, 17], [80, 64, 20], 2, 1, rng, seqused_k=[50, 0, 17], table=True)
    for b, used in enumerate(pb.seqused_k):
        k0, k1 = int(pb.cu_seqlens_k[b]), int(pb.cu_seqlens_k[b + 1])
        unused = pb.k[k0 + int(used) : k1].astype(np.float32)
        pb.k[k0 + int(used) : k1] = np.clip(unused * 16, -448, 448).astype(E4M3)
    check(entry, pb, run(entry, pb))


def test_counts_past_the_tensors_are_clamped() -> None:
    """cu_seqlens_k claiming 500 keys for the last sequence where k has 20 rows after its start, and
    cu_seqlens_q's last entry past q: the kernel clamps both counts to the tensors (zyfa_abi.h), reads and
    writes nothing past them and attends over those rows (the reference: the batch before the change)."""
    entry = _entry(128, "lean")
    pb = fp8_batch(entry, [8, 30], [10, 20], 2, 1, np.random.default_rng())
    ref = reference_of(entry, pb)
    pb.cu_seqlens_k[-1] = 510
    pb.cu_seqlens_q[-1] = 1000
    res = run(entry, pb)
    assert not res.findings, "\n".join(map(str, res.findings))
    pb.cu_seqlens_q[-1], pb.cu_seqlens_k[-1] = 38, 30
    got = torch.from_numpy(pb.out.astype(np.float64))
    lse = torch.from_numpy(pb.lse.astype(np.float64))
    _check_against_reference(got, lse, *ref, _torch(pb.v))


def test_tiles_past_a_sequence_write_nothing() -> None:
    """Only the workgroups of query tile 1 (rows 64..) of every (head, sequence): the 70-query sequence writes
    rows 64..69 and nothing else; the 5-query sequence's tile-1 workgroup exits at once."""
    from zyfa_asmgen.sim.cli import workgroup_of

    entry = _entry(192, "lean")
    pb = fp8_batch(entry, [70, 5], [90, 5], 2, 1, np.random.default_rng())
    grid = packed_grid(entry, pb)
    wgs = [workgroup_of(1, h, b, grid, entry) for b in range(2) for h in range(2)]
    res = run(entry, pb, workgroups=wgs)
    assert not res.findings, "\n".join(map(str, res.findings))
    written = ~np.isnan(pb.out.astype(np.float32)).all(axis=-1)
    assert written[64:70].all() and not written[:64].any() and not written[70:].any()


@pytest.mark.parametrize(
    "d_qk,p_mode,page_size,table",
    [
        (128, "lean", 16, True),
        (192, "exact", 64, False),
        (128, "exact", 256, False),
        (192, "lean", 24, True),  # no power of two: a block's pages start anywhere in it
    ],
)
def test_paged_cache(d_qk, p_mode, page_size, table) -> None:
    """K / V through the page table (the paged build, cu_seqlens_k NULL, seqused_k the counts): GQA 4:1, one
    key, an empty sequence, 40 queries over 150 keys (chunked prefill, crossing pages and key blocks), 70 over
    70 (two query tiles), the pages in random order with spare pages between them."""
    entry = _entry(d_qk, p_mode, "paged")
    pb = fp8_batch(entry, [1, 0, 40, 70], [1, 9, 150, 70], 4, 1, np.random.default_rng(), table=table,
                   page_size=page_size)  # fmt: skip
    check(entry, pb, run(entry, pb))


def test_paged_bad_page_index_is_clamped() -> None:
    """A table entry past the cache: the kernel clamps it to the last page (zyfa_abi.h), reads nothing outside
    the cache, and matches the reference over the clamped table. The last sequence is the longest (its table
    row is the table's end) and its keys end inside a block: the keys past it read the sequence's last key,
    not table entries past the row (the simulator faults on a read outside the table)."""
    entry = _entry(128, "lean", "paged")
    pb = fp8_batch(entry, [3, 30], [20, 100], 2, 1, np.random.default_rng(), page_size=16)
    pb.page_table[1, 3] = 10_000
    res = run(entry, pb)
    pb.page_table = np.clip(pb.page_table, 0, pb.k.shape[0] - 1)
    check(entry, pb, res)


@pytest.mark.parametrize("waves,layout", [(1, "paged"), (8, "paged"), (8, "varlen")])
def test_other_wave_counts(waves, layout) -> None:
    """The generator's other workgroup shapes: one wave (one DMA wave: the gather runs in two groups of
    pieces) and eight (only the first four waves move K / V), with 192/128 heads, page size 16."""
    row = _entry(192, "lean", layout)
    entry = {**row, "name": f"{row['name']}_w{waves}", "tile_m": 32 * waves, "threads": 64 * waves}
    simulator = sim.Simulator(generate("mfma_fp8", Variant.from_dict(entry), _abi()), entry["name"])
    pb = fp8_batch(entry, [1, 0, 40, 70], [1, 9, 150, 70], 4, 2, np.random.default_rng(), table=True,
                   page_size=16 if layout == "paged" else 0)  # fmt: skip
    check(entry, pb, launch_packed(simulator, entry, _abi(), pb))
