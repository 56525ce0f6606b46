"""A small interpreter for the AMD ISA pseudocode that the tinygrad wheel ships (the CDNA4 XML's
instruction descriptions), used as a second authority for the simulator's VALU/SALU semantics.

Written for these tests; it reads a subset of the pseudocode language: typed register views
(S0.u32, S1.f32, D0.i32, ...), bit slices X[hi : lo], sized literals and casts (1'1U, 64'U(x),
32'F(x)), the C operators, ?:, if/elsif/else/endif, for ... endfor, break, and the helper functions
the simple arithmetic instructions use. Integers are exact Python ints; finite floats are exact
fractions until stored into a typed float (rounded to nearest even), so the pseudocode's math is
evaluated without intermediate rounding. Anything outside the subset raises PcodeUnsupported and
the caller skips that instruction.
"""

from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

import ml_dtypes
import numpy as np


class PcodeUnsupported(Exception):
    """The pseudocode uses a construct this interpreter does not implement."""


class Break(Exception):
    pass


INT_VIEWS = {"u64": (64, False), "i64": (64, True), "b64": (64, False), "u32": (32, False), "i32": (32, True),
             "b32": (32, False), "u24": (24, False), "i24": (24, True), "u16": (16, False), "i16": (16, True),
             "b16": (16, False), "u8": (8, False), "i8": (8, True), "b8": (8, False), "u1": (1, False),
             "i1": (1, True), "u2": (2, False), "u3": (3, False), "b3": (3, False), "u4": (4, False),
             "b4": (4, False), "u5": (5, False), "u6": (6, False)}  # fmt: skip
FLOAT_VIEWS = {"f32": 32, "f16": 16, "f64": 64, "bf16": 16}


# ---- float helpers (exact rounding) ------------------------------------------------------------


def _special(x) -> bool:
    return isinstance(x, float) and (math.isnan(x) or math.isinf(x))


