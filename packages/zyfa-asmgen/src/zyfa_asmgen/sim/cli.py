"""`zyfa-asmgen sim NAME`: run one gfx950 kernel of the build in the simulator and report.

It finds the kernel's assembly (NAME.s beside manifest.json when the build kept it, else it
compiles the HIP source with the pinned clang or runs the generator, from the kernels/variants.bzl
entry), builds random inputs (bf16 through ml_dtypes, e4m3fn bytes), lays out the kernarg bytes
from kernels/abi/zyfa_abi.h (zyfa_asmgen.abi), launches, and prints three sections:

* result: the error against the simulator's own reference, a numpy float64 dense softmax on the
  dequantised inputs, with the tolerance each check uses (zyfa-asmgen sits below zyfa-torch and
  never imports it: zyfa-torch's tests hold the simulated kernels to `zyfa.reference`);
* hazards: the checker's findings;
* modelled timing (timing.py): occupancy, per-workgroup cycles and loop iterations at full
  occupancy, and modelled TFLOP/s of full launches on MI355X with the model's assumptions.

Every argument is checked when the command line is parsed (sizes >= 1, descales finite and > 0 as
float32, the launch shape), so a bad value stops with a usage message (exit status 2) before any
work. Exit status 0 when the result is within tolerance and the checker found nothing, else 1.
docs/simulator.md explains how to read the output.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from ..abi import AbiLayout, parse_abi_header
from .errors import SimError
from .kernarg import pack_kernarg
from .machine import Simulator
from .memory import GlobalMemory
from .steady import LaunchEstimate, WorkgroupCost, attention_bytes, attention_flops, estimate
from .timing import MI355X, fit_linear, format_cu, model_cu
from .varlen import launch_uniform

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
DEFAULT_LAUNCH = "1,32768,32768,32,8"
MAX_TIMED_WGS = 4  # traced workgroups the CU model replays (evenly spaced query tiles)


# ---- finding the kernel -----------------------------------------------------------------------------


def load_variants(path: Path) -> list[dict[str, Any]]:
    """Every entry of every top-level list of dicts in variants.bzl (a pure Python literal)."""
    out: list[dict[str, Any]] = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            out += [v for v in value if isinstance(v, dict) and "name" in v]
    return out


def find_repo(start: Path) -> Path | None:
    """The first directory at or above `start` holding kernels/variants.bzl."""
    for d in (start, *start.parents):
        if (d / "kernels" / "variants.bzl").is_file():
            return d
    return None


@dataclass
class KernelSource:
    """A kernel's variant/manifest entry and its assembly."""

    entry: dict[str, Any]
    asm: str
    origin: str
    repo: Path | None = None


def _manifest_entry(mdir: Path, name: str) -> dict[str, Any] | None:
    path = mdir / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"no manifest.json in {mdir}")
    rows = json.loads(path.read_text()).get("kernels", [])
    return next((r for r in rows if r.get("name") == name), None)


def _default_manifest_dir(repo: Path | None) -> Path | None:
    env = os.environ.get("ZYFA_KERNEL_DIR")
    for d in ([Path(env)] if env else []) + ([repo / "bazel-bin" / "kernels"] if repo else []):
        if (d / "manifest.json").is_file():
            return d
    return None


