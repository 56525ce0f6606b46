"""Launching a kernel: initial register state from the descriptor, workgroups of waves, barriers.

Usage:
    prog = parse_asm(text)
    sim = Simulator(prog, "kernel_name")
    mem = GlobalMemory(); q_addr = mem.map(q_array) ...
    result = sim.launch(grid=(gx, gy, gz), block=(64, 1, 1), kernarg=args_bytes, mem=mem)
    result.findings  -> hazards found; the output buffers were written in place.

The caller builds the kernarg bytes (the simulator knows nothing of the ZYFA ABI). Hidden kernel
arguments that the metadata lists after the caller's bytes (hidden_block_count_x, ...) are filled
in from the launch shape.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ops_memory, ops_mfma, ops_misc, ops_scalar, ops_vector  # noqa: F401  (register handlers)
from .asm import KernelInfo, Program, parse_asm
from .core import EXEC, LANES, M0, MASK32, VCC, Ctx, Op, Wave, compile_instruction
from .errors import Deadlock, LaunchError, SimError
from .hazards import Finding, LdsShadow, Report, WaveChecker
from .memory import GlobalMemory

LDS_LIMIT = 160 * 1024  # gfx950 LDS per workgroup
POISON = 0x7FBADBAD  # uninitialised registers: a NaN pattern as f32, a large int, a bad address


def _unsupported(err: SimError, op_text: str) -> Op:
    def fn(w: Wave) -> None:
        raise type(err)(str(err))

    return fn


@dataclass
class WaveTrace:
    """The instructions one wave executed, in order, for the timing model (timing.py).

    pcs: instruction indices into Simulator.ops. aux: per executed instruction, the number of
    active lanes for vector memory and LDS instructions, the byte address for scalar loads, and 0
    otherwise (what the timing model needs to cost them).
    """

    wave: int
    pcs: list[int] = field(default_factory=list)
    aux: list[int] = field(default_factory=list)


@dataclass
class LaunchResult:
    """Outcome of a launch: findings and counts."""

    report: Report
    instructions: int
    workgroups: list[tuple[int, int, int]]
    waves: int
    op_counts: dict[str, int] = field(default_factory=dict)
    # Dynamic instruction traces (launch(trace=True)): workgroup id -> one WaveTrace per wave.
    traces: dict[tuple[int, int, int], list[WaveTrace]] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        """All findings (deduplicated)."""
        return self.report.findings


class Simulator:
    """A compiled kernel ready to launch."""

    def __init__(self, program: Program | str, kernel: str | None = None, check: bool = True) -> None:
        self.program = parse_asm(program) if isinstance(program, str) else program
        self.kernel: KernelInfo = self.program.kernel(kernel)
        self.check = check
        ctx = Ctx(self.program.labels)
        self.ops: list[Op] = []
        self.compile_errors: list[str] = []
        for inst in self.program.instructions:
            try:
                self.ops.append(compile_instruction(inst, ctx))
            except SimError as e:
                # Deferred: an unsupported instruction fails when (and only if) it executes.
                self.compile_errors.append(str(e))
                self.ops.append(Op(_unsupported(e, inst.text), "unsupported", inst))
        self.desc = self.kernel.descriptor
        self.register_findings = self._static_register_check()

    # ---- descriptor helpers ----
    def _d(self, key: str, default: int = 0) -> int:
        v = self.desc.get(key, default)
        if not isinstance(v, int):
            raise LaunchError(f"descriptor field {key} = {v!r} is not a resolved integer")
        return v

    def vgpr_limits(self) -> tuple[int, int]:
        """(arch VGPRs, AGPRs) the descriptor allocates (gfx90a+ unified register file)."""
        nfv = self._d("next_free_vgpr", 0)
        acc = self._d("accum_offset", 4)
        if nfv > acc:
            return acc, nfv - acc
        return nfv, 0

    def sgpr_limit(self) -> int:
        """SGPRs the kernel may use (next_free_sgpr)."""
        return self._d("next_free_sgpr", 0)

    def lds_size(self, dynamic: int = 0) -> int:
        """LDS bytes of one workgroup."""
        return self._d("group_segment_fixed_size", 0) + dynamic

    def _static_register_check(self) -> list[tuple[Op, str]]:
        nv, na = self.vgpr_limits()
        ns = self.sgpr_limit()
        out = []
        if not any(f == "a" for op in self.ops for f, _, _ in op.reads + op.writes):
            # AGPRs sit at accum_offset in the unified file and alias nothing a kernel without AGPRs
            # touches: its VGPRs may use the whole allocation (AITER's fmha_v3_fwd kernels, run on
            # MI355X, use v160-v255 with accum_offset 160 and no AGPR).
            nv, na = nv + na, 0
        if nv + na > 512:
            out.append((None, f"descriptor allocates {nv} VGPRs + {na} AGPRs > 512"))
        for op in self.ops:
            for file, idx, cnt in op.reads + op.writes:
                top = idx + cnt
                if file == "v" and top > nv:
                    out.append((op, f"uses v{top - 1} but the descriptor allocates {nv} VGPRs"))
                elif file == "a" and top > na:
                    out.append((op, f"uses a{top - 1} but the descriptor allocates {na} AGPRs"))
                elif file == "s" and idx < 102 and top > ns:
                    out.append((op, f"uses s{top - 1} but next_free_sgpr is {ns}"))
        return out

    # ---- launch ----
    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
        mem: GlobalMemory,
        workgroups: Iterable[tuple[int, int, int]] | None = None,
        dynamic_lds: int = 0,
        wave_order: str = "forward",
        max_instructions: int = 50_000_000,
        rules: list | None = None,
        setup: Callable[[Workgroup], None] | None = None,
        trace: bool = False,
    ) -> LaunchResult:
        """Run the kernel for the given workgroups (default: all of the grid).

        setup, if given, is called on each workgroup after its initial state is set (tests use it
        to place register values); rules overrides the default wait-state rule list; trace=True
        records every wave's executed instructions in LaunchResult.traces (for sim.timing).
        """
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        nthreads = block[0] * block[1] * block[2]
        if nthreads > 1024 or nthreads < 1:
            raise LaunchError(f"block {block} has {nthreads} threads")
        maxwg = self.kernel.metadata.get(".max_flat_workgroup_size")
        if isinstance(maxwg, int) and nthreads > maxwg:
            raise LaunchError(f"block of {nthreads} threads > .max_flat_workgroup_size {maxwg}")
        lds = self.lds_size(dynamic_lds)
        if lds > LDS_LIMIT:
            raise LaunchError(f"LDS {lds} bytes > {LDS_LIMIT}")
        kbytes = self._kernarg_segment(kernarg, grid, block)
        kaddr = mem.map(np.frombuffer(kbytes, dtype=np.uint8).copy(), name="kernarg", readonly=True)
        report = Report()
        for op, msg in self.register_findings:
            line, text = (op.inst.line, op.inst.text) if op else (0, "")
            report.add(Finding("register", msg, (0, 0, 0), -1, line, text))
        if rules is None and self.check:
            from .hazard_rules import default_rules

            rules = default_rules()
        wgs = (
            list(workgroups)
            if workgroups is not None
            else [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
        )
        total = 0
        counts: dict[str, int] = {}
        traces: dict[tuple[int, int, int], list[WaveTrace]] = {}
        nwaves = (nthreads + LANES - 1) // LANES
        for wg_id in wgs:
            if any(not 0 <= wg_id[i] < grid[i] for i in range(3)):
                raise LaunchError(f"workgroup {wg_id} outside grid {grid}")
            wg = Workgroup(self, wg_id, grid, block, lds, mem, report, rules if self.check else None)
            wg.init_waves(kaddr, kbytes)
            if trace:
                wg.traces = [WaveTrace(w.wave_id) for w in wg.waves]
            if setup is not None:
                setup(wg)
            total += wg.run(wave_order, max_instructions)
            for k, v in wg.op_counts.items():
                counts[k] = counts.get(k, 0) + v
            if trace:
                traces[tuple(wg_id)] = wg.traces
        return LaunchResult(report, total, wgs, nwaves * len(wgs), counts, traces)

    def _kernarg_segment(self, kernarg: bytes, grid: tuple, block: tuple) -> bytes:
        """The caller's bytes, extended with hidden arguments the metadata asks for."""
        size = self.kernel.metadata.get(".kernarg_segment_size", self._d("kernarg_size", len(kernarg)))
        buf = bytearray(max(size, len(kernarg)))
        buf[: len(kernarg)] = kernarg
        counts = [grid[i] for i in range(3)]
        for arg in self.kernel.metadata.get(".args", []) or []:
            kind, off = arg.get(".value_kind", ""), arg.get(".offset", 0)
            if not kind.startswith("hidden_") or off < len(kernarg):
                continue
            vals: dict[str, Any] = {
                "hidden_block_count_x": ("<I", counts[0]),
                "hidden_block_count_y": ("<I", counts[1]),
                "hidden_block_count_z": ("<I", counts[2]),
                "hidden_group_size_x": ("<H", block[0]),
                "hidden_group_size_y": ("<H", block[1]),
                "hidden_group_size_z": ("<H", block[2]),
                "hidden_remainder_x": ("<H", 0),
                "hidden_remainder_y": ("<H", 0),
                "hidden_remainder_z": ("<H", 0),
                "hidden_grid_dims": ("<H", sum(1 for g in grid if g > 1) or 1),
            }
            if kind in vals:
                fmt, v = vals[kind]
                struct.pack_into(fmt, buf, off, v)
        return bytes(buf)


