#!/usr/bin/env python3
"""Build ZYFA code objects from kernels/variants.bzl: the one tool behind Bazel and the pip build.

Both front ends call this file, so a variant compiles with the same commands, the same toolchain
checks and the same manifest rows whichever way it is built. Standard library only (python >= 3.10).

    zyfa_kernel_build.py compile NAME --out X.cubin|X.hsaco --meta X.meta.json [--asm X.s]
    zyfa_kernel_build.py manifest --out manifest.json A.meta.json B.meta.json ...
    zyfa_kernel_build.py build-all --out DIR [--jobs N] [--arch ARCH] [--skip-all REASON]
    zyfa_kernel_build.py overlay --base DIR --over DIR --out DIR   # a candidate build over an installed one
    zyfa_kernel_build.py toolchains          # what is found here, and what each kind of kernel needs

Kinds: "cuda" (nvcc -> .cubin), "hip" (clang -x hip -> .s -> .hsaco) and "asmgen"
(python -m zyfa_asmgen emit -> .s -> .hsaco); the gfx950 .s stays next to the code object because
the simulator runs it. Toolchains are found and version-checked in one place (zyfa_toolchains.py)
against the pins in kernels/toolchains.bzl. Env ZYFA_MISSING_TOOLCHAINS=skip makes `compile` write
an empty code object and a "skipped" meta instead of failing when a toolchain is absent (Bazel on a
machine without nvcc); `build-all` always skips such variants and records why in the manifest.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

# Siblings in kernels/tools/ (this file runs as a script, so its directory is on sys.path).
from zyfa_resources import parse_ptxas, read_gfx950_resources, serialized_wgmma
from zyfa_toolchains import (
    ASMGEN_SRC,
    BuildError,
    Toolchain,
    ToolchainCache,
    ToolchainError,
    load_literal,
    run_tool,
    tool_env,
)

ROOT = Path(os.path.abspath(__file__)).parent.parent.parent
ABI_HEADER = "kernels/abi/zyfa_abi.h"

# Field -> accepted types of one VARIANTS entry (bool is checked apart: it is an int in Python).
VARIANT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "arch": str,
    "dtype": str,
    "d_qk": int,
    "d_v": int,
    "causal": bool,
    "p_mode": (str, type(None)),
    "kind": str,
    "src": str,
    "tile_m": int,
    "tile_n": int,
    "threads": int,
    "smem_bytes": int,
    "tag": str,
}
# Optional fields -> accepted types (an absent "grid" is "tiles": see grid_mode; an absent "loads" is
# "cp.async": see loads_mode; an absent "stale_tau" is 0.0: see stale_tau; an absent "v_prep" is False; an
# absent "layout" is "dense": see layout).
OPTIONAL_FIELDS: dict[str, type | tuple[type, ...]] = {
    "grid": str,
    "loads": str,
    "stale_tau": float,
    "v_prep": bool,
    "tile_order": str,
    "layout": str,
    "q_tiles": int,
}
# Query-tile order of a "tiles" grid: "ascending" = blockIdx.x is the query tile; "descending" = blockIdx.x
# is ceil(seqlen_q / tile_m) - 1 - tile, so the causal tiles with the most keys are dispatched first
# (gfx950/fa_fwd_bf16.hip is built with -DZYFA_TILE_DESCENDING=1; the mfma_fp8 generator emits a
# descending order only, so its rows must name one: the simulator and the models map workgroups to tiles
# by this field);
# "global_descending" = the workgroups in dispatch order (x fastest) take the last query tile of every head
# and batch first, then the one before it, and so on (-DZYFA_TILE_DESCENDING=2): the longest tiles of the
# whole launch start first, not only those of each head (the mfma_fp8 generator reads the field itself).
# "sequence_major" (packed rows of sm90/fa_fwd_wgmma.cu, -DZYFA_WS_SEQ_MAJOR=1): the items take a packed
# batch's sequences by tile count, descending, each sequence's items consecutive, kv head by kv head, each kv
# head's tiles longest first (kernels/sm90/fa_fwd_wgmma/varlen_tiles.h); "ascending" there is tile-major
# (every sequence's last tile first, then the one before it).
TILE_ORDERS = ("ascending", "descending", "global_descending", "sequence_major")
TILE_ORDER_DEFINES = {"descending": 1, "global_descending": 2}
DESCENDING_SRCS = ("gfx950/fa_fwd_bf16.hip", "mfma_fp8")
GLOBAL_DESCENDING_SRCS = ("gfx950/fa_fwd_bf16.hip", "mfma_fp8")
ALWAYS_DESCENDING_SRCS = ("mfma_fp8",)
SEQUENCE_MAJOR_SRCS = ("sm90/fa_fwd_wgmma.cu",)
# Launch grids: "tiles" = (ceil(seqlen_q / tile_m), heads_q, batch); "persistent" = (min(SMs, items), 1, 1),
# which only the sm90 wgmma kernel's ZYFA_WS_PERSISTENT build understands (it walks the items itself). A
# packed build's "tiles" is the compact (ZYFA_VARLEN_TILES bound, heads_q, 1); "batch_tiles" (packed layouts
# only, VARLEN_SRCS) = (ceil(max_seqlen_q / tile_m), heads_q, batch), one block per tile of each sequence;
# "dynamic" (packed layouts of the sm90 wgmma kernel, -DZYFA_WS_PERSISTENT=1 -DZYFA_WS_DYNAMIC=1) = the
# persistent grid whose blocks claim their items from zyfa_varlen_args.item_counter (ABI 5).
GRID_MODES = ("tiles", "persistent", "batch_tiles", "dynamic")
PERSISTENT_GRIDS = ("persistent", "dynamic")
PERSISTENT_SRC = "sm90/fa_fwd_wgmma.cu"
# Global -> shared loads: "cp.async" (one kernel parameter, zyfa_fwd_args) or "tma" (the sm90 wgmma
# kernel's ZYFA_WS_TMA build: a last parameter, zyfa_tma_maps, that launchers encode).
LOADS_MODES = ("cp.async", "tma")
# Stale running max (docs/numerics.md): a row keeps m unless a block raises it by more than stale_tau
# (log2 units). The sources that implement it, with the define that carries tau ("": the mfma_fp8
# generator reads the row's field itself); FP8 P must stay below
# e4m3's 448 = 2^8.8 with the row max at 2^8, so FP8 needs stale_tau below the ABI header's
# ZYFA_FP8_MAX_STALE_TAU (fp8_max_stale_tau).
# The largest k / v seq stride (elements, exclusive) a source's kernels address, written to each row as
# "max_kv_seq_stride" (0: no limit of their own) and checked by zyfa-core's launch plan. The gfx950 BF16
# kernel loads a block of 64 rows through a buffer descriptor whose byte count and lane offsets are 32-bit:
# 63 strides of 2 bytes must stay below 2^31.
KV_SEQ_STRIDE_LIMITS = {"gfx950/fa_fwd_bf16.hip": 1 << 24}
STALE_SRCS = {
    "sm90/fa_fwd_wgmma.cu": "ZYFA_WS_STALE_TAU",
    "gfx950/fa_fwd_bf16.hip": "ZYFA_STALE_TAU",
    "mfma_fp8": "",
}
# V pre-pass (kernels/abi/zyfa_abi.h, ABI 3): the sm90 wgmma kernel's ZYFA_WS_VPRE build for e4m3 exact / lean
# P with d_v 128 and tile_n a multiple of 64; its cubin has a second entry, <name>_vprep, which the manifest
# row names in "v_prep" (launchers run it into a workspace first).
VPREP_SRC = "sm90/fa_fwd_wgmma.cu"
VPREP_SUFFIX = "_vprep"
# Packed batches (kernels/abi/zyfa_abi.h, ABI 4): "varlen" (packed k, v) and "paged" (k, v through a page
# table) builds take zyfa_varlen_args as a second parameter. The sources that have them (VARLEN_SRCS: the
# define that carries LAYOUT_DEFINE, the layouts built, the grids allowed): the sm90 wgmma kernel
# (ZYFA_WS_VARLEN = 1 / 2) on either grid (persistent: min(SMs, items) CTAs walk the batch's (query tile,
# head) items), its BF16 varlen build also with loads "tma" (Q / K by TMA over the packed tensors,
# zyfa_tma_maps as a third parameter; V stays on cp.async), its e4m3 varlen build (tile_n <= 128) also with
# a V pre-pass (the packed Vt layout of kernels/abi/zyfa_abi.h, ABI 6) and with it loads "tma" (Q, K and the
# Vt tiles by TMA, ABI 7); the gfx950 BF16 kernel
# (ZYFA_VARLEN = 1 / 2), grid
# "batch_tiles" = (ceil(max_seqlen_q / tile_m), heads_q, batch), a workgroup whose tile starts past its
# sequence's length exiting at once; the mfma_fp8 generator (both layouts, on "batch_tiles"; no define: it
# reads the field). The name spells the layout (LAYOUT_SUFFIX).
LAYOUTS = ("dense", "varlen", "paged")
LAYOUT_SUFFIX = {"varlen": "_varlen", "paged": "_paged"}
LAYOUT_DEFINE = {"varlen": 1, "paged": 2}
VARLEN_SRCS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "sm90/fa_fwd_wgmma.cu": ("ZYFA_WS_VARLEN", ("varlen", "paged"), ("tiles", "persistent", "dynamic")),
    "gfx950/fa_fwd_bf16.hip": ("ZYFA_VARLEN", ("varlen", "paged"), ("batch_tiles",)),
    "mfma_fp8": ("", ("varlen", "paged"), ("batch_tiles",)),
}
ARCH_KINDS = {"sm90a": ("cuda",), "gfx950": ("hip", "asmgen")}
DTYPES = ("bf16", "e4m3fn")
KIND_SUFFIX = {"cuda": ".cubin", "hip": ".hsaco", "asmgen": ".hsaco"}

# Hardware limits checked after a build (docs/architecture.md, "Verification without AMD hardware").
GFX950_MAX_REGISTERS = 512  # unified VGPR + AGPR file per lane
GFX950_MAX_LDS = 160 * 1024
SM90_MAX_SMEM = 227 * 1024  # opt-in dynamic + static shared memory per block


# FP8 P modes and the name part each adds ("exact" adds none). "f16" (P.V in f16: P rounded to f16, V
# converted e4m3 -> f16 in the kernel) exists only in the sm90 wgmma kernel (its ZYFA_WS_PV_F16).
FP8_P_MODES = ("exact", "lean", "f16")
P_MODE_SUFFIX = {"lean": "_leanp", "f16": "_pf16"}
PV_F16_SRCS = ("sm90/fa_fwd_wgmma.cu",)


def expected_name(v: dict[str, Any]) -> str:
    """The kernel key the naming rule gives a variant, e.g. fa_fwd_e4m3fn_hd192x128_causal_leanp_sm90a."""
    hd = f"{v['d_qk']}" if v["d_qk"] == v["d_v"] else f"{v['d_qk']}x{v['d_v']}"
    causal = "_causal" if v["causal"] else ""
    mode = P_MODE_SUFFIX.get(v["p_mode"], "")
    packed = LAYOUT_SUFFIX.get(layout(v), "")
    tag = f"_{v['tag']}" if v.get("tag") else ""
    return f"fa_fwd_{v['dtype']}_hd{hd}{causal}{mode}{packed}{tag}_{v['arch']}"


def variant_problems(v: Any, root: Path = ROOT) -> list[str]:
    """Everything wrong with one VARIANTS entry (empty list: the entry is valid); `root`'s ABI header
    gives the limits it is checked against."""
    if not isinstance(v, dict):
        return [f"entry {v!r} is not a dict"]
    label = v.get("name", "?")
    missing = [k for k in VARIANT_FIELDS if k not in v]
    extra = [k for k in v if k not in VARIANT_FIELDS and k not in OPTIONAL_FIELDS]
    problems = [f"{label}: missing field(s) {missing}"] if missing else []
    if extra:
        problems.append(f"{label}: unknown field(s) {extra}")
    if missing:
        return problems
    present = {**VARIANT_FIELDS, **{k: t for k, t in OPTIONAL_FIELDS.items() if k in v}}
    for key, types in present.items():
        if (types is bool) != isinstance(v[key], bool) or not isinstance(v[key], types):
            problems.append(f"{label}: {key} = {v[key]!r} has the wrong type")
    if problems:
        return problems
    problems += grid_problems(v)
    problems += loads_problems(v)
    problems += stale_problems(v, fp8_max_stale_tau(root))
    problems += v_prep_problems(v)
    problems += q_tiles_problems(v)
    problems += tile_order_problems(v)
    problems += layout_problems(v)
    if v["kind"] not in ARCH_KINDS.get(v["arch"], ()):
        problems.append(f"{label}: kind {v['kind']!r} is not built for arch {v['arch']!r} ({ARCH_KINDS})")
    if v["dtype"] not in DTYPES:
        problems.append(f"{label}: dtype {v['dtype']!r} is not one of {DTYPES}")
    modes = (None,) if v["dtype"] == "bf16" else FP8_P_MODES
    if v["p_mode"] not in modes:
        problems.append(f"{label}: p_mode {v['p_mode']!r} with dtype {v['dtype']} must be one of {modes}")
    if v["p_mode"] == "f16" and v["src"] not in PV_F16_SRCS:
        problems.append(f"{label}: p_mode 'f16' is built only from {PV_F16_SRCS}, not {v['src']!r}")
    for key in ("d_qk", "d_v", "tile_m", "tile_n", "threads"):
        if v[key] <= 0:
            problems.append(f"{label}: {key} = {v[key]} must be positive")
    if v["smem_bytes"] < 0:
        problems.append(f"{label}: smem_bytes must not be negative")
    if not problems and v["name"] != expected_name(v):
        problems.append(f"{label}: the naming rule gives {expected_name(v)!r}")
    return problems


def grid_mode(v: dict[str, Any]) -> str:
    """The variant's launch grid: its "grid" field, "tiles" when absent."""
    return v.get("grid", "tiles")


