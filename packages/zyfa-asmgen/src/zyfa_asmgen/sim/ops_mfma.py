"""MFMA semantics by logical (i, k, j) through the oracle layout tables.

Lane/register positions come only from data/mfma_layouts.npz, a re-encoding of the oracle layouts
in tests/sim/data/oracles/mfma_layouts (see _gen_layouts.py). D[i][j] = C[i][j] + sum_k A[i][k] B[k][j]
is computed in float64 and rounded once to f32: the products of bf16/fp8 inputs are exact, and the
chip's internal accumulation order and precision are not documented, so a kernel must not depend
on them (the oracle golden vectors are exact under any order).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from .asm import Instruction
from .core import LANES, Ctx, Op, Wave, handler, reg_of, vdst_ref
from .errors import UnsupportedOperand
from .fp import bf16_bits_to_f32, fp8_decode

_DATA = Path(__file__).parent / "data" / "mfma_layouts.npz"

# Instruction -> (layout name, A format, B format). Formats: 'bf16', 'e4m3', 'e5m2', or 'f8f6f4'
# (format chosen per instruction by cbsz for A and blgp for B: 0 = e4m3, 1 = e5m2).
MFMA = {
    "v_mfma_f32_32x32x16_bf16": ("v_mfma_f32_32x32x16_bf16", "bf16", "bf16"),
    "v_mfma_f32_16x16x32_bf16": ("v_mfma_f32_16x16x32_bf16", "bf16", "bf16"),
    "v_mfma_f32_32x32x8_bf16": ("v_mfma_f32_32x32x8_bf16", "bf16", "bf16"),
    "v_mfma_f32_16x16x16_bf16": ("v_mfma_f32_16x16x16_bf16", "bf16", "bf16"),
    "v_mfma_f32_32x32x64_f8f6f4": ("v_mfma_f32_32x32x64_f8f6f4", "f8f6f4", "f8f6f4"),
    "v_mfma_f32_16x16x128_f8f6f4": ("v_mfma_f32_16x16x128_f8f6f4", "f8f6f4", "f8f6f4"),
}
for _a in ("fp8", "bf8"):
    for _b in ("fp8", "bf8"):
        _fa, _fb = ("e4m3" if _a == "fp8" else "e5m2"), ("e4m3" if _b == "fp8" else "e5m2")
        MFMA[f"v_mfma_f32_32x32x16_{_a}_{_b}"] = ("v_mfma_f32_32x32x16_fp8_fp8", _fa, _fb)
        MFMA[f"v_mfma_f32_16x16x32_{_a}_{_b}"] = ("v_mfma_f32_16x16x32_fp8_fp8", _fa, _fb)


@cache
def layout(name: str) -> dict[str, np.ndarray]:
    """The layout tables of one MFMA: A (M,K,3), B (K,N,3), D (M,N,3) of [lane, reg, lo] and meta."""
    with np.load(_DATA) as z:
        return {k: z[f"{name}/{k}"] for k in ("A", "B", "D", "meta")}


def _gather(regs: np.ndarray, tab: np.ndarray, bits: int) -> np.ndarray:
    """Element bit patterns at the table positions from a (nregs, 64) register block."""
    lane, reg, lo = tab[..., 0], tab[..., 1], tab[..., 2]
    words = regs[reg.astype(np.int64), lane.astype(np.int64)]
    mask = np.uint32((1 << bits) - 1) if bits < 32 else np.uint32(0xFFFFFFFF)
    return (words >> lo.astype(np.uint32)) & mask


def decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    """Element codes -> float64 values."""
    if fmt == "bf16":
        return bf16_bits_to_f32(codes).astype(np.float64)
    return fp8_decode(codes, fmt).astype(np.float64)


class MfmaSemantics:
    """Compute D from register blocks for one MFMA instruction and operand formats."""

    def __init__(self, name: str, fmt_a: str, fmt_b: str) -> None:
        t = layout(name)
        self.A, self.B, self.D = t["A"], t["B"], t["D"]
        m, n, k, bits_a, bits_b, ra, rb, rd = (int(x) for x in t["meta"])
        self.m, self.n, self.k = m, n, k
        self.bits_a, self.bits_b = bits_a, bits_b
        self.regs_a, self.regs_b, self.regs_d = ra, rb, rd
        self.fmt_a, self.fmt_b = fmt_a, fmt_b
        # Output scatter indices: flat position reg*64 + lane of each D[i][j].
        self.d_flat = (self.D[..., 1].astype(np.int64) * LANES + self.D[..., 0]).reshape(-1)

    def matrices(self, a_regs: np.ndarray, b_regs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Logical A (M x K) and B (K x N) as float64."""
        a = decode(_gather(a_regs, self.A, self.bits_a), self.fmt_a)
        b = decode(_gather(b_regs, self.B, self.bits_b), self.fmt_b)
        return a, b

    def run(self, a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray) -> np.ndarray:
        """D register block (regs_d, 64) uint32."""
        a, b = self.matrices(a_regs, b_regs)
        with np.errstate(invalid="ignore", over="ignore"):
            c = _gather(c_regs, self.D, 32).view(np.float32).astype(np.float64)
            d = (c + a @ b).astype(np.float32)
        out = np.zeros(self.regs_d * LANES, dtype=np.uint32)
        out[self.d_flat] = d.view(np.uint32).reshape(-1)
        return out.reshape(self.regs_d, LANES)


