"""Wave state, operand access and the instruction-handler registry shared by the semantics modules.

A wave's registers: SGPRs as a Python list of 32-bit ints indexed by the gfx9 operand number (so
vcc = 106/107, m0 = 124, exec = 126/127 live in the same list), SCC as an int, and VGPR / AGPR
files as numpy uint32 arrays of shape (256, 64): one row per register, one column per lane. Every
vector instruction works on whole rows, so a wave64 instruction is a handful of numpy calls.

Each parsed Instruction is compiled once into an `Op`: a closure `fn(wave)` plus what the hazard
checker and the timing model need (register reads/writes, instruction class).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .asm import Instruction, Operand, Reg, imm_bits
from .errors import UnknownInstruction, UnsupportedOperand

if TYPE_CHECKING:
    from .machine import Workgroup

LANES = 64
MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1
VCC, M0, EXEC = 106, 124, 126
_LANE_BITS = np.arange(LANES, dtype=np.uint64)


def mask_to_int(mask: np.ndarray) -> int:
    """64 lane booleans -> 64-bit int (bit l = lane l)."""
    return int(np.packbits(mask.astype(np.uint8), bitorder="little").view("<u8")[0])


def int_to_mask(v: int) -> np.ndarray:
    """64-bit int -> 64 lane booleans."""
    return ((np.uint64(v & MASK64) >> _LANE_BITS) & np.uint64(1)).astype(bool)


class Wave:
    """Architectural state of one wave64."""

    def __init__(self, wg: Workgroup, wave_id: int) -> None:
        self.wg = wg
        self.wave_id = wave_id
        self.s: list[int] = [0] * 128
        self.scc = 0
        self.v = np.zeros((256, LANES), dtype=np.uint32)
        self.a = np.zeros((256, LANES), dtype=np.uint32)
        self.pc = 0
        self.done = False
        self.at_barrier = False
        self.barriers_passed = 0
        self.executed = 0
        self._exec_key = -1
        self._exec_mask = np.zeros(LANES, dtype=bool)
        self.exec_full = False
        self.mode: dict[str, int] = {}
        self.checker: Any = None  # hazards.WaveChecker, set by the machine
        self.cycle = 0  # issue counter used by the hazard checker's wait-state accounting
        # Vector-memory operations in flight, oldest first (vmcnt returns in order): None, or the
        # LDS-DMA write (lds addresses, bytes, instruction) that lands when s_waitcnt retires it.
        self.vm_queue: deque = deque()
        self.dma_issued: tuple | None = None  # set by an LDS-DMA op for the machine to queue

    # ---- exec ----
    @property
    def exec_int(self) -> int:
        """EXEC as a 64-bit int."""
        return self.s[EXEC] | (self.s[EXEC + 1] << 32)

    @property
    def exec_mask(self) -> np.ndarray:
        """EXEC as 64 booleans (cached until EXEC changes)."""
        key = self.s[EXEC] | (self.s[EXEC + 1] << 32)
        if key != self._exec_key:
            self._exec_key = key
            self._exec_mask = int_to_mask(key)
            self.exec_full = key == MASK64
        return self._exec_mask

    def set_exec(self, v: int) -> None:
        """Write EXEC."""
        self.s[EXEC] = v & MASK32
        self.s[EXEC + 1] = (v >> 32) & MASK32

    # ---- scalar registers ----
    def sget(self, idx: int, count: int = 1) -> int:
        """Read `count` consecutive SGPRs as one little-endian int."""
        if count == 1:
            return self.s[idx]
        v = 0
        for i in range(count):
            v |= self.s[idx + i] << (32 * i)
        return v

    def sset(self, idx: int, value: int, count: int = 1) -> None:
        """Write `count` consecutive SGPRs from one int."""
        for i in range(count):
            self.s[idx + i] = (value >> (32 * i)) & MASK32
        if idx <= EXEC + 1 and idx + count > EXEC:
            self._exec_key = -1

    def lane_mask_get(self, idx: int) -> np.ndarray:
        """An SGPR pair holding a lane mask (vcc, s[n:n+1]) as booleans."""
        return int_to_mask(self.s[idx] | (self.s[idx + 1] << 32))

    def lane_mask_set(self, idx: int, mask: np.ndarray, only_exec: bool = True) -> None:
        """Write a lane mask to an SGPR pair. VALU compares write 0 for inactive lanes."""
        if only_exec:
            mask = mask & self.exec_mask
        self.sset(idx, mask_to_int(mask), 2)

    # ---- vector registers ----
    def vfile(self, file: str) -> np.ndarray:
        """The VGPR ('v') or AGPR ('a') file."""
        return self.v if file == "v" else self.a

    def vwrite(self, arr: np.ndarray, idx: int, val: np.ndarray) -> None:
        """Write one register row under EXEC."""
        m = self.exec_mask
        if self.exec_full:
            arr[idx] = val
        else:
            arr[idx] = np.where(m, val, arr[idx])


# ---- operand accessors (built once per instruction) ----------------------------------------


def _bcast(value: int) -> np.ndarray:
    a = np.full(LANES, value & MASK32, dtype=np.uint32)
    a.flags.writeable = False
    return a


def sreg_index(op: Operand) -> int:
    """SGPR index of a scalar register operand."""
    if op.kind != "reg" or op.reg.file != "s":
        raise UnsupportedOperand(f"expected a scalar register, got {op.text!r}")
    return op.reg.index


def scalar_src(op: Operand, width: int = 32, fmt: str = "i") -> Callable[[Wave], int]:
    """Reader for a scalar source (SGPR, special register, SCC or immediate) -> Python int."""
    nd = width // 32
    if op.kind == "reg":
        r = op.reg
        if r.file == "scc":
            return lambda w: w.scc
        if r.file != "s":
            raise UnsupportedOperand(f"scalar operand cannot be {op.text!r}")
        idx = r.index
        if nd == 1:
            return lambda w: w.s[idx]
        return lambda w: w.sget(idx, nd)
    if op.kind in ("int", "float"):
        # 64-bit operands sign-extend integer constants.
        val = op.value & MASK64 if width == 64 and op.kind == "int" else imm_bits(op, width, fmt)
        return lambda w: val
    raise UnsupportedOperand(f"scalar operand cannot be {op.text!r}")


def scalar_dst(op: Operand, width: int = 32) -> Callable[[Wave, int], None]:
    """Writer for a scalar destination."""
    idx = sreg_index(op)
    nd = width // 32
    if nd == 1 and not (EXEC <= idx <= EXEC + 1):

        def wr(w: Wave, v: int) -> None:
            w.s[idx] = v & MASK32

        return wr
    return lambda w, v: w.sset(idx, v, nd)


def vector_src(op: Operand, fmt: str = "i", width: int = 32) -> Callable[[Wave], np.ndarray]:
    """Reader for a 32-bit VALU source -> (64,) uint32 (VGPR, AGPR, SGPR broadcast, immediate)."""
    if width == 64:
        return vector_src64(op, fmt)
    if op.kind == "reg":
        r = op.reg
        if r.file == "v":
            i = r.index
            return lambda w: w.v[i]
        if r.file == "a":
            i = r.index
            return lambda w: w.a[i]
        if r.file == "s":
            i = r.index
            return lambda w: _bcast(w.s[i])
        raise UnsupportedOperand(f"vector source cannot be {op.text!r}")
    if op.kind in ("int", "float"):
        const = _bcast(imm_bits(op, 32, fmt))
        return lambda w: const
    raise UnsupportedOperand(f"vector source cannot be {op.text!r}")


def vector_src64(op: Operand, fmt: str = "i") -> Callable[[Wave], np.ndarray]:
    """Reader for a 64-bit VALU source (register pair or constant) -> (64,) uint64."""
    if op.kind == "reg":
        r = op.reg
        if r.file in ("v", "a"):
            i = r.index
            if r.count < 2:
                raise UnsupportedOperand(f"64-bit operand needs a register pair: {op.text!r}")
            if r.file == "v":
                return lambda w: w.v[i].astype(np.uint64) | (w.v[i + 1].astype(np.uint64) << np.uint64(32))
            return lambda w: w.a[i].astype(np.uint64) | (w.a[i + 1].astype(np.uint64) << np.uint64(32))
        if r.file == "s":
            i = r.index
            return lambda w: np.full(LANES, w.sget(i, 2), dtype=np.uint64)
        raise UnsupportedOperand(f"vector source cannot be {op.text!r}")
    if op.kind == "int":
        c = np.full(LANES, op.value & MASK64, dtype=np.uint64)
        return lambda w: c
    if op.kind == "float":
        c = np.full(LANES, imm_bits(op, 64, fmt), dtype=np.uint64)
        return lambda w: c
    raise UnsupportedOperand(f"vector source cannot be {op.text!r}")


def f32_src(op: Operand) -> Callable[[Wave], np.ndarray]:
    """Reader for an f32 source with the VOP3 abs/neg modifiers applied -> float32 (64,)."""
    raw = vector_src(op, "f")
    if op.abs and op.neg:
        return lambda w: -np.abs(raw(w).view(np.float32))
    if op.abs:
        return lambda w: np.abs(raw(w).view(np.float32))
    if op.neg:
        return lambda w: -(raw(w).view(np.float32))
    return lambda w: raw(w).view(np.float32)


def vdst_ref(op: Operand) -> tuple[str, int, int]:
    """(file, index, count) of a vector destination."""
    if op.kind != "reg" or op.reg.file not in ("v", "a"):
        raise UnsupportedOperand(f"expected a VGPR/AGPR destination, got {op.text!r}")
    return op.reg.file, op.reg.index, op.reg.count


def vector_dst(op: Operand) -> Callable[[Wave, np.ndarray], None]:
    """Writer for a 32-bit vector destination under EXEC."""
    file, idx, _ = vdst_ref(op)
    if file == "v":
        return lambda w, val: w.vwrite(w.v, idx, val)
    return lambda w, val: w.vwrite(w.a, idx, val)


def vector_dst64(op: Operand) -> Callable[[Wave, np.ndarray], None]:
    """Writer for a 64-bit vector destination (uint64 lanes) under EXEC."""
    file, idx, _ = vdst_ref(op)

    def wr(w: Wave, val: np.ndarray) -> None:
        arr = w.vfile(file)
        val = val.astype(np.uint64)
        w.vwrite(arr, idx, (val & np.uint64(MASK32)).astype(np.uint32))
        w.vwrite(arr, idx + 1, (val >> np.uint64(32)).astype(np.uint32))

    return wr


# ---- register read/write sets for the hazard checker -----------------------------------------

RegSet = tuple[tuple[str, int, int], ...]


def reg_of(op: Operand) -> tuple[str, int, int] | None:
    """(file, index, count) of a register operand, None for constants."""
    if op.kind != "reg":
        return None
    return (op.reg.file, op.reg.index, op.reg.count)


def regs(*ops: Operand | None, widths: tuple[int, ...] | None = None) -> RegSet:
    """Register set of the given operands (constants skipped)."""
    out = []
    for i, op in enumerate(ops):
        if op is None:
            continue
        r = reg_of(op)
        if r is None:
            continue
        if widths is not None and widths[i] > 32 and r[2] == 1:
            r = (r[0], r[1], widths[i] // 32)
        out.append(r)
    return tuple(out)


# ---- compiled ops and the registry -------------------------------------------------------------


@dataclass
class Op:
    """One compiled instruction.

    kind: the instruction class the hazard checker and timing model use: 'salu', 'smem', 'valu',
    'trans' (transcendental VALU), 'mfma', 'vmem_load', 'vmem_store', 'lds_dma', 'ds', 'branch',
    'waitcnt', 'barrier', 'nop', 'end', 'other'. reads/writes: register sets (SCC/VCC/EXEC and
    M0 appear as 's' indices or the 'scc' file).
    """

    fn: Callable[[Wave], Any]
    kind: str
    inst: Instruction
    reads: RegSet = ()
    writes: RegSet = ()
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ctx:
    """Compile-time context: label table of the program."""

    labels: dict[str, int]


Handler = Callable[[Instruction, Ctx], Op]
HANDLERS: dict[str, Handler] = {}
PATTERN_HANDLERS: list[tuple[re.Pattern[str], Handler]] = []


def handler(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for exact canonical mnemonics."""

    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn

    return deco