def grid_problems(v: dict[str, Any]) -> list[str]:
    """What is wrong with the variant's grid field (an unknown mode, or persistent on another source)."""
    label, grid = v["name"], grid_mode(v)
    if grid not in GRID_MODES:
        return [f"{label}: grid {grid!r} is not one of {GRID_MODES}"]
    if grid in PERSISTENT_GRIDS and v["src"] != PERSISTENT_SRC:
        # Any other kernel maps blockIdx.y/z to head and batch: on an (SMs, 1, 1) grid it would compute
        # only the first SMs' tiles of head 0, batch 0.
        return [f"{label}: grid {grid!r} needs src {PERSISTENT_SRC!r} (built with ZYFA_WS_PERSISTENT=1)"]
    if grid == "dynamic" and layout(v) == "dense":
        return [f"{label}: grid 'dynamic' is for layouts 'varlen' and 'paged' (it claims packed items)"]
    if grid == "batch_tiles" and layout(v) == "dense":
        return [
            f"{label}: grid 'batch_tiles' is for layouts 'varlen' and 'paged'; dense kernels take 'tiles'"
        ]
    return []


def loads_mode(v: dict[str, Any]) -> str:
    """The variant's global -> shared load path: its "loads" field, "cp.async" when absent."""
    return v.get("loads", "cp.async")