def round_to(x, fmt: str):
    """Round an exact value (Fraction/int/float) to the format; returns a Python float."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x) or x == 0):
        return x
    if fmt == "f64":
        return float(Fraction(x))
    frac = Fraction(x)
    try:
        f64 = float(frac)  # correctly rounded to double
    except OverflowError:
        return math.inf if frac > 0 else -math.inf
    err = frac - Fraction(f64)
    if fmt == "f32":
        dt = np.float32
    elif fmt == "f16":
        dt = np.float16
    else:
        dt = ml_dtypes.bfloat16
    # Round-to-odd in double, then to the narrow format (double has >= 2 more bits than all).
    if err != 0:
        bits = struct.unpack("<Q", struct.pack("<d", f64))[0]
        if bits & 1 == 0:
            f64 = float(np.nextafter(f64, math.inf if err > 0 else -math.inf))
    with np.errstate(over="ignore"):
        return float(np.array(f64, dtype=np.float64).astype(dt))


def f_to_bits(x, fmt: str) -> int:
    if fmt == "f32":
        return int(np.array(round_to(x, "f32"), dtype=np.float32).view(np.uint32))
    if fmt == "f64":
        return struct.unpack("<Q", struct.pack("<d", round_to(x, "f64")))[0]
    if fmt == "f16":
        return int(np.array(round_to(x, "f16"), dtype=np.float16).view(np.uint16))
    return int(np.array(round_to(x, "bf16"), dtype=ml_dtypes.bfloat16).view(np.uint16))


def bits_to_f(b: int, fmt: str):
    if fmt == "f32":
        v = float(np.array(b & 0xFFFFFFFF, dtype=np.uint32).view(np.float32))
    elif fmt == "f64":
        v = struct.unpack("<d", struct.pack("<Q", b & (2**64 - 1)))[0]
    elif fmt == "f16":
        v = float(np.array(b & 0xFFFF, dtype=np.uint16).view(np.float16))
    else:
        v = float(np.array(b & 0xFFFF, dtype=np.uint16).view(ml_dtypes.bfloat16))
    return v if _special(v) else (Fraction(v) if v != 0 or not math.copysign(1, v) < 0 else -0.0)


class FVal:
    """A float value: exact Fraction, or a Python float for inf/nan/-0.0, plus its bits if known."""

    __slots__ = ("v", "fmt", "bits")

    def __init__(self, v, fmt: str = "f64", bits: int | None = None):
        self.v, self.fmt, self.bits = v, fmt, bits

    def f(self) -> float:
        return float(self.v)


def _fv(x):
    if isinstance(x, FVal):
        return x.v
    return Fraction(x) if isinstance(x, int) else x


def _is_nan(x) -> bool:
    v = _fv(x)
    return isinstance(v, float) and math.isnan(v)


def _tofloat(v) -> float:
    """A value as a Python float, keeping nonzero tiny values nonzero and huge ones infinite."""
    if isinstance(v, float):
        return v
    try:
        f = float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf
    if f == 0 and v != 0:
        return math.copysign(5e-324, 1 if v > 0 else -1)
    return f


def _signed_zero_literal(e) -> bool:
    """An explicitly signed zero in the text: +0.0 or -0.0."""
    return e[0] == "un" and e[1] in "+-" and e[2][0] == "float" and e[2][1] == 0


def _zero_sign_eq(a, b) -> bool:
    """Equality against a written +0.0 / -0.0, sign included.

    The ISA text writes such tests to tell the zeros apart (V_MIN_F32: `S0 == +0.0 && S1 == -0.0`
    then S1, `S0 == -0.0 && S1 == +0.0` then S0): with IEEE equality the first branch would catch
    every pair of zeros and the second could never run.
    """
    if not (isinstance(a, FVal) and isinstance(b, FVal)) or _is_nan(a) or _is_nan(b):
        return False
    x, y = _fv(a), _fv(b)
    if x == 0 and y == 0:
        return _neg(x) == _neg(y)
    return x == y


def _neg(v) -> bool:
    return (isinstance(v, float) and math.copysign(1, v) < 0) or (not isinstance(v, float) and v < 0)


def _arith(op: str, a, b):
    av, bv = _fv(a), _fv(b)
    if _special(av) or _special(bv):
        fa, fb = _tofloat(av), _tofloat(bv)
        with np.errstate(all="ignore"):
            r = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[op](
                np.float64(fa), np.float64(fb)
            )
        r = float(r)
        return FVal(r if (_special(r) or r == 0 and math.copysign(1, r) < 0) else Fraction(r))
    na, nb = _neg(av), _neg(bv)
    xa, xb = Fraction(av), Fraction(bv)  # -0.0 becomes 0; its sign is in na/nb
    if op in "+-":
        if op == "-":
            xb, nb = -xb, not nb
        r = xa + xb
        if r == 0:
            both_zero = xa == 0 and xb == 0
            return FVal(-0.0 if both_zero and na and nb else Fraction(0))
        return FVal(r)
    if op == "*":
        r = xa * xb
    else:
        if xb == 0:
            return FVal(math.nan if xa == 0 else (-math.inf if na != nb else math.inf))
        r = xa / xb
    return FVal(-0.0 if r == 0 and na != nb else r)


# ---- tokenizer / parser --------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<sized>\d+'(?:[0-9]+[UI]?|0x[0-9a-fA-F]+|[-+]?[0-9.]+F?)(?![A-Za-z(]))
    | (?P<cast>\d+'[UIFB](?=\())
    | (?P<hex>0x[0-9a-fA-F]+(?:ULL|LL|U)?)
    | (?P<float>\d+\.\d*(?:[eE][-+]?\d+)?F?)
    | (?P<int>\d+(?:ULL|LL|U)?)
    | (?P<id>[A-Za-z_][A-Za-z_0-9]*)
    | (?P<op>\*\*|<<|>>|<=|>=|==|!=|<>|&&|\|\||\+=|-=|\|=|&=|\*=|\+:|[-+*/%<>=!~&|^?:;,.(){}\[\]])
    )""",
    re.X,
)


