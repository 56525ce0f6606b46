"""gfx950 machine code -> LLVM-syntax assembly, one line per instruction.

The encodings come from AMD's CDNA4 ISA tables as the `tinygrad` wheel ships them (pinned: the
`decode` extra of zyfa-asmgen): `tinygrad.renderer.amd.decode_inst(data, "cdna")` splits an encoding
into its fields and names the opcode, and its operand table gives each operand's width. This module
prints those fields in the syntax of LLVM's AMDGPU assembler (AMDGPUOperandSyntax /
AMDGPUModifierSyntax), so that the text

  * parses with `sim.asm` into the simulator's own Instruction objects, and
  * assembles with the pinned clang back to the same bytes (`sim.roundtrip` checks every one).

An encoding the tables do not know, or one whose fields this printer does not handle, raises
DecodeError naming its byte offset and bytes: nothing is skipped or guessed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import SimError

# The tinygrad release whose CDNA4 tables this printer was checked against (round trip over every
# instruction of the code objects in docs/simulator.md).
PINNED_TINYGRAD = "0.14.0"

# Inline constants of the 9-bit source encoding (LLVM prints 1/(2*pi) as 0.15915494).
_INLINE_FLOATS = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0",
                  246: "4.0", 247: "-4.0", 248: "0.15915494"}  # fmt: skip
_SPECIAL = {102: "flat_scratch_lo", 103: "flat_scratch_hi", 104: "xnack_mask_lo", 105: "xnack_mask_hi",
            106: "vcc_lo", 107: "vcc_hi", 124: "m0", 126: "exec_lo", 127: "exec_hi",
            235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base",
            238: "src_private_limit", 239: "src_pops_exiting_wave_id", 251: "src_vccz",
            252: "src_execz", 253: "src_scc", 254: "src_lds_direct"}  # fmt: skip
_PAIRS = {102: "flat_scratch", 104: "xnack_mask", 106: "vcc", 126: "exec"}
LITERAL, SDWA_SRC, DPP_SRC = 255, 249, 250
# VOP3 opcodes below this have a 32-bit twin (VOPC 0-255, VOP2 256-319, VOP1 320-447): their VOP3 form
# needs the _e64 suffix, or the assembler would pick the shorter encoding.
_VOP3_ONLY_FROM = 0x1C0
_LD_SCALE = 44  # VOP3P opcode of v_mfma_ld_scale_b32
_OMOD = {1: "mul:2", 2: "mul:4", 3: "div:2"}
_SDWA_SEL = ["BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD"]
_SDWA_UNUSED = ["UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE"]
# Mnemonics whose tinygrad enum name differs from LLVM's.
_RENAMES = {"v_accvgpr_read": "v_accvgpr_read_b32", "v_accvgpr_write": "v_accvgpr_write_b32"}
_SOPP_NO_OPERAND = {
    "s_barrier", "s_wakeup", "s_icache_inv", "s_ttracedata", "s_set_gpr_idx_off", "s_endpgm_saved",
    "s_endpgm_ordered_ps_done",
}  # fmt: skip
_SOPP_BRANCH_PREFIX = ("s_branch", "s_cbranch_")


class DecodeError(SimError, ValueError):
    """An encoding the decoder does not know (message: byte offset and the bytes)."""


@dataclass(frozen=True)
class DecodedInstruction:
    """One instruction: byte offset in .text, its encoding, LLVM-syntax text, branch target offset."""

    offset: int
    data: bytes
    text: str
    target: int | None = None


def _tinygrad() -> tuple[Callable[[bytes, str], Any], dict]:
    """decode_inst and the CDNA operand table, or an error naming the pinned requirement."""
    try:
        amd = importlib.import_module("tinygrad.renderer.amd")
        operands = importlib.import_module("tinygrad.runtime.autogen.amd.cdna.operands")
    except ImportError as e:
        raise DecodeError(
            f"decoding gfx950 machine code needs the CDNA4 tables of tinygrad=={PINNED_TINYGRAD}: "
            "pip install 'zyfa-asmgen[decode]'"
        ) from e
    return amd.decode_inst, operands.OPERANDS


def src_text(code: int, count: int = 1, literal: int | None = None, acc: bool = False) -> str:
    """LLVM text of a 9-bit source operand code (0-511) covering `count` registers."""
    if code >= 256:
        idx, f = code - 256, "a" if acc else "v"
        return f"{f}{idx}" if count == 1 else f"{f}[{idx}:{idx + count - 1}]"
    if code <= 101:
        return f"s{code}" if count == 1 else f"s[{code}:{code + count - 1}]"
    if 108 <= code <= 123:
        idx = code - 108
        return f"ttmp{idx}" if count == 1 else f"ttmp[{idx}:{idx + count - 1}]"
    if count == 2 and code in _PAIRS:
        return _PAIRS[code]
    if code in _SPECIAL:
        return _SPECIAL[code]
    if 128 <= code <= 192:
        return str(code - 128)
    if 193 <= code <= 208:
        return str(192 - code)
    if code in _INLINE_FLOATS:
        return _INLINE_FLOATS[code]
    if code == LITERAL:
        if literal is None:
            raise ValueError("literal operand without a literal dword")
        return f"0x{literal:x}"
    raise ValueError(f"source operand code {code} has no assembly spelling")


class _Printer:
    """Print one decoded tinygrad instruction; `offset` is its byte offset (for branch targets)."""

    def __init__(self, inst: Any, operands: dict, offset: int) -> None:
        self.inst = inst
        self.fmt = type(inst).__name__
        self.ops = operands.get(inst.op, {})
        self.offset = offset
        name = inst.op.name.lower()
        for suf in ("_e32", "_e64"):
            name = name.removesuffix(suf)
        self.name = _RENAMES.get(name, name)
        self.suffix = ""  # the encoding suffix a printer adds: _e64, _dpp, _sdwa
        self.target: int | None = None

    # ---- fields ----
    def raw(self, field: str) -> int:
        f = dict(type(self.inst)._fields)[field]
        return (self.inst._raw >> f.lo) & f.mask

    def code(self, field: str) -> int:
        """The operand-space code (0-511) of a register/source field."""
        return getattr(self.inst, field).offset

    def count(self, field: str) -> int:
        """Registers of an operand (the f8f6f4 MFMAs size A and B by their cbsz/blgp formats)."""
        return self.inst.op_regs.get(field, 1) if field in self.ops else 1

    def lit(self) -> int | None:
        return getattr(self.inst, "literal", None)

    def src(self, field: str, acc: bool = False, neg: bool = False, abs_: bool = False) -> str:
        t = src_text(self.code(field), self.count(field), self.lit(), acc)
        if abs_:
            t = f"|{t}|"
        return f"-{t}" if neg else t

    def sreg(self, field: str) -> str:
        return src_text(self.code(field), self.count(field), self.lit())

    # ---- per format ----
    def text(self) -> str:
        fmt = self.fmt.removesuffix("_LIT")
        fn = getattr(self, f"p_{fmt.lower()}", None)
        if fn is None:
            raise ValueError(f"no printer for the {self.fmt} encoding")
        parts, mods = fn()
        head = self.name + self.suffix + (" " + ", ".join(parts) if parts else "")
        return " ".join([head, *mods])

    def p_sop1(self) -> tuple[list[str], list[str]]:
        return [self.sreg(f) for f in ("sdst", "ssrc0") if f in self.ops], []

    def p_sop2(self) -> tuple[list[str], list[str]]:
        return [self.sreg(f) for f in ("sdst", "ssrc0", "ssrc1") if f in self.ops], []

    def p_sopc(self) -> tuple[list[str], list[str]]:
        if self.name == "s_set_gpr_idx_on":  # ssrc1 is the 4-bit index mode, not an operand code
            mode = self.raw("ssrc1")
            names = ",".join(n for k, n in enumerate(("SRC0", "SRC1", "SRC2", "DST")) if mode >> k & 1)
            return [self.sreg("ssrc0"), f"gpr_idx({names})"], []
        return [self.sreg(f) for f in ("ssrc0", "ssrc1") if f in self.ops], []

    def p_sopk(self) -> tuple[list[str], list[str]]:
        imm = self.inst.simm16
        if self.name in ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32"):
            hw = f"hwreg({imm & 0x3F}, {(imm >> 6) & 0x1F}, {((imm >> 11) & 0x1F) + 1})"
            if self.name == "s_getreg_b32":
                return [self.sreg("sdst"), hw], []
            return [hw, f"0x{self.lit():x}" if self.name.endswith("imm32_b32") else self.sreg("sdst")], []
        if self.name in ("s_call_b64", "s_cbranch_i_fork"):
            return [self.sreg("sdst"), self.branch(imm)], []
        return [self.sreg("sdst"), f"0x{imm:x}"], []

    def branch(self, simm16: int) -> str:
        rel = simm16 - 0x10000 if simm16 & 0x8000 else simm16
        self.target = self.offset + 4 + 4 * rel
        return label_name(self.target)

    def p_sopp(self) -> tuple[list[str], list[str]]:
        imm = self.inst.simm16
        if self.name.startswith(_SOPP_BRANCH_PREFIX):
            return [self.branch(imm)], []
        if self.name == "s_waitcnt":
            return [waitcnt_text(imm)], []
        if self.name in _SOPP_NO_OPERAND or (self.name == "s_endpgm" and imm == 0):
            if imm:
                raise ValueError(f"{self.name} with a nonzero immediate {imm:#x}")
            return [], []
        return [str(imm)], []

    def p_smem(self) -> tuple[list[str], list[str]]:
        i = self.inst
        parts = [self.sreg(f) for f in ("sdata", "sbase") if f in self.ops]
        mods = []
        if "soffset" in self.ops:
            if i.imm and i.soffset_en:
                parts.append(src_text(self.raw("soffset"), 1))
                mods.append(f"offset:0x{i.offset:x}")
            elif i.imm:
                parts.append(f"0x{i.offset:x}")
            elif i.soffset_en:
                raise ValueError("SMEM with soffset_en and no immediate offset")
            elif parts:
                parts.append(src_text(i.offset & 0xFF, 1))
        if i.glc:
            mods.append("glc")
        if i.nv:
            mods.append("nv")
        return parts, mods

    def vop_dst(self) -> str:
        """vdst of a VOP1/VOP2 encoding: a VGPR, or an SGPR for v_readfirstlane_b32."""
        if self.ops.get("vdst", (None, 0, None))[2].name in ("OPR_SREG_NOVCC", "OPR_SREG", "OPR_SDST"):
            return src_text(self.raw("vdst"), 1)
        return src_text(self.code("vdst"), self.count("vdst"), acc=self.name == "v_accvgpr_mov_b32")

    def p_vop1(self) -> tuple[list[str], list[str]]:
        if "vdst" not in self.ops and "src0" not in self.ops:
            return [], []
        acc = self.name == "v_accvgpr_mov_b32"
        return [self.vop_dst(), self.src("src0", acc=acc)], []

    def p_vop2(self) -> tuple[list[str], list[str]]:
        d, s0, s1 = self.vop_dst(), self.src("src0"), self.src("vsrc1")
        n = self.name
        if n in ("v_fmamk_f32", "v_madmk_f16"):
            return [d, s0, f"0x{self.lit():x}", s1], []
        if n in ("v_fmaak_f32", "v_madak_f16"):
            return [d, s0, s1, f"0x{self.lit():x}"], []
        if n == "v_cndmask_b32":
            return [d, s0, s1, "vcc"], []
        if n in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32"):
            return [d, "vcc", s0, s1], []
        if n in ("v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32"):
            return [d, "vcc", s0, s1, "vcc"], []
        return [d, s0, s1], []

    def p_vopc(self) -> tuple[list[str], list[str]]:
        return ["vcc", self.src("src0"), self.src("vsrc1")], []

    def vop3_srcs(self) -> list[str]:
        i = self.inst
        neg, abs_ = i.neg, getattr(i, "abs", 0)
        return [self.src(f, neg=bool(neg >> k & 1), abs_=bool(abs_ >> k & 1))
                for k, f in enumerate(("src0", "src1", "src2")) if f in self.ops]  # fmt: skip

    def vop3_mods(self, nsrc: int) -> list[str]:
        i, mods = self.inst, []
        opsel = getattr(i, "opsel", 0)
        if opsel:
            mods.append("op_sel:[" + ",".join(str(opsel >> k & 1) for k in (*range(nsrc), 3)) + "]")
        if i.clmp:
            mods.append("clamp")
        if i.omod:
            mods.append(_OMOD[i.omod])
        return mods

    def set_vop3_suffix(self) -> None:
        self.suffix = "_e64" if self.inst.op.value < _VOP3_ONLY_FROM else ""

    def p_vop3(self) -> tuple[list[str], list[str]]:
        self.set_vop3_suffix()
        if "vdst" not in self.ops and "src0" not in self.ops:
            return [], self.vop3_mods(0)
        if self.name.startswith("v_bitop3_"):
            return self.bitop3()
        if self.name in ("v_permlane16_swap_b32", "v_permlane32_swap_b32"):
            # The VOP3 form's op_sel bits are the swap's bound_ctrl and fi.
            opsel = self.inst.opsel
            mods = [m for k, m in enumerate(("bound_ctrl:1", "fi:1")) if opsel >> k & 1]
            return [self.vop3_dst(), self.src("src0")], mods
        srcs = self.vop3_srcs()
        dst = self.vop3_dst()
        return [dst, *srcs], self.vop3_mods(len(srcs))

    def bitop3(self) -> tuple[list[str], list[str]]:
        """v_bitop3_*: the 8-bit truth table lives in the omod (7:6), abs (5:3) and neg (2:0) fields."""
        i = self.inst
        table = i.omod << 6 | i.abs << 3 | i.neg
        srcs = [self.src(f) for f in ("src0", "src1", "src2")]
        mods = [f"bitop3:0x{table:x}"] if table else []
        if i.opsel:
            mods.append("op_sel:[" + ",".join(str(i.opsel >> k & 1) for k in (0, 1, 2, 3)) + "]")
        return [self.vop3_dst(), *srcs], mods

    def vop3_dst(self) -> str:
        kind = self.ops.get("vdst", (None, 0, None))[2]
        if kind is not None and kind.name in ("OPR_SREG_NOVCC", "OPR_SREG", "OPR_SDST"):
            return src_text(self.raw("vdst"), self.count("vdst"))
        return src_text(self.code("vdst"), self.count("vdst"))

    def p_vop3_sdst(self) -> tuple[list[str], list[str]]:
        self.set_vop3_suffix()
        srcs = self.vop3_srcs()
        sdst = src_text(self.raw("vdst"), 2)
        return [sdst, *srcs], self.vop3_mods(len(srcs))

    def p_vop3sd(self) -> tuple[list[str], list[str]]:
        self.set_vop3_suffix()
        srcs = self.vop3_srcs()
        vdst = src_text(self.code("vdst"), self.count("vdst"))
        return [vdst, src_text(self.raw("sdst"), 2), *srcs], self.vop3_mods(len(srcs))

    def p_vop3p(self) -> tuple[list[str], list[str]]:
        i = self.inst
        if self.name == "v_accvgpr_read_b32":
            return [src_text(self.code("vdst"), 1), src_text(self.code("src0"), 1, acc=True)], []
        if self.name == "v_accvgpr_write_b32":
            return [src_text(self.code("vdst"), 1, acc=True), self.src("src0")], []
        fields = [f for f in ("src0", "src1", "src2") if f in self.ops]
        srcs = [self.src(f) for f in fields]
        n = len(fields)
        hi = i.opsel_hi | (i.opsel_hi2 << 2)

        def lst(name: str, bits: int) -> str:
            return f"{name}:[" + ",".join(str(bits >> k & 1) for k in range(n)) + "]"

        mods = [lst("op_sel", i.opsel), lst("op_sel_hi", hi)]
        if i.neg:
            mods.append(lst("neg_lo", i.neg))
        if i.neg_hi:
            mods.append(lst("neg_hi", i.neg_hi))
        if i.clmp:
            mods.append("clamp")
        return [src_text(self.code("vdst"), self.count("vdst")), *srcs], mods

    def p_vop3p_mfma(self) -> tuple[list[str], list[str]]:
        i = self.inst
        d = src_text(self.code("vdst"), self.count("vdst"), acc=bool(i.acc_cd))
        a = src_text(self.code("src0"), self.count("src0"), self.lit(), acc=bool(i.acc & 1))
        b = src_text(self.code("src1"), self.count("src1"), self.lit(), acc=bool(i.acc & 2))
        c = src_text(self.code("src2"), self.count("src2"), self.lit(), acc=bool(i.acc_cd))
        mods = [f"{k}:{getattr(i, k)}" for k in ("cbsz", "abid", "blgp") if getattr(i, k)]
        return [d, a, b, c], mods

    def p_vop3px2(self) -> tuple[list[str], list[str]]:
        """v_mfma_scale_*: the v_mfma_ld_scale_b32 dwords (scale sources, op_sel) fused with the MFMA."""
        i = self.inst
        d = src_text(self.code("vdst"), self.count("vdst"), acc=bool(i.acc_cd))
        a = src_text(self.code("src0"), self.count("src0"), acc=bool(i.acc & 1))
        b = src_text(self.code("src1"), self.count("src1"), acc=bool(i.acc & 2))
        c = src_text(self.code("src2"), self.count("src2"), acc=bool(i.acc_cd))
        scales = [src_text(i.scale_src0, 1), src_text(i.scale_src1, 1)]
        hi = i.opsel_hi | (self.inst._raw >> 14 & 1) << 2
        mods = ["op_sel:[" + ",".join(str(i.opsel >> k & 1) for k in range(3)) + "]",
                "op_sel_hi:[" + ",".join(str(hi >> k & 1) for k in range(3)) + "]"]  # fmt: skip
        mods += [f"{k}:{getattr(i, k)}" for k in ("cbsz", "blgp") if getattr(i, k)]
        return [d, a, b, c, *scales], mods

    def p_ds(self) -> tuple[list[str], list[str]]:
        i, acc = self.inst, bool(self.inst.acc)
        parts = []
        for f in ("vdst", "addr", "data0", "data1"):
            if f in self.ops:
                parts.append(src_text(self.code(f), self.count(f), acc=acc and f != "addr"))
        mods = []
        if "2" in self.name.removeprefix("ds_").split("_")[0]:  # read2/write2/wrxchg2: two offsets
            mods += [f"offset0:{i.offset0}", f"offset1:{i.offset1}"]
        elif i.offset0 | i.offset1 << 8:
            mods.append(f"offset:{i.offset0 | i.offset1 << 8}")
        if i.gds:
            mods.append("gds")
        return parts, mods

    def p_mubuf(self) -> tuple[list[str], list[str]]:
        i = self.inst
        parts = []
        if "vdata" in self.ops and not i.lds:
            parts.append(src_text(self.code("vdata"), self.count("vdata"), acc=bool(i.acc)))
        nva = i.offen + i.idxen
        parts.append(src_text(self.code("vaddr"), nva) if nva else "off")
        parts += [src_text(self.raw("srsrc") * 4, 4), src_text(self.code("soffset"), 1)]
        mods = [m for m in ("offen", "idxen") if getattr(i, m)]
        if i.offset:
            mods.append(f"offset:{i.offset}")
        mods += [m for m in ("sc0", "sc1", "nt", "lds") if getattr(i, m)]
        return parts, mods

    def p_global(self) -> tuple[list[str], list[str]]:
        return self.flat_like(signed_offset=True)

    def p_scratch(self) -> tuple[list[str], list[str]]:
        return self.flat_like(signed_offset=True)

    def p_flat(self) -> tuple[list[str], list[str]]:
        return self.flat_like(signed_offset=False)

    def flat_like(self, signed_offset: bool) -> tuple[list[str], list[str]]:
        i, acc = self.inst, bool(self.inst.acc)
        saddr = self.raw("saddr")
        has_saddr = "saddr" in self.ops and saddr != 0x7F
        parts = []
        if "vdst" in self.ops and "_lds_" not in self.name:  # *_load_lds_* write LDS, not a VGPR
            parts.append(src_text(self.code("vdst"), self.count("vdst"), acc=acc))
        if self.fmt == "SCRATCH":
            parts.append(src_text(self.code("addr"), 1) if not i.sve and has_saddr is False else "off")
        else:
            parts.append(src_text(self.code("addr"), 1 if has_saddr else 2))
        if "data" in self.ops:
            parts.append(src_text(self.code("data"), self.count("data"), acc=acc))
        if "saddr" in self.ops and self.fmt != "FLAT":
            parts.append(src_text(saddr, 2 if self.fmt == "GLOBAL" else 1) if has_saddr else "off")
        off = i.offset
        if signed_offset and off & 0x1000:
            off -= 0x2000
        mods = [f"offset:{off}"] if off else []
        mods += [m for m in ("sc0", "sc1", "nt") if getattr(i, m)]
        return parts, mods

    def p_vop1_sdwa(self) -> tuple[list[str], list[str]]:
        return self.sdwa(["vdst", "src0"])

    def p_vop2_sdwa(self) -> tuple[list[str], list[str]]:
        return self.sdwa(["vdst", "src0", "vsrc1"])

    def p_vop1_dpp16(self) -> tuple[list[str], list[str]]:
        return self.dpp(with_src1=False)

    def p_vop2_dpp16(self) -> tuple[list[str], list[str]]:
        return self.dpp(with_src1=True)

    def dpp(self, with_src1: bool) -> tuple[list[str], list[str]]:
        i, self.suffix = self.inst, "_dpp"
        src0 = _modded(src_text(self.code("vsrc0"), 1), i.src0_neg, i.src0_abs, 0)
        parts = [src_text(self.code("vdst"), 1), src0]
        if with_src1:
            parts.append(_modded(src_text(self.code("vsrc1"), 1), i.src1_neg, i.src1_abs, 0))
        if self.name == "v_cndmask_b32":
            parts.append("vcc")
        mods = [dpp_ctrl_text(i.dpp), f"row_mask:0x{i.row_mask:x}", f"bank_mask:0x{i.bank_mask:x}"]
        if i.bc:
            mods.append("bound_ctrl:1")
        return parts, mods

    def sdwa(self, fields: list[str]) -> tuple[list[str], list[str]]:
        i, self.suffix = self.inst, "_sdwa"
        parts = [src_text(self.code("vdst"), self.count("vdst"))]
        s0 = src_text(self.raw("vsrc0") + (0 if i.s0 else 256), 1)
        parts.append(_modded(s0, i.src0_neg, i.src0_abs, i.src0_sext))
        if "vsrc1" in fields:
            s1 = src_text(self.raw("vsrc1") + (0 if i.s1 else 256), 1)
            parts.append(_modded(s1, i.src1_neg, i.src1_abs, i.src1_sext))
        mods = ["clamp"] if i.clmp else []
        if i.omod:
            mods.append(_OMOD[i.omod])
        # Defaults (DWORD selects, UNUSED_PAD) are left out: some opcodes (v_cvt_f32_fp8) take no dst_sel.
        sels = [
            ("dst_sel", _SDWA_SEL[i.dst_sel], "DWORD"),
            ("dst_unused", _SDWA_UNUSED[i.dst_unused], "UNUSED_PAD"),
            ("src0_sel", _SDWA_SEL[i.src0_sel], "DWORD"),
        ]
        if "vsrc1" in fields:
            sels.append(("src1_sel", _SDWA_SEL[i.src1_sel], "DWORD"))
        mods += [f"{k}:{v}" for k, v, default in sels if v != default]
        return parts, mods


def dpp_ctrl_text(ctrl: int) -> str:
    """The DPP control of the 9-bit dpp_ctrl field, as LLVM spells it."""
    if ctrl <= 0xFF:
        return "quad_perm:[" + ",".join(str(ctrl >> (2 * k) & 3) for k in range(4)) + "]"
    ranges = {0x100: "row_shl", 0x110: "row_shr", 0x120: "row_ror", 0x150: "row_newbcast"}
    base = ctrl & ~0xF
    if base in ranges and ctrl & 0xF:
        return f"{ranges[base]}:{ctrl & 0xF}"
    fixed = {0x130: "wave_shl:1", 0x134: "wave_rol:1", 0x138: "wave_shr:1", 0x13C: "wave_ror:1",
             0x140: "row_mirror", 0x141: "row_half_mirror",
             0x142: "row_bcast:15", 0x143: "row_bcast:31"}  # fmt: skip
    if ctrl in fixed:
        return fixed[ctrl]
    raise ValueError(f"dpp_ctrl {ctrl:#x} is reserved")


def _modded(t: str, neg: int, abs_: int, sext: int) -> str:
    if sext:
        t = f"sext({t})"
    if abs_:
        t = f"|{t}|"
    return f"-{t}" if neg else t


def waitcnt_text(imm: int) -> str:
    """gfx9 s_waitcnt immediate as counters: vmcnt bits [3:0]+[15:14], expcnt [6:4], lgkmcnt [11:8]."""
    if imm & 0x3080:  # bits no counter owns: keep the number, the assembler takes it as is
        return f"0x{imm:x}"
    vm = (imm & 0xF) | ((imm >> 14) & 3) << 4
    return f"vmcnt({vm}) expcnt({(imm >> 4) & 7}) lgkmcnt({(imm >> 8) & 0xF})"


def label_name(offset: int) -> str:
    """The label a decoded listing puts at byte offset `offset` of .text."""
    return f".L{offset:06x}"


def _decode_one(decode_inst: Callable[[bytes, str], Any], window: bytes) -> Any:
    """Decode the instruction at the start of `window` (up to 16 bytes).

    A v_mfma_scale_* is two VOP3P dwords pairs: v_mfma_ld_scale_b32 fused with the MFMA. The table's
    format test only looks at the second pair, so an ordinary MFMA followed by another MFMA would pass
    for one: the first pair must be the ld_scale opcode, else only 8 bytes are decoded."""
    inst = decode_inst(window.ljust(16, b"\0"), "cdna")
    if type(inst).__name__ == "VOP3PX2" and (int.from_bytes(window[:4], "little") >> 16) & 0x7F != _LD_SCALE:
        inst = decode_inst(window[:8].ljust(16, b"\0"), "cdna")
    return inst


def decode_text(code: bytes, base: int = 0) -> list[DecodedInstruction]:
    """Decode a whole .text section (`base`: its offset, for error messages) into instructions.

    DecodeError names the byte offset and the bytes of the first encoding that is unknown or that
    the printer cannot spell; a truncated last instruction is an error too.
    """
    decode_inst, operands = _tinygrad()
    out: list[DecodedInstruction] = []
    pos = 0
    while pos < len(code):
        window = code[pos : pos + 16]
        try:
            inst = _decode_one(decode_inst, window)
            size = inst.size()
            if pos + size > len(code):
                raise ValueError(f"a {size}-byte encoding runs past the end of the section")
            p = _Printer(inst, operands, pos)
            text = p.text()
        except (ValueError, KeyError, AttributeError, TypeError, RuntimeError) as e:
            raise DecodeError(
                f"cannot decode the instruction at .text+{pos:#x} (file offset {base + pos:#x}), "
                f"bytes {window[:8].hex(' ')}: {e}"
            ) from None
        out.append(DecodedInstruction(pos, code[pos : pos + size], text, p.target))
        pos += size
    return out


def listing(insts: list[DecodedInstruction], names: dict[int, str] | None = None) -> str:
    """Assembly text of decoded instructions: `.text`, then each instruction on its own line, with a
    label before every branch target and a `NAME:` line at each offset of `names` (kernel entries)."""
    targets = {i.target for i in insts if i.target is not None}
    names = names or {}
    starts = {i.offset for i in insts}
    stray = sorted(t for t in targets | set(names) if t not in starts)
    if stray:
        raise DecodeError(f"branch target or symbol at .text+{stray[0]:#x} is not an instruction start")
    lines = [".text"]
    for i in insts:
        if i.offset in names:
            lines.append(f"{names[i.offset]}:")
        if i.offset in targets:
            lines.append(f"{label_name(i.offset)}:")
        lines.append(f"  {i.text}")
    return "\n".join(lines) + "\n"