def locate_kernel(name: str, manifest_dir: Path | None, variants: Path | None) -> KernelSource:
    """Find the kernel: NAME.s beside the manifest, else build its assembly from variants.bzl."""
    repo = find_repo(variants.resolve().parent if variants else Path.cwd())
    if manifest_dir is None and variants is None:
        manifest_dir = _default_manifest_dir(repo)
    entry = None
    if manifest_dir is not None:
        entry = _manifest_entry(manifest_dir, name)
        if entry is not None and (manifest_dir / f"{name}.s").is_file():
            origin = f"{manifest_dir / (name + '.s')} (assembly the build kept beside manifest.json)"
            return KernelSource(entry, (manifest_dir / f"{name}.s").read_text(), origin, repo)
    vpath = variants or (repo / "kernels" / "variants.bzl" if repo else None)
    if vpath is None or not vpath.is_file():
        if manifest_dir is not None and entry is None:
            raise ValueError(
                _unknown(name, str(manifest_dir / "manifest.json"), _manifest_gfx950(manifest_dir))
            )
        raise FileNotFoundError(f"kernel {name!r}: no assembly beside a manifest and no kernels/variants.bzl")
    ventry = next((v for v in load_variants(vpath) if v["name"] == name), None)
    if ventry is None:
        known = [v["name"] for v in load_variants(vpath) if v.get("arch") == "gfx950"]
        raise ValueError(_unknown(name, str(vpath), known))
    repo = vpath.resolve().parent.parent
    return KernelSource({**ventry, **(entry or {})}, _build_asm(ventry, repo), _origin(ventry, repo), repo)


def _manifest_gfx950(mdir: Path) -> list[str]:
    rows = json.loads((mdir / "manifest.json").read_text()).get("kernels", [])
    return [r["name"] for r in rows if r.get("arch") == "gfx950"]


def _unknown(name: str, where: str, known: list[str]) -> str:
    return f"no kernel {name!r} in {where}; gfx950 kernels there: {', '.join(known) or 'none'}"


def _origin(v: dict[str, Any], repo: Path) -> str:
    if v["kind"] == "hip":
        return f"{repo / 'kernels' / v['src']} compiled now by the pinned clang (-O3 -S)"
    return f"generator {v['src']!r} run now"


# The -DZYFA_TILE_DESCENDING value of each tile_order and the -DZYFA_VARLEN value of each layout of the HIP
# kernel, as kernels/tools/zyfa_kernel_build.py builds them.
TILE_ORDER_DEFINES = {"descending": 1, "global_descending": 2}
HIP_LAYOUT_DEFINES = {"varlen": 1, "paged": 2}


def _build_asm(v: dict[str, Any], repo: Path) -> str:
    """Compile the HIP source or run the generator, as the build does."""
    if v.get("arch") != "gfx950":
        raise ValueError(f"{v['name']} is an {v.get('arch')} kernel; the simulator runs gfx950 kernels only")
    if v["kind"] == "asmgen":
        from ..generators import generate
        from ..variant import Variant

        return generate(v["src"], Variant.from_dict(v), parse_abi_header(repo / "kernels/abi/zyfa_abi.h"))
    from ..assembler import compile_hip

    defines = {"ZYFA_KERNEL_NAME": v["name"], "ZYFA_DTYPE_E4M3": int(v["dtype"] == "e4m3fn"),
               "ZYFA_D_QK": v["d_qk"], "ZYFA_D_V": v["d_v"], "ZYFA_TILE_M": v["tile_m"],
               "ZYFA_TILE_N": v["tile_n"], "ZYFA_THREADS": v["threads"], "ZYFA_SMEM_BYTES": v["smem_bytes"],
               "ZYFA_LEAN_P": int(v["p_mode"] == "lean"),
               "ZYFA_TILE_DESCENDING": TILE_ORDER_DEFINES.get(v.get("tile_order"), 0)}  # fmt: skip
    if float(v.get("stale_tau", 0.0)) > 0.0:
        defines["ZYFA_STALE_TAU"] = f"{float(v['stale_tau'])!r}f"  # a float literal, e.g. 8.0f
    if v.get("layout", "dense") in HIP_LAYOUT_DEFINES:
        defines["ZYFA_VARLEN"] = HIP_LAYOUT_DEFINES[v["layout"]]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{v['name']}.s"
        compile_hip(repo / "kernels" / v["src"], out, defines, [repo / "kernels"])
        return out.read_text()


# ---- inputs, kernarg, reference --------------------------------------------------------------------------