def tokenize(src: str) -> list[tuple[str, str]]:
    out = []
    src = re.sub(r"//[^\n]*", "", src)
    pos = 0
    while pos < len(src):
        if src[pos:].strip() == "":
            break
        m = _TOKEN.match(src, pos)
        if not m:
            raise PcodeUnsupported(f"cannot tokenize at {src[pos : pos + 20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class Parser:
    def __init__(self, toks):
        self.t = toks
        self.i = 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.t[j] if j < len(self.t) else ("eof", "")

    def take(self, val: str | None = None):
        tok = self.peek()
        if val is not None and tok[1] != val:
            raise PcodeUnsupported(f"expected {val!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def at(self, val: str) -> bool:
        return self.peek()[1] == val

    # statements
    def block(self, ends: tuple[str, ...]) -> list:
        stmts = []
        while self.peek()[0] != "eof" and self.peek()[1] not in ends:
            if self.at(";"):
                self.take()
                continue
            stmts.append(self.stmt())
        return stmts

    def stmt(self):
        tok = self.peek()
        if tok[1] == "if":
            return self.if_stmt()
        if tok[1] == "for":
            self.take()
            var = self.take()[1]
            self.take("in")
            lo = self.expr()
            self.take(":")
            hi = self.expr()
            self.take("do")
            body = self.block(("endfor",))
            self.take("endfor")
            return ("for", var, lo, hi, body)
        if tok[1] == "break":
            self.take()
            return ("break",)
        if tok[1] == "declare":
            while not self.at(";") and self.peek()[0] != "eof":
                self.take()
            return ("nop",)
        if tok[1] in ("lambda", "return"):
            raise PcodeUnsupported(tok[1])
        target = self.expr()
        op = self.take()[1]
        if op not in ("=", "+=", "-=", "|=", "&=", "*="):
            raise PcodeUnsupported(f"statement operator {op}")
        return ("assign", target, op, self.expr())

    def if_stmt(self):
        branches = []
        self.take("if")
        cond = self.expr()
        self.take("then")
        body = self.block(("elsif", "else", "endif"))
        branches.append((cond, body))
        while self.at("elsif"):
            self.take()
            c = self.expr()
            self.take("then")
            branches.append((c, self.block(("elsif", "else", "endif"))))
        other = []
        if self.at("else"):
            self.take()
            other = self.block(("endif",))
        self.take("endif")
        return ("if", branches, other)

    # expressions (precedence climbing)
    BIN = [("?",), ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!=", "<>"), ("<", ">", "<=", ">="),
           ("<<", ">>"), ("+", "-"), ("*", "/", "%"), ("**",)]  # fmt: skip

    def expr(self, level: int = 0):
        if level == 0:
            c = self.expr(1)
            if self.at("?"):
                self.take()
                a = self.expr(0)
                self.take(":")
                b = self.expr(0)
                return ("?", c, a, b)
            return c
        if level >= len(self.BIN):
            return self.unary()
        left = self.expr(level + 1)
        while self.peek()[1] in self.BIN[level] and self.peek()[0] == "op":
            op = self.take()[1]
            right = self.expr(level + 1)
            left = ("bin", op, left, right)
        return left

    def unary(self):
        if self.peek()[1] in ("-", "~", "!", "+") and self.peek()[0] == "op":
            op = self.take()[1]
            return ("un", op, self.unary())
        return self.postfix(self.primary())

    def primary(self):
        kind, val = self.take()
        if kind == "op" and val == "(":
            e = self.expr()
            self.take(")")
            return e
        if kind == "op" and val == "{":
            parts = [self.expr()]
            while self.at(","):
                self.take()
                parts.append(self.expr())
            self.take("}")
            return ("concat", parts)
        if kind == "cast":
            n, t = val.split("'")
            self.take("(")
            e = self.expr()
            self.take(")")
            return ("cast", int(n), t, e)
        if kind == "sized":
            n, lit = val.split("'")
            lit = lit.rstrip("UI")
            if lit.endswith("F") or "." in lit:
                return ("float", Fraction(lit.rstrip("F")))
            return ("sint", int(lit, 0), int(n))
        if kind == "hex":
            return ("int", int(re.sub(r"(ULL|LL|U)$", "", val), 16))
        if kind == "int":
            return ("int", int(re.sub(r"(ULL|LL|U)$", "", val)))
        if kind == "float":
            return ("float", Fraction(val.rstrip("F")))
        if kind == "id":
            if self.at("(") and val not in ("S0", "S1", "S2", "D0"):
                self.take("(")
                args = []
                if not self.at(")"):
                    args.append(self.expr())
                    while self.at(","):
                        self.take()
                        args.append(self.expr())
                self.take(")")
                return ("call", val, args)
            return ("var", val)
        raise PcodeUnsupported(f"unexpected token {val!r}")

    def postfix(self, e):
        while True:
            if self.at("."):
                self.take()
                e = ("view", e, self.take()[1])
            elif self.at("["):
                self.take()
                a = self.expr()
                if self.at(":"):
                    self.take()
                    b = self.expr()
                    self.take("]")
                    e = ("slice", e, a, b)
                elif self.at("+:"):
                    raise PcodeUnsupported("+: slices")
                else:
                    self.take("]")
                    e = ("index", e, a)
            else:
                return e


# ---- evaluation -----------------------------------------------------------------------------------


class Machine:
    """Evaluates one instruction's pseudocode for one lane.

    regs: name -> raw bits (int) for S0, S1, S2, D0, VCC, SCC, ...; views decode them.
    """

    def __init__(self, regs: dict[str, int], lane: int = 0, widths: dict[str, int] | None = None):
        self.regs = dict(regs)
        self.regs.setdefault("laneId", lane)
        self.regs.setdefault("WAVE_MODE", 0)
        self.vars: dict[str, object] = {"ROUND_MODE": 0, "ROUND_NEAREST_EVEN": 0, "ROUND_TOWARD_ZERO": 1}
        self.lane = lane
        self.widths = widths or {}

    # values are int (exact) or FVal
    def run(self, src: str) -> None:
        prog = Parser(tokenize(src)).block(())
        for s in prog:
            self.exec(s)

    def exec(self, s) -> None:
        kind = s[0]
        if kind == "assign":
            _, target, op, e = s
            val = self.eval(e)
            if op != "=":
                val = self.binop(op[0], self.eval(target), val)
            self.store(target, val)
        elif kind == "if":
            for cond, body in s[1]:
                if self.truth(self.eval(cond)):
                    for x in body:
                        self.exec(x)
                    return
            for x in s[2]:
                self.exec(x)
        elif kind == "for":
            _, var, lo, hi, body = s
            try:
                for i in range(self.as_int(self.eval(lo)), self.as_int(self.eval(hi)) + 1):
                    self.vars[var] = i
                    for x in body:
                        self.exec(x)
            except Break:
                pass
        elif kind == "break":
            raise Break
        elif kind == "nop":
            return
        else:
            raise PcodeUnsupported(kind)

    def truth(self, v) -> bool:
        if isinstance(v, FVal):
            return not _is_nan(v) and _fv(v) != 0
        return v != 0

    def as_int(self, v) -> int:
        if isinstance(v, FVal):
            raise PcodeUnsupported("float used as int")
        return int(v)

    # ---- storage ----
    def _raw(self, name: str) -> int:
        if name in self.regs:
            return self.regs[name]
        if name in self.vars:
            v = self.vars[name]
            if isinstance(v, FVal):
                if v.bits is None:
                    raise PcodeUnsupported(f"bits of untyped float {name}")
                return v.bits
            return v
        raise PcodeUnsupported(f"unknown register {name}")

    def store(self, target, val) -> None:
        t = target[0]
        if t == "var":
            name = target[1]
            if name in self.regs:
                self.regs[name] = self.to_bits(val, self.widths.get(name, 64))
            else:
                self.vars[name] = val
            return
        if t == "view":
            base, view = target[1], target[2]
            if base[0] == "var":
                name = base[1]
                bits = self._encode(val, view)
                width = INT_VIEWS.get(view, (FLOAT_VIEWS.get(view, 32), False))[0]
                if name in self.regs or name not in self.vars or not isinstance(self.vars[name], FVal):
                    old = self.regs.get(
                        name, self.vars.get(name, 0) if not isinstance(self.vars.get(name), FVal) else 0
                    )
                    new = (old & ~((1 << width) - 1)) | bits
                    if name in self.regs:
                        self.regs[name] = new
                    else:
                        self.vars[name] = new
                    return
            if base[0] == "slice":
                self.store(base, self._encode(val, view))
                return
            raise PcodeUnsupported("view store")
        if t == "slice":
            base, hi, lo = target[1], self.as_int(self.eval(target[2])), self.as_int(self.eval(target[3]))
            if hi < lo:
                raise PcodeUnsupported("reversed slice store")
            width = hi - lo + 1
            name = self._base_name(base)
            old = self._raw_or_zero(name)
            v = self.to_bits(val, width)
            new = (old & ~(((1 << width) - 1) << lo)) | (v << lo)
            self._set_raw(name, new)
            return
        if t == "index":
            base = target[1]
            if base[0] == "view":
                base = base[1]
            name = self._base_name(base)
            i = self.as_int(self.eval(target[2]))
            old = self._raw_or_zero(name)
            bit = 1 if self.truth(val) else 0
            self._set_raw(name, (old & ~(1 << i)) | (bit << i))
            return
        raise PcodeUnsupported(f"store to {t}")

    def _base_name(self, e) -> str:
        if e[0] == "var":
            return e[1]
        if e[0] == "view" and e[1][0] == "var":
            return e[1][1]
        raise PcodeUnsupported("complex store base")

    def _raw_or_zero(self, name: str) -> int:
        try:
            return self._raw(name)
        except PcodeUnsupported:
            return 0

    def _set_raw(self, name: str, v: int) -> None:
        if name in self.regs:
            self.regs[name] = v
        else:
            self.vars[name] = v

    def _encode(self, val, view: str) -> int:
        if view in FLOAT_VIEWS:
            if not isinstance(val, FVal):
                val = FVal(Fraction(val))
            if val.bits is not None and val.fmt == view:
                return val.bits
            return f_to_bits(val.v, view)
        width, _ = INT_VIEWS[view]
        return self.to_bits(val, width)

    def to_bits(self, val, width: int) -> int:
        if isinstance(val, FVal):
            if val.bits is not None:
                return val.bits & ((1 << width) - 1)
            raise PcodeUnsupported("float stored as bits without a format")
        return int(val) & ((1 << width) - 1)

    # ---- expressions ----
    def eval(self, e):
        k = e[0]
        if k in ("int", "sint"):
            return e[1]
        if k == "float":
            return FVal(e[1])
        if k == "var":
            return self.var(e[1])
        if k == "view":
            if e[1][0] == "var" and e[1][1] in ("INF", "NAN", "OVERFLOW_F32", "UNDERFLOW_F32"):
                return self._named_float(e[1][1], e[2])
            return self.view(self.eval_raw(e[1]), e[2])
        if k == "slice":
            raw = self.eval_raw(e[1])
            hi, lo = self.as_int(self.eval(e[2])), self.as_int(self.eval(e[3]))
            if hi < lo:  # bit reversal X[0 : 31]
                n = lo - hi + 1
                v = (raw >> hi) & ((1 << n) - 1)
                return int(f"{v:0{n}b}"[::-1], 2)
            return (raw >> lo) & ((1 << (hi - lo + 1)) - 1)
        if k == "index":
            raw = self.eval_raw(e[1])
            return (raw >> self.as_int(self.eval(e[2]))) & 1
        if k == "un":
            v = self.eval(e[2])
            if e[1] == "-":
                if not isinstance(v, FVal):
                    return -v
                x = _fv(v)
                if x == 0:
                    return FVal(0.0 if _neg(x) else -0.0)  # negating a zero flips its sign
                return FVal(-x)
            if e[1] == "+":
                return v
            if e[1] == "~":
                return ~self.as_int(v)
            return 0 if self.truth(v) else 1
        if k == "bin":
            if e[1] == "&&":
                return 1 if self.truth(self.eval(e[2])) and self.truth(self.eval(e[3])) else 0
            if e[1] == "||":
                return 1 if self.truth(self.eval(e[2])) or self.truth(self.eval(e[3])) else 0
            if e[1] in ("==", "!=") and (_signed_zero_literal(e[2]) or _signed_zero_literal(e[3])):
                eq = _zero_sign_eq(self.eval(e[2]), self.eval(e[3]))
                return int(eq if e[1] == "==" else not eq)
            return self.binop(e[1], self.eval(e[2]), self.eval(e[3]))
        if k == "?":
            return self.eval(e[2]) if self.truth(self.eval(e[1])) else self.eval(e[3])
        if k == "cast":
            return self.cast(e[1], e[2], self.eval(e[3]))
        if k == "call":
            return self.call(e[1], [self.eval(a) for a in e[2]])
        if k == "concat":
            vals = [self.eval(p) for p in e[1]]
            widths = [self._width_of(p) for p in e[1]]
            out = 0
            for v, w in zip(vals, widths, strict=True):
                out = (out << w) | self.to_bits(v, w)
            return out
        raise PcodeUnsupported(k)

    def _width_of(self, e) -> int:
        if e[0] == "sint":
            return e[2]
        if e[0] == "view":
            return INT_VIEWS.get(e[2], (FLOAT_VIEWS.get(e[2], 32), False))[0]
        if e[0] == "call" and e[1] in ("f32_to_f16", "f32_to_bf16"):
            return 16
        if e[0] == "call" and e[1] in ("f32_to_fp8", "f32_to_bf8"):
            return 8
        if e[0] == "slice":
            hi, lo = self.as_int(self.eval(e[2])), self.as_int(self.eval(e[3]))
            return abs(hi - lo) + 1
        raise PcodeUnsupported("concat part width")

    def eval_raw(self, e) -> int:
        """Bits of an expression used as a register (for views/slices)."""
        if e[0] == "var":
            return self._raw(e[1])
        v = self.eval(e)
        if isinstance(v, FVal):
            if v.bits is None:
                raise PcodeUnsupported("bits of a computed float")
            return v.bits
        return v & (2**128 - 1)

    def _named_float(self, name: str, fmt: str):
        if name == "INF":
            return FVal(math.inf, fmt)
        if name == "NAN":
            return FVal(math.nan, fmt)
        if name == "OVERFLOW_F32":
            return FVal(math.inf, fmt)  # the largest magnitude, rounded: +inf in f32
        return FVal(Fraction(0), fmt)  # UNDERFLOW_F32

    def var(self, name: str):
        consts = {"laneId": self.lane, "PI": FVal(Fraction(math.pi)), "WAVE_MODE": 0}
        if name in consts:
            return consts[name]
        if name in ("INF", "NAN", "OVERFLOW_F32", "UNDERFLOW_F32"):
            return self._named_float(name, "f64")
        if name in self.vars:
            return self.vars[name]
        if name in self.regs:
            return self.regs[name]
        raise PcodeUnsupported(f"unknown name {name}")

    def view(self, raw: int, v: str):
        if v in INT_VIEWS:
            width, signed = INT_VIEWS[v]
            x = raw & ((1 << width) - 1)
            if signed and x >> (width - 1):
                x -= 1 << width
            return x
        if v in FLOAT_VIEWS:
            width = FLOAT_VIEWS[v]
            bits = raw & ((1 << width) - 1)
            return FVal(bits_to_f(bits, v), v, bits)
        if v == "IEEE":
            return 1  # our kernels run with IEEE mode on (descriptor ieee_mode 1)
        raise PcodeUnsupported(f"view .{v}")

    def cast(self, n: int, t: str, v):
        if t == "F":
            fmt = {16: "f16", 32: "f32", 64: "f64"}[n]
            if isinstance(v, FVal):
                if v.fmt == fmt and v.bits is not None:
                    return v
                r = round_to(v.v, fmt)
                return FVal(r if _special(r) or (r == 0 and math.copysign(1, r) < 0) else Fraction(r), fmt,
                            f_to_bits(v.v, fmt))  # fmt: skip
            # An int cast to float reinterprets bits (32'F(0xffc00000)).
            return FVal(bits_to_f(v, fmt), fmt, v & ((1 << n) - 1))
        if isinstance(v, FVal):
            raise PcodeUnsupported("float to int cast")
        if t == "I":
            x = v & ((1 << n) - 1)
            return x - (1 << n) if x >> (n - 1) else x
        return v & ((1 << n) - 1)

    def binop(self, op: str, a, b):
        if isinstance(a, FVal) or isinstance(b, FVal):
            if op in "+-*/":
                return _arith(op, a, b)
            if op == "**":
                av, bv = _fv(a), _fv(b)
                if isinstance(bv, Fraction) and bv.denominator == 1 and not isinstance(av, float):
                    # Clamp far outside every float format: the exact power still rounds the same.
                    e = max(-1100, min(1100, int(bv)))
                    return FVal(av**e)
                return FVal(float(av) ** float(bv))
            if op in ("==", "!=", "<>", "<", ">", "<=", ">="):
                if _is_nan(a) or _is_nan(b):
                    return 1 if op in ("!=", "<>") else 0
                x, y = float(_fv(a)) if isinstance(_fv(a), float) else _fv(a), _fv(b)
                if isinstance(y, float) or isinstance(x, float):
                    x, y = float(x), float(y)
                return int({"==": x == y, "!=": x != y, "<>": x != y, "<": x < y, ">": x > y, "<=": x <= y,
                            ">=": x >= y}[op])  # fmt: skip
            raise PcodeUnsupported(f"float {op}")
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return int(a / b) if b else 0
        if op == "%":
            return a % b
        if op == "<<":
            return a << b
        if op == ">>":
            return a >> b
        if op == "&":
            return a & b
        if op == "|":
            return a | b
        if op == "^":
            return a ^ b
        if op == "**":
            return a**b
        return int({"==": a == b, "!=": a != b, "<>": a != b, "<": a < b, ">": a > b, "<=": a <= b,
                    ">=": a >= b}[op])  # fmt: skip

    # ---- helper functions ----
    def call(self, name: str, args: list):
        f = getattr(self, f"fn_{name}", None)
        if f is None:
            raise PcodeUnsupported(f"function {name}")
        return f(*args)

    @staticmethod
    def _f(x) -> float:
        return float(_fv(x))

    def fn_fma(self, a, b, c):
        return _arith("+", _arith("*", a, b), c)

    def fn_floor(self, a):
        v = _fv(a)
        return FVal(v if isinstance(v, float) else Fraction(math.floor(v)))  # -0.0 stays -0.0

    def fn_trunc(self, a):
        v = _fv(a)
        if isinstance(v, float):
            return FVal(v)
        t = math.trunc(v)
        return FVal(-0.0 if t == 0 and v < 0 else Fraction(t))  # trunc keeps the sign of zero

    def fn_fract(self, a):
        v = _fv(a)
        if isinstance(v, float):
            return FVal(math.nan if _special(v) else Fraction(0))
        return FVal(v - math.floor(v))

    def fn_isEven(self, a):
        v = _fv(a)
        if _special(v):
            return 0
        return int(math.floor(v) % 2 == 0)

    def fn_sqrt(self, a):
        x = _tofloat(_fv(a))
        if x == 0 or math.isnan(x) or x == math.inf:
            return FVal(x)  # sqrt(-0) = -0 (IEEE)
        if x < 0:
            return FVal(math.nan)
        return FVal(Fraction(math.sqrt(x)))

    def fn_pow(self, a, b):
        with np.errstate(all="ignore"):
            r = float(np.power(np.float64(self._f(a)), np.float64(self._f(b))))
        return FVal(r if _special(r) else Fraction(r))

    def fn_log2(self, a):
        x = self._f(a)
        if x == 0:
            return FVal(-math.inf)
        if x < 0 or math.isnan(x):
            return FVal(math.nan)
        return FVal(math.inf if math.isinf(x) else Fraction(math.log2(x)))

    def fn_isNAN(self, a):
        return int(_is_nan(a))

    def fn_isSignalNAN(self, a):
        if not _is_nan(a) or not isinstance(a, FVal) or a.bits is None:
            return 0
        quiet_bit = {"f32": 22, "f64": 51, "f16": 9, "bf16": 6}[a.fmt]
        return int(not (a.bits >> quiet_bit) & 1)

    def fn_isQuietNAN(self, a):
        return int(_is_nan(a) and not self.fn_isSignalNAN(a))

    def fn_cvtToQuietNAN(self, a):
        return FVal(math.nan)

    def fn_exponent(self, a):
        if not isinstance(a, FVal) or a.bits is None:
            raise PcodeUnsupported("exponent of untyped value")
        shift, mask = {"f32": (23, 0xFF), "f64": (52, 0x7FF), "f16": (10, 0x1F), "bf16": (7, 0xFF)}[a.fmt]
        return (a.bits >> shift) & mask

    def fn_sign(self, a):
        if isinstance(a, FVal) and a.bits is not None:
            return (a.bits >> (FLOAT_VIEWS[a.fmt] - 1)) & 1
        return int(math.copysign(1, self._f(a)) < 0)

    def fn_abs(self, a):
        if isinstance(a, FVal):
            v = _fv(a)
            bits = None if a.bits is None else a.bits & ~(1 << (FLOAT_VIEWS.get(a.fmt, 64) - 1))
            return FVal(abs(v), a.fmt, bits)
        return abs(a)

    def fn_ldexp(self, a, n):
        v = _fv(a)
        n = max(-1100, min(1100, int(n)))
        return FVal(v if isinstance(v, float) else v * Fraction(2) ** n)

    def fn_i32_to_f32(self, a):
        return FVal(Fraction(a))

    fn_u32_to_f32 = fn_i32_to_f32

    def fn_f16_to_f32(self, a):
        return FVal(_fv(a))

    fn_bf16_to_f32 = fn_f16_to_f32

    def _f2i(self, a, lo: int, hi: int) -> int:
        v = _fv(a)
        if isinstance(v, float):
            if math.isnan(v) or v == 0:
                return 0
            return hi if v > 0 else lo
        return max(lo, min(hi, math.trunc(v)))

    def fn_f32_to_i32(self, a):
        return self._f2i(a, -(2**31), 2**31 - 1)

    def fn_f32_to_u32(self, a):
        return self._f2i(a, 0, 2**32 - 1)

    def fn_f32_to_f16(self, a):
        v = _fv(a)
        bits = f_to_bits(v, "f16")
        if self.vars.get("ROUND_MODE") == 1 and not _special(v) and v != 0:
            r = bits_to_f(bits, "f16")
            if not _special(r) and abs(Fraction(r)) > abs(Fraction(v)) or _special(r):
                # round toward zero: step one f16 ulp back toward zero
                h = np.array(bits, dtype=np.uint16).view(np.float16)
                bits = int(np.nextafter(h, np.float16(0)).view(np.uint16))
        return FVal(v, "f16", bits)

    def fn_signext_from_bit(self, x, n):
        n = int(n)
        if n == 0:
            return 0
        x &= (1 << n) - 1
        return x - (1 << n) if x >> (n - 1) else x

    def fn_f32_to_bf16(self, a):
        return FVal(_fv(a), "bf16", f_to_bits(_fv(a), "bf16"))

    def fn_signext(self, a):
        return a

    def fn_mantissa(self, a):
        m, _ = math.frexp(_tofloat(_fv(a)))
        return FVal(m if m == 0 else Fraction(m))

    def fn_v_max_f32(self, a, b):
        m = Machine({"S0": f_to_bits(_fv(a), "f32"), "S1": f_to_bits(_fv(b), "f32")}, widths={"D0": 32})
        m.regs["D0"] = 0
        from tinygrad.runtime.autogen.amd.cdna.str_pcode import PCODE  # noqa: PLC0415

        m.run(next(v for k, v in PCODE.items() if k.name == "V_MAX_F32_E32"))
        return m.view(m.regs["D0"], "f32")

    def fn_v_min_f32(self, a, b):
        m = Machine({"S0": f_to_bits(_fv(a), "f32"), "S1": f_to_bits(_fv(b), "f32")}, widths={"D0": 32})
        m.regs["D0"] = 0
        from tinygrad.runtime.autogen.amd.cdna.str_pcode import PCODE  # noqa: PLC0415

        m.run(next(v for k, v in PCODE.items() if k.name == "V_MIN_F32_E32"))
        return m.view(m.regs["D0"], "f32")

    def fn_v_min_i32(self, a, b):
        return min(a, b)

    fn_v_min_u32 = fn_v_min_i32
    fn_v_max_i32 = staticmethod(lambda a, b: max(a, b))
    fn_v_max_u32 = fn_v_max_i32

    def fn_v_min3_i32(self, a, b, c):
        return min(a, b, c)

    fn_v_min3_u32 = fn_v_min3_i32
    fn_v_max3_i32 = staticmethod(lambda a, b, c: max(a, b, c))
    fn_v_max3_u32 = fn_v_max3_i32

    def fn_v_max3_f32(self, a, b, c):
        return self.fn_v_max_f32(self.fn_v_max_f32(a, b), c)

    def fn_v_min3_f32(self, a, b, c):
        return self.fn_v_min_f32(self.fn_v_min_f32(a, b), c)
