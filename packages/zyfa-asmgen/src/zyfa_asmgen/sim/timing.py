"""A MODELLED timing of gfx950 kernels: one compute unit replayed from the simulator's traces.

The functional simulator (machine.py) records, with `launch(trace=True)`, the instructions each
wave executed. This module replays those traces on a model of one CU and predicts cycles; every
number it produces is *modelled*, never measured, and rests on the assumptions that
`MachineModel.assumptions()` lists (printed with every report).

The model (all times in clock cycles):

* 4 SIMDs per CU. A SIMD gets an issue opportunity every 4 cycles and issues at most one
  instruction per port (VALU incl. MFMA and transcendental, SALU, scalar memory, vector memory,
  LDS, branch) per opportunity, from different waves, oldest first (higher `s_setprio` first). A
  wave issues at most one instruction per opportunity, in order (GCN's issue model).
* VALU: a wave64 instruction occupies the SIMD's 16-lane VALU for 4 cycles; transcendentals and
  f32<->int/f16 conversions for 16 (quarter rate); MFMA issues through the VALU port (4 cycles) and
  then occupies the SIMD's matrix core for passes x 4 cycles, with the pass counts of
  `hazard_rules.MFMA_PASSES` (the same numbers the hazard checker uses). An MFMA waits for the
  matrix core; an instruction reading an MFMA result waits until passes + 3 passes after issue,
  except the srcC of the next MFMA in an accumulation chain (the hardware forwards it).
* Memory: vector memory instructions share a per-CU pipe of `vmem_bytes_per_clk` and complete
  `vmem_latency` cycles after leaving it, in order per wave; LDS instructions likewise with the LDS
  figures; scalar loads hit or miss a small LRU scalar cache. `s_waitcnt` stalls the wave until
  the counters it names are satisfied (vmcnt and LDS in order, scalar loads out of order).
* `s_barrier` releases the waves of a workgroup `barrier_cycles` after the last one arrives;
  `s_nop N` idles the wave N+1 opportunities; a taken branch costs `branch_taken_cycles`.
* Occupancy: waves per SIMD from the descriptor's VGPR+AGPR (unified file, granule 8), SGPR and
  LDS use, capped at 8 (LLVM AMDGPUBaseInfo for GFX90A+).

`model_cu` fills a CU with the traced workgroups and runs it in a closed loop (every slot starts
its workgroup again when it ends) until each slot has finished one, so the per-workgroup cycles it
reports are those under full occupancy. `model_launch` spreads a launch's workgroups over all CUs
of the chip from per-workgroup costs.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .hazard_rules import MFMA_PASSES

if TYPE_CHECKING:
    from .machine import LaunchResult, Simulator, WaveTrace

INF = float("inf")

# LLVM VOP1Instructions.td: SchedRW = [WriteFloatCvt] (quarter rate in SISchedule.td).
QUARTER_RATE_CVT = {
    "v_cvt_f32_i32", "v_cvt_f32_u32", "v_cvt_u32_f32", "v_cvt_i32_f32", "v_cvt_f16_f32",
    "v_cvt_f32_f16", "v_cvt_rpi_i32_f32", "v_cvt_flr_i32_f32", "v_cvt_off_f32_i4",
}  # fmt: skip


_COEXEC = "a VALU op of one wave runs while another wave's MFMA occupies the matrix core (ISA co-execution)"
_NO_COEXEC = (
    "a VALU op waits while its SIMD's matrix core is busy (calibrated: AITER's published MI355X speeds "
    "within 15% this way, 35-59% faster with co-execution; docs/simulator.md)"
)


@dataclass(frozen=True)
class MachineModel:
    """The modelled machine: MI355X (gfx950) figures and the model's approximations.

    Defaults and their sources are listed by `assumptions()`; change a field to ask "what if".
    """

    name: str = "MI355X (gfx950)"
    cus: int = 256
    simds: int = 4
    clock_ghz: float = 2.4
    max_waves_per_simd: int = 8
    vgprs_per_lane: int = 512
    vgpr_granule: int = 8
    sgprs_per_simd: int = 800
    sgpr_granule: int = 16
    lds_bytes: int = 160 * 1024
    max_wgs_multiwave: int = 16
    issue_cycles: int = 4
    valu_cycles: int = 4
    quarter_cycles: int = 16
    mfma_result_extra_passes: int = 3
    smem_hit_latency: int = 20
    scalar_cache_bytes: int = 16 * 1024
    scalar_line_bytes: int = 64
    vmem_latency: int = 320
    vmem_bytes_per_clk: float = 64.0
    lds_latency: int = 64
    lds_bytes_per_clk: float = 128.0
    branch_taken_cycles: int = 32
    barrier_cycles: int = 16
    hbm_bytes_per_s: float = 8.0e12
    # A VALU op of one wave may run while another wave's MFMA occupies the SIMD's matrix core (the
    # CDNA3 ISA's co-execution of independent VALU and MFMA work). False asks "what if they could
    # not overlap at all" (calibration bounds the hardware between the two).
    valu_mfma_coexec: bool = False

    def assumptions(self) -> list[str]:
        """Every figure the model uses, with where it comes from."""
        return [
            f"{self.name}: {self.cus} CUs x {self.simds} SIMDs at {self.clock_ghz} GHz peak engine clock "
            "(ROCm GPU specs table, https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html)",
            f"issue: one opportunity per SIMD every {self.issue_cycles} cycles, at most one instruction per "
            "port and per wave (GCN issue model); oldest wave first, s_setprio first",
            f"VALU wave64 op {self.valu_cycles} cycles (16-lane SIMD); transcendentals and f32<->int/f16 "
            f"conversions {self.quarter_cycles} (quarter rate: LLVM SISchedule.td WriteTrans32 / "
            "WriteFloatCvt; CDNA4 not measured)",
            "MFMA: passes x 4 cycles on the SIMD's matrix core, passes from hazard_rules.MFMA_PASSES "
            "(32x32x16 bf16 8, 32x32x64 f8f6f4 fp8 16: 1024 / 2048 FLOP/clk/SIMD, i.e. 2.5 / 5.0 PFLOP/s "
            "on the chip); results readable "
            f"{self.mfma_result_extra_passes} passes after the matrix core finishes; srcC chains forward",
            "VALU beside MFMA: " + (_COEXEC if self.valu_mfma_coexec else _NO_COEXEC),
            f"waves per SIMD <= {self.max_waves_per_simd}; VGPR+AGPR {self.vgprs_per_lane} per lane, granule "
            f"{self.vgpr_granule}; {self.sgprs_per_simd} SGPRs per SIMD, granule {self.sgpr_granule}; "
            f"{self.lds_bytes // 1024} KiB LDS per CU; <= {self.max_wgs_multiwave} multi-wave workgroups "
            "per CU (LLVM AMDGPUBaseInfo: getMaxWavesPerEU, getVGPRAllocGranule, getMaxWorkGroupsPerCU)",
            f"vector memory: {self.vmem_latency} cycles latency (LLVM SISchedule.td WriteVMEM; treated as "
            f"an L2 hit), {self.vmem_bytes_per_clk:g} B/clk per CU, no cache model, no HBM contention "
            "inside the CU model",
            f"LDS: {self.lds_latency} cycles latency, {self.lds_bytes_per_clk:g} B/clk per CU, no bank "
            "conflicts [assumed, unverified for gfx950]",
            f"scalar loads: {self.smem_hit_latency} cycles on a hit (LLVM WriteSMEM) in a "
            f"{self.scalar_cache_bytes // 1024} KiB LRU scalar cache of {self.scalar_line_bytes} B lines, "
            f"else the vector-memory latency [assumed]",
            f"taken branch {self.branch_taken_cycles} cycles (LLVM WriteBranch); barrier release "
            f"{self.barrier_cycles} cycles after the last arrival; workgroup launch costs nothing [assumed]",
            "launch: workgroups go in dispatch order (x fastest) to the CU slot that frees first; each "
            "costs what it cost in the full-occupancy CU model (the tail runs no faster)",
        ]

    def mfma_peak_tflops(self, mfma: str, m: int, n: int, k: int) -> float:
        """Dense peak of one MFMA instruction on the whole chip, TFLOP/s."""
        per_simd = 2 * m * n * k / (4 * MFMA_PASSES[mfma])
        return per_simd * self.simds * self.cus * self.clock_ghz * 1e9 / 1e12


MI355X = MachineModel()


# ---- occupancy -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Occupancy:
    """How many waves and workgroups of a kernel fit one CU, and what limits them."""

    waves_per_simd: int
    wgs_per_cu: int
    waves_per_wg: int
    limiter: str


def occupancy(sim: Simulator, threads: int, spec: MachineModel = MI355X, dynamic_lds: int = 0) -> Occupancy:
    """Occupancy from the kernel descriptor (VGPR/AGPR, SGPR and LDS use) and the block size."""
    nv, na = sim.vgpr_limits()
    arch = -(-nv // 4) * 4 if na else nv
    regs = max(spec.vgpr_granule, -(-(arch + na) // spec.vgpr_granule) * spec.vgpr_granule)
    limits = {"waves": spec.max_waves_per_simd, "vgprs": spec.vgprs_per_lane // regs}
    sg = -(-(sim.sgpr_limit() + 6) // spec.sgpr_granule) * spec.sgpr_granule  # +6: VCC, XNACK, flat
    limits["sgprs"] = spec.sgprs_per_simd // sg
    wps = min(limits.values())
    waves_per_wg = -(-threads // 64)
    wg_limits = {"waves": wps * spec.simds // waves_per_wg}
    lds = sim.lds_size(dynamic_lds)
    if lds:
        wg_limits["lds"] = spec.lds_bytes // lds
    if waves_per_wg > 1:
        wg_limits["barriers"] = spec.max_wgs_multiwave
    wgs = min(wg_limits.values())
    limiter = min(wg_limits, key=wg_limits.get)
    if limiter == "waves":
        limiter = min(limits, key=limits.get)
    if wgs < 1:
        raise ValueError(f"a workgroup of {threads} threads does not fit one CU ({wg_limits})")
    return Occupancy(wps, wgs, waves_per_wg, limiter)


# ---- per-instruction costs ---------------------------------------------------------------------------

# Ports of a SIMD's issue arbiter (bit masks).
P_VALU, P_SALU, P_SMEM, P_VMEM, P_LDS, P_BRANCH = 1, 2, 4, 8, 16, 32
# Instruction classes of the replay.
C_VALU, C_MFMA, C_SALU, C_SMEM, C_VMEM, C_LDS, C_BRANCH, C_WAIT, C_NOP, C_BAR, C_END, C_OTHER = range(12)

_CLASS = {
    "valu": (C_VALU, P_VALU), "trans": (C_VALU, P_VALU), "mfma": (C_MFMA, P_VALU),
    "salu": (C_SALU, P_SALU), "smem": (C_SMEM, P_SMEM), "vmem_load": (C_VMEM, P_VMEM),
    "vmem_store": (C_VMEM, P_VMEM), "lds_dma": (C_VMEM, P_VMEM), "ds": (C_LDS, P_LDS),
    "branch": (C_BRANCH, P_BRANCH), "waitcnt": (C_WAIT, 0), "nop": (C_NOP, 0), "barrier": (C_BAR, 0),
    "end": (C_END, 0), "other": (C_OTHER, 0),
}  # fmt: skip


@dataclass
class _Cost:
    """What the replay needs to know about one static instruction."""

    cls: int
    port: int
    cycles: int = 0  # VALU occupancy
    passes: int = 0  # MFMA passes
    flops: int = 0  # MFMA FLOPs per wave instruction
    bytes_per_lane: int = 0
    vreads: tuple = ()  # (file, idx, count) VGPR/AGPR reads that may wait for an MFMA result
    srcc: tuple | None = None
    vwrites: tuple = ()
    limits: dict | None = None
    wait_states: int = 1
    setprio: int | None = None
    sleep: int = 0
    weight: float = 4.0  # share of a run's work, for runs cut off by the end of the window


def _cost(op, spec: MachineModel) -> _Cost:
    if op.kind == "unsupported":
        return _Cost(C_OTHER, 0)
    cls, port = _CLASS[op.kind]
    c = _Cost(cls, port)
    vr = tuple(r for r in op.reads if r[0] in ("v", "a"))
    c.vwrites = tuple(r for r in op.writes if r[0] in ("v", "a"))
    if op.kind in ("valu", "trans"):
        slow = op.kind == "trans" or op.inst.op in QUARTER_RATE_CVT
        c.cycles = spec.quarter_cycles if slow else spec.valu_cycles
        c.weight = float(c.cycles)
        c.vreads = vr
    elif op.kind == "mfma":
        c.cycles = spec.valu_cycles
        c.passes = MFMA_PASSES[op.info["mfma"]]
        c.weight = 4.0 * c.passes
        c.flops = 2 * op.info["m"] * op.info["n"] * op.info["k"]
        c.vreads = vr[:2]
        c.srcc = vr[2] if len(vr) > 2 else None
    elif op.kind in ("vmem_load", "vmem_store", "lds_dma", "ds"):
        c.bytes_per_lane = op.info.get("bytes", 4)
        c.vreads = vr
    elif op.kind == "waitcnt":
        c.limits = op.info["limits"]
    elif op.kind == "nop":
        c.wait_states = op.info.get("wait_states", 1)
    elif op.kind == "other":
        if op.inst.op == "s_setprio":
            c.setprio = int(op.inst.operands[0].value)
        elif op.inst.op == "s_sleep":
            c.sleep = 64 * int(op.inst.operands[0].value)
    return c


def _loop_headers(sim: Simulator) -> dict[int, str]:
    """Instruction index -> label of every target of a backward branch (a loop header)."""
    names: dict[int, str] = {}
    for name, idx in sim.program.labels.items():
        if idx not in names or (names[idx].startswith(".L") is False and name.startswith(".L")):
            names.setdefault(idx, name)
    heads = {}
    for i, op in enumerate(sim.ops):
        if op.kind != "branch" or not op.inst.operands or op.inst.operands[0].kind != "label":
            continue
        tgt = sim.program.labels.get(op.inst.operands[0].name)
        if tgt is not None and tgt <= i:
            heads[tgt] = op.inst.operands[0].name
    return heads


# ---- the replay ----------------------------------------------------------------------------------------

STALLS = ("waitcnt", "barrier", "mfma_dep", "matrix_core", "valu_busy", "port", "nop", "branch", "drain")


class _Wave:
    __slots__ = ("pcs", "aux", "pos", "n", "ready", "done", "simd", "wg", "prio", "age", "vm", "lgkm",
                 "last_vm", "last_lds", "mres", "stall", "arrived_at", "last_head", "work")  # fmt: skip

    def __init__(self, tr: WaveTrace, simd: int, wg: _Wg, age: int, t: float) -> None:
        self.pcs, self.aux = tr.pcs, tr.aux
        self.pos, self.n = 0, len(tr.pcs)
        self.ready, self.done = t, False
        self.simd, self.wg, self.prio, self.age = simd, wg, 0, age
        self.vm: deque[float] = deque()
        self.lgkm: list[float] = []
        self.last_vm = self.last_lds = 0.0
        self.mres: dict[tuple[str, int], tuple[float, tuple]] = {}
        self.stall = wg.stall
        self.arrived_at = 0.0
        self.last_head: dict[int, float] = {}
        self.work = 0.0


class _Wg:
    __slots__ = ("slot", "trace_idx", "start", "waves", "live", "arrived", "stall", "loops")

    def __init__(self, slot: int, trace_idx: int, start: float) -> None:
        self.slot, self.trace_idx, self.start = slot, trace_idx, start
        self.waves: list[_Wave] = []
        self.live = 0
        self.arrived: list[_Wave] = []
        self.stall = dict.fromkeys(STALLS, 0.0)
        self.loops: dict[int, list[float]] = {}


@dataclass
class LoopTiming:
    """One loop (a backward-branch target): iterations per traced workgroup (from the traces) and
    the modelled cycles from one arrival at its header to the next, averaged over every wave and
    iteration of the full-occupancy replay (a wave's view, contention included)."""

    label: str
    iterations: list[int]  # back-edge iterations of each traced workgroup (all its waves / waves)
    cycles_per_iteration: float


@dataclass
class CuTiming:
    """Modelled timing of one CU running the traced workgroups at full occupancy."""

    occupancy: Occupancy
    slots: int
    window_cycles: float
    wg_cycles: list[float]  # cycles per run of each traced workgroup at full occupancy (slot time)
    wg_runs: list[float]  # runs completed in the window (in-flight runs by their issued fraction)
    mfma_flops: list[int]  # MFMA FLOPs of each traced workgroup
    mfma_busy: float  # fraction of the window the matrix cores were busy (all SIMDs)
    valu_busy: float
    loops: list[LoopTiming]
    stalls: list[dict[str, float]]  # per traced workgroup: wave-cycles stalled per reason per run
    spec: MachineModel = field(default_factory=MachineModel)

    def cu_tflops(self) -> float:
        """MFMA TFLOP/s of this CU in the window, times the chip's CU count (all CUs this busy)."""
        return self.mfma_busy_flops() / self.window_cycles * self.spec.clock_ghz * 1e9 * self.spec.cus / 1e12

    def mfma_busy_flops(self) -> float:
        """MFMA FLOPs completed in the window (each finished run counted)."""
        return sum(f * r for f, r in zip(self.mfma_flops, self.wg_runs, strict=True))


class _Cu:
    """The replay engine for one CU."""

    def __init__(self, sim: Simulator, spec: MachineModel) -> None:
        self.sim, self.spec = sim, spec
        self.costs = [_cost(op, spec) for op in sim.ops]
        self.heads = _loop_headers(sim)
        self.simd_waves: list[list[_Wave]] = [[] for _ in range(spec.simds)]
        self.dirty = [False] * spec.simds
        self.valu_free = [0.0] * spec.simds
        self.xdl_free = [0.0] * spec.simds
        self.xdl_busy = [0.0] * spec.simds
        self.xdl_owner: list[tuple[_Wave, int] | None] = [None] * spec.simds  # last MFMA: (wave, cycles)
        self.valu_busy = [0.0] * spec.simds
        self.vmem_free = 0.0
        self.lds_free = 0.0
        self.scache: OrderedDict[int, None] = OrderedDict()
        self.nlines = spec.scalar_cache_bytes // spec.scalar_line_bytes
        self.finished: list[tuple[_Wg, float]] = []  # ended, not yet handed to the dispatcher
        self.done_runs: list[tuple[_Wg, float]] = []
        self.slots_done: set[int] = set()
        self.slot_trace: list[int] = []
        self.work_cache: dict[int, float] = {}
        self.age = 0

    # ---- workgroups ----
    def start_wg(self, slot: int, trace_idx: int, traces: Sequence[WaveTrace], t: float) -> None:
        wg = _Wg(slot, trace_idx, t)
        nw = len(traces)
        for j, tr in enumerate(traces):
            simd = (slot * nw + j) % self.spec.simds
            w = _Wave(tr, simd, wg, self.age, t)
            self.age += 1
            wg.waves.append(w)
            self.simd_waves[simd].append(w)
            self.dirty[simd] = True
        wg.live = nw

    def _end_wave(self, w: _Wave, t: float) -> _Wg | None:
        w.done = True
        self.simd_waves[w.simd].remove(w)
        wg = w.wg
        wg.live -= 1
        if wg.live == 0:
            self.finished.append((wg, t))
            return wg
        self._maybe_release(wg, t)
        return None

    def _maybe_release(self, wg: _Wg, t: float) -> None:
        if wg.arrived and len(wg.arrived) == wg.live:
            rel = t + self.spec.barrier_cycles
            for a in wg.arrived:
                a.ready = rel
                wg.stall["barrier"] += rel - a.arrived_at
            wg.arrived = []

    # ---- one issue attempt ----
    def _mfma_dep(self, w: _Wave, c: _Cost) -> float:
        dep = 0.0
        mres = w.mres
        for file, idx, cnt in c.vreads:
            for r in range(idx, idx + cnt):
                e = mres.get((file, r))
                if e is not None and e[0] > dep:
                    dep = e[0]
        if c.srcc is not None:
            file, idx, cnt = c.srcc
            for r in range(idx, idx + cnt):
                e = mres.get((file, r))
                if e is not None and e[1] != c.srcc and e[0] > dep:
                    dep = e[0]  # srcC not exactly the previous result tuple: no forwarding
        return dep

    def _waitcnt(self, w: _Wave, lim: dict, t: float) -> float:
        vm = w.vm
        while vm and vm[0] <= t:
            vm.popleft()
        tw = t
        if len(vm) > lim["vmcnt"]:
            tw = vm[len(vm) - lim["vmcnt"] - 1]
        lg = [x for x in w.lgkm if x > t]
        w.lgkm = lg
        if len(lg) > lim["lgkmcnt"]:
            tw = max(tw, sorted(lg)[len(lg) - lim["lgkmcnt"] - 1])
        return tw

    def _scalar_latency(self, addr: int) -> int:
        line = addr // self.spec.scalar_line_bytes
        if line in self.scache:
            self.scache.move_to_end(line)
            return self.spec.smem_hit_latency
        self.scache[line] = None
        if len(self.scache) > self.nlines:
            self.scache.popitem(last=False)
        return self.spec.vmem_latency

    def issue(self, w: _Wave, t: float, ports: int) -> int:
        """Try to issue w's next instruction at time t; returns the ports used so far."""
        spec = self.spec
        pc = w.pcs[w.pos]
        c = self.costs[pc]
        cls = c.cls
        st = w.stall
        if cls == C_WAIT:
            tw = self._waitcnt(w, c.limits, t)
            if tw > t:
                st["waitcnt"] += tw - t
                w.ready = tw
                return ports
        elif cls == C_NOP:
            st["nop"] += spec.issue_cycles * (c.wait_states - 1)
            self._advance(w, pc, t, spec.issue_cycles * c.wait_states)
            return ports
        elif cls == C_BAR:
            self._advance(w, pc, t, INF)
            w.arrived_at = t
            w.wg.arrived.append(w)
            self._maybe_release(w.wg, t)
            return ports
        elif cls == C_END:
            # The wave's slot frees when its MFMAs and memory operations have finished.
            tw = max([t, *(e[0] for e in w.mres.values()), *w.vm, *w.lgkm])
            if tw > t:
                st["drain"] += tw - t
                w.ready = tw
                return ports
            self._advance(w, pc, t, INF)
            self._end_wave(w, t)
            return ports
        elif cls == C_OTHER:
            if c.setprio is not None:
                w.prio = c.setprio
                self.dirty[w.simd] = True
            self._advance(w, pc, t, spec.issue_cycles + c.sleep)
            return ports
        else:
            if ports & c.port:
                st["port"] += spec.issue_cycles
                w.ready = t + spec.issue_cycles
                return ports
            if not self._execute(w, c, t):
                return ports
            ports |= c.port
        delay = spec.issue_cycles
        if cls == C_BRANCH and w.pos + 1 < w.n and w.pcs[w.pos + 1] != pc + 1:
            delay = spec.branch_taken_cycles
            st["branch"] += delay - spec.issue_cycles
        self._advance(w, pc, t, delay)
        return ports

    def _execute(self, w: _Wave, c: _Cost, t: float) -> bool:
        """Claim the units an instruction needs at t; False (and w.ready set) when it must wait."""
        spec = self.spec
        cls, s, st = c.cls, w.simd, w.stall
        if c.vreads and w.mres:
            dep = self._mfma_dep(w, c)
            if dep > t:
                st["mfma_dep"] += dep - t
                w.ready = dep
                return False
        if cls in (C_VALU, C_MFMA):
            if self.valu_free[s] > t:
                st["valu_busy"] += self.valu_free[s] - t
                w.ready = self.valu_free[s]
                return False
            if cls == C_VALU and not spec.valu_mfma_coexec and self.xdl_free[s] > t:
                st["matrix_core"] += self.xdl_free[s] - t
                w.ready = self.xdl_free[s]
                return False
            if cls == C_MFMA:
                if self.xdl_free[s] > t:
                    st["matrix_core"] += self.xdl_free[s] - t
                    w.ready = self.xdl_free[s]
                    return False
                busy = 4 * c.passes
                self.xdl_free[s] = t + busy
                self.xdl_busy[s] += busy
                self.xdl_owner[s] = (w, busy)
                ready = t + 4 * (c.passes + spec.mfma_result_extra_passes)
                dst = c.vwrites[0]
                for r in range(dst[1], dst[1] + dst[2]):
                    w.mres[(dst[0], r)] = (ready, dst)
            else:
                self.valu_busy[s] += c.cycles
                for file, idx, cnt in c.vwrites:
                    for r in range(idx, idx + cnt):
                        w.mres.pop((file, r), None)
            self.valu_free[s] = t + c.cycles
        elif cls == C_VMEM:
            nbytes = w.aux[w.pos] * c.bytes_per_lane
            start = max(t, self.vmem_free)
            self.vmem_free = start + nbytes / spec.vmem_bytes_per_clk
            done = max(self.vmem_free + spec.vmem_latency, w.last_vm)
            w.last_vm = done
            w.vm.append(done)
        elif cls == C_LDS:
            nbytes = w.aux[w.pos] * c.bytes_per_lane
            start = max(t, self.lds_free)
            self.lds_free = start + nbytes / spec.lds_bytes_per_clk
            done = max(self.lds_free + spec.lds_latency, w.last_lds)
            w.last_lds = done
            w.lgkm.append(done)
        elif cls == C_SMEM:
            w.lgkm.append(t + self._scalar_latency(w.aux[w.pos]))
        return True

    def _advance(self, w: _Wave, pc: int, t: float, delay: float) -> None:
        if pc in self.heads:
            prev = w.last_head.get(pc)
            # An iteration = from one arrival at the header to the next via the back edge.
            if prev is not None and w.pos > 0 and w.pcs[w.pos - 1] > pc:
                w.wg.loops.setdefault(pc, []).append(t - prev)
            w.last_head[pc] = t
        w.work += self.costs[pc].weight
        w.pos += 1
        w.ready = t + delay

    # ---- the clock ----
    def run(self, next_wg: Callable[[int, float], tuple[int, Sequence[WaveTrace]] | None],
            slots: int, stop: Callable[[], bool]) -> float:  # fmt: skip
        """Run until `stop()` or nothing is left; next_wg(slot, t) gives a slot its next workgroup."""
        for slot in range(slots):
            nxt = next_wg(slot, 0.0)
            if nxt is not None:
                self.start_wg(slot, nxt[0], nxt[1], 0.0)
        t = 0.0
        step = self.spec.issue_cycles
        while True:
            nxt_t = INF
            for s in range(self.spec.simds):
                waves = self.simd_waves[s]
                if self.dirty[s]:
                    waves.sort(key=lambda w: (-w.prio, w.age))
                    self.dirty[s] = False
                ports = 0
                for w in list(waves):
                    if w.ready <= t and not w.done:
                        ports = self.issue(w, t, ports)
                    if not w.done and w.ready < nxt_t:
                        nxt_t = w.ready
            while self.finished:
                wg, tend = self.finished.pop(0)
                self.done_runs.append((wg, tend))
                self.slots_done.add(wg.slot)
                nxt = next_wg(wg.slot, tend)
                if nxt is not None:
                    self.start_wg(wg.slot, nxt[0], nxt[1], tend + step)
                    nxt_t = min(nxt_t, tend + step)
            if stop() or nxt_t == INF:
                return t
            t = max(t + step, math.ceil(nxt_t / step) * step)


def model_cu(
    sim: Simulator,
    traces: Sequence[Sequence[WaveTrace]],
    threads: int,
    spec: MachineModel = MI355X,
    waves_per_simd: int | None = None,
    dynamic_lds: int = 0,
) -> CuTiming:
    """Model one CU filled with the traced workgroups (cycled over its slots) at full occupancy.

    traces: one list of WaveTrace per traced workgroup (LaunchResult.traces values). The CU holds
    as many workgroups as the occupancy allows (or waves_per_simd, to ask "what if"); slot i runs
    traced workgroup (i // simds) % len(traces) again and again until every slot has finished one.
    """
    if not traces:
        raise ValueError("no traced workgroups: launch with trace=True")
    occ = occupancy(sim, threads, spec, dynamic_lds)
    if waves_per_simd is not None:
        wg_cap = waves_per_simd * spec.simds // occ.waves_per_wg
        occ = Occupancy(waves_per_simd, max(1, wg_cap), occ.waves_per_wg, "override")
    slots = occ.wgs_per_cu
    cu = _Cu(sim, spec)
    # Slots that share a SIMD pattern repeat every `period` slots; give each SIMD a mix of traces.
    period = spec.simds // math.gcd(occ.waves_per_wg, spec.simds)
    assign = [(i // period) % len(traces) for i in range(slots)]

    cu.slot_trace = assign

    def next_wg(slot: int, t: float) -> tuple[int, Sequence[WaveTrace]]:
        return assign[slot], traces[assign[slot]]

    window = cu.run(next_wg, slots, lambda: len(cu.slots_done) == slots)
    return _summarise(cu, occ, slots, window, traces, spec)


def _summarise(cu: _Cu, occ: Occupancy, slots: int, window: float, traces, spec: MachineModel) -> CuTiming:
    """Per-trace costs by throughput: window x slots of that trace / runs they completed.

    Runs still in flight at the end count by the fraction of their instructions issued. Averaging
    the elapsed time of finished runs instead would favour the oldest waves, which the issue
    arbiter serves first, and drop the runs cut off by the end of the window.
    """
    n = len(traces)
    runs = [0.0] * n
    nslots = [0] * n
    stalls = [dict.fromkeys(STALLS, 0.0) for _ in range(n)]
    loop_iters: dict[int, list[float]] = {}
    in_flight = {id(w.wg): w.wg for ws in cu.simd_waves for w in ws}
    # An MFMA still in the matrix core at the end of the window counts by the fraction it has done.
    unfinished: dict[int, float] = {}
    for s, own in enumerate(cu.xdl_owner):
        if own is not None and cu.xdl_free[s] > window:
            unfinished[id(own[0])] = cu.xdl_free[s] - window
    done_wgs = [wg for wg, _ in cu.done_runs]
    for wg in done_wgs + list(in_flight.values()):
        i = wg.trace_idx
        if id(wg) in in_flight:
            done = sum(w.work - unfinished.get(id(w), 0.0) for w in wg.waves)
            total = sum(_trace_work(cu, w) for w in wg.waves)
            runs[i] += done / max(total, 1e-9)
        else:
            runs[i] += 1
        for k, v in wg.stall.items():
            stalls[i][k] += v
        for pc, its in wg.loops.items():
            loop_iters.setdefault(pc, []).extend(its)
    for slot in range(slots):
        nslots[cu.slot_trace[slot]] += 1
    wg_cycles = [window * nslots[i] / runs[i] if runs[i] else math.nan for i in range(n)]
    stalls = [{k: v / runs[i] for k, v in stalls[i].items()} if runs[i] else stalls[i] for i in range(n)]
    loops = [
        LoopTiming(cu.heads[pc], [_iterations(wgt, pc) for wgt in traces], sum(v) / len(v))
        for pc, v in sorted(loop_iters.items())
    ]
    flops = [sum(cu.costs[pc].flops for tr in wgt for pc in tr.pcs) for wgt in traces]
    denom = max(window, 1.0) * spec.simds
    return CuTiming(
        occupancy=occ, slots=slots, window_cycles=window, wg_cycles=wg_cycles, wg_runs=runs,
        mfma_flops=flops, mfma_busy=min(1.0, sum(cu.xdl_busy) / denom),
        valu_busy=min(1.0, sum(cu.valu_busy) / denom), loops=loops, stalls=stalls, spec=spec,
    )  # fmt: skip


def _trace_work(cu: _Cu, w: _Wave) -> float:
    """Total weight of a wave's trace (cached per trace)."""
    key = id(w.pcs)
    if key not in cu.work_cache:
        cu.work_cache[key] = sum(cu.costs[pc].weight for pc in w.pcs)
    return cu.work_cache[key]


def _iterations(wg_traces: Sequence[WaveTrace], head: int) -> int:
    """Back-edge arrivals at `head` in a workgroup's traces, per wave."""
    n = 0
    for tr in wg_traces:
        p = tr.pcs
        n += sum(1 for i in range(1, len(p)) if p[i] == head and p[i - 1] > head)
    return round(n / max(1, len(wg_traces)))


def traces_of(result: LaunchResult) -> list[list[WaveTrace]]:
    """The traced workgroups of a launch, in launch order."""
    if not result.traces:
        raise ValueError("the launch recorded no traces: pass trace=True to Simulator.launch")
    return [result.traces[tuple(w)] for w in result.workgroups]


# ---- a whole launch -----------------------------------------------------------------------------------


@dataclass
class LaunchTiming:
    """Modelled time of a full launch on the chip."""

    cycles: float
    seconds: float
    workgroups: int
    slots: int
    fill: float  # workgroups / (CUs x slots): below 1 the chip is not full even at the start

    def tflops(self, flops: float) -> float:
        """Modelled TFLOP/s for a launch doing `flops` floating-point operations."""
        return flops / self.seconds / 1e12


def model_launch(costs: Sequence[float], slots_per_cu: int, spec: MachineModel = MI355X) -> LaunchTiming:
    """Dispatch workgroups (per-workgroup cycles, in dispatch order) over every CU slot of the chip."""
    nslots = spec.cus * slots_per_cu
    free = [0.0] * min(nslots, max(1, len(costs)))
    heapq.heapify(free)
    end = 0.0
    for c in costs:
        t = heapq.heappop(free) + c
        end = max(end, t)
        heapq.heappush(free, t)
    return LaunchTiming(end, end / (spec.clock_ghz * 1e9), len(costs), nslots, len(costs) / nslots)


def fit_linear(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares y = a + b x: (a, b, largest relative residual). One point: a = 0."""
    if len(set(xs)) < 2:
        b = sum(ys) / max(sum(xs), 1e-9)
        return 0.0, b, 0.0
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    res = max(abs(a + b * x - y) / max(abs(y), 1e-9) for x, y in zip(xs, ys, strict=True))
    return a, b, res


def format_cu(cu: CuTiming, names: Sequence[str] | None = None) -> list[str]:
    """Report lines for a CU model (every figure labelled modelled)."""
    occ = cu.occupancy
    out = [
        f"occupancy: {occ.waves_per_simd} waves/SIMD, {cu.slots} workgroups/CU of {occ.waves_per_wg} "
        f"wave(s) (limited by {occ.limiter})",
        f"modelled CU window: {cu.window_cycles:.0f} cycles; matrix cores busy {100 * cu.mfma_busy:.1f}% "
        f"(modelled), VALU busy {100 * cu.valu_busy:.1f}% (modelled)",
    ]
    for i, c in enumerate(cu.wg_cycles):
        name = names[i] if names else f"workgroup {i}"
        top = sorted(cu.stalls[i].items(), key=lambda kv: -kv[1])[:3]
        why = ", ".join(f"{k} {v:.0f}" for k, v in top if v > 0) or "none"
        out.append(f"  {name}: {c:.0f} modelled cycles per run at full occupancy; largest stalls "
                   f"(wave-cycles): {why}")  # fmt: skip
    for lp in cu.loops:
        its = "/".join(str(i) for i in lp.iterations)
        out.append(f"  loop {lp.label}: {lp.cycles_per_iteration:.0f} modelled cycles/iteration (a wave's "
                   f"view at full occupancy); iterations per traced workgroup {its}")  # fmt: skip
    return out


__all__ = [
    "MI355X",
    "CuTiming",
    "LaunchTiming",
    "LoopTiming",
    "MachineModel",
    "Occupancy",
    "fit_linear",
    "format_cu",
    "model_cu",
    "model_launch",
    "occupancy",
    "traces_of",
]