def loads_problems(v: dict[str, Any]) -> list[str]:
    """What is wrong with the variant's loads field (an unknown mode, or tma where it is not built)."""
    label, loads = v["name"], loads_mode(v)
    if loads not in LOADS_MODES:
        return [f"{label}: loads {loads!r} is not one of {LOADS_MODES}"]
    if loads == "tma" and v["src"] != PERSISTENT_SRC:  # e4m3fn: Q / K only (V is transposed)
        return [f"{label}: loads 'tma' needs src {PERSISTENT_SRC!r} (ZYFA_WS_TMA)"]
    return []


def tile_order(v: dict[str, Any]) -> str:
    """The variant's query-tile order: its "tile_order" field, "ascending" when absent."""
    return v.get("tile_order", "ascending")


def tile_order_problems(v: dict[str, Any]) -> list[str]:
    """What is wrong with the variant's tile_order (an unknown order, or descending where it is not built)."""
    label, order = v["name"], tile_order(v)
    if order not in TILE_ORDERS:
        return [f"{label}: tile_order {order!r} is not one of {TILE_ORDERS}"]
    tile_grid = grid_mode(v) in ("tiles", "batch_tiles")
    if order == "descending" and (v["src"] not in DESCENDING_SRCS or not tile_grid):
        return [f"{label}: tile_order 'descending' needs grid 'tiles' and src in {DESCENDING_SRCS}"]
    if order == "global_descending" and (v["src"] not in GLOBAL_DESCENDING_SRCS or not tile_grid):
        return [
            f"{label}: tile_order 'global_descending' needs grid 'tiles' and src in {GLOBAL_DESCENDING_SRCS}"
        ]
    if order == "sequence_major" and (v["src"] not in SEQUENCE_MAJOR_SRCS or layout(v) == "dense"):
        return [f"{label}: tile_order 'sequence_major' needs a packed layout and src {SEQUENCE_MAJOR_SRCS}"]
    if order == "ascending" and v["src"] in ALWAYS_DESCENDING_SRCS:
        return [
            f"{label}: src {v['src']!r} runs the last query tile first: "
            "set tile_order 'descending' or 'global_descending'"
        ]
    return []


