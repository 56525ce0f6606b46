"""Shared VALU machinery: source fetch with DPP / SDWA / abs / neg, destination write with clamp,
output modifier, SDWA dst_sel and EXEC.

DPP (gfx9): only src0 of a VOP1/VOP2 instruction is permuted. A lane whose source lane is out of
range, or inactive in EXEC, reads 0 when bound_ctrl is set and is not written otherwise; rows and
banks cleared in row_mask/bank_mask are not written. (LLVM prints bound_ctrl:0 for the set bit,
an SP3 quirk; the parser reads any bound_ctrl:<n> as "set".)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .asm import Instruction, Operand
from .core import LANES, MASK32, Wave, reg_of, vdst_ref, vector_src
from .errors import UnsupportedOperand

_L = np.arange(LANES)

DPP_MODS = {"row_mask", "bank_mask", "bound_ctrl", "fi"}
SDWA_MODS = {"dst_sel", "dst_unused", "src0_sel", "src1_sel"}
_SEL = {
    "BYTE_0": (0, 8),
    "BYTE_1": (8, 8),
    "BYTE_2": (16, 8),
    "BYTE_3": (24, 8),
    "WORD_0": (0, 16),
    "WORD_1": (16, 16),
    "DWORD": (0, 32),
}


def dpp_source_lanes(mods: dict) -> np.ndarray:
    """Source lane for each lane under the DPP control in mods; -1 where out of range."""
    if "quad_perm" in mods:
        p = mods["quad_perm"]
        return (_L & ~3) + np.array(p)[_L & 3]
    row, pos = _L & ~15, _L & 15
    if "row_shl" in mods:
        n = mods["row_shl"]
        return np.where(pos + n < 16, _L + n, -1)
    if "row_shr" in mods:
        n = mods["row_shr"]
        return np.where(pos - n >= 0, _L - n, -1)
    if "row_ror" in mods:
        return row + ((pos - mods["row_ror"]) % 16)
    if "wave_shl" in mods:
        return np.where(_L + 1 < LANES, _L + 1, -1)
    if "wave_rol" in mods:
        return (_L + 1) % LANES
    if "wave_shr" in mods:
        return np.where(_L >= 1, _L - 1, -1)
    if "wave_ror" in mods:
        return (_L - 1) % LANES
    if "row_mirror" in mods:
        return row + 15 - pos
    if "row_half_mirror" in mods:
        return (_L & ~7) + 7 - (_L & 7)
    if "row_bcast" in mods:
        n = mods["row_bcast"]
        if n == 15:
            return np.where(_L >= 16, row - 1, -1)
        if n == 31:
            return np.where(_L >= 32, 31, -1)
        raise UnsupportedOperand(f"row_bcast:{n}")
    if "row_newbcast" in mods:
        return row + mods["row_newbcast"]
    raise UnsupportedOperand(f"DPP control not implemented: {mods}")


@dataclass
class DPP:
    """Precomputed DPP lane routing."""

    src: np.ndarray  # source lane per lane (clipped to 0..63)
    oob: np.ndarray  # lane's source is out of range
    write_mask: np.ndarray  # lanes enabled by row_mask/bank_mask
    bound_ctrl: bool

    @classmethod
    def from_mods(cls, mods: dict) -> DPP:
        src = dpp_source_lanes(mods)
        row_mask = mods.get("row_mask", 0xF)
        bank_mask = mods.get("bank_mask", 0xF)
        wm = ((row_mask >> (_L // 16)) & 1).astype(bool) & ((bank_mask >> ((_L // 4) % 4)) & 1).astype(bool)
        return cls(np.where(src < 0, 0, src), src < 0, wm, "bound_ctrl" in mods)

    def apply(self, w: Wave, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(permuted src0, lanes that may be written)."""
        invalid = self.oob | ~w.exec_mask[self.src]
        y = x[self.src]
        if self.bound_ctrl:
            return np.where(invalid, np.zeros_like(y), y), self.write_mask
        return y, self.write_mask & ~invalid


def sdwa_extract(x: np.ndarray, sel: str, signed: bool) -> np.ndarray:
    """SDWA source select: bits of the selected byte/word, zero- or sign-extended."""
    sh, n = _SEL[sel]
    if n == 32:
        return x
    v = (x >> np.uint32(sh)) & np.uint32((1 << n) - 1)
    if signed:
        v = (v.astype(np.int64) - ((v >> np.uint32(n - 1)) & 1).astype(np.int64) * (1 << n)).astype(np.int64)
        return (v & MASK32).astype(np.uint32)
    return v


