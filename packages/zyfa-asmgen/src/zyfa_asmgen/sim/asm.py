"""Parser for LLVM-syntax gfx950 assembly (clang -S output and the zyfa_asmgen generator's output).

It reads: labels, instructions with their operands and modifiers, `.set` symbols, the
`.amdhsa_kernel` descriptor blocks and the `.amdgpu_metadata` YAML. It does not assemble (no
encodings): the simulator works on the parsed form, and a kernel is checked with the pinned LLVM
assembler separately. Syntax follows LLVM's AMDGPUInstructionSyntax / AMDGPUOperandSyntax /
AMDGPUModifierSyntax documents.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

from . import yamlmini
from .errors import AsmParseError

# Scalar register numbers of the named special registers (the gfx9 SGPR operand encoding).
SPECIAL_SREGS: dict[str, tuple[int, int]] = {
    "flat_scratch": (102, 2),
    "flat_scratch_lo": (102, 1),
    "flat_scratch_hi": (103, 1),
    "xnack_mask": (104, 2),
    "xnack_mask_lo": (104, 1),
    "xnack_mask_hi": (105, 1),
    "vcc": (106, 2),
    "vcc_lo": (106, 1),
    "vcc_hi": (107, 1),
    "m0": (124, 1),
    "exec": (126, 2),
    "exec_lo": (126, 1),
    "exec_hi": (127, 1),
}

# Modifiers that take no value.
_FLAG_MODS = {
    "offen", "idxen", "addr64", "glc", "slc", "dlc", "sc0", "sc1", "nt", "lds", "gds", "tfe",
    "clamp", "row_mirror", "row_half_mirror", "off_mod",
}  # fmt: skip

# Suffixes that name the encoding; the simulator's semantics do not depend on them except dpp/sdwa.
_ENC_SUFFIXES = ("_e64_dpp", "_e32", "_e64", "_dpp", "_sdwa")

# Spellings the assembler accepts for the same instruction.
_ALIASES = {
    "v_accvgpr_read": "v_accvgpr_read_b32",
    "v_accvgpr_write": "v_accvgpr_write_b32",
    "v_mfma_f32_32x32x8bf16_1k": "v_mfma_f32_32x32x8_bf16",
    "v_mfma_f32_16x16x16bf16_1k": "v_mfma_f32_16x16x16_bf16",
}

_DPP_CTRL = {
    "quad_perm", "row_shl", "row_shr", "row_ror", "wave_shl", "wave_rol", "wave_shr", "wave_ror",
    "row_mirror", "row_half_mirror", "row_bcast", "row_newbcast", "row_share", "row_xmask",
}  # fmt: skip
_SDWA_MODS = {"dst_sel", "dst_unused", "src0_sel", "src1_sel"}

_REG_RE = re.compile(r"^(s|v|a|ttmp)(\d+)$")
_TUPLE_RE = re.compile(r"^(s|v|a|ttmp)\[(\d+):(\d+)\]$")
_FUNC_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$")
_IDENT_RE = re.compile(r"^[A-Za-z_.$][A-Za-z0-9_.$@]*$")
_BRANCHES_WITH_LABEL = re.compile(r"^s_(branch|cbranch_\w+)$")


@dataclass(frozen=True)
class Reg:
    """A register or register tuple. file: 's' (incl. specials by number), 'v', 'a', 'scc'."""

    file: str
    index: int
    count: int = 1

    def __str__(self) -> str:
        if self.count == 1:
            return f"{self.file}{self.index}"
        return f"{self.file}[{self.index}:{self.index + self.count - 1}]"


@dataclass
class Operand:
    """One instruction operand.

    kind: 'reg' | 'int' | 'float' | 'label' | 'off' | 'func'. For 'int' value is the Python int as
    written (may be negative); for 'float' value is the float written. For 'func' (hwreg(...),
    vmcnt(...), gpr_idx(...)) name and args hold the parts. neg/abs are the VOP3 source modifiers
    (-x, |x|, abs(x), neg(x)); sext is the SDWA sext() modifier.
    """

    kind: str
    text: str
    reg: Reg | None = None
    value: Any = None
    name: str = ""
    args: str = ""
    neg: bool = False
    abs: bool = False
    sext: bool = False


@dataclass
class Instruction:
    """A parsed instruction. `op` is the canonical mnemonic: encoding suffix removed, aliases resolved."""

    mnemonic: str
    op: str
    enc: str
    operands: list[Operand]
    mods: dict[str, Any]
    line: int
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class KernelInfo:
    """A kernel: entry instruction index, descriptor fields (without '.amdhsa_'), metadata entry."""

    name: str
    entry: int
    descriptor: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Program:
    """A parsed assembly file: one instruction list for all its functions, labels into it, kernels."""

    instructions: list[Instruction]
    labels: dict[str, int]
    kernels: dict[str, KernelInfo]
    symbols: dict[str, Any]
    metadata: dict[str, Any]
    target: str = ""

    def kernel(self, name: str | None = None) -> KernelInfo:
        """The named kernel, or the only one when name is None."""
        if name is None:
            if len(self.kernels) != 1:
                raise KeyError(f"program has kernels {sorted(self.kernels)}; name one")
            return next(iter(self.kernels.values()))
        if name not in self.kernels:
            raise KeyError(f"no kernel {name!r}; have {sorted(self.kernels)}")
        return self.kernels[name]


def strip_comment(line: str) -> str:
    """Remove a ';' or '//' comment that is outside double quotes."""
    in_str = False
    for i, ch in enumerate(line):
        if ch == '"':
            in_str = not in_str
        elif not in_str and (ch == ";" or (ch == "/" and line[i + 1 : i + 2] == "/")):
            return line[:i]
    return line


def split_top(text: str, sep: str) -> list[str]:
    """Split at `sep` characters (',' or whitespace when sep is ' ') outside () [] and ||."""
    parts, cur, depth = [], [], 0
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        is_sep = ch.isspace() if sep == " " else ch == sep
        if is_sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()] if sep == " " else [p.strip() for p in parts]


def _parse_int(text: str) -> int | None:
    t = text.strip()
    try:
        if re.fullmatch(r"-?0[xX][0-9a-fA-F]+", t):
            return int(t, 16)
        if re.fullmatch(r"-?0[bB][01]+", t):
            return int(t, 2)
        if re.fullmatch(r"-?\d+", t):
            return int(t, 10)
    except ValueError:
        return None
    return None


def _parse_float(text: str) -> float | None:
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", text.strip()) and (
        "." in text or "e" in text.lower()
    ):
        return float(text)
    return None


def parse_reg(text: str) -> Reg | None:
    """Parse a register name or tuple (s5, v[2:5], a[0:15], vcc, exec_lo, m0, scc)."""
    t = text.strip().lower()
    m = _REG_RE.match(t)
    if m:
        file = "s" if m.group(1) == "ttmp" else m.group(1)
        base = 108 if m.group(1) == "ttmp" else 0
        return Reg(file, base + int(m.group(2)), 1)
    m = _TUPLE_RE.match(t)
    if m:
        lo, hi = int(m.group(2)), int(m.group(3))
        if hi < lo:
            return None
        file = "s" if m.group(1) == "ttmp" else m.group(1)
        base = 108 if m.group(1) == "ttmp" else 0
        return Reg(file, base + lo, hi - lo + 1)
    if t in SPECIAL_SREGS:
        idx, cnt = SPECIAL_SREGS[t]
        return Reg("s", idx, cnt)
    if t == "scc":
        return Reg("scc", 0, 1)
    return None


def parse_operand(text: str, want_label: bool = False) -> Operand:
    """Parse one operand (without trailing modifiers)."""
    t = text.strip()
    op = Operand(kind="", text=t)
    body = t
    # Source modifiers: -x, |x|, -|x|, abs(x), neg(x), sext(x).
    while True:
        if body.startswith("neg(") and body.endswith(")"):
            op.neg, body = True, body[4:-1].strip()
        elif body.startswith("abs(") and body.endswith(")"):
            op.abs, body = True, body[4:-1].strip()
        elif body.startswith("sext(") and body.endswith(")"):
            op.sext, body = True, body[5:-1].strip()
        elif body.startswith("|") and body.endswith("|") and len(body) > 2:
            op.abs, body = True, body[1:-1].strip()
        elif body.startswith("-") and (body[1:2] == "|" or parse_reg(body[1:]) is not None):
            op.neg, body = True, body[1:].strip()
        else:
            break
    reg = parse_reg(body)
    if reg is not None:
        op.kind, op.reg = "reg", reg
        return op
    if body.lower() == "off":
        op.kind = "off"
        return op
    iv = _parse_int(body)
    if iv is not None:
        op.kind, op.value = "int", iv
        return op
    fv = _parse_float(body)
    if fv is not None:
        op.kind, op.value = "float", fv
        return op
    m = _FUNC_RE.match(body)
    if m:
        op.kind, op.name, op.args = "func", m.group(1).lower(), m.group(2)
        return op
    if _IDENT_RE.match(body):
        op.kind, op.name = "label", body
        return op
    raise AsmParseError(f"cannot parse operand {t!r}")


def _mod_value(v: str) -> Any:
    v = v.strip()
    if v.startswith("[") and v.endswith("]"):
        out = []
        for p in v[1:-1].split(","):
            iv = _parse_int(p)
            if iv is None:
                raise AsmParseError(f"bad list modifier value {v!r}")
            out.append(iv)
        return out
    iv = _parse_int(v)
    if iv is not None:
        return iv
    return v


def parse_modifier(tok: str) -> tuple[str, Any]:
    """Parse `name:value` or a bare flag into (name, value)."""
    name, sep, val = tok.partition(":")
    name = name.strip().lower()
    if not sep:
        return name, True
    return name, _mod_value(val)


def canonical_op(mnemonic: str) -> tuple[str, str]:
    """Return (canonical op, encoding suffix) for a mnemonic."""
    m = mnemonic.lower()
    enc = ""
    for suf in _ENC_SUFFIXES:
        if m.endswith(suf):
            m, enc = m[: -len(suf)], suf[1:]
            break
    m = _ALIASES.get(m, m)
    return m, enc


def parse_instruction(text: str, line: int) -> Instruction:
    """Parse one instruction statement (comment already removed)."""
    t = text.strip()
    mnemonic, _, rest = t.partition(" ")
    mnemonic = mnemonic.strip()
    rest = rest.strip()
    op, enc = canonical_op(mnemonic)
    operands: list[Operand] = []
    mods: dict[str, Any] = {}
    want_label = bool(_BRANCHES_WITH_LABEL.match(op))
    if op == "s_waitcnt" or op.startswith("s_waitcnt_"):
        # s_waitcnt vmcnt(1) expcnt(0) lgkmcnt(2) -- counters separated by spaces or '&' or ','.
        toks = [x for x in re.split(r"[\s,&]+", rest) if x]
        operands = [parse_operand(x) for x in toks]
    elif rest:
        segs = split_top(rest, ",")
        for si, seg in enumerate(segs):
            toks = split_top(seg, " ")
            if not toks:
                raise AsmParseError(f"line {line}: empty operand in {t!r}")
            first = toks[0]
            # A segment's first token is an operand unless it is clearly a modifier (name:value).
            if si == 0 or not _looks_like_modifier(first):
                operands.append(_parse_operand_checked(first, want_label, line, t))
                toks = toks[1:]
            for tok in toks:
                name, val = parse_modifier(tok)
                mods[name] = val
    if enc == "":
        if any(k in _DPP_CTRL for k in mods):
            enc = "dpp"
        elif any(k in _SDWA_MODS for k in mods):
            enc = "sdwa"
    return Instruction(mnemonic.lower(), op, enc, operands, mods, line, t)


def _looks_like_modifier(tok: str) -> bool:
    name = tok.split(":", 1)[0].lower()
    return (":" in tok and re.match(r"^[a-z_0-9]+:", tok.lower()) is not None) or name in _FLAG_MODS


def _parse_operand_checked(tok: str, want_label: bool, line: int, text: str) -> Operand:
    try:
        return parse_operand(tok, want_label)
    except AsmParseError as e:
        raise AsmParseError(f"line {line}: {e} in {text!r}") from None


def _eval_symbol(expr: str, symbols: dict[str, Any]) -> Any:
    """Evaluate a descriptor/.set value: an int, a known symbol, or simple +,-,*,max,min of them."""
    e = expr.strip()
    iv = _parse_int(e)
    if iv is not None:
        return iv
    if e in symbols:
        return symbols[e]
    m = _FUNC_RE.match(e)
    if m and m.group(1) in ("max", "min"):
        vals = [_eval_symbol(a, symbols) for a in split_top(m.group(2), ",")]
        if all(isinstance(v, int) for v in vals):
            return max(vals) if m.group(1) == "max" else min(vals)
    for opch, fn in (("+", lambda a, b: a + b), ("-", lambda a, b: a - b), ("*", lambda a, b: a * b)):
        parts = split_top(e, opch)
        if len(parts) == 2 and parts[0]:
            a, b = _eval_symbol(parts[0], symbols), _eval_symbol(parts[1], symbols)
            if isinstance(a, int) and isinstance(b, int):
                return fn(a, b)
    return e  # left symbolic; KernelInfo users check for int


def parse_asm(text: str) -> Program:
    """Parse a whole assembly file into a Program."""
    instructions: list[Instruction] = []
    labels: dict[str, int] = {}
    symbols: dict[str, Any] = {}
    descriptors: dict[str, dict[str, Any]] = {}
    meta_text: list[str] = []
    target = ""
    section = ".text"
    in_kd: str | None = None
    in_meta = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if in_meta:
            if raw.strip().startswith(".end_amdgpu_metadata"):
                in_meta = False
            else:
                meta_text.append(raw)
            continue
        s = strip_comment(raw).strip()
        if not s:
            continue
        # Labels (possibly followed by a statement on the same line).
        while True:
            m = re.match(r"^([A-Za-z_.$][A-Za-z0-9_.$@]*):(?!\S)\s*", s)
            if not m:
                break
            if section.startswith(".text"):
                labels[m.group(1)] = len(instructions)
            s = s[m.end() :]
        if not s:
            continue
        if in_kd is not None:
            if s.startswith(".end_amdhsa_kernel"):
                in_kd = None
            elif s.startswith(".amdhsa_"):
                key, _, val = s.partition(" ")
                descriptors[in_kd][key[len(".amdhsa_") :]] = _eval_symbol(val, symbols)
            else:
                raise AsmParseError(f"line {lineno}: unexpected {s!r} inside .amdhsa_kernel")
            continue
        if s.startswith("."):
            directive, _, args = s.partition(" ")
            directive = directive.strip()
            args = args.strip()
            if directive == ".amdhsa_kernel":
                in_kd = args.strip()
                descriptors[in_kd] = {}
            elif directive == ".amdgpu_metadata":
                in_meta = True
            elif directive == ".amdgcn_target":
                target = args.strip('"')
            elif directive in (".text",):
                section = ".text"
            elif directive in (".section", ".data", ".rodata", ".bss"):
                section = args.split(",")[0].strip() if directive == ".section" else directive
            elif directive == ".set":
                name, _, val = args.partition(",")
                symbols[name.strip()] = _eval_symbol(val, symbols)
            # Every other directive (.globl, .p2align, .type, .size, .fill, ...) has no effect on
            # execution; .fill in .text is padding after the last s_endpgm.
            continue
        if not section.startswith(".text"):
            continue
        instructions.append(parse_instruction(s, lineno))
    metadata = yamlmini.load("\n".join(meta_text)) if meta_text else {}
    kernels = _collect_kernels(descriptors, metadata or {}, labels)
    return Program(instructions, labels, kernels, symbols, metadata or {}, target)


def _collect_kernels(
    descriptors: dict[str, dict[str, Any]], metadata: dict[str, Any], labels: dict[str, int]
) -> dict[str, KernelInfo]:
    meta_by_name = {k.get(".name"): k for k in (metadata.get("amdhsa.kernels") or [])}
    kernels = {}
    for name, desc in descriptors.items():
        if name not in labels:
            raise AsmParseError(f"kernel descriptor {name!r} has no code label")
        kernels[name] = KernelInfo(name, labels[name], desc, meta_by_name.get(name, {}))
    return kernels


# ---- immediates -------------------------------------------------------------------------------

# Inline float constants of the f32 operand encoding, with their bit patterns (1/(2*pi) included).
_INLINE_F32 = {0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 0.15915494}


def f32_bits(x: float) -> int:
    """IEEE binary32 bits of x (round to nearest)."""
    if abs(x - 0.15915494) < 1e-9:
        return 0x3E22F983  # the hardware's 1/(2*pi) inline constant
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f64_bits(x: float) -> int:
    """IEEE binary64 bits of x."""
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def f16_bits(x: float) -> int:
    """IEEE binary16 bits of x."""
    return struct.unpack("<H", struct.pack("<e", x))[0]


def is_inline_constant(op: Operand) -> bool:
    """True when the operand is an inline constant (integers -16..64, the float inline set)."""
    if op.kind == "int":
        return -16 <= op.value <= 64
    if op.kind == "float":
        return op.value in _INLINE_F32 or abs(op.value - 0.15915494) < 1e-9
    return False


def imm_bits(op: Operand, width: int, fmt: str) -> int:
    """Bits of an immediate operand for an operand of `width` bits and format fmt ('i','f').

    Integers are their two's-complement bits (sign-extended to the width: an inline -1 in a 64-bit
    operand is all ones). A float written in a float-typed operand is that float's encoding; a
    float in an integer operand is the f32 encoding (as LLVM prints it).
    """
    mask = (1 << width) - 1
    if op.kind == "int":
        return op.value & mask
    if op.kind == "float":
        if fmt == "f":
            if width == 64:
                return f64_bits(op.value)
            if width == 16:
                return f16_bits(op.value)
            return f32_bits(op.value) & mask
        return f32_bits(op.value) & mask
    raise AsmParseError(f"operand {op.text!r} is not an immediate")
