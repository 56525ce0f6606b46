"""manifest.json: what code objects exist, how they were built, and which one serves a request.

The manifest is written by `kernels/tools/zyfa_kernel_build.py` (Bazel or the pip build) next to the
code objects it lists. `find_kernel_dir` finds that directory, `Manifest.load` reads and checks it,
`Manifest.select` picks the kernel for (arch, dtype, d_qk, d_v, causal[, p_mode]).

Loading refuses rows outside what any kernel of their kind can launch with (`_check_row_limits`) and
code objects whose bytes do not match the row's ``sha256`` (written by the build; a row without it, from
a manifest older than the field, is not checked), so a corrupt or swapped file is named before a
driver sees it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from zyfa_core.abi import ABI_VERSION
from zyfa_core.errors import KernelDirNotFoundError, KernelNotFoundError, ManifestError

__all__ = [
    "ENV_KERNEL_DIR",
    "GRID_MODES",
    "LAYOUTS",
    "LOAD_MODES",
    "MANIFEST_NAME",
    "P_MODES",
    "P_MODE_PREFERENCE",
    "preferred_p_modes",
    "VPREP_KEYS",
    "VPREP_THREADS",
    "VT_PACKED_GAP",
    "KernelSpec",
    "Manifest",
    "SkippedKernel",
    "canonical_dtype",
    "check_code_object",
    "default_manifest",
    "file_sha256",
    "find_kernel_dir",
    "select",
    "vt_packed_row_bytes",
    "vt_row_bytes",
]

ENV_KERNEL_DIR = "ZYFA_KERNEL_DIR"
MANIFEST_NAME = "manifest.json"
P_MODES = ("exact", "lean", "f16")
"""FP8 probability modes: "exact" (P = e4m3(exp2)), "lean" (P's e4m3 code from one FMA), "f16" (P.V in
f16: P = f16(exp2), V converted e4m3 -> f16 in the kernel; sm90a only). Also the order in which `select`
prefers them when p_mode is None, on an arch without its own entry in `P_MODE_PREFERENCE`."""
P_MODE_PREFERENCE: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"sm90a": ("lean", "exact", "f16"), "gfx950": ("lean", "exact")}
)
"""Per-arch order of `select`'s preference when p_mode is None. sm90a prefers lean P because the H200
measured it faster than exact P at every seqlen (2K-32K), on both shapes and on Gaussian and model-like
inputs (1.10-1.40x), and faster and more accurate than cuDNN FP8, the peer a user would otherwise run
(docs/benchmarks/index.md; kernels/sm90/NOTES.md, "FP8 modes"). Exact P stays the choice for the smallest
error (p_mode="exact"). gfx950 prefers lean P too: its exp shares the VALU with the softmax, so the one
FMA per score is where lean P gains most (MODELLED in docs/gfx950-fp8-kernel.md; no MI355X measures it)."""


def preferred_p_modes(arch: str) -> tuple[str, ...]:
    """The FP8 P modes in the order p_mode=None prefers them on `arch` (the CPU path takes the first)."""
    return P_MODE_PREFERENCE.get(arch, P_MODES)


GRID_MODES = ("tiles", "persistent", "batch_tiles", "dynamic")
"""Launch grids (`zyfa_core.launch_grid`): "tiles" = (ceil(seqlen_q / tile_m), heads_q, batch);
"persistent" = (min(SMs, work items), 1, 1), the kernel walking its items. A row without "grid" (a
manifest older than the field) is "tiles". A packed ("varlen" / "paged" layout) kernel counts its query
tiles by a bound on those of all sequences: "tiles" = (bound, heads_q, 1), "persistent" = (min(SMs, bound
* heads_q), 1, 1); or, "batch_tiles" (packed layouts only), one block per query tile of each sequence:
(ceil(max_seqlen_q / tile_m), heads_q, batch), a block past its sequence's length exiting; or "dynamic"
(packed layouts only), the persistent grid whose blocks claim their items from a counter in the launch's
workspace (ABI 5: zyfa_varlen_args.item_counter; `KernelSpec.workspace_bytes`)."""
ITEM_COUNTER_BYTES = 16
"""The last bytes of a grid "dynamic" launch's workspace, which hold its item counter (ZYFA_ITEM_COUNTER_BYTES
in kernels/abi/zyfa_abi.h, ABI 5; tests/test_abi.py checks the two agree)."""
LOAD_MODES = ("cp.async", "tma")
"""How a kernel loads q/k/v: "cp.async" takes the one zyfa_fwd_args parameter; "tma" (sm90a) takes a
second, zyfa_tma_maps, which the launcher encodes (`zyfa_core.launcher.tma_maps_bytes`). A row without
"loads" is "cp.async"."""
LAYOUTS = ("dense", "varlen", "paged")
"""What batches a kernel serves (ABI 4): "dense" [batch, seqlen, heads, d] tensors (one parameter, or the TMA
maps as a second); "varlen" packed q/k/v by cu_seqlens and "paged" packed q with K/V through a page table,
both with zyfa_varlen_args as the second parameter (a "tma" varlen kernel the maps third, ABI 6;
kernels/abi/zyfa_abi.h). A row without "layout" is "dense"."""
FP8_MAX_STALE_TAU = 0.8
"""Largest running-max staleness an FP8 kernel may declare (exclusive): its P = 2^(t - m + 8) must stay
below e4m3's 448 = 2^8.81 when t exceeds the kept max by up to stale_tau (ZYFA_FP8_MAX_STALE_TAU in
kernels/abi/zyfa_abi.h; tests/test_abi.py checks the mirror)."""
VPREP_KEYS = 128
"""Keys per block of the V pre-pass (ZYFA_VPREP_KEYS in kernels/abi/zyfa_abi.h, ABI 3; tests/test_abi.py
checks the mirror)."""
VPREP_THREADS = 256
"""Threads per block of the V pre-pass (ZYFA_VPREP_THREADS)."""
VT_PACKED_GAP = 144
"""Columns between consecutive sequences' Vt in a packed batch's V pre-pass (ZYFA_VT_PACKED_GAP, ABI 6;
tests/test_abi.py checks the mirror): each sequence starts at VT_PACKED_GAP x b + its first key rounded up to
16, so at least 128 zero columns follow it."""


def vt_row_bytes(seqlen_k: int, tile_n: int) -> int:
    """Bytes of one row of the pre-transposed V (ZYFA_VT_ROW_BYTES): seqlen_k (at least 1) rounded up to a
    multiple of lcm(tile_n, VPREP_KEYS), the kernel's KV block and the pass's keys per block."""
    pad = math.lcm(tile_n, VPREP_KEYS)
    return -(-max(seqlen_k, 1) // pad) * pad


def vt_packed_row_bytes(batch: int, total_k: int) -> int:
    """Bytes of one row of a packed batch's pre-transposed V (ZYFA_VT_PACKED_ROW_BYTES): every sequence's keys
    from its own column, VT_PACKED_GAP x batch + total_k + 128 rounded up to a multiple of VPREP_KEYS."""
    return -(-(batch * VT_PACKED_GAP + total_k + 128) // VPREP_KEYS) * VPREP_KEYS


# Accepted spellings of the input dtypes -> the manifest's canonical name.
_DTYPE_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "e4m3fn": "e4m3fn",
    "fp8_e4m3": "e4m3fn",
    "fp8_e4m3fn": "e4m3fn",
    "float8_e4m3fn": "e4m3fn",
    "torch.float8_e4m3fn": "e4m3fn",
}


def canonical_dtype(dtype: object) -> str:
    """Map a dtype spelling ("bf16", "bfloat16", "fp8_e4m3", torch.float8_e4m3fn, ...) to "bf16"/"e4m3fn".

    Raises:
        ValueError: an unsupported dtype (the message lists the accepted spellings).
    """
    name = str(dtype).lower()
    if name not in _DTYPE_ALIASES:
        raise ValueError(f"unsupported dtype {dtype!r}; ZYFA kernels take {sorted(_DTYPE_ALIASES)}")
    return _DTYPE_ALIASES[name]


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One row of manifest.json: a code object and everything needed to launch it.

    `path` is not in the row: it is the code object's absolute path (manifest dir / file).
    `smem_bytes` is the dynamic shared memory to launch with for kind "cuda"; for "hip"/"asmgen" it
    is the LDS size recorded from the code object, which its descriptor already reserves (see
    `launch_smem_bytes`). `grid` is one of GRID_MODES: how `zyfa_core.launch_grid` sizes the launch.
    `loads` is one of LOAD_MODES: "tma" kernels take the TMA maps as their last parameter.
    `v_prep` names the V pre-pass entry of the code object ("" for none): such a kernel reads V
    pre-transposed from a workspace of `workspace_bytes` that the pass fills first (ABI 3; `launch`).
    `causal` True: the kernel applies the bottom-right causal mask when ZYFA_FLAG_CAUSAL is set; every ZYFA
    kernel reads that flag at run time, so it serves non-causal calls (flag clear) too. `layout` is one of
    LAYOUTS.
    """

    name: str
    file: str
    arch: str
    dtype: str
    d_qk: int
    d_v: int
    causal: bool
    p_mode: str | None
    kind: str
    tile_m: int
    tile_n: int
    threads: int
    smem_bytes: int
    registers: int
    spill_bytes: int
    abi_version: int
    source_sha256: str
    path: Path
    sgprs: int | None = None
    tag: str = ""
    grid: str = "tiles"
    loads: str = "cp.async"
    stale_tau: float = 0.0
    """Running-max staleness bound in log2 units (docs/numerics.md "Stale running max"): the kernel keeps
    a row's max m unless a block raises it by more than this; 0.0 = the exact running max. Pass it to
    `zyfa.reference.attention(stale_tau=...)` to reproduce the kernel's numerics."""
    max_kv_seq_stride: int = 0
    """The k and v seq strides (elements) must stay below this (the gfx950 BF16 kernel's 32-bit buffer
    offsets: 2^24); 0 = no limit of the kernel's own. The launch plan checks it."""
    v_prep: str = ""
    """The V pre-pass entry (kernels/abi/zyfa_abi.h, ABI 3), "" when the kernel reads V as given."""
    layout: str = "dense"
    """"dense", "varlen" or "paged" (LAYOUTS): the batches the kernel serves."""
    sha256: str = ""
    """SHA-256 (hex) of the code object's bytes, checked when the manifest loads; "" in rows older than
    the field (not checked)."""
    toolchain: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False
    )

    def vt_row_bytes(self, seqlen_k: int) -> int:
        """Bytes of one row of this kernel's pre-transposed V (module function `vt_row_bytes`)."""
        return vt_row_bytes(seqlen_k, self.tile_n)

    def _vt_rows(self, batch: int, heads_kv: int, seqlen_k: int, total_k: int | None) -> tuple[int, int]:
        """(rows, bytes per row) of the V pre-pass's Vt: batch x heads_kv x d_v rows of `vt_row_bytes`, or for
        a packed kernel heads_kv x d_v rows of `vt_packed_row_bytes` (its sequences share each row)."""
        if self.layout == "dense":
            return batch * heads_kv * self.d_v, self.vt_row_bytes(seqlen_k)
        if total_k is None:
            raise ValueError(f"{self.name}: the V pre-pass of a packed kernel is sized by total_k; pass it")
        return heads_kv * self.d_v, vt_packed_row_bytes(batch, total_k)

    def workspace_bytes(self, batch: int, heads_kv: int, seqlen_k: int, total_k: int | None = None) -> int:
        """Device workspace one launch needs: the pre-transposed V (`_vt_rows`; e4m3: 1 byte per element;
        total_k, the packed keys, for a packed kernel with a V pre-pass), then, grid "dynamic",
        ITEM_COUNTER_BYTES for the item counter that the launcher clears before the kernel; 0 for a kernel
        that needs neither. Raises ValueError for a packed V pre-pass without total_k."""
        rows, row_bytes = self._vt_rows(batch, heads_kv, seqlen_k, total_k) if self.v_prep else (0, 0)
        return rows * row_bytes + (ITEM_COUNTER_BYTES if self.grid == "dynamic" else 0)

    def v_prep_grid(
        self, batch: int, heads_kv: int, seqlen_k: int, total_k: int | None = None
    ) -> tuple[int, int, int]:
        """Launch grid of the V pre-pass: one block of VPREP_THREADS per 128 keys of each (kv head, batch);
        a packed kernel's, per 128 columns of each kv head's shared rows."""
        _, row_bytes = self._vt_rows(batch, heads_kv, seqlen_k, total_k)
        return (row_bytes // VPREP_KEYS, heads_kv, batch if self.layout == "dense" else 1)

    @property
    def launch_smem_bytes(self) -> int:
        """Dynamic shared memory (bytes) to pass at launch: smem_bytes for cuda, 0 for hip/asmgen.

        HIP code objects here use static LDS only, which the kernel descriptor already reserves;
        passing it again as dynamic LDS would allocate it twice.
        """
        return self.smem_bytes if self.kind == "cuda" else 0

    def describe(self) -> str:
        """A one-line summary: name (dtype d_qk x d_v, causal, p_mode, tag, grid if persistent, loads if
        tma, stale_tau if not 0, the V pre-pass if any, arch)."""
        mode = f", p={self.p_mode}" if self.p_mode else ""
        causal = "causal" if self.causal else "non-causal"
        tag = f", tag={self.tag}" if self.tag else ""
        grid = f", grid={self.grid}" if self.grid != "tiles" else ""
        loads = f", loads={self.loads}" if self.loads != "cp.async" else ""
        stale = f", stale_tau={self.stale_tau:g}" if self.stale_tau else ""
        prep = ", V pre-pass" if self.v_prep else ""
        layout = f", {self.layout}" if self.layout != "dense" else ""
        details = f"{causal}{mode}{tag}{grid}{loads}{stale}{prep}{layout}"
        return f"{self.name} ({self.dtype} d{self.d_qk}x{self.d_v}, {details}, {self.arch})"


@dataclasses.dataclass(frozen=True)
class SkippedKernel:
    """A variant the build left out, with the reason (e.g. its toolchain is absent)."""

    name: str
    reason: str


# Required row keys and their types; bool is checked apart because bool is an int in Python.
_ROW_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "file": str,
    "arch": str,
    "dtype": str,
    "d_qk": int,
    "d_v": int,
    "causal": bool,
    "p_mode": (str, type(None)),
    "kind": str,
    "tile_m": int,
    "tile_n": int,
    "threads": int,
    "smem_bytes": int,
    "registers": int,
    "spill_bytes": int,
    "abi_version": int,
    "source_sha256": str,
}
_KINDS = ("cuda", "hip", "asmgen")
MAX_THREADS = 1024
"""Most threads per block any target launches (CUDA and HIP alike)."""
THREAD_GROUP = MappingProxyType({"cuda": 32, "hip": 64, "asmgen": 64})
"""Threads per block must be a multiple of the kind's warp (32) or wavefront (64, gfx9)."""
MAX_SMEM_BYTES = MappingProxyType({"cuda": 232448, "hip": 163840, "asmgen": 163840})
"""Largest shared memory (LDS) per block of any target of the kind: 227 KiB (sm90a's opt-in limit) and
160 KiB (gfx950). A launch still checks the device's own limit."""
MAX_REGISTERS = MappingProxyType({"cuda": 255, "hip": 512, "asmgen": 512})
"""Registers per thread (cuda) or VGPRs per lane (gfx9, with AGPRs)."""
MAX_TILE = 512
"""Largest tile_m / tile_n a row may declare: the kernels' tiles are 1..256 keys or rows."""
MAX_HEAD_DIM = 512
"""Largest d_qk / d_v a row may declare."""