@dataclass
class Shape:
    """A launch shape."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int

    def __str__(self) -> str:
        return (f"batch {self.batch}, seqlen_q {self.seqlen_q}, seqlen_k {self.seqlen_k}, "
                f"heads_q {self.heads_q}, heads_kv {self.heads_kv}")  # fmt: skip


@dataclass
class Inputs:
    """Device-format inputs, their dequantised float64 values, outputs poisoned with NaN."""

    raw: list[np.ndarray]  # q, k, v as stored (bf16 or e4m3fn)
    f64: list[np.ndarray]  # dequantised
    descales: tuple[float, float, float]
    out: np.ndarray  # bf16, NaN-filled
    lse: np.ndarray  # float32, NaN-filled
    scale: float


def make_inputs(entry: dict[str, Any], shape: Shape, rng: np.random.Generator, descales: tuple) -> Inputs:
    """Random q, k, v in the kernel's input format."""
    fp8 = entry["dtype"] == "e4m3fn"
    dims = ((shape.seqlen_q, shape.heads_q, entry["d_qk"]), (shape.seqlen_k, shape.heads_kv, entry["d_qk"]),
            (shape.seqlen_k, shape.heads_kv, entry["d_v"]))  # fmt: skip
    raw, f64 = [], []
    ds = descales if fp8 else (1.0, 1.0, 1.0)
    for (s, h, d), dsc in zip(dims, ds, strict=True):
        x = rng.standard_normal((shape.batch, s, h, d)) * (3.0 if fp8 else 1.0)
        x = x.astype(E4M3 if fp8 else BF16)
        raw.append(x)
        f64.append(x.astype(np.float64) * dsc)
    out = np.full((shape.batch, shape.seqlen_q, shape.heads_q, entry["d_v"]), np.nan, dtype=BF16)
    lse = np.full((shape.batch, shape.heads_q, shape.seqlen_q), np.nan, dtype=np.float32)
    return Inputs(raw, f64, ds, out, lse, 1.0 / math.sqrt(entry["d_qk"]))


def kernarg_values(inp: Inputs, ptrs: list[int], shape: Shape, entry: dict, flags: int) -> dict[str, Any]:
    """Field name -> value for zyfa_fwd_args."""
    vals: dict[str, Any] = dict(zip(("q", "k", "v", "out", "lse"), ptrs, strict=True))
    for name, t in zip(("q", "k", "v", "out"), [*inp.raw, inp.out], strict=True):
        for axis, s in zip(("batch", "seq", "head"), t.strides[:3], strict=True):
            vals[f"{name}_stride_{axis}"] = s // t.itemsize
    vals.update(batch=shape.batch, heads_q=shape.heads_q, heads_kv=shape.heads_kv, seqlen_q=shape.seqlen_q,
                seqlen_k=shape.seqlen_k, d_qk=entry["d_qk"], d_v=entry["d_v"], flags=flags,
                softmax_scale=inp.scale, q_descale=inp.descales[0], k_descale=inp.descales[1],
                v_descale=inp.descales[2])  # fmt: skip
    return vals


def dense_reference(inp: Inputs, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """float64 softmax(q k^T scale) v on the dequantised inputs: (out, lse); empty rows 0 / +inf."""
    q, k, v = inp.f64
    b, sq, hq, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    out = np.zeros((b, sq, hq, v.shape[3]))
    lse = np.full((b, hq, sq), np.inf)
    seen = np.arange(sk)[None] <= np.arange(sq)[:, None] + sk - sq
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hkv)
            s = q[bi, :, h] @ k[bi, :, kh].T * inp.scale
            if causal:
                s = np.where(seen, s, -np.inf)
            mx = s.max(1, keepdims=True)
            ok = np.isfinite(mx[:, 0])
            p = np.exp(s - np.where(ok[:, None], mx, 0))
            tot = p.sum(1, keepdims=True)
            out[bi, :, h] = np.where(ok[:, None], (p / np.where(ok[:, None], tot, 1)) @ v[bi, :, kh], 0)
            lse[bi, h] = np.where(ok, mx[:, 0] + np.log(np.where(ok, tot[:, 0], 1)), np.inf)
    return out, lse


