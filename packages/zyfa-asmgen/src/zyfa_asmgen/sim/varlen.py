"""Packed variable-length batches in the simulator (kernels/abi/zyfa_abi.h, ABI 5).

A kernel whose row has "layout" "varlen" takes two parameters: zyfa_fwd_args, whose q, k, v and out are
packed [total, heads, d] tensors (batch strides 0, seqlen_q / seqlen_k the largest counts of the batch),
then zyfa_varlen_args (cu_seqlens_q / _k, optional seqused_k, total_q / total_k), at the offsets the header
gives (zyfa_asmgen.abi). Sequence b has the q rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 and the keys
cu_seqlens_k[b] .. (seqused_k[b] of them when given); lse is float32 [heads_q, total_q]. A "paged" kernel
reads k and v from a cache [num_pages, page_size, heads_kv, d] instead: key j of sequence b is slot
j % page_size of page page_table[b][j / page_size] (batch strides: the page stride). The gfx950 BF16
kernel's packed builds are launched (ceil(max_seqlen_q / tile_m), heads_q, batch): workgroup (x, head, b)
computes query tile x of sequence b (under the row's tile_order) or exits when the sequence is shorter; the
gfx950 FP8 generator's packed builds (mfma_fp8) take the same grid. FP8 batches hold float8_e4m3fn q, k and
v and per-tensor descales, or a descale table ([3, batch, heads_kv] float32; ZYFA_FLAG_DESCALE_TABLE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ..abi import AbiLayout
from .kernarg import pack_kernarg
from .machine import Simulator
from .memory import GlobalMemory

BF16 = ml_dtypes.bfloat16


@dataclass
class PackedBatch:
    """A packed BF16 (or FP8) batch as the kernel reads it, its outputs poisoned with NaN."""

    q: np.ndarray  # bf16 or float8_e4m3fn [total_q, heads_q, d_qk]
    k: np.ndarray  # bf16 [total_k, heads_kv, d_qk], or paged [num_pages, page_size, heads_kv, d_qk]
    v: np.ndarray  # bf16 [total_k, heads_kv, d_v], or paged [num_pages, page_size, heads_kv, d_v]
    out: np.ndarray  # bf16 [total_q, heads_q, d_v], NaN
    lse: np.ndarray  # float32 [heads_q, total_q], NaN
    cu_seqlens_q: np.ndarray  # int32 [batch + 1]
    cu_seqlens_k: np.ndarray | None  # int32 [batch + 1]; None only when paged with seqused_k
    seqused_k: np.ndarray | None  # int32 [batch]: the keys each sequence uses, or None (all of its range)
    scale: float
    page_table: np.ndarray | None = None  # int32 [batch, max_pages] (paged), else None
    descales: tuple[float, float, float] = (1.0, 1.0, 1.0)  # FP8 q, k, v descales per tensor
    descale_table: np.ndarray | None = None  # FP8: float32 [3, batch, heads_kv] (q, k, v), else None

    @property
    def batch(self) -> int:
        """Sequences in the batch."""
        return len(self.cu_seqlens_q) - 1

    def lens_q(self) -> np.ndarray:
        """Queries of each sequence."""
        return np.diff(self.cu_seqlens_q)

    def lens_k(self) -> np.ndarray:
        """Keys of each sequence: seqused_k when given, else its cu_seqlens_k range."""
        return np.diff(self.cu_seqlens_k) if self.seqused_k is None else self.seqused_k.copy()

    def total_k(self) -> int:
        """Rows of packed k and v, or num_pages * page_size of a paged cache."""
        return self.k.shape[0] * (self.k.shape[1] if self.page_table is not None else 1)

    def keys(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Sequence b's k and v rows [len_k, heads_kv, d] as zyfa_abi.h defines them, with its clamps: the
        count at most the rows of k after the sequence's start (packed) or its table row's pages (paged),
        a page index clamped to the cache."""
        n = int(self.lens_k()[b])
        if self.page_table is None:
            k0 = int(np.clip(self.cu_seqlens_k[b], 0, self.total_k()))
            n = max(0, min(n, self.total_k() - k0))
            return self.k[k0 : k0 + n], self.v[k0 : k0 + n]
        page_size = self.k.shape[1]
        n = max(0, min(n, self.page_table.shape[1] * page_size))
        j = np.arange(n)
        pages = np.clip(self.page_table[b, j // page_size], 0, self.k.shape[0] - 1)
        return self.k[pages, j % page_size], self.v[pages, j % page_size]

    def max_seqlen_q(self) -> int:
        """The launch's seqlen_q: the longest sequence's queries (at least 1)."""
        return max(1, int(self.lens_q().max(initial=0)))

    def max_seqlen_k(self) -> int:
        """The launch's seqlen_k: the most keys of a sequence (at least 1)."""
        return max(1, int(self.lens_k().max(initial=0)))


def cu_seqlens(lens: list[int] | np.ndarray) -> np.ndarray:
    """int32 [len(lens) + 1] exclusive prefix sums: sequence b's rows are [cu[b], cu[b + 1])."""
    return np.concatenate([[0], np.cumsum(np.asarray(lens, dtype=np.int64))]).astype(np.int32)


def make_packed(
    entry: dict[str, Any],
    lens_q: list[int],
    lens_k: list[int],
    heads_q: int,
    heads_kv: int,
    rng: np.random.Generator,
    seqused_k: list[int] | None = None,
    pad_q: int = 0,
) -> PackedBatch:
    """Random N(0, 1) bf16 q, k, v of sequences with lens_q queries and lens_k keys each (seqused_k: the
    keys each actually uses, at most its lens_k), plus `pad_q` q / out rows after the last sequence, which
    no sequence owns (the kernel must leave them unwritten)."""
    if len(lens_q) != len(lens_k) or (seqused_k is not None and len(seqused_k) != len(lens_q)):
        raise ValueError("lens_q, lens_k (and seqused_k) need one entry per sequence")
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    total_q, total_k = int(cu_q[-1]) + pad_q, int(cu_k[-1])
    dqk, dv = entry["d_qk"], entry["d_v"]
    q = rng.standard_normal((total_q, heads_q, dqk)).astype(BF16)
    k = rng.standard_normal((total_k, heads_kv, dqk)).astype(BF16)
    v = rng.standard_normal((total_k, heads_kv, dv)).astype(BF16)
    out = np.full((total_q, heads_q, dv), np.nan, dtype=BF16)
    lse = np.full((heads_q, total_q), np.nan, dtype=np.float32)
    used = None if seqused_k is None else np.asarray(seqused_k, dtype=np.int32)
    return PackedBatch(q, k, v, out, lse, cu_q, cu_k, used, 1.0 / float(np.sqrt(dqk)))


def make_paged(
    entry: dict[str, Any],
    lens_q: list[int],
    lens_k: list[int],
    heads_q: int,
    heads_kv: int,
    page_size: int,
    rng: np.random.Generator,
    spare_pages: int = 3,
) -> PackedBatch:
    """As make_packed, with k and v in a paged cache: each sequence's keys on pages drawn at random (no
    page shared), `spare_pages` pages that no sequence uses, table rows padded with page 0 past a
    sequence's pages; cu_seqlens_k None, seqused_k the key counts (a serving engine's paged call)."""
    pb = make_packed(entry, lens_q, [0] * len(lens_q), heads_q, heads_kv, rng)
    need = [-(-n // page_size) for n in lens_k]
    max_pages = max(1, *need)
    num_pages = sum(need) + spare_pages
    order = rng.permutation(num_pages).astype(np.int32)
    table = np.zeros((len(lens_q), max_pages), dtype=np.int32)
    at = 0
    for b, n in enumerate(need):
        table[b, :n] = order[at : at + n]
        at += n
    dqk, dv = entry["d_qk"], entry["d_v"]
    pb.k = rng.standard_normal((num_pages, page_size, heads_kv, dqk)).astype(BF16)
    pb.v = rng.standard_normal((num_pages, page_size, heads_kv, dv)).astype(BF16)
    pb.cu_seqlens_k, pb.seqused_k, pb.page_table = None, np.asarray(lens_k, dtype=np.int32), table
    return pb


def packed_grid(entry: dict[str, Any], pb: PackedBatch) -> tuple[int, int, int]:
    """(ceil(max_seqlen_q / tile_m), heads_q, batch): the packed build's launch grid."""
    return (-(-pb.max_seqlen_q() // entry["tile_m"]), pb.q.shape[1], pb.batch)


def packed_kernarg_values(
    pb: PackedBatch, mem: GlobalMemory, entry: dict[str, Any], flags: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Map the batch's buffers into `mem`; return the field values of zyfa_fwd_args and zyfa_varlen_args.
    `flags` must include ZYFA_FLAG_VARLEN (the caller's ABI header gives its value)."""
    ptrs = {name: mem.map(_raw(getattr(pb, name))) for name in ("q", "k", "v", "out")}
    ptrs["lse"] = mem.map(pb.lse)
    fwd: dict[str, Any] = dict(ptrs)
    for name in ("q", "k", "v", "out"):
        t = getattr(pb, name)
        strides = [s // t.itemsize for s in t.strides[:-1]]
        if t.ndim == 3:  # packed: sequences are rows, not batches
            strides = [0, *strides]
        for axis, stride in zip(("batch", "seq", "head"), strides, strict=True):  # paged: batch = page
            fwd[f"{name}_stride_{axis}"] = stride
    fwd.update(batch=pb.batch, heads_q=pb.q.shape[1], heads_kv=pb.k.shape[-2], seqlen_q=pb.max_seqlen_q(),
               seqlen_k=pb.max_seqlen_k(), d_qk=entry["d_qk"], d_v=entry["d_v"], flags=flags,
               softmax_scale=pb.scale, q_descale=pb.descales[0], k_descale=pb.descales[1],
               v_descale=pb.descales[2])  # fmt: skip
    varlen: dict[str, Any] = {
        "cu_seqlens_q": mem.map(pb.cu_seqlens_q, readonly=True),
        "cu_seqlens_k": 0 if pb.cu_seqlens_k is None else mem.map(pb.cu_seqlens_k, readonly=True),
        "seqused_k": 0 if pb.seqused_k is None else mem.map(pb.seqused_k, readonly=True),
        "total_q": pb.q.shape[0],
        "total_k": pb.total_k(),
    }
    if pb.descale_table is not None:
        varlen["descales"] = mem.map(np.ascontiguousarray(pb.descale_table, dtype=np.float32), readonly=True)
    if pb.page_table is not None:
        pages = pb.page_table.shape[1]
        varlen.update(page_table=mem.map(pb.page_table, readonly=True), page_table_stride=pages,
                      page_size=pb.k.shape[1], num_pages=pb.k.shape[0], max_pages=pages)  # fmt: skip
    return fwd, varlen


def _raw(t: np.ndarray) -> np.ndarray:
    """The tensor's bytes as the kernel reads them: 16-bit words (bf16) or bytes (e4m3)."""
    return t.view(np.uint16 if t.itemsize == 2 else np.uint8)


def packed_flags(layout: AbiLayout, entry: dict[str, Any], lse: bool = True, table: bool = False) -> int:
    """ZYFA_FLAG_VARLEN (and PAGED for a paged kernel), with CAUSAL for a causal kernel, LSE when `lse` and
    DESCALE_TABLE when `table`."""
    flags = layout.flags["ZYFA_FLAG_VARLEN"]
    if table:
        flags |= layout.flags["ZYFA_FLAG_DESCALE_TABLE"]
    if entry.get("layout") == "paged":
        flags |= layout.flags["ZYFA_FLAG_PAGED"]
    if entry["causal"]:
        flags |= layout.flags["ZYFA_FLAG_CAUSAL"]
    if lse:
        flags |= layout.flags["ZYFA_FLAG_LSE"]
    return flags


def launch_packed(
    sim: Simulator,
    entry: dict[str, Any],
    layout: AbiLayout,
    pb: PackedBatch,
    flags: int | None = None,
    workgroups: list[tuple[int, int, int]] | None = None,
    **launch: Any,
):
    """Launch a packed build on `pb` (every workgroup of packed_grid, or `workgroups`); pb.out and pb.lse
    receive the results. `launch` goes to Simulator.launch (wave_order, trace, ...). Returns its result."""
    if entry.get("layout", "dense") not in ("varlen", "paged"):
        raise ValueError(f"{entry['name']} is not a packed (layout 'varlen' or 'paged') kernel")
    if (entry["layout"] == "paged") != (pb.page_table is not None):
        needs = "a batch with a page table" if entry["layout"] == "paged" else "a batch without a page table"
        raise ValueError(f"{entry['name']} ({entry['layout']}) needs {needs}")
    mem = GlobalMemory()
    flags = packed_flags(layout, entry, table=pb.descale_table is not None) if flags is None else flags
    fwd, varlen = packed_kernarg_values(pb, mem, entry, flags)
    kernarg = pack_kernarg(layout, fwd, varlen)
    grid = packed_grid(entry, pb)
    return sim.launch(grid, (entry["threads"], 1, 1), kernarg, mem, workgroups=workgroups, **launch)


def launch_uniform(
    sim: Simulator,
    entry: dict[str, Any],
    layout: AbiLayout,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    out: np.ndarray,
    lse: np.ndarray,
    scale: float,
    descales: tuple[float, float, float] = (1.0, 1.0, 1.0),
    **launch: Any,
):
    """A dense batch (q [b, sq, hq, d_qk], k / v [b, sk, hkv, d] bf16 or e4m3, out [b, sq, hq, d_v] bf16, lse
    float32 [b, hq, sq], all contiguous) run by a packed build as b sequences of sq queries over sk keys each:
    the packed tensors are views of the dense ones, so out is written in place; lse is copied back from the
    kernel's [heads_q, total_q]. A paged build reads k and v as a cache of b pages of sk keys, sequence i's
    table row [i]. `descales`: FP8 q, k, v descales per tensor. `launch` as for launch_packed. Returns the
    launch result."""
    b, sq, hq, _ = q.shape
    sk = k.shape[1]
    packed_lse = np.full((hq, b * sq), np.nan, dtype=np.float32)
    rows = [x.reshape(x.shape[0] * x.shape[1], x.shape[2], -1) for x in (q, k, v, out)]  # views: contiguous
    pb = PackedBatch(
        *rows, packed_lse, cu_seqlens([sq] * b), cu_seqlens([sk] * b), None, scale, descales=descales
    )
    if entry.get("layout") == "paged":
        pb.k, pb.v, pb.cu_seqlens_k = k, v, None
        pb.seqused_k = np.full(b, sk, dtype=np.int32)
        pb.page_table = np.arange(b, dtype=np.int32)[:, None]
    res = launch_packed(sim, entry, layout, pb, **launch)
    lse[...] = packed_lse.reshape(hq, b, sq).transpose(1, 0, 2)
    return res
