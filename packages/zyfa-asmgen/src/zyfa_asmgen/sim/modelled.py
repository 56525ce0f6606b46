"""The gfx950 scoreboard: our kernels and AITER's in the same timing model (every figure MODELLED).

Each kernel is fitted once (`steady.py`: traced small launches, a CU full of each traced workgroup,
cycles = a + b x key blocks) and then estimated on every shape of the board: causal prefill at a
fixed number of tokens per call (batch = tokens / seqlen), d=128 with GQA 32/8 and d=192/128 with
16/16 heads. Our kernels come from the build (NAME.s beside manifest.json) or from
kernels/variants.bzl (compiled or generated now); AITER's from the fmha_v3_fwd code objects in a
directory the caller names (they are AMD's binaries and never part of this package). Whatever of
the two is present is modelled; what is missing is named in the output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..abi import AbiLayout
from . import cli
from .aiter import AiterKernel, kernel_of, run_aiter, tune_option
from .steady import LaunchEstimate, WorkgroupCost, attention_bytes, attention_flops, estimate, fit_cost
from .timing import MI355X, MachineModel

SEQLENS = (2048, 4096, 8192, 16384, 32768)
TOKENS = 32768
HEADS = {128: (32, 8), 192: (16, 16)}  # d_qk: (heads_q, heads_kv) of the board
BF16_PEAK = MI355X.mfma_peak_tflops("v_mfma_f32_32x32x16_bf16", 32, 32, 16)
FP8_PEAK = MI355X.mfma_peak_tflops("v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64)


@dataclass
class Contender:
    """One kernel on the board: who made it, what it computes, how its launches are estimated."""

    name: str
    source: str  # 'zyfa' | 'aiter'
    d_qk: int
    d_v: int
    dtype: str
    causal: bool
    fit: str  # how the workgroup cost was obtained
    launch: Callable[[cli.Shape], LaunchEstimate]

    @property
    def peak(self) -> float:
        """The MFMA peak of the kernel's data type, TFLOP/s."""
        return FP8_PEAK if self.dtype == "e4m3fn" else BF16_PEAK


def _fit_text(cost: WorkgroupCost) -> str:
    pts = ", ".join(f"{b} blocks: {c:.0f}" for b, c in cost.points)
    if cost.interpolate:
        (x0, y0), (x1, y1) = sorted(cost.points)[-2:]
        return (f"{cost.slots} workgroup(s)/CU; cycles interpolated between the traced workgroups ({pts}); "
                f"{(y1 - y0) / (x1 - x0):.0f} cycles/key block between the two longest")  # fmt: skip
    return (f"a = {cost.a:.0f}, b = {cost.b:.0f} cycles/key block, {cost.slots} workgroup(s)/CU "
            f"(traced {pts}; worst residual {100 * cost.residual:.1f}%)")  # fmt: skip


