"""A small builder for one gfx950 kernel program: emit / label / finalize.

Generators write instructions in LLVM syntax through `Kernel.emit`. The builder

* parses each line (`isa.Instr`) and inserts the `s_nop` wait states the gfx950 hazard rules ask
  for: by default with the linear rules of `hazards` (no MFMA), draining the hazard window before
  every branch; with `sim_hazards=True` with the simulator's full rule set (MFMA included) over the
  program's control flow, at `finalize` (`wait_states`);
* places labels and checks, at `finalize`, that every branch reaches its target within the SOPP
  branch range (signed 16-bit count of 4-byte words from the next instruction), using an upper
  bound of each instruction's size;
* counts the VGPRs, AGPRs and SGPRs the program names and the LDS it allocated through `lds()`,
  so the kernel descriptor is computed from the program, never typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import hazards
from .isa import Instr

_LABEL_RE = re.compile(r"^\.?[A-Za-z_][A-Za-z_0-9.$]*$")
SOPP_BRANCH_MIN = -(1 << 15)
SOPP_BRANCH_MAX = (1 << 15) - 1


class KernelBuildError(ValueError):
    """The program is malformed: unknown or duplicate label, branch out of range, bad LDS use."""


@dataclass(frozen=True)
class Line:
    """One line of the program body: an instruction, a label or a comment."""

    kind: str  # "instr", "label", "comment"
    text: str
    comment: str = ""
    instr: Instr | None = None


@dataclass(frozen=True)
class Program:
    """A finalized program body and the resources it uses."""

    name: str
    lines: tuple[Line, ...]
    vgprs: int  # architectural VGPRs named (highest index + 1)
    agprs: int  # AGPRs named
    sgprs: int  # SGPRs named (s0..), not counting VCC
    uses_vcc: bool
    lds_bytes: int
    max_code_bytes: int  # upper bound of the encoded size
    mnemonics: frozenset[str] = field(default_factory=frozenset)

    def body_text(self) -> str:
        """The instructions and labels as assembly text (tab-indented, comments with //)."""
        out = []
        for ln in self.lines:
            if ln.kind == "label":
                out.append(f"{ln.text}:")
            elif ln.kind == "comment":
                out.append(f"  // {ln.text}")
            else:
                out.append(f"  {ln.text}" + (f"  // {ln.comment}" if ln.comment else ""))
        return "\n".join(out) + "\n"


class Kernel:
    """Collects a kernel body; see the module docstring.

    `preloaded_sgprs` / `preloaded_vgprs`: registers the hardware fills before the first
    instruction (user SGPRs, workgroup ids, workitem ids). They count as used even if never read.
    """

    def __init__(
        self, name: str, *, preloaded_sgprs: int = 0, preloaded_vgprs: int = 1, sim_hazards: bool = False
    ) -> None:
        self.name = name
        self._sim_hazards = sim_hazards
        self._lines: list[Line] = []
        self._labels: set[str] = set()
        self._window: list[Instr] = []  # recent instructions for the hazard rules
        self._lds: dict[str, tuple[int, int]] = {}
        self._lds_top = 0
        self._preloaded_sgprs = preloaded_sgprs
        self._preloaded_vgprs = preloaded_vgprs
        self._finalized = False

    # -- building ---------------------------------------------------------------------------
    def emit(self, text: str, comment: str = "") -> None:
        """Append one instruction (LLVM syntax), preceded by any s_nop a hazard rule needs."""
        self._check_open()
        ins = Instr.parse(text)
        if self._sim_hazards:
            self._lines.append(Line("instr", ins.text, comment, ins))
            return
        if ins.mnemonic.startswith("v_mfma"):
            raise KernelBuildError(
                "zyfa_asmgen.hazards has no MFMA rules: build MFMA kernels with Kernel(..., sim_hazards=True)"
            )
        if ins.is_branch:
            self._pad(hazards.drain(self._window), "drain hazards before a branch")
        else:
            need = hazards.pending(self._window, ins)
            if need:
                self._pad(need.wait_states, need.rule)
        self._append(ins, comment)

    def label(self, name: str) -> None:
        """Place a label (e.g. `.Lloop`) at the current position."""
        self._check_open()
        if not _LABEL_RE.match(name):
            raise KernelBuildError(f"bad label name {name!r}")
        if name in self._labels:
            raise KernelBuildError(f"duplicate label {name!r}")
        self._labels.add(name)
        self._lines.append(Line("label", name))

    def comment(self, text: str) -> None:
        """A full-line comment in the listing."""
        self._check_open()
        self._lines.append(Line("comment", text))

    def lds(self, name: str, nbytes: int, align: int = 16) -> int:
        """Reserve `nbytes` of LDS for `name`; returns its byte offset."""
        self._check_open()
        if name in self._lds or nbytes <= 0:
            raise KernelBuildError(f"bad LDS allocation {name!r} ({nbytes} bytes)")
        off = -(-self._lds_top // align) * align
        self._lds[name] = (off, nbytes)
        self._lds_top = off + nbytes
        return off

    # -- finishing ---------------------------------------------------------------------------
    def finalize(self) -> Program:
        """Check labels and branch ranges, count resources, return the Program."""
        self._check_open()
        self._finalized = True
        if self._sim_hazards:
            self._place_wait_states()
        addresses = self._label_addresses()
        self._check_branches(addresses)
        instrs = [ln.instr for ln in self._lines if ln.instr is not None]
        if any(i.is_lds for i in instrs) and not self._lds:
            raise KernelBuildError("the program uses ds_* instructions but allocated no LDS")
        top = {"v": self._preloaded_vgprs, "a": 0, "s": self._preloaded_sgprs}
        uses_vcc = False
        for i in instrs:
            for r in (*i.defs, *i.uses):
                if r.file in top:
                    top[r.file] = max(top[r.file], r.first + r.count)
                uses_vcc |= r.file == "vcc"
        return Program(
            name=self.name,
            lines=tuple(self._lines),
            vgprs=top["v"],
            agprs=top["a"],
            sgprs=top["s"],
            uses_vcc=uses_vcc,
            lds_bytes=self._lds_top,
            max_code_bytes=sum(i.max_size() for i in instrs),
            mnemonics=frozenset(i.mnemonic for i in instrs),
        )

    # -- internals ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._finalized:
            raise KernelBuildError(f"kernel {self.name!r} is already finalized")

    def _append(self, ins: Instr, comment: str) -> None:
        self._lines.append(Line("instr", ins.text, comment, ins))
        self._window.append(ins)
        del self._window[: -hazards.MAX_WAIT_STATES]

    def _pad(self, wait_states: int, why: str) -> None:
        while wait_states > 0:
            n = min(wait_states, 16)  # s_nop takes 0..15 (1..16 wait states)
            self._append(Instr.parse(f"s_nop {n - 1}"), f"hazard: {why}")
            wait_states -= n

    def _place_wait_states(self) -> None:
        from . import wait_states  # the simulator's rules (numpy); only kernels that ask load it

        pads = wait_states.plan([(ln.kind, ln.text) for ln in self._lines])
        out: list[Line] = []
        for idx, ln in enumerate(self._lines):
            n, why = pads.get(idx, (0, ""))
            while n > 0:
                k = min(n, 16)  # s_nop takes 0..15 (1..16 wait states)
                out.append(Line("instr", f"s_nop {k - 1}", f"hazard: {why}", Instr.parse(f"s_nop {k - 1}")))
                n -= k
            out.append(ln)
        self._lines = out

    def _label_addresses(self) -> dict[str, int]:
        addr = 0
        out: dict[str, int] = {}
        for ln in self._lines:
            if ln.kind == "label":
                out[ln.text] = addr
            elif ln.instr is not None:
                addr += ln.instr.max_size()
        return out

    def _check_branches(self, labels: dict[str, int]) -> None:
        """Every branch target exists and lies within the SOPP range, whatever the real sizes.

        Sizes are upper bounds, so the distance in either direction is at most the bound sum of
        the instructions between the branch and its target.
        """
        addr = 0
        for ln in self._lines:
            if ln.instr is None:
                continue
            size = ln.instr.max_size()
            if ln.instr.is_branch:
                target = ln.instr.operands[0]
                if target not in labels:
                    raise KernelBuildError(f"branch to unknown label {target!r}")
                words = (labels[target] - (addr + size)) // 4
                if not SOPP_BRANCH_MIN <= words <= SOPP_BRANCH_MAX:
                    raise KernelBuildError(
                        f"branch '{ln.instr.text}' spans up to {words} words; the SOPP range is "
                        f"[{SOPP_BRANCH_MIN}, {SOPP_BRANCH_MAX}]"
                    )
            addr += size