def stale_tau(v: dict[str, Any]) -> float:
    """The variant's running-max staleness bound in log2 units: its "stale_tau" field, 0.0 when absent."""
    return float(v.get("stale_tau", 0.0))


def stale_problems(v: dict[str, Any], fp8_max: float) -> list[str]:
    """What is wrong with the variant's stale_tau (negative or not finite, another source, FP8 >= fp8_max)."""
    label, tau = v["name"], stale_tau(v)
    if not math.isfinite(tau) or tau < 0.0:
        return [f"{label}: stale_tau {tau!r} must be a finite number >= 0"]
    if tau > 0.0 and v["src"] not in STALE_SRCS:
        return [f"{label}: stale_tau > 0 needs src in {tuple(STALE_SRCS)}"]
    if v["dtype"] == "e4m3fn" and tau >= fp8_max:
        return [f"{label}: stale_tau {tau} would let FP8 P pass e4m3's 448; it must be < {fp8_max}"]
    return []


def layout(v: dict[str, Any]) -> str:
    """The batches the variant serves: its "layout" field, "dense" when absent."""
    return v.get("layout", "dense")


def layout_problems(v: dict[str, Any]) -> list[str]:
    """What is wrong with the variant's layout (unknown, or packed where the varlen build does not exist)."""
    label, kind = v["name"], layout(v)
    if kind not in LAYOUTS:
        return [f"{label}: layout {kind!r} is not one of {LAYOUTS}"]
    if kind == "dense":
        return []
    srcs = [src for src, (_, kinds, _) in VARLEN_SRCS.items() if kind in kinds]
    if v["src"] not in srcs:
        return [f"{label}: layout {kind!r} needs src one of {srcs}"]
    if v.get("v_prep") and (kind != "varlen" or v["tile_n"] > 128):
        return [f"{label}: v_prep on a packed batch is built for layout 'varlen' with tile_n <= 128 only"]
    if loads_mode(v) == "tma" and (kind != "varlen" or (v["dtype"] != "bf16" and not v.get("v_prep"))):
        return [
            f"{label}: loads 'tma' on a packed batch is built for layout 'varlen', dtype 'bf16' or e4m3fn "
            "with v_prep (Vt tiles from the pre-pass) only"
        ]
    grids = VARLEN_SRCS[v["src"]][2]
    if grid_mode(v) not in grids:
        return [f"{label}: layout {kind!r} of {v['src']!r} is built for grid {' or '.join(grids)}"]
    return []


def v_prep_entry(v: dict[str, Any]) -> str:
    """The name of the variant's V pre-pass entry ("" when it has none: "v_prep" absent or False)."""
    return v["name"] + VPREP_SUFFIX if v.get("v_prep", False) else ""


def q_tiles(v: dict[str, Any]) -> int:
    """Query tiles in the kernel's shared memory: the "q_tiles" field, 1 when absent."""
    return v.get("q_tiles", 1)


def q_tiles_problems(v: dict[str, Any]) -> list[str]:
    """What is wrong with the variant's q_tiles (2 only on the wgmma kernel's varlen builds)."""
    tiles = q_tiles(v)
    if tiles == 1 or (tiles == 2 and v["src"] == PERSISTENT_SRC and layout(v) == "varlen"):
        return []
    return [f"{v['name']}: q_tiles {tiles!r}: 1, or 2 on a {PERSISTENT_SRC!r} layout 'varlen' row"]


def v_prep_problems(v: dict[str, Any]) -> list[str]:
    """What is wrong with the variant's v_prep (set where the wgmma kernel's ZYFA_WS_VPRE is not built)."""
    if not v.get("v_prep", False):
        return []
    ok = (
        v["src"] == VPREP_SRC
        and v["dtype"] == "e4m3fn"
        and v["p_mode"] in ("exact", "lean")
        and v["d_v"] == 128
        and v["tile_n"] % 64 == 0
    )
    if ok:
        return []
    return [
        f"{v['name']}: v_prep needs src {VPREP_SRC!r}, dtype e4m3fn, p_mode exact or lean, d_v 128 and "
        "tile_n a multiple of 64 (ZYFA_WS_VPRE)"
    ]