def _row_error(where: str, name: str, problem: str) -> ManifestError:
    return ManifestError(f"{where}: kernel {name!r}: {problem}")


def _check_row_types(row: Mapping[str, Any], where: str, name: str) -> None:
    missing = [key for key in _ROW_TYPES if key not in row]
    if missing:
        raise _row_error(where, name, f"missing key(s) {missing}")
    for key, expected in _ROW_TYPES.items():
        value = row[key]
        is_bool = isinstance(value, bool)
        if (expected is bool) != is_bool or not isinstance(value, expected):
            raise _row_error(where, name, f"{key} = {value!r} has the wrong type")
    for key in ("d_qk", "d_v", "tile_m", "tile_n", "threads"):
        if row[key] <= 0:
            raise _row_error(where, name, f"{key} = {row[key]} must be positive")
    if row["smem_bytes"] < 0:
        raise _row_error(where, name, f"smem_bytes = {row['smem_bytes']} must not be negative")


def _check_row_limits(row: Mapping[str, Any], where: str, name: str) -> None:
    """Refuse values no kernel of the row's kind can launch with (the kind is checked already)."""
    kind = row["kind"]
    threads, group = row["threads"], THREAD_GROUP[kind]
    if threads > MAX_THREADS or threads % group:
        raise _row_error(
            where,
            name,
            f"threads = {threads}: a {kind} block takes at most {MAX_THREADS} threads, a multiple of {group}",
        )
    if row["smem_bytes"] > MAX_SMEM_BYTES[kind]:
        raise _row_error(
            where,
            name,
            f"smem_bytes = {row['smem_bytes']} exceeds {MAX_SMEM_BYTES[kind]}, the most a {kind} block has",
        )
    for key, limit in (
        ("tile_m", MAX_TILE),
        ("tile_n", MAX_TILE),
        ("d_qk", MAX_HEAD_DIM),
        ("d_v", MAX_HEAD_DIM),
    ):
        if row[key] > limit:
            raise _row_error(where, name, f"{key} = {row[key]} is beyond {limit}")
    if not 0 <= row["registers"] <= MAX_REGISTERS[kind]:
        raise _row_error(
            where, name, f"registers = {row['registers']} is outside 0..{MAX_REGISTERS[kind]} for {kind}"
        )
    if row["spill_bytes"] < 0:
        raise _row_error(where, name, f"spill_bytes = {row['spill_bytes']} must not be negative")


