"""Steady-state timing of long attention launches (MODELLED, not measured).

A 16K-32K launch cannot be simulated instruction by instruction in Python, and need not be: an
attention workgroup is a prologue, a loop over key blocks that does the same work every iteration,
and an epilogue. So its cost at full occupancy is a + b x (key blocks it visits):

1. run the kernel functionally on a few small shapes with traces (a handful of workgroups whose
   key-block counts differ);
2. replay each traced workgroup on a CU full of copies of itself (`timing.model_cu`: every slot the
   occupancy allows busy, so contention for the issue ports, matrix cores, LDS and the vector-memory
   pipe is that of a full CU) and read its cycles per run;
3. fit a (prologue + epilogue) and b (one loop iteration) by least squares, or, where the traced
   workgroups come from a launch of the real launch's seqlen, interpolate between them (a loop whose
   iterations get cheaper as the row grows, e.g. a data-dependent rescale, is charged what rows of
   that length cost);
4. give every workgroup of the real launch its cycles and spread them, in dispatch order,
   over all CUs x slots (`timing.model_launch`): the waves of workgroups and the causal tail come
   from that list; HBM bounds the launch from below (all of Q, K, V and O moved once).

The fit's residual is reported: a loop whose iterations are not alike (a causal diagonal) shows
up there. Every figure is labelled MODELLED.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .machine import Simulator, WaveTrace
from .timing import MI355X, MachineModel, fit_linear, model_cu, model_launch


@dataclass(frozen=True)
class WorkgroupCost:
    """Modelled cycles of one workgroup at full occupancy ~= a + b x key blocks."""

    a: float
    b: float
    slots: int  # workgroups per CU at full occupancy
    residual: float  # largest relative residual of the fit
    points: tuple[tuple[int, float], ...]  # (key blocks, modelled cycles) traced
    # True: cycles follow the traced points (piecewise linear through them, the end segments' slopes
    # beyond), for loops whose iterations cost less as a row grows (a rescale that data-dependent
    # tests skip once the row's max has settled). False: the least-squares line a + b x blocks.
    interpolate: bool = False

    def cycles(self, blocks: int) -> float:
        """Modelled cycles of a workgroup visiting `blocks` key blocks."""
        pts = sorted(dict(self.points).items())
        if not self.interpolate or len(pts) < 2:
            return self.a + self.b * blocks
        i = next((k for k in range(1, len(pts) - 1) if blocks <= pts[k][0]), len(pts) - 1)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        return y0 + (y1 - y0) * (blocks - x0) / (x1 - x0)


def fit_cost(
    sim: Simulator,
    runs: Sequence[tuple[int, Sequence[WaveTrace]]],
    threads: int,
    spec: MachineModel = MI355X,
    interpolate: bool = False,
) -> WorkgroupCost:
    """Fit a + b x blocks over traced workgroups, each replayed alone on a full CU (see `WorkgroupCost`
    for `interpolate`)."""
    if not runs:
        raise ValueError("no traced workgroups to fit")
    pts, slots = [], 1
    for blocks, traces in runs:
        cu = model_cu(sim, [traces], threads, spec)
        pts.append((blocks, cu.wg_cycles[0]))
        slots = cu.slots
    a, b, res = fit_linear([p[0] for p in pts], [p[1] for p in pts])
    return WorkgroupCost(a, b, slots, res, tuple(pts), interpolate)


def attention_flops(batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, d_qk: int, d_v: int,
                    causal: bool) -> float:  # fmt: skip
    """The benchmarks' FLOP convention: 2 x B x H x Sq x Sk x (d_qk + d_v), halved when causal."""
    return 2.0 * batch * heads_q * seqlen_q * seqlen_k * (d_qk + d_v) / (2 if causal else 1)


def attention_bytes(batch: int, heads_q: int, heads_kv: int, seqlen_q: int, seqlen_k: int, d_qk: int,
                    d_v: int, item: int) -> float:  # fmt: skip
    """Bytes a launch must move at least once: Q, K, V in `item` bytes, O in bf16."""
    q = seqlen_q * heads_q * d_qk * item
    kv = seqlen_k * heads_kv * (d_qk + d_v) * item
    return float(batch * (q + kv + 2 * seqlen_q * heads_q * d_v))


@dataclass(frozen=True)
class LaunchEstimate:
    """A modelled launch."""

    seconds: float
    tflops: float
    workgroups: int
    fill: float  # workgroups / (CUs x slots)
    hbm_bound: bool


def estimate(costs: Sequence[float], slots: int, flops: float, nbytes: float,
             spec: MachineModel = MI355X) -> LaunchEstimate:  # fmt: skip
    """Spread per-workgroup cycles (dispatch order) over the chip; HBM bounds the time from below."""
    lt = model_launch(costs, slots, spec)
    secs = max(lt.seconds, nbytes / spec.hbm_bytes_per_s)
    return LaunchEstimate(secs, flops / secs / 1e12, len(costs), lt.fill, secs > lt.seconds)