def load_variants(root: Path) -> list[dict[str, Any]]:
    """VARIANTS from <root>/kernels/variants.bzl, checked (fields, types, naming rule, unique names)."""
    path = root / "kernels" / "variants.bzl"
    variants = load_literal(path, "VARIANTS")
    problems = [p for v in variants for p in variant_problems(v, root)]
    names = [v.get("name") for v in variants if isinstance(v, dict)]
    problems += [f"duplicate name {n!r}" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise BuildError(f"{path}:\n  " + "\n  ".join(problems))
    return variants


def find_variant(variants: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    """The variant with this name; the error lists the names that exist."""
    for v in variants:
        if v["name"] == name:
            return v
    raise BuildError(f"no variant {name!r} in kernels/variants.bzl; known: {[v['name'] for v in variants]}")


def _abi_define(root: Path, name: str, pattern: str) -> str:
    """The value of `#define name` in the ABI header (`pattern`: the value's regex)."""
    match = re.search(rf"^#define\s+{name}\s+({pattern})\s*$", (root / ABI_HEADER).read_text(), re.M)
    if not match:
        raise BuildError(f"{root / ABI_HEADER}: no #define {name}")
    return match.group(1)


def abi_version(root: Path) -> int:
    """ZYFA_ABI_VERSION from the ABI header."""
    return int(_abi_define(root, "ZYFA_ABI_VERSION", r"\d+"))


def fp8_max_stale_tau(root: Path) -> float:
    """ZYFA_FP8_MAX_STALE_TAU from the ABI header: FP8 kernels need stale_tau below it."""
    return float(_abi_define(root, "ZYFA_FP8_MAX_STALE_TAU", r"[0-9.]+"))


def defines(v: dict[str, Any]) -> list[str]:
    """The -D set every kernel source is compiled with (the variant's compile-time configuration)."""
    values = {
        "ZYFA_KERNEL_NAME": v["name"],
        "ZYFA_DTYPE_E4M3": int(v["dtype"] == "e4m3fn"),
        "ZYFA_D_QK": v["d_qk"],
        "ZYFA_D_V": v["d_v"],
        "ZYFA_TILE_M": v["tile_m"],
        "ZYFA_TILE_N": v["tile_n"],
        "ZYFA_THREADS": v["threads"],
        "ZYFA_SMEM_BYTES": v["smem_bytes"],
        "ZYFA_LEAN_P": int(v["p_mode"] == "lean"),
    }
    if v["p_mode"] == "f16":  # only then, so the other builds keep exactly their defines
        values["ZYFA_WS_PV_F16"] = 1
    if grid_mode(v) in PERSISTENT_GRIDS:
        # Only then: the tile-grid builds keep exactly the defines (and PTX) they had before the field.
        values["ZYFA_WS_PERSISTENT"] = 1
    if grid_mode(v) == "dynamic":
        values["ZYFA_WS_DYNAMIC"] = 1
    if loads_mode(v) == "tma":
        values["ZYFA_WS_TMA"] = 1
    if stale_tau(v) > 0.0 and STALE_SRCS[v["src"]]:
        values[STALE_SRCS[v["src"]]] = f"{stale_tau(v)!r}f"  # a float literal, e.g. 8.0f
    if v_prep_entry(v):
        values["ZYFA_WS_VPRE"] = 1
    if q_tiles(v) != 1:
        values["ZYFA_WS_Q_TILES"] = q_tiles(v)
    if tile_order(v) in TILE_ORDER_DEFINES:
        values["ZYFA_TILE_DESCENDING"] = TILE_ORDER_DEFINES[tile_order(v)]
    if tile_order(v) == "sequence_major":
        values["ZYFA_WS_SEQ_MAJOR"] = 1
    if layout(v) != "dense" and VARLEN_SRCS[v["src"]][0]:  # only then: the dense builds keep their defines
        values[VARLEN_SRCS[v["src"]][0]] = LAYOUT_DEFINE[layout(v)]
    return [f"-D{key}={value}" for key, value in values.items()]


def compile_cuda(v: dict[str, Any], root: Path, tc: Toolchain, out: Path, work: Path) -> dict[str, Any]:
    """nvcc -> .cubin; returns the resource fields of the manifest row."""
    argv = [
        *tc.command, "-O3", "-std=c++17", *tc.flags, "-cubin",
        f"-I{root / 'kernels'}", *[f"-I{d}" for d in tc.include_dirs], *defines(v),
        "-Xptxas", "-v", str(root / "kernels" / v["src"]), "-o", str(out),
    ]  # fmt: skip
    output = run_tool(argv, tool_env(work, tc.env), f"nvcc ({v['name']})")
    res = parse_ptxas(output, v["name"])
    if reasons := serialized_wgmma(output, v["name"]):
        raise BuildError(f"{v['name']}: ptxas serialised its wgmmas ({'; '.join(reasons)})")
    if v_prep_entry(v) and parse_ptxas(output, v_prep_entry(v))["spill_bytes"]:
        raise BuildError(f"{v_prep_entry(v)}: the V pre-pass entry spills registers")
    if res["static_smem"] + v["smem_bytes"] > SM90_MAX_SMEM:
        raise BuildError(
            f"{v['name']}: {res['static_smem']} static + {v['smem_bytes']} dynamic bytes of shared memory "
            f"exceed sm_90's {SM90_MAX_SMEM} per block"
        )
    return {"smem_bytes": v["smem_bytes"], "registers": res["registers"], "spill_bytes": res["spill_bytes"]}


def assemble_link(tc: Toolchain, asm: Path, out: Path, work: Path, name: str) -> None:
    """gfx950 .s -> .o -> .hsaco with the pinned LLVM."""
    env = tool_env(work, tc.env)
    obj = work / f"{name}.o"
    target = ("-target", "amdgcn-amd-amdhsa", "-mcpu=gfx950")
    run_tool([*tc.command, "clang", *target, "-c", str(asm), "-o", str(obj)], env, f"assembling {asm.name}")
    run_tool([*tc.command, "ld.lld", "-shared", str(obj), "-o", str(out)], env, f"linking {out.name}")


def compile_gfx950(
    v: dict[str, Any], root: Path, tc: Toolchain, out: Path, asm: Path, work: Path
) -> dict[str, Any]:
    """hip or asmgen -> .s (kept at `asm`) -> .hsaco; returns the resource fields of the manifest row."""
    env = tool_env(work, tc.env)
    if v["kind"] == "hip":
        # -cuid: clang otherwise derives the __hip_cuid_ symbol from the source's path, and Bazel's
        # sandbox path would make its code objects differ from the pip build's.
        argv = [
            *tc.command, "clang", "-x", "hip", "--offload-arch=gfx950", "-nogpulib", "-nogpuinc",
            "--cuda-device-only", "-O3", "-S", f"-cuid={v['name']}", f"-I{root / 'kernels'}", *defines(v),
            str(root / "kernels" / v["src"]), "-o", str(asm),
        ]  # fmt: skip
        run_tool(argv, env, f"clang -x hip ({v['name']})")
    else:
        argv = [
            sys.executable, "-m", "zyfa_asmgen", "emit", v["src"], "--variant-json", json.dumps(v),
            "--abi-header", str(root / ABI_HEADER), "-o", str(asm),
        ]  # fmt: skip
        run_tool(argv, env, f"zyfa_asmgen emit {v['src']} ({v['name']})")
    assemble_link(tc, asm, out, work, v["name"])
    return gfx950_resources(asm.read_text(encoding="utf-8"), v["name"], str(asm))


def gfx950_resources(text: str, name: str, where: str) -> dict[str, int]:
    """The resource fields of a gfx950 manifest row, from the kernel's assembly; refuses what does not fit."""
    res = read_gfx950_resources(text, name, where)
    if res["registers"] > GFX950_MAX_REGISTERS or res["lds_bytes"] > GFX950_MAX_LDS:
        raise BuildError(
            f"{name}: {res['registers']} VGPR+AGPR (max {GFX950_MAX_REGISTERS}) and "
            f"{res['lds_bytes']} LDS bytes (max {GFX950_MAX_LDS}) do not fit gfx950"
        )
    return {
        "smem_bytes": res["lds_bytes"], "registers": res["registers"], "spill_bytes": res["scratch_bytes"],
        "sgprs": res["sgprs"], "vgprs": res["vgprs"], "agprs": res["agprs"],
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------
# One variant -> code object + meta; metas -> manifest.json.


def source_files(v: dict[str, Any], root: Path) -> list[Path]:
    """Files whose bytes define the kernel: the source, the headers in its folder and below, and the ABI
    header, or (asmgen) the generator package's Python sources and the ABI header."""
    if v["kind"] == "asmgen":
        files = sorted((root / ASMGEN_SRC).rglob("*.py"))
    else:
        src = root / "kernels" / v["src"]
        if not src.is_file():
            raise BuildError(f"{v['name']}: source {src} does not exist (kernels/variants.bzl names it)")
        headers = [p for p in src.parent.rglob("*") if p.suffix in (".h", ".cuh", ".hpp", ".inc")]
        files = [src, *sorted(headers)]
    return [*files, root / ABI_HEADER]


def source_sha256(v: dict[str, Any], root: Path) -> str:
    """sha256 over (path relative to root, bytes) of every file in `source_files`."""
    digest = hashlib.sha256()
    for path in source_files(v, root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def compile_variant(
    v: dict[str, Any], root: Path, tc: Toolchain, out: Path, asm: Path | None = None
) -> dict[str, Any]:
    """Build one variant into `out` (and `asm` for gfx950); return its manifest row."""
    sha = source_sha256(v, root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"zyfa-{v['name']}-") as tmp:
        work = Path(tmp)
        if v["kind"] == "cuda":
            resources = compile_cuda(v, root, tc, out, work)
        else:
            resources = compile_gfx950(v, root, tc, out, asm or out.with_suffix(".s"), work)
    return manifest_row(v, root, out, resources, sha, dict(tc.versions))


def manifest_row(
    v: dict[str, Any], root: Path, out: Path, resources: dict[str, int], sha: str, toolchain: dict[str, str]
) -> dict[str, Any]:
    """The manifest row of variant `v` built into `out` (resource fields and source hash given)."""
    row = {key: v[key] for key in VARIANT_FIELDS if key != "src"}
    row["grid"] = grid_mode(v)  # always written, so a launcher never guesses
    row["loads"] = loads_mode(v)  # "tma": the kernel takes zyfa_tma_maps as its last parameter
    row["stale_tau"] = stale_tau(v)  # the reference needs it to reproduce the kernel's running max
    row["v_prep"] = v_prep_entry(v)  # "": none; else the entry a launcher runs first (ABI 3)
    row["tile_order"] = tile_order(v)  # which query tile blockIdx.x computes (the simulator maps it)
    row["layout"] = layout(v)  # "varlen" / "paged": the kernel takes zyfa_varlen_args as a second parameter
    row["max_kv_seq_stride"] = KV_SEQ_STRIDE_LIMITS.get(v["src"], 0)  # 0: none; else the plan checks it
    row.update(file=out.name, **resources, abi_version=abi_version(root), source_sha256=sha)
    row["sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()  # the loader checks the built file
    row["toolchain"] = toolchain
    return row


def write_json(path: Path, data: Any) -> None:
    """Write indented JSON; keys keep insertion order, so rows list fields in the contract's order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def merge_manifest(metas: Iterable[dict[str, Any]], abi: int, code_dir: Path | None = None) -> dict[str, Any]:
    """manifest.json content from per-variant metas ({"kernel": row} or {"skipped": {name, reason}}).

    Raises:
        BuildError: duplicate names, a row of another ABI version, conflicting toolchain versions,
            or (when `code_dir` is given) a listed code object missing from it.
    """
    kernels, skipped, toolchains = [], [], {}
    for meta in metas:
        if "skipped" in meta:
            skipped.append(meta["skipped"])
            continue
        row = meta["kernel"]
        if row["abi_version"] != abi:
            raise BuildError(f"{row['name']} was built for ABI {row['abi_version']}, the header says {abi}")
        if code_dir is not None and not (code_dir / row["file"]).is_file():
            raise BuildError(f"{row['name']}: code object {code_dir / row['file']} is missing")
        for tool, version in row["toolchain"].items():
            if toolchains.setdefault(tool, version) != version:
                raise BuildError(
                    f"{row['name']} was built with {tool} {version}, others with {toolchains[tool]}"
                )
        kernels.append(row)
    names = [k["name"] for k in kernels] + [s["name"] for s in skipped]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise BuildError(f"duplicate kernel names in the manifest: {dupes}")
    return {"abi_version": abi, "toolchains": toolchains, "kernels": kernels, "skipped": skipped}


def overlay(base: Path, over: Path, out: Path) -> dict[str, Any]:
    """A kernel directory at `out`: `base`'s code objects and manifest rows, the rows that `over`'s manifest
    names (and their code objects) in place of base's rows of the same names. What `ZYFA_KERNEL_DIR` needs to
    run a candidate build of a few variants beside an installed one.

    Raises:
        BuildError: another ABI version, a row of `over` that `base` does not have, a missing code object.
    """
    manifests = [json.loads((d / "manifest.json").read_text(encoding="utf-8")) for d in (base, over)]
    abis = [m["abi_version"] for m in manifests]
    if abis[0] != abis[1]:
        raise BuildError(f"{over} is ABI {abis[1]}, {base} is ABI {abis[0]}")
    replace = {row["name"]: row for row in manifests[1]["kernels"]}
    if unknown := sorted(set(replace) - {row["name"] for row in manifests[0]["kernels"]}):
        raise BuildError(f"{over} has kernels that {base} lacks: {unknown}")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for row in manifests[0]["kernels"]:
        source = over if row["name"] in replace else base
        row = replace.get(row["name"], row)
        if not (source / row["file"]).is_file():
            raise BuildError(f"{row['name']}: code object {source / row['file']} is missing")
        shutil.copyfile(source / row["file"], out / row["file"])
        rows.append(row)
    manifest = {**manifests[0], "kernels": rows}
    manifest["toolchains"] = {**manifests[0]["toolchains"], **manifests[1]["toolchains"]}
    write_json(out / "manifest.json", manifest)
    return manifest


def build_one(v: dict[str, Any], root: Path, cache: ToolchainCache, out_dir: Path) -> dict[str, Any]:
    """build-all's step: the variant's meta, skipped (with the reason) when its toolchain is absent."""
    try:
        tc = cache.get(v["kind"])
    except ToolchainError as exc:
        return {"skipped": {"name": v["name"], "reason": str(exc)}}
    out = out_dir / (v["name"] + KIND_SUFFIX[v["kind"]])
    return {"kernel": compile_variant(v, root, tc, out)}


def clean_outputs(out_dir: Path) -> None:
    """Remove the code objects, .s files and manifest.json a previous build-all left in `out_dir`,
    so a variant dropped from the list cannot linger in a wheel (not recursive)."""
    if out_dir.is_dir():
        for path in out_dir.iterdir():
            if path.is_file() and (path.suffix in (".cubin", ".hsaco", ".s") or path.name == "manifest.json"):
                path.unlink()


def progress(message: str) -> None:
    """One line of build progress on stderr, flushed at once (pip -v and nox show it as it happens)."""
    print(f"zyfa_kernel_build: {message}", file=sys.stderr, flush=True)


def build_with_progress(
    variants: list[dict[str, Any]], build: Callable[[dict[str, Any]], dict[str, Any]], jobs: int
) -> list[dict[str, Any]]:
    """`build` over `variants` on `jobs` threads, in order, saying which variant starts (i of N) and how
    each ends, so a long build is never silent."""
    total, lock = len(variants), threading.Lock()
    counts = {"started": 0, "done": 0}
    progress(f"compiling {total} code objects, {max(1, jobs)} at a time")

    def step(v: dict[str, Any]) -> dict[str, Any]:
        with lock:
            counts["started"] += 1
            progress(f"[{counts['started']}/{total}] {v['name']}")
        start = time.monotonic()
        meta = build(v)
        with lock:
            counts["done"] += 1
            what = f"skipped ({meta['skipped']['reason']})" if "skipped" in meta else "built"
            progress(f"{v['name']} {what} in {time.monotonic() - start:.0f} s; {total - counts['done']} left")
        return meta

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(step, variants))


def build_all(root: Path, out_dir: Path, jobs: int, arch: str | None, skip_all: str | None) -> dict[str, Any]:
    """Build every variant the present toolchains allow into `out_dir`; write out_dir/manifest.json."""
    variants = [v for v in load_variants(root) if arch is None or v["arch"] == arch]
    clean_outputs(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if skip_all:
        metas = [{"skipped": {"name": v["name"], "reason": skip_all}} for v in variants]
    else:
        cache = ToolchainCache(root)
        for kind in sorted({v["kind"] for v in variants}):  # find toolchains once, before threads
            with contextlib.suppress(ToolchainError):
                cache.get(kind)
        metas = build_with_progress(variants, lambda v: build_one(v, root, cache, out_dir), jobs)
    manifest = merge_manifest(metas, abi_version(root), out_dir)
    write_json(out_dir / "manifest.json", manifest)
    return manifest


# ---------------------------------------------------------------------------------------------
# Command line.


def cmd_compile(args: argparse.Namespace) -> None:
    """`compile`: one variant to --out and --meta (Bazel's per-variant action)."""
    root: Path = args.root
    v = find_variant(load_variants(root), args.variant)
    cache = ToolchainCache(root)
    try:
        tc = cache.get(v["kind"])
    except ToolchainError as exc:
        if os.environ.get("ZYFA_MISSING_TOOLCHAINS") != "skip":
            raise
        # Declared outputs must exist: empty placeholders that the manifest does not list.
        for path in filter(None, (args.out, args.asm)):
            Path(path).write_bytes(b"")
        write_json(Path(args.meta), {"skipped": {"name": v["name"], "reason": str(exc)}})
        print(f"zyfa_kernel_build: skipped {v['name']}: {exc}", file=sys.stderr)
        return
    row = compile_variant(v, root, tc, Path(args.out), Path(args.asm) if args.asm else None)
    write_json(Path(args.meta), {"kernel": row})


def cmd_manifest(args: argparse.Namespace) -> None:
    """`manifest`: merge metas (whose code objects lie next to them) into one manifest.json."""
    metas = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.metas]
    out = Path(args.out)
    for meta, path in zip(metas, args.metas, strict=True):
        if "kernel" in meta and not (Path(path).parent / meta["kernel"]["file"]).is_file():
            raise BuildError(f"{path}: code object {meta['kernel']['file']} is not next to it")
    write_json(out, merge_manifest(metas, abi_version(args.root)))


def cmd_overlay(args: argparse.Namespace) -> None:
    """`overlay`: a kernel directory of --base with --over's kernels in place of the same-named ones."""
    manifest = overlay(Path(args.base), Path(args.over), Path(args.out))
    print(f"wrote {Path(args.out) / 'manifest.json'}: {len(manifest['kernels'])} kernels")


def cmd_build_all(args: argparse.Namespace) -> None:
    """`build-all`: everything the present toolchains allow, into --out (what the pip build runs)."""
    manifest = build_all(args.root, Path(args.out), args.jobs, args.arch, args.skip_all)
    for row in manifest["kernels"]:
        print(f"built   {row['file']}: {row['registers']} registers, {row['smem_bytes']} smem bytes")
    for item in manifest["skipped"]:
        print(f"skipped {item['name']}: {item['reason']}")
    print(f"wrote {Path(args.out) / 'manifest.json'}")


def cmd_toolchains(args: argparse.Namespace) -> None:
    """`toolchains`: each kind's toolchain as found here, or why it is unusable."""
    cache = ToolchainCache(args.root)
    for kind in KIND_SUFFIX:
        try:
            tc = cache.get(kind)
            print(f"{kind:7s} ok       {' '.join(f'{k} {v}' for k, v in tc.versions.items())}")
        except ToolchainError as exc:
            print(f"{kind:7s} missing  {exc}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root",
        type=lambda text: Path(text).absolute(),  # absolute, not resolved: stay inside Bazel's sandbox
        default=ROOT,
        help="repository root (default: two levels above tools/)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compile", help="build one variant")
    p.add_argument("variant")
    p.add_argument("--out", required=True, help="code object path (.cubin / .hsaco)")
    p.add_argument("--meta", required=True, help="per-variant meta JSON path")
    p.add_argument("--asm", help="where to keep the gfx950 .s (default: next to --out)")
    p.set_defaults(func=cmd_compile)
    p = sub.add_parser("manifest", help="merge per-variant metas into manifest.json")
    p.add_argument("--out", required=True)
    p.add_argument("metas", nargs="*")
    p.set_defaults(func=cmd_manifest)
    p = sub.add_parser("overlay", help="a kernel directory: --base with --over's kernels replacing its own")
    p.add_argument("--base", required=True, help="kernel directory (manifest.json and code objects)")
    p.add_argument("--over", required=True, help="kernel directory whose kernels replace base's")
    p.add_argument("--out", required=True, help="directory to write")
    p.set_defaults(func=cmd_overlay)
    p = sub.add_parser("build-all", help="build every variant the present toolchains allow")
    p.add_argument("--out", required=True, help="directory for code objects and manifest.json")
    p.add_argument(
        "--jobs", type=int, default=int(os.environ.get("ZYFA_BUILD_JOBS", min(2, os.cpu_count() or 1)))
    )
    p.add_argument("--arch", choices=sorted(ARCH_KINDS), help="only this arch")
    p.add_argument("--skip-all", metavar="REASON", help="build nothing; list every variant as skipped")
    p.set_defaults(func=cmd_build_all)
    p = sub.add_parser("toolchains", help="report the toolchains found here")
    p.set_defaults(func=cmd_toolchains)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; build errors print as `zyfa_kernel_build: error: ...` and exit 1."""
    args = parse_args(argv)
    try:
        args.func(args)
    except BuildError as exc:
        print(f"zyfa_kernel_build: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