def _sha256_field(row: Mapping[str, Any], where: str, name: str) -> str:
    """The row's code-object digest ("" when absent), checked to be 64 lowercase hex digits."""
    digest = row.get("sha256", "")
    if not isinstance(digest, str) or (
        digest and (len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest))
    ):
        raise _row_error(where, name, f"sha256 {digest!r} must be 64 lowercase hex digits")
    return digest


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_code_object(spec: KernelSpec) -> None:
    """Refuse a present code object whose bytes do not match the row's sha256 (a missing one is left to
    the launch, which names it; a row without sha256 is not checked).

    Raises:
        ManifestError: naming the file, both digests and what to do.
    """
    if not spec.sha256 or not spec.path.is_file():
        return
    actual = file_sha256(spec.path)
    if actual != spec.sha256:
        raise ManifestError(
            f"code object {spec.path} of kernel {spec.name!r} has SHA-256 {actual}, but the manifest "
            f"records {spec.sha256}: the file was changed or corrupted after the build; rebuild the "
            "kernels (`pip install packages/zyfa-core` or `bazel build //kernels:all`)"
        )


def _spec_from_row(row: Any, directory: Path, where: str) -> KernelSpec:
    """Build a KernelSpec from one manifest row, checking keys, types and the ABI version."""
    if not isinstance(row, Mapping):
        raise ManifestError(f"{where}: a kernels entry is not an object: {row!r}")
    name = str(row.get("name", "?"))
    _check_row_types(row, where, name)
    if row["abi_version"] != ABI_VERSION:
        raise _row_error(
            where, name, f"built for ABI version {row['abi_version']}, this zyfa_core uses {ABI_VERSION}"
        )
    if row["kind"] not in _KINDS:
        raise _row_error(where, name, f"kind {row['kind']!r} is not one of {_KINDS}")
    _check_row_limits(row, where, name)
    if Path(row["file"]).name != row["file"]:
        raise _row_error(where, name, f"file {row['file']!r} must be a bare file name")
    try:
        dtype = canonical_dtype(row["dtype"])
    except ValueError as exc:
        raise _row_error(where, name, str(exc)) from None
    if row["p_mode"] is not None and row["p_mode"] not in P_MODES:
        raise _row_error(where, name, f"p_mode {row['p_mode']!r} is not one of {P_MODES} or null")
    fields = {key: row[key] for key in _ROW_TYPES}
    fields["dtype"] = dtype
    sgprs = row.get("sgprs")
    toolchain = row.get("toolchain") or {}
    tag = row.get("tag") or ""
    if not isinstance(tag, str):
        raise _row_error(where, name, f"tag {tag!r} must be a string")
    # Absent in manifests written before the field: those kernels all take the tile grid. An unknown
    # mode is refused rather than launched on the tile grid, which such a kernel may not understand.
    grid = row.get("grid", "tiles")
    if grid not in GRID_MODES:
        raise _row_error(where, name, f"grid {grid!r} is not one of {GRID_MODES}")
    # Likewise: absent means the one-parameter cp.async kernels. An unknown mode is refused, since a
    # launch with the wrong parameter count would be rejected by the driver or read garbage.
    loads = row.get("loads", "cp.async")
    if loads not in LOAD_MODES:
        raise _row_error(where, name, f"loads {loads!r} is not one of {LOAD_MODES}")
    stale_tau = _stale_tau(row, where, name, dtype)
    max_kv_seq_stride = row.get("max_kv_seq_stride", 0)  # absent in rows older than the field: no limit
    if isinstance(max_kv_seq_stride, bool) or not isinstance(max_kv_seq_stride, int) or max_kv_seq_stride < 0:
        raise _row_error(where, name, f"max_kv_seq_stride {max_kv_seq_stride!r} must be an int >= 0")
    v_prep = _v_prep(row, where, name, dtype)
    layout = row.get("layout", "dense")
    if layout not in LAYOUTS:
        raise _row_error(where, name, f"layout {layout!r} is not one of {LAYOUTS}")
    if layout == "dense" and grid in ("batch_tiles", "dynamic"):
        raise _row_error(where, name, f'grid "{grid}" is for packed layouts; dense kernels take "tiles"')
    if layout == "paged" and loads != "cp.async":
        raise _row_error(where, name, "a paged kernel gathers K / V through the page table: loads 'cp.async'")
    if layout == "paged" and v_prep:
        raise _row_error(where, name, "a paged kernel has no V pre-pass")
    if layout == "varlen" and loads == "tma" and dtype != "bf16" and not v_prep:
        raise _row_error(
            where,
            name,
            "an e4m3 varlen kernel loads V by TMA only as the V pre-pass's Vt tiles: name a v_prep entry",
        )
    return KernelSpec(
        **fields,
        path=directory / row["file"],
        sgprs=int(sgprs) if sgprs is not None else None,
        tag=tag,
        grid=grid,
        loads=loads,
        stale_tau=stale_tau,
        max_kv_seq_stride=max_kv_seq_stride,
        v_prep=v_prep,
        layout=layout,
        sha256=_sha256_field(row, where, name),
        toolchain=MappingProxyType(dict(toolchain)),
    )


