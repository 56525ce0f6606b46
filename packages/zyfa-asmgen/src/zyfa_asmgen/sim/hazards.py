"""The hazard checker: outstanding-memory (s_waitcnt) tracking, LDS races, wait-state rules.

Counters (gfx9 family, which gfx950 belongs to):
  vmcnt   vector memory loads and stores (global/flat/buffer, LDS DMA); they return in issue order.
  lgkmcnt LDS (DS) instructions, which return in order, and scalar memory (s_load), which may
          return out of order: with any s_load outstanding only lgkmcnt(0) proves that a given
          one has completed.
  expcnt  exports and GDS; our kernels use neither.
An instruction's data is considered usable only after an s_waitcnt retires it under these rules;
reading or overwriting a register an outstanding load will write is reported, as is an LDS access
that overlaps an outstanding LDS-DMA write.

LDS races: every LDS byte remembers the last writing wave and its barrier epoch (the number of
s_barrier the wave has passed), and every wave the epoch of its last read. Two accesses from
different waves in the same epoch, at least one a write, are a race. A DS/LDS-DMA write still
outstanding (not waited for) when its wave reaches s_barrier is treated as landing after the
barrier, so a read in the next epoch by another wave races with it. An LDS-DMA write
(buffer_load ... lds, global_load_lds_*) is performed in LDS only when the s_waitcnt vmcnt that
covers it (or s_endpgm) retires it: the latest moment the hardware may land it (machine.py).

Wait-state rules (hazard_rules.py) are checked on the dynamic instruction stream of each wave.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .core import Op, Wave
from .hazard_rules import check as check_rules

if TYPE_CHECKING:
    from .machine import Workgroup


@dataclass(frozen=True)
class Finding:
    """One problem found while running a kernel."""

    kind: str  # 'waitcnt', 'lds_race', 'lds_oob', 'register', 'exec', 'hazard:<rule>', ...
    message: str
    workgroup: tuple[int, int, int]
    wave: int
    line: int
    text: str

    def __str__(self) -> str:
        return (
            f"[{self.kind}] wg{self.workgroup} wave{self.wave} line {self.line}: {self.text}: {self.message}"
        )


class Report:
    """Collects findings; the same (kind, line, message head) is kept once with a count."""

    def __init__(self, limit: int = 1000) -> None:
        self.findings: list[Finding] = []
        self.counts: dict[tuple, int] = {}
        self.limit = limit

    def add(self, f: Finding) -> None:
        """Record a finding (deduplicated by kind, line and message)."""
        key = (f.kind, f.line, f.message)
        if key in self.counts:
            self.counts[key] += 1
            return
        self.counts[key] = 1
        if len(self.findings) < self.limit:
            self.findings.append(f)

    def kinds(self) -> set[str]:
        """The set of finding kinds seen."""
        return {f.kind for f in self.findings}

    def __len__(self) -> int:
        return len(self.findings)


@dataclass
class Pending:
    """An issued memory instruction not yet retired by s_waitcnt."""

    seq: int
    counter: str  # 'vm' | 'lgkm'
    smem: bool
    writes: tuple
    op: Op
    lds_ranges: list = field(default_factory=list)  # (start, end) byte ranges written to LDS


class WaveChecker:
    """Per-wave bookkeeping: outstanding memory ops and the issued-instruction history."""

    def __init__(self, wave: Wave, wg: Workgroup, rules: list | None) -> None:
        self.wave = wave
        self.wg = wg
        self.seq = 0
        self.pending: dict[str, deque[Pending]] = {"vm": deque(), "lgkm": deque()}
        self.reg_pending: dict[tuple[str, int], Pending] = {}
        self.rules = rules or []
        # History for wait-state rules: (wait-state position after issue, op) newest last.
        self.history: deque[tuple[int, Op]] = deque(maxlen=64)
        self.ws = 0  # wait states elapsed since the wave started
        self.last_issue: Pending | None = None

    # ---- hooks called by the machine ----
    def before(self, op: Op) -> None:
        """Checks that need the state before `op` executes."""
        w = self.wave
        self.wg.last_lds_ranges = []
        if self.reg_pending:
            for file, idx, cnt in op.reads:
                self._check_regs(op, file, idx, cnt, "reads")
            for file, idx, cnt in op.writes:
                self._check_regs(op, file, idx, cnt, "overwrites", self._in_order_after(op))
        if self.rules:
            for name, need, prod, since in check_rules(op, self.history, self.ws, self.rules):
                self.wg.report(
                    w,
                    f"hazard:{name}",
                    f"needs {need} wait states after '{prod.inst.text}' (line {prod.inst.line}), has {since}",
                    op,
                )

    def after(self, op: Op) -> None:
        """Bookkeeping once `op` has executed."""
        kind = op.kind
        if kind == "waitcnt":
            before = len(self.pending["vm"]) + len(self.pending["lgkm"])
            self._waitcnt(op.info["limits"])
            # How many outstanding operations this s_waitcnt has retired over all runs: a wait that
            # never retires anything is redundant on the paths executed (seeded-bug tests use it).
            retired = before - len(self.pending["vm"]) - len(self.pending["lgkm"])
            op.info["retired"] = op.info.get("retired", 0) + retired
        elif "counter" in op.info:
            self.seq += 1
            p = Pending(self.seq, op.info["counter"], bool(op.info.get("smem")), op.writes, op)
            if op.kind == "lds_dma" or (op.kind == "ds" and op.info.get("lds") and not op.writes):
                p.lds_ranges = self.wg.last_lds_ranges
            self.pending[p.counter].append(p)
            for file, idx, cnt in op.writes:
                for r in range(idx, idx + cnt):
                    self.reg_pending[(file, r)] = p
            self.last_issue = p
        n = op.info.get("wait_states", 1)
        self.ws += n
        self.history.append((self.ws, op))

    def outstanding_lds_writes(self) -> list[Pending]:
        """DS writes of this wave not yet retired (LDS-DMA writes land only when retired)."""
        return [
            p for p in self.pending["lgkm"] if p.op.kind == "ds" and not p.op.writes and p.op.info.get("lds")
        ]

    def lds_dma_overlap(self, start: np.ndarray, nbytes: int) -> Pending | None:
        """An outstanding LDS-DMA write of this wave overlapping the given accesses, if any."""
        for p in self.pending["vm"]:
            for lo, hi in p.lds_ranges:
                if np.any((start < hi) & (start + nbytes > lo)):
                    return p
        return None

    # ---- internals ----
    def _in_order_after(self, op: Op):
        """For a load `op`: which outstanding loads it may overwrite the registers of.

        Loads that return in order on the same counter (vector memory on vmcnt; LDS on lgkmcnt)
        write their registers in issue order, so a newer one's data lands last and the s_waitcnt
        that covers the newer also covers the older: a write-after-write between them needs no
        wait (LLVM's SIInsertWaitcnts likewise skips VMEM write-after-write of one type). Scalar
        loads return out of order and are never exempt.
        """
        ctr = op.info.get("counter")
        if ctr is None or op.info.get("smem"):
            return None
        return lambda p: p.counter == ctr and not p.smem

    def _check_regs(self, op: Op, file: str, idx: int, cnt: int, how: str, exempt=None) -> None:
        for r in range(idx, idx + cnt):
            p = self.reg_pending.get((file, r))
            if p is not None and not (exempt is not None and exempt(p)):
                ctr = "vmcnt" if p.counter == "vm" else "lgkmcnt"
                self.wg.report(
                    self.wave,
                    "waitcnt",
                    f"{how} {file}{r} while '{p.op.inst.text}' (line {p.op.inst.line}) is outstanding "
                    f"(missing s_waitcnt {ctr})",
                    op,
                )
                return

    def _retire(self, p: Pending) -> None:
        for file, idx, cnt in p.writes:
            for r in range(idx, idx + cnt):
                if self.reg_pending.get((file, r)) is p:
                    del self.reg_pending[(file, r)]

    def _waitcnt(self, lim: dict[str, int]) -> None:
        vm = self.pending["vm"]
        while len(vm) > lim["vmcnt"]:
            self._retire(vm.popleft())
        lg = self.pending["lgkm"]
        n = lim["lgkmcnt"]
        if len(lg) <= n:
            return
        if n == 0:
            while lg:
                self._retire(lg.popleft())
            return
        # In-order LDS ops: the oldest (count - n) are proven complete; s_loads are not.
        lds = [p for p in lg if not p.smem]
        done = lds[: max(0, len(lds) - n)]
        for p in done:
            lg.remove(p)
            self._retire(p)

    def barrier(self) -> None:
        """Called when the wave arrives at s_barrier."""
        for p in self.outstanding_lds_writes():
            p.op.info.setdefault("_crossed", True)
            self.wg.lds_write_crossed_barrier(self.wave, p)


class LdsShadow:
    """Per-byte access history of one workgroup's LDS for race detection."""

    def __init__(self, size: int, nwaves: int) -> None:
        self.writer = np.full(size, -1, dtype=np.int16)
        self.write_epoch = np.full(size, -1, dtype=np.int32)
        self.read_epoch = np.full((max(nwaves, 1), size), -1, dtype=np.int32)
        self.write_line = np.zeros(size, dtype=np.int32)

    def access(self, wave: int, epoch: int, idx: np.ndarray, write: bool) -> str | None:
        """Record an access to byte indices idx; return a race description or None."""
        if idx.size == 0:
            return None
        wr = self.writer[idx]
        we = self.write_epoch[idx]
        conflict = (wr >= 0) & (wr != wave) & (we >= epoch)
        msg = None
        if conflict.any():
            k = int(np.flatnonzero(conflict)[0])
            msg = (
                f"{'writes' if write else 'reads'} LDS byte {int(idx[k])} written by wave {int(wr[k])} "
                f"(line {int(self.write_line[idx[k]])}) with no s_barrier in between"
            )
        if write and msg is None:
            others = (
                np.delete(self.read_epoch[:, idx], wave, axis=0) if self.read_epoch.shape[0] > 1 else None
            )
            if others is not None and others.size and (others >= epoch).any():
                wv, k = np.argwhere(others >= epoch)[0]
                wv = int(wv) + (1 if int(wv) >= wave else 0)
                msg = f"writes LDS byte {int(idx[k])} read by wave {wv} with no s_barrier in between"
        if write:
            self.writer[idx] = wave
            self.write_epoch[idx] = epoch
        else:
            self.read_epoch[wave, idx] = np.maximum(self.read_epoch[wave, idx], epoch)
        return msg