class Workgroup:
    """One workgroup: its waves, its LDS, race shadow, and the barrier logic."""

    def __init__(
        self,
        sim: Simulator,
        wg_id: tuple[int, int, int],
        grid: tuple,
        block: tuple,
        lds_size: int,
        mem: GlobalMemory,
        report: Report,
        rules: list | None,
    ) -> None:
        self.sim = sim
        self.wg_id = wg_id
        self.grid = grid
        self.block = block
        self.mem = mem
        self.lds = np.zeros(lds_size, dtype=np.uint8)
        self.report_sink = report
        self.rules = rules
        self.check = rules is not None
        n = block[0] * block[1] * block[2]
        self.nthreads = n
        self.waves = [Wave(self, i) for i in range((n + LANES - 1) // LANES)]
        self.shadow = LdsShadow(lds_size, len(self.waves)) if self.check else None
        self.last_lds_ranges: list = []
        self.op_counts: dict[str, int] = {}
        self.current_op: Op | None = None
        self.traces: list[WaveTrace] | None = None

    # ---- reporting ----
    def report(self, w: Wave, kind: str, msg: str, op: Op | None = None) -> None:
        """Record a finding at the wave's current instruction."""
        op = op or self.current_op
        line, text = (op.inst.line, op.inst.text) if op else (0, "")
        self.report_sink.add(Finding(kind, msg, self.wg_id, w.wave_id, line, text))

    # ---- initial state ----
    def init_waves(self, kaddr: int, kbytes: bytes) -> None:
        """Set SGPRs, VGPRs and EXEC of every wave per the kernel descriptor."""
        d = self.sim.desc
        get = self.sim._d
        if get("enable_private_segment", 0) or get("user_sgpr_private_segment_buffer", 0):
            raise LaunchError("kernels with scratch (private segment) are not supported")
        user: list[int] = []
        if get("user_sgpr_dispatch_ptr", 0):
            user += [0, 0]  # no AQL packet is modelled; a kernel reading it would fault
        if get("user_sgpr_queue_ptr", 0):
            user += [0, 0]
        if get("user_sgpr_kernarg_segment_ptr", 0):
            user += [kaddr & MASK32, kaddr >> 32]
        if get("user_sgpr_dispatch_id", 0):
            user += [0, 0]
        if get("user_sgpr_flat_scratch_init", 0):
            user += [0, 0]
        if get("user_sgpr_private_segment_size", 0):
            user += [0]
        plen, poff = get("user_sgpr_kernarg_preload_length", 0), get("user_sgpr_kernarg_preload_offset", 0)
        for i in range(plen):
            off = 4 * (poff + i)
            user.append(int.from_bytes(kbytes[off : off + 4].ljust(4, b"\0"), "little"))
        declared = d.get("user_sgpr_count")
        if isinstance(declared, int) and declared < len(user):
            raise LaunchError(f"user_sgpr_count {declared} < {len(user)} enabled user SGPRs")
        nuser = declared if isinstance(declared, int) else len(user)
        system: list[int] = []
        for axis, key in enumerate(("x", "y", "z")):
            if get(f"system_sgpr_workgroup_id_{key}", 1 if key == "x" else 0):
                system.append(self.wg_id[axis])
        if get("system_sgpr_workgroup_info", 0):
            system.append(0)
        tid_dims = get("system_vgpr_workitem_id", 0)
        bx, by, _ = self.block
        tids = np.arange(len(self.waves) * LANES)
        tx, ty, tz = tids % bx, (tids // bx) % by, tids // (bx * by)
        for w in self.waves:
            w.s = [POISON] * 128
            for i, v in enumerate(user):
                w.s[i] = v
            for i, v in enumerate(system):
                w.s[nuser + i] = v
            w.s[M0] = POISON
            w.s[VCC] = w.s[VCC + 1] = POISON
            w.v[:] = POISON
            w.a[:] = POISON
            lo = w.wave_id * LANES
            sl = slice(lo, lo + LANES)
            # gfx90a+ packs the work-item IDs into v0: x in [9:0], y in [19:10], z in [29:20].
            v0 = tx[sl].astype(np.uint32)
            if tid_dims >= 1:
                v0 |= ty[sl].astype(np.uint32) << np.uint32(10)
            if tid_dims >= 2:
                v0 |= tz[sl].astype(np.uint32) << np.uint32(20)
            w.v[0] = v0
            active = min(LANES, self.nthreads - lo)
            w.set_exec((1 << active) - 1 if active < LANES else (1 << 64) - 1)
            w.scc = 0
            w.pc = self.sim.kernel.entry
            if self.check:
                w.checker = WaveChecker(w, self, self.rules)

    # ---- execution ----
    def run(self, wave_order: str, max_instructions: int) -> int:
        """Run all waves to s_endpgm; return the number of instructions executed."""
        order = list(self.waves) if wave_order == "forward" else list(reversed(self.waves))
        total = 0
        while True:
            for w in order:
                if not w.done and not w.at_barrier:
                    total += self._run_wave(w, max_instructions)
            live = [w for w in self.waves if not w.done]
            if not live:
                return total
            if all(w.at_barrier for w in live):
                for w in live:
                    w.at_barrier = False
                    w.barriers_passed += 1
                continue
            raise Deadlock("waves neither finished nor reached a barrier")

    def _run_wave(self, w: Wave, budget: int) -> int:
        ops = self.sim.ops
        n_ops = len(ops)
        chk = w.checker
        counts = self.op_counts
        tr = self.traces[w.wave_id] if self.traces is not None else None
        n = 0
        while not w.done and not w.at_barrier:
            pc = w.pc
            if pc >= n_ops:
                raise SimError(f"wave {w.wave_id} ran past the last instruction (missing s_endpgm?)")
            op = ops[pc]
            self.current_op = op
            w.pc = pc + 1
            if tr is not None:
                tr.pcs.append(pc)
                tr.aux.append(_trace_aux(op, w))
            if chk is not None:
                chk.before(op)
            op.fn(w)
            if chk is not None:
                chk.after(op)
                if op.kind == "barrier":
                    chk.barrier()
            counts[op.kind] = counts.get(op.kind, 0) + 1
            n += 1
            w.executed += 1
            if w.executed > budget:
                raise Deadlock(f"wave {w.wave_id} exceeded {budget} instructions (infinite loop?)")
        return n

    # ---- LDS ----
    def _lds_bounds(self, w: Wave, addrs: np.ndarray, nbytes: int, op: Any) -> np.ndarray:
        ok = (addrs >= 0) & (addrs + nbytes <= self.lds.size)
        if not ok.all():
            bad = int(addrs[~ok][0])
            self.report(
                w, "lds_oob", f"LDS access [{bad}, +{nbytes}) outside the {self.lds.size}-byte allocation"
            )
        return ok

    def lds_read(self, w: Wave, addrs: np.ndarray, nbytes: int, inst: Any) -> np.ndarray:
        """Read nbytes at each LDS address; out-of-range lanes read 0 (and are reported)."""
        addrs = np.asarray(addrs, dtype=np.int64)
        ok = self._lds_bounds(w, addrs, nbytes, inst)
        out = np.zeros((addrs.size, nbytes), dtype=np.uint8)
        span = np.arange(nbytes)
        idx = addrs[ok][:, None] + span
        out[ok] = self.lds[idx]
        if self.check:
            p = w.checker.lds_dma_overlap(addrs[ok], nbytes)
            if p is not None:
                self.report(
                    w,
                    "waitcnt",
                    f"reads LDS written by outstanding '{p.op.inst.text}' (missing s_waitcnt vmcnt)",
                )
            msg = self.shadow.access(w.wave_id, w.barriers_passed, np.unique(idx.reshape(-1)), False)
            if msg:
                self.report(w, "lds_race", msg)
        return out

    def lds_write(self, w: Wave, addrs: np.ndarray, data: np.ndarray, inst: Any) -> None:
        """Write rows of bytes to LDS; out-of-range lanes are dropped (and reported)."""
        addrs = np.asarray(addrs, dtype=np.int64)
        nbytes = data.shape[1]
        ok = self._lds_bounds(w, addrs, nbytes, inst)
        idx = addrs[ok][:, None] + np.arange(nbytes)
        self.lds[idx] = data[ok]
        if self.check:
            flat = np.unique(idx.reshape(-1))
            msg = self.shadow.access(w.wave_id, w.barriers_passed, flat, True)
            if msg:
                self.report(w, "lds_race", msg)
            line = self.current_op.inst.line if self.current_op else 0
            self.shadow.write_line[flat] = line
            self.last_lds_ranges = _ranges(flat)

    def lds_write_crossed_barrier(self, w: Wave, p: Any) -> None:
        """An LDS write still in flight at s_barrier: it may land after the barrier."""
        ranges = p.lds_ranges or []
        for lo, hi in ranges:
            self.shadow.write_epoch[lo:hi] = np.maximum(self.shadow.write_epoch[lo:hi], w.barriers_passed + 1)

    def lds_dma_landed(self, w: Wave, p: Any) -> None:
        """An LDS-DMA load retired (its LDS bytes are now stable)."""


def _trace_aux(op: Op, w: Wave) -> int:
    """What the timing model needs beyond the op itself (see WaveTrace.aux); taken before it runs."""
    kind = op.kind
    if kind in ("vmem_load", "vmem_store", "lds_dma", "ds"):
        return w.exec_int.bit_count()
    if kind == "smem":
        addr = op.info.get("addr")
        return addr(w) if addr is not None else 0
    return 0


def _ranges(flat: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unique byte indices -> list of [lo, hi) runs."""
    if flat.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(flat) != 1)
    starts = np.concatenate([[flat[0]], flat[breaks + 1]])
    ends = np.concatenate([flat[breaks], [flat[-1]]]) + 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


__all__ = ["LaunchResult", "Simulator", "WaveTrace", "Workgroup", "EXEC"]
