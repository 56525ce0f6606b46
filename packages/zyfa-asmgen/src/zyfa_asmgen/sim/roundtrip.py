"""The decoder's authority: decode .text -> print LLVM syntax -> assemble with the pinned clang ->
the bytes must equal the original, instruction by instruction.

    from zyfa_asmgen.sim.roundtrip import roundtrip_file
    result = roundtrip_file("kernel.hsaco")   # raises RoundTripError on the first difference
    result.instructions, result.bytes

The same check runs from the command line: `zyfa-asmgen sim --code-object FILE --roundtrip`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..assembler import Toolchain, assemble, find_toolchain
from .decode import DecodedInstruction, decode_text, listing
from .elf import parse_elf, read_elf
from .errors import SimError


class RoundTripError(SimError, ValueError):
    """Reassembling the decoded text did not give back the original bytes."""


@dataclass(frozen=True)
class RoundTrip:
    """A passed round trip: how many instructions and bytes came back identical."""

    instructions: int
    bytes: int


def _first_difference(insts: list[DecodedInstruction], original: bytes, rebuilt: bytes) -> str:
    for i in insts:
        got = rebuilt[i.offset : i.offset + len(i.data)]
        if got != i.data:
            return (f".text+{i.offset:#x}: {i.text!r} was {i.data.hex(' ')}, "
                    f"reassembles to {got.hex(' ') or '(nothing)'}")  # fmt: skip
    return f"sizes differ: {len(original)} bytes decoded, {len(rebuilt)} reassembled"


def roundtrip_text(code: bytes, tc: Toolchain | None = None, workdir: Path | None = None) -> RoundTrip:
    """Round-trip one .text section; RoundTripError names the first instruction that differs."""
    tc = tc or find_toolchain()
    insts = decode_text(code)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        asm, obj = Path(tmp) / "roundtrip.s", Path(tmp) / "roundtrip.o"
        asm.write_text(listing(insts))
        assemble(asm, obj, tc)
        elf = read_elf(obj)
        rebuilt = elf.section_bytes(elf.section(".text"))
    if rebuilt != code:
        raise RoundTripError(_first_difference(insts, code, rebuilt))
    return RoundTrip(len(insts), len(code))


def roundtrip_file(path: Path | str, tc: Toolchain | None = None) -> RoundTrip:
    """Round-trip the .text section of a code object (.co/.hsaco) or relocatable object file."""
    elf = parse_elf(Path(path).read_bytes())
    try:
        return roundtrip_text(elf.section_bytes(elf.section(".text")), tc)
    except SimError as e:
        raise type(e)(f"{path}: {e}") from None