def _stale_tau(row: Mapping[str, Any], where: str, name: str, dtype: str) -> float:
    """The row's stale_tau (0.0 when absent, as in manifests older than the field), checked: a finite
    number >= 0, and < FP8_MAX_STALE_TAU for FP8 kernels (a larger one would saturate P)."""
    tau = row.get("stale_tau", 0.0)
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau < 0:
        raise _row_error(where, name, f"stale_tau {tau!r} must be a finite number >= 0")
    if dtype == "e4m3fn" and tau >= FP8_MAX_STALE_TAU:
        raise _row_error(where, name, f"stale_tau {tau} of an FP8 kernel must be < {FP8_MAX_STALE_TAU}")
    return float(tau)


def _v_prep(row: Mapping[str, Any], where: str, name: str, dtype: str) -> str:
    """The row's V pre-pass entry ("" when absent), checked: a string, and only on sm90a e4m3fn kernels with
    d_v 128 and tile_n a multiple of 64 (the only pass there is; ABI 3)."""
    entry = row.get("v_prep", "")
    if not isinstance(entry, str):
        raise _row_error(where, name, f"v_prep {entry!r} must be a string (an entry name, or empty)")
    if entry and not (
        row["arch"] == "sm90a" and dtype == "e4m3fn" and row["d_v"] == 128 and row["tile_n"] % 64 == 0
    ):
        raise _row_error(
            where, name, "v_prep is only for sm90a e4m3fn kernels with d_v 128 and tile_n a multiple of 64"
        )
    return entry


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A loaded manifest.json: kernels (in file order), skipped variants, toolchain versions."""

    directory: Path
    abi_version: int
    kernels: tuple[KernelSpec, ...]
    skipped: tuple[SkippedKernel, ...] = ()
    toolchains: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False
    )

    @property
    def path(self) -> Path:
        """The manifest.json file itself."""
        return self.directory / MANIFEST_NAME

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Manifest:
        """Read and check `<directory>/manifest.json`.

        Raises:
            ManifestError: unreadable or malformed JSON, a bad row (including values beyond the
                kind's limits), duplicate names, a code object whose SHA-256 differs from its row's,
                or an ABI version other than zyfa_core.abi.ABI_VERSION (the message names both).
        """
        directory = Path(directory).resolve()
        where = str(directory / MANIFEST_NAME)
        try:
            data = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ManifestError(f"cannot read {where}: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ManifestError(f"{where}: top level is not a JSON object")
        version = data.get("abi_version")
        if version != ABI_VERSION:
            raise ManifestError(
                f"{where} was built for ZYFA ABI version {version!r}, but this zyfa_core uses ABI "
                f"version {ABI_VERSION}; rebuild the kernels or install a matching zyfa-core"
            )
        rows = data.get("kernels", [])
        if not isinstance(rows, list):
            raise ManifestError(f"{where}: 'kernels' is not a list")
        kernels = tuple(_spec_from_row(row, directory, where) for row in rows)
        names = [spec.name for spec in kernels]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ManifestError(f"{where}: duplicate kernel name(s) {duplicates}")
        for spec in kernels:
            check_code_object(spec)
        skipped = tuple(_skipped_from_rows(data.get("skipped", []), where))
        toolchains = data.get("toolchains") or {}
        return cls(directory, version, kernels, skipped, MappingProxyType(dict(toolchains)))

    def arches(self) -> list[str]:
        """Architectures that have at least one kernel, sorted."""
        return sorted({spec.arch for spec in self.kernels})

    def get(self, name: str) -> KernelSpec:
        """The kernel with this key. Raises KernelNotFoundError (listing the keys) if absent."""
        for spec in self.kernels:
            if spec.name == name:
                return spec
        known = ", ".join(spec.name for spec in self.kernels) or "none"
        raise KernelNotFoundError(f"no kernel named {name!r} in {self.path}; kernels: {known}")

    def select(
        self,
        arch: str,
        dtype: object,
        d_qk: int,
        d_v: int,
        causal: bool,
        p_mode: str | None = None,
        tag: str = "",
        layout: str = "dense",
    ) -> KernelSpec:
        """The kernel serving (arch, dtype, d_qk, d_v, causal, p_mode, tag, layout).

        `dtype` is the input dtype ("bf16" or "e4m3fn"; aliases such as "fp8_e4m3" or a torch dtype
        are accepted). `p_mode` applies to FP8 only: "exact", "lean" or "f16" (P.V in f16, sm90a);
        None takes the first built of `P_MODE_PREFERENCE[arch]` (sm90a: lean, exact, f16; gfx950: lean,
        exact), or of `P_MODES` (exact, lean, f16) on other arches. `tag` "" picks the default
        implementation of that key; another tag (e.g. "simple" for the first mma.sync kernels on sm90a)
        picks that one. `layout` is "dense", "varlen" (packed q/k/v) or "paged" (packed q, paged K/V). A
        non-causal request takes a causal kernel when no non-causal one is built: every kernel reads
        ZYFA_FLAG_CAUSAL at run time. Among equal matches the first in manifest order wins.

        Raises:
            ValueError: an unknown dtype, p_mode or layout, or a p_mode with bf16.
            KernelNotFoundError: nothing serves the request; the message lists the kernels built
                for `arch`, the variants skipped for it with reasons, and the other arches.
        """
        dtype = canonical_dtype(dtype)
        if p_mode is not None and p_mode not in P_MODES:
            raise ValueError(f"p_mode must be one of {P_MODES} or None, got {p_mode!r}")
        if p_mode is not None and dtype == "bf16":
            raise ValueError(f"p_mode={p_mode!r} applies to FP8 (e4m3fn) inputs only, not bf16")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        # A non-causal call runs on a non-causal kernel where one is built, else on a causal one (flag clear).
        for kernel_causal in (causal,) if causal else (False, True):
            matches = [
                spec
                for spec in self.kernels
                if (spec.arch, spec.dtype, spec.d_qk, spec.d_v, spec.causal, spec.tag, spec.layout)
                == (arch, dtype, d_qk, d_v, kernel_causal, tag, layout)
            ]
            order = (p_mode,) if p_mode is not None else (*preferred_p_modes(arch), None)
            for mode in order:
                for spec in matches:
                    if spec.p_mode == mode:
                        return spec
        raise KernelNotFoundError(
            self._not_found_message(arch, dtype, d_qk, d_v, causal, p_mode, tag, layout)
        )

    def _not_found_message(
        self,
        arch: str,
        dtype: str,
        d_qk: int,
        d_v: int,
        causal: bool,
        p_mode: str | None,
        tag: str,
        layout: str = "dense",
    ) -> str:
        request = (
            f"arch={arch} dtype={dtype} d_qk={d_qk} d_v={d_v} causal={causal} p_mode={p_mode or 'any'}"
            f" tag={tag or 'default'} layout={layout}"
        )
        lines = [f"no ZYFA kernel serves {request} (manifest {self.path})."]
        same_arch = [spec for spec in self.kernels if spec.arch == arch]
        if same_arch:
            lines.append(f"Kernels for {arch}:")
            lines += [f"  {spec.describe()}" for spec in same_arch]
        else:
            lines.append(f"No kernels were built for {arch}.")
        skipped = [item for item in self.skipped if item.name.endswith(f"_{arch}")]
        if skipped:
            lines.append(f"Skipped for {arch} at build time:")
            lines += [f"  {item.name}: {item.reason}" for item in skipped]
        others = [a for a in self.arches() if a != arch]
        if others:
            counts = ", ".join(f"{a} ({sum(s.arch == a for s in self.kernels)} kernels)" for a in others)
            lines.append(f"Other arches in this manifest: {counts}.")
        return "\n".join(lines)


def _skipped_from_rows(rows: Any, where: str) -> Iterable[SkippedKernel]:
    if not isinstance(rows, list):
        raise ManifestError(f"{where}: 'skipped' is not a list")
    for row in rows:
        if not isinstance(row, Mapping) or not isinstance(row.get("name"), str):
            raise ManifestError(f"{where}: bad 'skipped' entry {row!r} (needs name and reason)")
        yield SkippedKernel(row["name"], str(row.get("reason", "")))


def find_kernel_dir() -> Path:
    """The directory holding manifest.json and the code objects.

    Looked for in order: env ZYFA_KERNEL_DIR (if set it must hold a manifest; no fallback, so a typo
    is not silently ignored), the installed package's `zyfa_core/kernels/`, then
    `<repo>/bazel-bin/kernels/` found by walking up from this file and from the current directory.

    Raises:
        KernelDirNotFoundError: nothing found; the message names each place looked and why it missed.
    """
    here = Path(__file__).resolve().parent
    return _search_kernel_dir(os.environ.get(ENV_KERNEL_DIR), here / "kernels", (here, Path.cwd().resolve()))


def _why_missing(directory: Path) -> str:
    return "directory does not exist" if not directory.is_dir() else f"no {MANIFEST_NAME} in it"


def _search_kernel_dir(env: str | None, package_dir: Path, starts: Iterable[Path]) -> Path:
    """find_kernel_dir with its inputs explicit (the tests drive it with temporary trees)."""
    if env:
        directory = Path(env)
        if (directory / MANIFEST_NAME).is_file():
            return directory.resolve()
        raise KernelDirNotFoundError(f"{ENV_KERNEL_DIR}={env}: {_why_missing(directory)}")
    misses = [f"{ENV_KERNEL_DIR}: not set"]
    if (package_dir / MANIFEST_NAME).is_file():
        return package_dir
    misses.append(f"{package_dir}: {_why_missing(package_dir)} (where the pip build puts kernels)")
    for start in starts:
        for directory in (start, *start.parents):
            candidate = directory / "bazel-bin" / "kernels"
            if (candidate / MANIFEST_NAME).is_file():
                return candidate.resolve()
        misses.append(f"bazel-bin/kernels/{MANIFEST_NAME}: not found in {start} or any parent")
    raise KernelDirNotFoundError(
        "no ZYFA kernel directory found. Looked at:\n  "
        + "\n  ".join(misses)
        + f"\nBuild the kernels (`bazel build //kernels:all` or `pip install packages/zyfa-core`) "
        f"or set {ENV_KERNEL_DIR}."
    )


@functools.cache
def _load_cached(directory: Path) -> Manifest:
    return Manifest.load(directory)


def default_manifest() -> Manifest:
    """The manifest in `find_kernel_dir()`, loaded once per directory and process."""
    return _load_cached(find_kernel_dir())


def select(
    arch: str,
    dtype: object,
    d_qk: int,
    d_v: int,
    causal: bool,
    p_mode: str | None = None,
    tag: str = "",
    layout: str = "dense",
) -> KernelSpec:
    """`default_manifest().select(...)`: see `Manifest.select`."""
    return default_manifest().select(arch, dtype, d_qk, d_v, causal, p_mode, tag, layout)