def pattern_handler(regex: str) -> Callable[[Handler], Handler]:
    """Register a handler for every canonical mnemonic matching regex (checked after exact names)."""

    def deco(fn: Handler) -> Handler:
        PATTERN_HANDLERS.append((re.compile(regex), fn))
        return fn

    return deco


def compile_instruction(inst: Instruction, ctx: Ctx) -> Op:
    """Compile one instruction; UnknownInstruction if no family implements it."""
    h = HANDLERS.get(inst.op)
    if h is None:
        for rx, fn in PATTERN_HANDLERS:
            if rx.fullmatch(inst.op):
                h = fn
                break
    if h is None:
        raise UnknownInstruction(
            f"line {inst.line}: instruction {inst.op!r} is not implemented ({inst.text})"
        )
    try:
        return h(inst, ctx)
    except (UnknownInstruction, UnsupportedOperand) as e:
        raise type(e)(f"line {inst.line}: {e} [{inst.text}]") from None


def check_no_mods(inst: Instruction, allowed: set[str]) -> None:
    """Reject modifiers this handler does not implement (never ignore them silently)."""
    bad = [m for m in inst.mods if m not in allowed]
    if bad:
        raise UnsupportedOperand(f"modifier(s) {bad} not implemented for {inst.op}")


def label_target(op: Operand, ctx: Ctx) -> int:
    """Instruction index of a branch target label."""
    if op.kind != "label" or op.name not in ctx.labels:
        raise UnsupportedOperand(f"unknown branch target {op.text!r}")
    return ctx.labels[op.name]


def as_reg(file: str, idx: int, count: int = 1) -> Operand:
    """A synthetic register operand (implicit operands such as VCC)."""
    return Operand(kind="reg", text=f"{file}{idx}", reg=Reg(file, idx, count))