# ---- running and reporting ---------------------------------------------------------------------------


@dataclass
class Report:
    """Lines of the three sections and the verdict."""

    lines: list[str] = field(default_factory=list)
    ok: bool = True

    def add(self, *lines: str) -> None:
        """Append lines."""
        self.lines.extend(lines)


def key_blocks(tile: int, entry: dict, shape: Shape) -> int:
    """KV blocks a query tile visits (the contract's causal rule: bottom-right aligned)."""
    last = min((tile + 1) * entry["tile_m"], shape.seqlen_q) - 1
    keys = shape.seqlen_k
    if entry["causal"]:
        keys = max(0, min(shape.seqlen_k, last + shape.seqlen_k - shape.seqlen_q + 1))
    return -(-keys // entry["tile_n"])


def workgroup_of(
    tile: int, head: int, batch: int, grid: tuple[int, int, int], entry: dict
) -> tuple[int, int, int]:
    """The workgroup (blockIdx) that computes query tile `tile` of (head, batch) under the row's tile_order:
    "ascending" (x = tile), "descending" (x = the last tile first) or "global_descending" (in dispatch
    order, x fastest, the last tile of every head and batch first, then the one before it, ...)."""
    nx, ny, nz = grid
    order = entry.get("tile_order")
    if order == "global_descending":
        lin = (nx - 1 - tile) * ny * nz + head + ny * batch
        return lin % nx, lin // nx % ny, lin // (nx * ny)
    return (nx - 1 - tile if order == "descending" else tile), head, batch


def tile_of(wg: tuple[int, int, int], grid: tuple[int, int, int], entry: dict) -> tuple[int, int, int]:
    """(query tile, head, batch) of workgroup wg: the inverse of workgroup_of."""
    (x, y, z), (nx, ny, nz) = wg, grid
    order = entry.get("tile_order")
    if order == "global_descending":
        lin = x + nx * (y + ny * z)
        pair = lin % (ny * nz)
        return nx - 1 - lin // (ny * nz), pair % ny, pair // ny
    return (nx - 1 - x if order == "descending" else x), y, z


def select_tiles(spec: str, ntiles: int) -> list[int]:
    """--workgroups: 'all', or comma-separated query-tile indices (blockIdx.x)."""
    if spec == "all":
        return list(range(ntiles))
    tiles = sorted({int(x) for x in spec.split(",") if x.strip()})
    bad = [t for t in tiles if not 0 <= t < ntiles]
    if bad or not tiles:
        raise ValueError(f"--workgroups {spec!r}: query tiles must be in 0..{ntiles - 1}")
    return tiles


def result_section(rep: Report, inp: Inputs, entry: dict, rows: np.ndarray) -> None:
    """Compare the rows the launch computed with the references."""
    ref, lref = dense_reference(inp, bool(entry["causal"]))
    got = inp.out.astype(np.float64)[:, rows]
    r = ref[:, rows]
    fp8 = entry["dtype"] == "e4m3fn"
    unwritten = int(np.isnan(got).any(axis=(0, 2, 3)).sum())
    err = np.abs(np.nan_to_num(got, nan=1e9) - r)
    rel = float(np.linalg.norm(np.nan_to_num(got, nan=1e9) - r) / max(np.linalg.norm(r), 1e-30))
    tol = 5e-2 if fp8 else 1e-2
    rep.add("result:", "  reference 1: numpy float64 dense softmax on the dequantised inputs")
    rep.add(f"  out vs reference 1: max |err| {err.max():.3e}, relative L2 {rel:.3e} (tolerance {tol:g}: "
            f"{'ok' if rel <= tol else 'FAIL'})")  # fmt: skip
    ok = rel <= tol and unwritten == 0
    lg, lr = inp.lse.astype(np.float64)[:, :, rows], lref[:, :, rows]
    inf_ok = bool(np.array_equal(np.isinf(lg), np.isinf(lr))) and not np.isnan(lg).any()
    fin = np.isfinite(lr) & np.isfinite(lg)
    lerr = float(np.abs(lg[fin] - lr[fin]).max()) if fin.any() else 0.0
    ltol = 2e-2 * max(1.0, float(np.abs(lr[fin]).max()) if fin.any() else 1.0)
    lok = inf_ok and lerr <= ltol
    rep.add(f"  lse vs reference 1: max |err| {lerr:.3e} (tolerance {ltol:.3g}), +inf rows and no NaN: "
            f"{inf_ok} ({'ok' if lok else 'FAIL'})")  # fmt: skip
    ok = ok and lok
    rep.add(f"  unwritten output rows: {unwritten}")
    rep.ok = rep.ok and ok


def hazard_section(rep: Report, findings: list, limit: int = 20) -> None:
    """The checker's findings."""
    if not findings:
        rep.add("hazards: none found")
        return
    rep.add(f"hazards: {len(findings)} finding(s)")
    rep.add(*(f"  {f}" for f in findings[:limit]))
    if len(findings) > limit:
        rep.add(f"  ... {len(findings) - limit} more")
    rep.ok = False


def parse_shape(text: str) -> Shape:
    """'B,SQ,SK,HQ,HKV' -> Shape."""
    try:
        parts = [int(x) for x in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) != 5 or min(parts) < 1 or parts[3] % parts[4]:
        raise ValueError(
            f"--launch-shape {text!r}: want B,SQ,SK,HQ,HKV, each >= 1, with HQ a multiple of HKV"
        )
    return Shape(*parts)


def launch_lines(entry: dict, shape: Shape, a: float, b: float, slots: int, peak: float) -> list[str]:
    """Modelled time and TFLOP/s of a full launch of `shape` from per-workgroup cycles a + b * blocks."""
    est = launch_estimate(entry, shape, WorkgroupCost(a, b, slots, 0.0, ()))
    fill = "HBM-bound" if est.hbm_bound else f"the grid fills {100 * min(est.fill, 1):.0f}% of the CU slots"
    name = f"b{shape.batch} sq{shape.seqlen_q} sk{shape.seqlen_k} hq{shape.heads_q} hkv{shape.heads_kv}"
    return [
        f"  launch {name}: {est.workgroups} workgroups, {1e3 * est.seconds:.3f} ms MODELLED; {fill}",
        f"    {est.tflops:.3g} TFLOP/s MODELLED = {100 * est.tflops / peak:.3g}% of the {peak:.0f} TFLOP/s "
        "MFMA peak",
    ]


def launch_estimate(entry: dict, shape: Shape, cost: WorkgroupCost) -> LaunchEstimate:
    """A full launch of one of our kernels: grid (query tiles, heads, batch), x fastest."""
    grid = (-(-shape.seqlen_q // entry["tile_m"]), shape.heads_q, shape.batch)
    # in dispatch order: x fastest
    wgs = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    costs = [cost.cycles(key_blocks(tile_of(w, grid, entry)[0], entry, shape)) for w in wgs]
    dims = (shape.seqlen_q, shape.seqlen_k, entry["d_qk"], entry["d_v"])
    flops = attention_flops(shape.batch, shape.heads_q, *dims, bool(entry["causal"]))
    item = 1 if entry["dtype"] == "e4m3fn" else 2
    nbytes = attention_bytes(shape.batch, shape.heads_q, shape.heads_kv, *dims, item)
    return estimate(costs, cost.slots, flops, nbytes, MI355X)


def mfma_peak(entry: dict) -> float:
    """The chip's dense MFMA peak (TFLOP/s) for the kernel's data type."""
    if entry["dtype"] == "e4m3fn":
        return MI355X.mfma_peak_tflops("v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64)
    return MI355X.mfma_peak_tflops("v_mfma_f32_32x32x16_bf16", 32, 32, 16)


def traced_launch(src: KernelSource, layout: AbiLayout, shape: Shape, tiles: list[int],
                  rng: np.random.Generator, descales: tuple = (0.5, 0.25, 2.0)):  # fmt: skip
    """Launch one of our kernels on `shape` for the given query tiles (every head and batch), traced.

    Returns (simulator, launch result, inputs).
    """
    entry = src.entry
    inp = make_inputs(entry, shape, rng, tuple(descales))
    sim = Simulator(src.asm, entry["name"])
    grid = (-(-shape.seqlen_q // entry["tile_m"]), shape.heads_q, shape.batch)
    wgs = [workgroup_of(t, h, bi, grid, entry) for bi in range(shape.batch) for h in range(shape.heads_q)
           for t in tiles]  # fmt: skip
    if entry.get("layout", "dense") != "dense":  # a packed build: the batch as sequences of equal lengths
        tensors = (*inp.raw, inp.out, inp.lse)
        res = launch_uniform(
            sim, entry, layout, *tensors, inp.scale, inp.descales, workgroups=wgs, trace=True
        )
        return sim, res, inp
    mem = GlobalMemory()
    ptrs = [mem.map(x.view(np.uint8 if x.dtype == E4M3 else np.uint16)) for x in inp.raw]
    ptrs += [mem.map(inp.out.view(np.uint16)), mem.map(inp.lse)]
    flags = layout.flags.get("ZYFA_FLAG_CAUSAL", 1) * bool(entry["causal"]) | layout.flags.get(
        "ZYFA_FLAG_LSE", 2
    )
    kernarg = pack_kernarg(layout, kernarg_values(inp, ptrs, shape, entry, flags))
    res = sim.launch(grid, (entry["threads"], 1, 1), kernarg, mem, workgroups=wgs, trace=True)
    return sim, res, inp


def timing_section(
    rep: Report, sim: Simulator, res, entry: dict, shape: Shape, launches: list[Shape]
) -> None:
    """Model each traced workgroup of (head 0, batch 0) alone on a full CU; extrapolate to launches.

    Each workgroup is replayed with every slot of the CU running it (steady state of that
    workgroup), so the cost per key block it yields is the one of a long launch, where nearly all
    workgroups are long; a + b x blocks is fitted over the traced query tiles.
    """
    grid = (-(-shape.seqlen_q // entry["tile_m"]), shape.heads_q, shape.batch)
    own = sorted(w for w in res.traces if tile_of(w, grid, entry)[1:] == (0, 0)) or sorted(res.traces)
    if len(own) > MAX_TIMED_WGS:
        idx = np.linspace(0, len(own) - 1, MAX_TIMED_WGS).round().astype(int)
        own = [own[i] for i in sorted(set(idx.tolist()))]
    rep.add("modelled timing (a MODEL of MI355X: not measured; assumptions below):")
    xs, ys = [], []
    for w in own:
        cu = model_cu(sim, [res.traces[w]], entry["threads"], MI355X)
        blocks = key_blocks(tile_of(w, grid, entry)[0], entry, shape)
        lines = format_cu(cu, [f"workgroup {w} ({blocks} key blocks)"])
        rep.add(*(("  " + x) for x in (lines if w == own[0] else lines[1:])))
        xs.append(blocks)
        ys.append(cu.wg_cycles[0])
    a, b, resid = fit_linear(xs, ys)
    fit = f"fitted on {len(own)} workgroups, worst residual {100 * resid:.1f}%" if len(set(xs)) > 1 else (
        "one block count traced: proportional, a = 0")  # fmt: skip
    rep.add(f"  per-workgroup cycles ~= a + b x key blocks: a = {a:.0f}, b = {b:.0f} modelled cycles/block",
            f"    ({fit}; slot time at full occupancy: {cu.slots} workgroups share a CU)")  # fmt: skip
    peak = mfma_peak(entry)
    rep.add("  FLOPs: 2 x batch x heads_q x seqlen_q x seqlen_k x (d_qk + d_v), halved when causal")
    for s in [shape, *launches]:
        rep.add(*launch_lines(entry, s, a, b, cu.slots, peak))
    rep.add("  assumptions:", *(f"    - {x}" for x in MI355X.assumptions()))


def abi_layout(src: KernelSource, abi_header: Path | None) -> AbiLayout:
    """The kernarg layout of kernels/abi/zyfa_abi.h (abi_header, else the kernel's repository)."""
    abi_path = abi_header or (src.repo / "kernels/abi/zyfa_abi.h" if src.repo else None)
    if abi_path is None or not Path(abi_path).is_file():
        raise FileNotFoundError("kernels/abi/zyfa_abi.h not found: pass --abi-header")
    return parse_abi_header(abi_path)


def save_launch(path: Path, inp: Inputs, entry: dict, rows: np.ndarray) -> None:
    """Write one launch's numbers to an .npz for a comparison elsewhere (zyfa-torch's tests hold them to
    zyfa.reference): q, k, v as stored (bf16 as uint16 bits, e4m3fn as uint8 codes), out (bf16 bits) and
    lse as the kernel left them, the computed rows, descales, softmax scale and the kernel's row."""
    np.savez(
        path,
        q=inp.raw[0].view(np.uint8 if inp.raw[0].dtype == E4M3 else np.uint16),
        k=inp.raw[1].view(np.uint8 if inp.raw[1].dtype == E4M3 else np.uint16),
        v=inp.raw[2].view(np.uint8 if inp.raw[2].dtype == E4M3 else np.uint16),
        out=inp.out.view(np.uint16),
        lse=inp.lse,
        rows=rows,
        descales=np.array(inp.descales, dtype=np.float64),
        scale=np.float64(inp.scale),
        entry=json.dumps(entry),
    )


def run(args: argparse.Namespace) -> int:
    """The `sim` command."""
    t0 = time.perf_counter()
    shape = Shape(args.batch, args.seqlen_q, args.seqlen_k or args.seqlen_q, args.heads_q, args.heads_kv)
    if shape.heads_q % shape.heads_kv:
        raise ValueError(f"--heads-q {shape.heads_q} is not a multiple of --heads-kv {shape.heads_kv}")
    src = locate_kernel(args.kernel, args.manifest_dir, args.variants)
    entry = src.entry
    if entry.get("arch") != "gfx950":
        raise ValueError(f"{args.kernel} is an {entry.get('arch')} kernel; the simulator runs gfx950 only")
    layout = abi_layout(src, args.abi_header)
    rep = Report()
    ntiles = -(-shape.seqlen_q // entry["tile_m"])
    tiles = select_tiles(args.workgroups, ntiles)
    grid = (ntiles, shape.heads_q, shape.batch)
    try:
        sim, res, inp = traced_launch(
            src, layout, shape, tiles, np.random.default_rng(args.seed), args.descales
        )
    except SimError as e:
        print(f"zyfa-asmgen sim {entry['name']}: the kernel failed in the simulator: {e}")
        return 1
    rows = np.concatenate([np.arange(t * entry["tile_m"], min(shape.seqlen_q, (t + 1) * entry["tile_m"]))
                           for t in tiles])  # fmt: skip
    if args.save_out:
        save_launch(args.save_out, inp, entry, rows)
    _header(rep, src, sim, shape, grid, res, time.perf_counter() - t0)
    result_section(rep, inp, entry, rows)
    hazard_section(rep, res.findings)
    if not args.no_timing:
        launches = [] if args.launch_shape == "none" else [parse_shape(args.launch_shape)]
        timing_section(rep, sim, res, entry, shape, launches)
    rep.add(f"verdict: {'PASS' if rep.ok else 'FAIL'} ({time.perf_counter() - t0:.1f} s)")
    print("\n".join(rep.lines))
    return 0 if rep.ok else 1


def _header(rep: Report, src: KernelSource, sim: Simulator, shape: Shape, grid, res, secs: float) -> None:
    e = src.entry
    nv, na = sim.vgpr_limits()
    rep.add(f"zyfa-asmgen sim {e['name']}", f"  assembly: {src.origin}")
    pm = f", p_mode {e['p_mode']}" if e.get("p_mode") else ""
    rep.add(f"  kernel: {e['kind']}, {e['dtype']}{pm}, d_qk {e['d_qk']}, d_v {e['d_v']}, tile "
            f"{e['tile_m']}x{e['tile_n']}, {e['threads']} threads; {nv} VGPR + {na} AGPR, "
            f"{sim.sgpr_limit()} SGPR, {sim.lds_size()} B LDS")  # fmt: skip
    rep.add(f"  shape: {shape}; grid {grid}; ran {len(res.workgroups)} workgroup(s), {res.instructions} "
            f"instructions ({secs:.1f} s)")  # fmt: skip


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def _descale(text: str) -> float:
    """argparse type: a descale, finite and > 0 once narrowed to the kernel's float32."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    with np.errstate(over="ignore"):
        narrowed = float(np.float32(value))  # 1e39 -> inf, 1e-50 -> 0: both refused
    if not (math.isfinite(narrowed) and narrowed > 0):
        raise argparse.ArgumentTypeError(f"must be finite and > 0 as a float32, got {text}")
    return value


def _launch_shape(text: str) -> str:
    """argparse type: 'none' or B,SQ,SK,HQ,HKV (checked by parse_shape); returned as given."""
    if text != "none":
        try:
            parse_shape(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `sim` command's arguments."""
    p.add_argument("kernel", help="kernel name (manifest / variants.bzl key), a gfx950 kernel")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--manifest-dir", type=Path, help="directory with manifest.json (and NAME.s from the "
                     "build); default: $ZYFA_KERNEL_DIR, then <repo>/bazel-bin/kernels")  # fmt: skip
    src.add_argument("--variants", type=Path, help="kernels/variants.bzl: compile/generate the assembly now")
    p.add_argument("--abi-header", type=Path, help="zyfa_abi.h (default <repo>/kernels/abi/zyfa_abi.h)")
    p.add_argument("--seqlen-q", type=_positive_int, default=128)
    p.add_argument("--seqlen-k", type=_positive_int, default=None, help="default: seqlen-q")
    p.add_argument("--heads-q", type=_positive_int, default=2)
    p.add_argument("--heads-kv", type=_positive_int, default=1, help="a divisor of --heads-q")
    p.add_argument("--batch", type=_positive_int, default=1)
    p.add_argument("--workgroups", default="all", help="'all' or query tiles i,j,... run for every head "
                   "and batch (the row's tile_order maps them to blockIdx.x)")  # fmt: skip
    p.add_argument("--descales", type=_descale, nargs=3, default=(0.5, 0.25, 2.0), metavar=("Q", "K", "V"),
                   help="FP8 descale factors (ignored for bf16)")  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="input seed (default: fresh)")
    p.add_argument("--launch-shape", type=_launch_shape, default=DEFAULT_LAUNCH,
                   help=f"B,SQ,SK,HQ,HKV of an extra modelled full launch (default {DEFAULT_LAUNCH}; "
                   "'none' to skip)")  # fmt: skip
    p.add_argument("--no-timing", action="store_true", help="skip the timing model")
    p.add_argument("--save-out", type=Path, help="also write the launch's inputs and outputs to this .npz")