def zyfa_contender(
    name: str,
    manifest_dir: Path | None,
    variants: Path | None,
    abi_header: Path | None = None,
    fit_seqlen: int | None = None,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> Contender:
    """One of our gfx950 kernels on the board.

    With `fit_seqlen` None each launch is fitted at its own seqlen: a one-head launch of that seqlen,
    traced on query tiles whose rows see 0, 1/16, 1/8, 1/4, 1/2 and all of the keys, and the cycles of
    every workgroup follow those points (`WorkgroupCost.interpolate`), so a loop whose cost per block
    falls as rows grow is charged what rows of that length cost. With an int, one least-squares line
    a + b x blocks from a launch of that seqlen (up to 4 evenly spaced tiles) serves every shape.
    """
    src = cli.locate_kernel(name, manifest_dir, variants)
    entry = src.entry
    if entry.get("arch") != "gfx950":
        raise ValueError(f"{name} is an {entry.get('arch')} kernel; the model is of gfx950")
    layout = cli.abi_layout(src, abi_header)
    origin = src.origin.replace(f"{src.repo}/", "") if src.repo else src.origin  # repository-relative
    fits: dict[int, WorkgroupCost] = {}

    def fit(seqlen: int) -> WorkgroupCost:
        if seqlen not in fits:
            if log is not None:
                log(f"{name}: tracing a one-head launch of seqlen {seqlen} for the fit")
            fits[seqlen] = _fit_zyfa(src, layout, seqlen, fit_seqlen is None, seed)
        return fits[seqlen]

    if fit_seqlen is not None:
        cost = fit(fit_seqlen)
        how = f"{origin}; {_fit_text(cost)}"
        c = Contender(name, "zyfa", entry["d_qk"], entry["d_v"], entry["dtype"], bool(entry["causal"]), how,
                      lambda s: cli.launch_estimate(entry, s, cost))  # fmt: skip
        return c
    c = Contender(name, "zyfa", entry["d_qk"], entry["d_v"], entry["dtype"], bool(entry["causal"]),
                  f"{origin}; fitted at each launch's seqlen",
                  lambda s: cli.launch_estimate(entry, s, fit(s.seqlen_k)))  # fmt: skip
    c.fits = fits  # type: ignore[attr-defined]
    return c


def _fit_zyfa(
    src: cli.KernelSource, layout: AbiLayout, seqlen: int, per_launch: bool, seed: int
) -> WorkgroupCost:
    """Trace a one-head launch of `seqlen` on a few query tiles and fit their workgroups' cycles."""
    entry = src.entry
    shape = cli.Shape(1, seqlen, seqlen, 1, 1)
    ntiles = -(-seqlen // entry["tile_m"])
    fracs = (0, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1) if per_launch else np.linspace(0, 1, min(4, ntiles))
    tiles = sorted({int(round(f * (ntiles - 1))) for f in fracs})
    sim, res, _ = cli.traced_launch(src, layout, shape, tiles, np.random.default_rng(seed))
    # traces are keyed by blockIdx, which workgroup_of gives for a query tile
    traces = [res.traces[cli.workgroup_of(t, 0, 0, (ntiles, 1, 1), entry)] for t in tiles]
    runs = [(cli.key_blocks(t, entry, shape), tr) for t, tr in zip(tiles, traces, strict=True)]
    return fit_cost(sim, runs, entry["threads"], interpolate=per_launch)


def aiter_fit(path: Path, tune: int, seed: int = 0, spec: MachineModel = MI355X) -> WorkgroupCost:
    """Fit an AITER kernel: two one-head launches whose workgroup 0 visits different key-block counts."""
    kern = kernel_of(path)
    rng = np.random.default_rng(seed)
    runs = []
    if kern.causal:  # one and two workgroups of tile pairs (0, 1) and (0, 3)
        shapes = [(2 * kern.ts_qo, 2 * kern.ts_qo), (4 * kern.ts_qo, 4 * kern.ts_qo)]
    else:
        shapes = [(kern.ts_qo, 4 * kern.ts_kv), (kern.ts_qo, 8 * kern.ts_kv)]
    for sq, sk in shapes:
        r = run_aiter(path, sq, 1, rng, seqlen_k=sk, tune=tune, workgroups=[(0, 0, 0)], trace=True)
        runs.append((kern.key_blocks(0, sq, sk), r.res.traces[(0, 0, 0)]))
        sim = r.sim
    return fit_cost(sim, runs, kern.threads, spec)


def aiter_launch(kern: AiterKernel, shape: cli.Shape, cost: WorkgroupCost, spec: MachineModel = MI355X
                 ) -> LaunchEstimate:  # fmt: skip
    """A full AITER launch: grid (workgroups, heads, batch) in dispatch order, x fastest."""
    gx, _, _ = kern.grid(shape.batch, shape.heads_q, shape.seqlen_q)
    per_x = [cost.cycles(kern.key_blocks(x, shape.seqlen_q, shape.seqlen_k)) for x in range(gx)]
    costs = per_x * (shape.heads_q * shape.batch)
    dims = (shape.seqlen_q, shape.seqlen_k, kern.d_qk, 128)
    flops = attention_flops(shape.batch, shape.heads_q, *dims, kern.causal)
    nbytes = attention_bytes(shape.batch, shape.heads_q, shape.heads_kv, *dims, 2)
    return estimate(costs, cost.slots, flops, nbytes, spec)


def aiter_contender(path: Path, seed: int = 0, spec: MachineModel = MI355X) -> Contender:
    """An AITER code object on the board; fitted once per tune option its launches use."""
    kern = kernel_of(path)
    fits: dict[int, WorkgroupCost] = {}

    def launch(shape: cli.Shape) -> LaunchEstimate:
        tune = tune_option(kern.causal, shape.heads_q, shape.seqlen_q)
        if tune not in fits:
            fits[tune] = aiter_fit(path, tune, seed, spec)
        return aiter_launch(kern, shape, fits[tune], spec)

    c = Contender(f"aiter {path.stem}", "aiter", kern.d_qk, 128, "bf16", kern.causal, "", launch)
    c.fits = fits  # type: ignore[attr-defined]
    return c


def describe_fits(c: Contender) -> list[str]:
    """How a contender's workgroup cost was fitted, a line per fit (AITER's: one per tune option used;
    ours fitted per launch: one per seqlen)."""
    fits = getattr(c, "fits", None)
    if fits is None:
        return [f"{c.name}: {c.fit}"]
    key = "s_opt" if c.source == "aiter" else "seqlen"
    return [f"{c.name} ({key} {k}): {_fit_text(cost)}" for k, cost in sorted(fits.items())]


def board_shapes(d_qk: int, seqlens: Sequence[int], tokens: int) -> list[cli.Shape]:
    """The board's causal prefill shapes for one head dim: batch = tokens / seqlen."""
    hq, hkv = HEADS[d_qk]
    return [cli.Shape(max(1, tokens // s), s, s, hq, hkv) for s in seqlens]


def score(contenders: Sequence[Contender], seqlens: Sequence[int], tokens: int) -> list[dict]:
    """One row per (kernel, shape): TFLOP/s and % of the MFMA peak, MODELLED."""
    rows = []
    for c in contenders:
        if c.d_qk not in HEADS:
            continue
        for shape in board_shapes(c.d_qk, seqlens, tokens):
            est = c.launch(shape)
            rows.append({
                "kernel": c.name, "source": c.source, "dtype": c.dtype, "d_qk": c.d_qk, "d_v": c.d_v,
                "causal": c.causal, "batch": shape.batch, "seqlen": shape.seqlen_q, "heads_q": shape.heads_q,
                "heads_kv": shape.heads_kv, "ms": 1e3 * est.seconds, "tflops": est.tflops,
                "pct_peak": 100 * est.tflops / c.peak, "peak_tflops": c.peak, "hbm_bound": est.hbm_bound,
                "label": "MODELLED",
            })  # fmt: skip
    return rows
