"""What the generator needs to know about one gfx950 instruction line, read from its text.

`Instr.parse("v_fmac_f32_e32 v12, v20, v21")` gives the mnemonic, the operands, the registers it
writes and reads (explicit and implicit: exec, vcc, scc), its class (VALU, SALU, SMEM, VMEM, ...) and
an upper bound on its encoded size. The Kernel builder counts registers, places labels and finds
wait-state hazards with it. This is not an assembler: the pinned LLVM assembles the final text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Register operand spellings: v7, s[4:5], a[0:15], plus the named SGPRs we use.
_RANGE_RE = re.compile(r"^([vsa])\[(\d+):(\d+)\]$")
_SINGLE_RE = re.compile(r"^([vsa])(\d+)$")
_NAMED = {"vcc": ("vcc", 0, 2), "vcc_lo": ("vcc", 0, 1), "vcc_hi": ("vcc", 1, 1),
          "exec": ("exec", 0, 2), "exec_lo": ("exec", 0, 1), "exec_hi": ("exec", 1, 1),
          "m0": ("m0", 0, 1), "scc": ("scc", 0, 1)}  # fmt: skip

# Transcendental VALU ops (quarter rate; the result needs one wait state before a non-trans VALU reads it).
TRANS_OPS = frozenset(
    f"v_{op}_{t}"
    for op in ("exp", "log", "rcp", "rsq", "sqrt", "sin", "cos", "rcp_iflag", "exp_legacy", "log_legacy")
    for t in ("f16", "f32", "f64")
)

# Mnemonics (suffix stripped) that write no register operand: stores, compares into SCC, control.
_NO_DEF_PREFIXES = ("global_store", "buffer_store", "flat_store", "scratch_store", "ds_write", "s_store",
                    "s_cmp", "s_bitcmp", "s_cbranch", "s_branch", "s_waitcnt", "s_nop", "s_endpgm",
                    "s_barrier", "s_setprio", "s_sleep", "s_dcache", "s_sendmsg", "s_trap")  # fmt: skip
# VALU ops whose second operand is a second destination (an SGPR pair for the carry / the flag).
_TWO_DEF_OPS = ("v_mad_u64_u32", "v_mad_i64_i32", "v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32",
                "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32", "v_div_scale_f32",
                "v_div_scale_f64")  # fmt: skip
_ENC_SUFFIXES = ("_e32", "_e64", "_sdwa", "_dpp")
_SOPP = ("s_nop", "s_branch", "s_cbranch", "s_waitcnt", "s_endpgm", "s_barrier", "s_setprio", "s_sleep",
         "s_sendmsg", "s_trap", "s_icache")  # fmt: skip
_INLINE_FLOATS = {"0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0", "0.15915494"}


@dataclass(frozen=True)
class Reg:
    """A register range: file 'v', 's', 'a', or a named one ('vcc', 'exec', 'm0', 'scc')."""

    file: str
    first: int
    count: int

    def units(self) -> set[tuple[str, int]]:
        """Each 32-bit register as (file, index): what hazard and dependence checks compare."""
        return {(self.file, self.first + i) for i in range(self.count)}


def parse_reg(token: str) -> Reg | None:
    """The register an operand token names (modifiers like -x, |x|, neg() stripped), else None."""
    t = token.strip()
    t = t.lstrip("-").strip("|")
    m = _RANGE_RE.match(t)
    if m:
        return Reg(m.group(1), int(m.group(2)), int(m.group(3)) - int(m.group(2)) + 1)
    m = _SINGLE_RE.match(t)
    if m:
        return Reg(m.group(1), int(m.group(2)), 1)
    if t in _NAMED:
        f, first, n = _NAMED[t]
        return Reg(f, first, n)
    return None


def _split_operands(rest: str) -> tuple[list[str], list[str]]:
    """Operands (comma separated) and trailing modifiers (space separated after the last operand)."""
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in rest:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    mods: list[str] = []
    if parts:
        last = parts[-1].split()
        parts[-1] = last[0]
        mods = last[1:]
    return parts, mods


def base_mnemonic(mnemonic: str) -> str:
    """The mnemonic without its encoding suffix (_e32, _e64, _sdwa, _dpp)."""
    for suf in _ENC_SUFFIXES:
        if mnemonic.endswith(suf):
            return mnemonic[: -len(suf)]
    return mnemonic


def _is_literal(op: str) -> bool:
    """A 32-bit literal (not an inline constant): hex or integer outside [-16, 64], or a non-inline float."""
    t = op.strip()
    if parse_reg(t) is not None or t in ("off",) or t.startswith(("gpr_idx", "sendmsg", "hwreg")):
        return False
    if re.fullmatch(r"-?0x[0-9a-fA-F]+", t) or re.fullmatch(r"-?\d+", t):
        v = int(t, 0)
        return not -16 <= v <= 64
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", t):
        return t not in _INLINE_FLOATS and t not in ("0.0", "-0.0")
    return False


@dataclass(frozen=True)
class Instr:
    """One instruction line, with what the builder derives from it."""

    text: str
    mnemonic: str
    operands: tuple[str, ...]
    modifiers: tuple[str, ...]
    defs: tuple[Reg, ...]
    uses: tuple[Reg, ...]

    @staticmethod
    def parse(text: str) -> Instr:
        """Parse `mnemonic op, op, ... mod mod`; raises ValueError on an empty line."""
        text = " ".join(text.split())
        if not text:
            raise ValueError("empty instruction")
        mnemonic, _, rest = text.partition(" ")
        operands, mods = _split_operands(rest) if rest else ([], [])
        defs, uses = _defs_uses(mnemonic, operands, mods)
        return Instr(text, mnemonic, tuple(operands), tuple(mods), tuple(defs), tuple(uses))

    @property
    def base(self) -> str:
        """Mnemonic without the encoding suffix."""
        return base_mnemonic(self.mnemonic)

    @property
    def is_valu(self) -> bool:
        """Vector ALU (including conversions and MFMA)."""
        return self.mnemonic.startswith("v_")

    @property
    def is_vmem(self) -> bool:
        """Vector memory through the texture path (global/flat/buffer/scratch)."""
        return self.mnemonic.startswith(("global_", "flat_", "buffer_", "scratch_"))

    @property
    def is_smem(self) -> bool:
        """Scalar memory."""
        return self.mnemonic.startswith(("s_load", "s_store", "s_buffer", "s_memtime", "s_dcache"))

    @property
    def is_lds(self) -> bool:
        """LDS / GDS access (ds_*)."""
        return self.mnemonic.startswith("ds_")

    @property
    def is_branch(self) -> bool:
        """s_branch or s_cbranch_*: its only operand is a label."""
        return self.mnemonic == "s_branch" or self.mnemonic.startswith("s_cbranch_")

    @property
    def is_trans(self) -> bool:
        """Transcendental VALU op."""
        return self.base in TRANS_OPS

    def max_size(self) -> int:
        """Upper bound of the encoded size in bytes (exact for SOPP/SOP*/SMEM/VMEM/e32 forms).

        VOP3 on gfx9 takes no literal; VOP1/VOP2/VOPC (_e32) and SOP* grow by 4 bytes with one.
        Anything not recognised as a 4-byte form counts as 8 (16 for the scaled MFMA, which the
        assembler emits as two 8-byte words).
        """
        m = self.mnemonic
        literal = any(_is_literal(op) for op in self.operands)
        if m.startswith("v_mfma_scale"):
            return 16
        if m.startswith(_SOPP):
            return 4
        if self.is_smem or self.is_vmem or self.is_lds:
            return 8
        if m.startswith("s_"):
            return 8 if literal else 4
        if m.endswith("_e32"):
            return 8 if literal else 4
        return 8


# SALU ops that write SCC (s_mov, s_cselect, s_mul_* and the memory/control ops do not).
_SCC_WRITERS = ("s_add_", "s_sub_", "s_addc_", "s_subb_", "s_and_", "s_or_", "s_xor_", "s_andn2_", "s_orn2_",
                "s_nand_", "s_nor_", "s_xnor_", "s_lshl_", "s_lshr_", "s_ashr_", "s_min_", "s_max_", "s_bfe_",
                "s_cmp_", "s_cmpk_", "s_bitcmp", "s_abs_", "s_not_", "s_absdiff_")  # fmt: skip


def _defs_uses(mnemonic: str, operands: list[str], mods: list[str]) -> tuple[list[Reg], list[Reg]]:
    """Registers written and read, explicit operands first, then the implicit ones."""
    regs = [parse_reg(op) for op in operands]
    base = base_mnemonic(mnemonic)
    if mnemonic.startswith(_NO_DEF_PREFIXES):
        ndef = 0
    elif base.startswith(_TWO_DEF_OPS):
        ndef = 2
    else:
        ndef = 1 if operands else 0
    defs = [r for r in regs[:ndef] if r is not None]
    uses = [r for r in regs[ndef:] if r is not None]
    exec_reg = Reg("exec", 0, 2)
    scc = Reg("scc", 0, 1)
    if mnemonic.startswith(("v_", "global_", "flat_", "buffer_", "scratch_", "ds_")):
        uses.append(exec_reg)
    if "saveexec" in mnemonic or base.startswith("v_cmpx"):
        defs.append(exec_reg)
        uses.append(exec_reg)
    # Read-modify-write destinations: accumulate (fmac/mac), and ops that keep the other half of vdst.
    rmw = base.startswith(("v_fmac", "v_mac", "v_cvt_pk_fp8", "v_cvt_pk_bf8"))
    if defs and (rmw or (mnemonic.endswith("_sdwa") and "dst_unused:UNUSED_PRESERVE" in mods)):
        uses.append(defs[0])
    if mnemonic.startswith(_SCC_WRITERS) or "saveexec" in mnemonic:
        defs.append(scc)
    if mnemonic.startswith(("s_cbranch_scc", "s_cselect", "s_addc", "s_subb")):
        uses.append(scc)
    if mnemonic.startswith("s_cbranch_vcc"):
        uses.append(Reg("vcc", 0, 2))
    if mnemonic.startswith("s_cbranch_exec"):
        uses.append(exec_reg)
    return defs, uses