_F8 = {0: "e4m3", 1: "e5m2"}


@handler(*MFMA)
def _mfma(inst: Instruction, ctx: Ctx) -> Op:
    name, fa, fb = MFMA[inst.op]
    mods = inst.mods
    bad = [m for m in mods if m not in ("cbsz", "abid", "blgp")]
    if bad:
        raise UnsupportedOperand(f"modifiers {bad} on {inst.op}")
    if fa == "f8f6f4":
        cbsz, blgp = mods.get("cbsz", 0), mods.get("blgp", 0)
        if cbsz not in _F8 or blgp not in _F8 or mods.get("abid", 0):
            raise UnsupportedOperand(
                f"f8f6f4 formats cbsz={cbsz} blgp={blgp}: only fp8/bf8 (0/1) have oracle layouts"
            )
        fa, fb = _F8[cbsz], _F8[blgp]
    elif any(mods.get(k, 0) for k in ("cbsz", "abid", "blgp")):
        raise UnsupportedOperand(f"{inst.op}: broadcast controls cbsz/abid/blgp are not modelled")
    sem = MfmaSemantics(name, fa, fb)
    dst, sa, sb, sc = inst.operands
    fd, di, nd = vdst_ref(dst)
    fa_, ai, na = vdst_ref(sa)
    fb_, bi, nb = vdst_ref(sb)
    if (nd, na, nb) != (sem.regs_d, sem.regs_a, sem.regs_b):
        raise UnsupportedOperand(
            f"{inst.op}: register tuple sizes {nd},{na},{nb} != {sem.regs_d},{sem.regs_a},{sem.regs_b}"
        )
    if sc.kind == "reg":
        fc, ci, nc = vdst_ref(sc)
        if nc != sem.regs_d or fc != fd:
            raise UnsupportedOperand(f"{inst.op}: C and D must be the same file and size")

        def cget(w: Wave) -> np.ndarray:
            return w.vfile(fc)[ci : ci + nc]

    elif sc.kind in ("int", "float"):
        from .asm import imm_bits

        cval = np.full((sem.regs_d, LANES), imm_bits(sc, 32, "f"), dtype=np.uint32)

        def cget(w: Wave) -> np.ndarray:
            return cval

    else:
        raise UnsupportedOperand(f"bad MFMA C operand {sc.text!r}")

    def fn(w: Wave) -> None:
        if not w.exec_full and not w.exec_mask.all():
            # The ISA executes MFMA for the whole wave regardless of EXEC; kernels keep EXEC full.
            w.wg.report(w, "exec", f"{inst.op} executed with a partial EXEC mask")
        d = sem.run(w.vfile(fa_)[ai : ai + na], w.vfile(fb_)[bi : bi + nb], cget(w))
        w.vfile(fd)[di : di + nd] = d

    reads = ((fa_, ai, na), (fb_, bi, nb)) + (((reg_of(sc)),) if sc.kind == "reg" else ())
    info = {"m": sem.m, "n": sem.n, "k": sem.k, "mfma": name, "fmt": (fa, fb)}
    return Op(fn, "mfma", inst, reads, ((fd, di, nd),), info=info)


def reference_mfma(name: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> dict:
    """Build register images (A, B, C) for logical matrices with the layout: (a_regs, b_regs, c_regs).

    Used by tests to build inputs; the inverse of `MfmaSemantics.matrices` for codes.
    """
    t = layout(name)
    ra, rb, rd = (int(x) for x in t["meta"][5:8])
    out = {}
    for key, codes, nregs in (("A", a, ra), ("B", b, rb), ("D", c, rd)):
        regs = np.zeros((nregs, LANES), dtype=np.uint32)
        tab = t[key]
        lane, reg, lo = (tab[..., i].astype(np.int64) for i in range(3))
        np.bitwise_or.at(
            regs, (reg, lane), (codes.astype(np.uint64).astype(np.uint32) << lo.astype(np.uint32))
        )
        out[key] = regs
    return out
