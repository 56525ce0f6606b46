"""zyfa_asmgen.sim: a gfx950 instruction-level functional simulator with a hazard checker.

See docs/simulator.md for what it implements, what it proves and what it cannot.
"""

from .asm import Instruction, KernelInfo, Program, parse_asm
from .codeobject import CodeObject, CodeObjectError, load_code_object
from .errors import (
    AsmParseError,
    Deadlock,
    LaunchError,
    MemoryFault,
    SimError,
    UnknownInstruction,
    UnsupportedOperand,
)
from .hazards import Finding, Report
from .machine import LaunchResult, Simulator
from .memory import GlobalMemory

__all__ = [
    "AsmParseError",
    "CodeObject",
    "CodeObjectError",
    "Deadlock",
    "Finding",
    "GlobalMemory",
    "Instruction",
    "KernelInfo",
    "LaunchError",
    "LaunchResult",
    "MemoryFault",
    "Program",
    "Report",
    "SimError",
    "Simulator",
    "UnknownInstruction",
    "UnsupportedOperand",
    "load_code_object",
    "parse_asm",
]
