"""Exceptions raised by the simulator. Every failure names the instruction and line it came from."""

from __future__ import annotations


class SimError(Exception):
    """Base class of every simulator error."""


class AsmParseError(SimError):
    """The assembly text could not be parsed (names the line)."""


class UnknownInstruction(SimError):
    """An instruction the simulator does not implement. Never silently skipped."""


class UnsupportedOperand(SimError):
    """An operand or modifier form the simulator does not implement for this instruction."""


class MemoryFault(SimError):
    """A global (flat/global) access outside every buffer the caller registered."""


class LaunchError(SimError):
    """The launch does not fit the kernel descriptor (block size, kernarg size, LDS, registers)."""


class Deadlock(SimError):
    """Waves of a workgroup wait at different barriers forever, or a wave never ends."""
