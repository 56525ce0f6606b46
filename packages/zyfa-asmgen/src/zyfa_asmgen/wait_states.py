"""Place `s_nop` wait states with the simulator's gfx950 hazard rules, over the control-flow graph.

The generator and the simulator's checker must agree on what a hazard is, so this pass does not
keep rules of its own: it compiles every instruction with the simulator (`sim.core`) and asks
`sim.hazard_rules.check` what each one needs after the instructions that may precede it. The
checker counts wait states on the executed stream; here a label's predecessors are the fall-through
and every branch to it, so the pass walks the program repeatedly, carrying each branch's recent
history to its target, until no more padding is needed (loops converge in two or three walks).
Padding only grows, so the result meets every rule on every path through the program.
"""

from __future__ import annotations

from .sim import hazard_rules
from .sim.asm import parse_instruction
from .sim.core import Ctx, Op, compile_instruction

HISTORY = 24  # wait states the rules look back (hazard_rules.check cuts there too)
_MAX_WALKS = 8

# A history: producers newest first as (wait states since the producer issued, op).
History = tuple[tuple[int, Op], ...]


def _age(h: History, n: int) -> History:
    return tuple((a + n, p) for a, p in h if a + n < HISTORY)


def _key(h: History) -> tuple:
    return tuple((a, id(p)) for a, p in h)


def _need(op: Op, h: History, rules: list) -> tuple[int, str]:
    """Wait states still missing before `op` after history `h`, and the rule asking for most."""
    hist = [(-a, p) for a, p in reversed(h)]  # (end position, op) oldest first, now = 0
    worst, why = 0, ""
    for name, need, _prod, since in hazard_rules.check(op, hist, 0, rules):
        if need - since > worst:
            worst, why = need - since, name
    return worst, why


class _Walk:
    def __init__(self, ops: list[Op | None], targets: dict[int, str], rules: list) -> None:
        self.ops, self.targets, self.rules = ops, targets, rules

    def run(
        self,
        items: list[tuple[str, str]],
        pads: dict[int, tuple[int, str]],
        incoming: dict[str, list[History]],
    ) -> tuple[bool, dict[str, list[History]]]:
        """One walk; grows `pads` in place; returns (anything grew, histories reaching each label)."""
        grew = False
        alts: list[History] = [()]
        reach: dict[str, dict[tuple, History]] = {}
        for idx, (kind, text) in enumerate(items):
            if kind == "label":
                merged = {_key(h): h for h in alts + incoming.get(text, [])}
                alts = list(merged.values())
                continue
            op = self.ops[idx]
            if op is None:
                continue
            pad, why = pads.get(idx, (0, ""))
            alts = [_age(h, pad) for h in alts]
            more = max((_need(op, h, self.rules) for h in alts), default=(0, ""), key=lambda x: x[0])
            if more[0] > 0:
                grew = True
                pads[idx] = (pad + more[0], more[1] or why)
                alts = [_age(h, more[0]) for h in alts]
            n = op.info.get("wait_states", 1)
            alts = [((0, op),) + _age(h, n) for h in alts]
            if idx in self.targets:
                bucket = reach.setdefault(self.targets[idx], {})
                for h in alts:
                    bucket[_key(h)] = h
            if op.kind == "end" or op.inst.op == "s_branch":
                alts = []
        return grew, {k: list(v.values()) for k, v in reach.items()}


def plan(items: list[tuple[str, str]]) -> dict[int, tuple[int, str]]:
    """Wait states to insert before each instruction: {item index: (wait states, rule name)}.

    `items` is the program in order: ("instr", text) or ("label", name); other kinds are ignored.
    """
    labels: dict[str, int] = {}
    n = 0
    for kind, text in items:
        if kind == "label":
            labels[text] = n
        elif kind == "instr":
            n += 1
    ctx = Ctx(labels)
    ops: list[Op | None] = []
    targets: dict[int, str] = {}
    line = 0
    for idx, (kind, text) in enumerate(items):
        if kind != "instr":
            ops.append(None)
            continue
        line += 1
        op = compile_instruction(parse_instruction(text, line), ctx)
        ops.append(op)
        if op.kind == "branch":
            targets[idx] = text.split()[-1]
    walk = _Walk(ops, targets, hazard_rules.default_rules())
    pads: dict[int, tuple[int, str]] = {}
    incoming: dict[str, list[History]] = {}
    for _ in range(_MAX_WALKS):
        grew, reach = walk.run(items, pads, incoming)
        stable = {k: sorted(map(_key, v)) for k, v in reach.items()} == {
            k: sorted(map(_key, v)) for k, v in incoming.items()
        }
        incoming = reach
        if not grew and stable:
            return pads
    raise RuntimeError("wait-state placement did not converge")