class ValuBuilder:
    """Builds a VALU op: fetches sources with modifiers, writes the destination under EXEC.

    types: per source 'f32' (float32 view, abs/neg applied), 'u32' (raw bits), 'i32' (int64 values
    of the signed 32-bit interpretation) or 'u64'/'f64' for 64-bit sources.
    """

    def __init__(self, inst: Instruction, srcs: list[Operand], types: list[str], allowed: set[str]):
        self.inst = inst
        mods = inst.mods
        bad = [m for m in mods if m not in allowed | DPP_MODS | SDWA_MODS | _DPP_CTRL_NAMES]
        if bad:
            raise UnsupportedOperand(f"modifier(s) {bad} not implemented for {inst.op}")
        self.dpp = DPP.from_mods(mods) if inst.enc == "dpp" else None
        self.sdwa = inst.enc == "sdwa"
        self.fetch = [self._fetcher(i, op, t) for i, (op, t) in enumerate(zip(srcs, types, strict=True))]

    def _fetcher(self, i: int, op: Operand, t: str) -> Callable[[Wave], np.ndarray]:
        width = 64 if t in ("u64", "f64", "i64") else 32
        raw = vector_src(op, "f" if t.startswith("f") else "i", width)
        if (op.neg or op.abs) and not t.startswith("f"):
            raise UnsupportedOperand(f"neg/abs on integer operand {op.text!r}")
        if self.sdwa and width == 32:
            sel = self.inst.mods.get(f"src{i}_sel", "DWORD") if i < 2 else "DWORD"
            sx = op.sext
            base = raw
            raw = lambda w, base=base, sel=sel, sx=sx: sdwa_extract(base(w), sel, sx)  # noqa: E731
        if t == "f32":
            ab, ng = op.abs, op.neg
            r = raw

            def f(w: Wave) -> np.ndarray:
                x = r(w).view(np.float32)
                if ab:
                    x = np.abs(x)
                if ng:
                    x = -x
                return x

            return f
        if t == "f64":
            ab, ng = op.abs, op.neg
            r = raw

            def f64(w: Wave) -> np.ndarray:
                x = r(w).view(np.float64)
                if ab:
                    x = np.abs(x)
                if ng:
                    x = -x
                return x

            return f64
        if t == "i32":
            return lambda w: raw(w).view(np.int32).astype(np.int64)
        return raw

    def sources(self, w: Wave) -> tuple[list[np.ndarray], np.ndarray | None]:
        """Fetch all sources; with DPP also return the lanes that may be written (else None)."""
        vals = [f(w) for f in self.fetch]
        wmask = None
        if self.dpp is not None:
            x = vals[0]
            bits = x.view(np.uint32) if x.dtype == np.float32 else x
            y, wmask = self.dpp.apply(w, bits)
            vals[0] = y.view(np.float32) if x.dtype == np.float32 else y
        return vals, wmask


_DPP_CTRL_NAMES = {
    "quad_perm", "row_shl", "row_shr", "row_ror", "wave_shl", "wave_rol", "wave_shr", "wave_ror",
    "row_mirror", "row_half_mirror", "row_bcast", "row_newbcast",
}  # fmt: skip


def f32_out(inst: Instruction) -> Callable[[np.ndarray], np.ndarray]:
    """Apply the VOP3 output modifier (mul:2/4, div:2) and clamp to an f32 result."""
    omod = inst.mods.get("mul", 1)
    div = inst.mods.get("div", 1)
    clamp = bool(inst.mods.get("clamp", False))
    scale = np.float32(omod) / np.float32(div)

    def out(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if scale != 1:
            x = (x * scale).astype(np.float32)
        if clamp:
            # DX10_CLAMP (mode bit set by our descriptors): NaN clamps to 0.
            x = np.where(np.isnan(x), np.float32(0), np.clip(x, np.float32(0), np.float32(1))).astype(
                np.float32
            )
        return x.view(np.uint32)

    return out


def write_lanes(w: Wave, arr: np.ndarray, idx: int, val: np.ndarray, extra: np.ndarray | None) -> None:
    """Write one register row under EXEC (and an extra lane mask from DPP if given)."""
    if extra is None:
        w.vwrite(arr, idx, val)
        return
    m = w.exec_mask & extra
    arr[idx] = np.where(m, val, arr[idx])


def sdwa_dst(inst: Instruction) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Merge a result into the old destination per SDWA dst_sel / dst_unused."""
    sel = inst.mods.get("dst_sel", "DWORD")
    unused = inst.mods.get("dst_unused", "UNUSED_PRESERVE")
    sh, n = _SEL[sel]
    if n == 32:
        return lambda old, val: val
    m = np.uint32(((1 << n) - 1) << sh)

    def merge(old: np.ndarray, val: np.ndarray) -> np.ndarray:
        field = (val << np.uint32(sh)) & m
        if unused == "UNUSED_PRESERVE":
            return (old & ~m) | field
        if unused == "UNUSED_SEXT":
            sign = (val >> np.uint32(n - 1)) & np.uint32(1)
            hi = np.where(sign == 1, np.uint32(MASK32) & ~np.uint32((1 << (sh + n)) - 1), np.uint32(0))
            return field | hi.astype(np.uint32)
        return field

    return merge


def dst_writer(inst: Instruction, dst: Operand) -> Callable[[Wave, np.ndarray, np.ndarray | None], None]:
    """Destination writer: SDWA merge, EXEC and DPP masks."""
    file, idx, _ = vdst_ref(dst)
    merge = sdwa_dst(inst) if inst.enc == "sdwa" else None

    def wr(w: Wave, val: np.ndarray, extra: np.ndarray | None) -> None:
        arr = w.v if file == "v" else w.a
        if merge is not None:
            val = merge(arr[idx], val)
        write_lanes(w, arr, idx, val, extra)

    return wr


def src_regs(srcs: list[Operand], types: list[str]) -> tuple:
    """Register read set of VALU sources."""
    out = []
    for op, t in zip(srcs, types, strict=True):
        r = reg_of(op)
        if r is None:
            continue
        if t in ("u64", "f64", "i64") and r[2] == 1:
            r = (r[0], r[1], 2)
        out.append(r)
    return tuple(out)
