"""A minimal reader of the ELF64 little-endian files the AMDGPU toolchain makes (HSA code objects).

It reads what a code object loader needs and nothing else: the header (machine, ABI version,
flags), section headers by name, the symbol tables and the note records. Layouts follow the
System V gABI (ELF-64 object file format); the AMDGPU specifics (EM_AMDGPU, the ABI versions of the
code object versions, the gfx950 machine number) follow LLVM's AMDGPUUsage document.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
# e_ident[EI_ABIVERSION] of ELFOSABI_AMDGPU_HSA -> code object version.
ABI_VERSION_TO_CODE_OBJECT = {2: 4, 3: 5, 4: 6}
# e_flags bits [7:0]: the processor; gfx950 is EF_AMDGPU_MACH_AMDGCN_GFX950.
EF_AMDGPU_MACH_MASK = 0xFF
EF_AMDGPU_MACH_GFX950 = 0x04F
SHT_SYMTAB, SHT_NOTE, SHT_DYNSYM = 2, 7, 11
STT_FUNC, STT_OBJECT = 2, 1

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")


class ElfError(ValueError):
    """The file is not an ELF64 little-endian AMDGPU object, or one of its tables is malformed."""


@dataclass(frozen=True)
class Section:
    """One section header (the fields a loader uses)."""

    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


@dataclass(frozen=True)
class Symbol:
    """One symbol: name, value (virtual address), size, type (STT_*) and its section index."""

    name: str
    value: int
    size: int
    type: int
    shndx: int


@dataclass(frozen=True)
class Note:
    """One note record: owner name, type and descriptor bytes."""

    name: str
    type: int
    desc: bytes


@dataclass
class ElfFile:
    """A parsed ELF64 file: raw bytes, header fields, sections, symbols."""

    data: bytes
    machine: int
    abi_version: int
    flags: int
    sections: list[Section]
    symbols: list[Symbol]

    def section(self, name: str) -> Section:
        """The section called `name`; ElfError naming the sections present when there is none."""
        for s in self.sections:
            if s.name == name:
                return s
        raise ElfError(f"no section {name!r}; have {[s.name for s in self.sections if s.name]}")

    def section_bytes(self, sec: Section) -> bytes:
        """The file bytes of a section."""
        return self.data[sec.offset : sec.offset + sec.size]

    def notes(self) -> list[Note]:
        """Every note record of every SHT_NOTE section."""
        out: list[Note] = []
        for sec in self.sections:
            if sec.type == SHT_NOTE:
                out += _parse_notes(self.section_bytes(sec))
        return out

    def bytes_at(self, addr: int, size: int) -> bytes:
        """`size` file bytes at virtual address `addr` (through the section that holds it)."""
        for s in self.sections:
            if s.addr and s.addr <= addr and addr + size <= s.addr + s.size and s.type != 8:  # 8: NOBITS
                off = s.offset + addr - s.addr
                return self.data[off : off + size]
        raise ElfError(f"no section holds {size} bytes at address {addr:#x}")


def _cstr(table: bytes, off: int) -> str:
    end = table.find(b"\0", off)
    return table[off : end if end >= 0 else len(table)].decode("utf-8", "replace")


def _parse_notes(blob: bytes) -> list[Note]:
    out, pos = [], 0
    while pos + 12 <= len(blob):
        namesz, descsz, ntype = struct.unpack_from("<III", blob, pos)
        pos += 12
        name = blob[pos : pos + namesz].rstrip(b"\0").decode("ascii", "replace")
        pos += (namesz + 3) & ~3
        desc = blob[pos : pos + descsz]
        pos += (descsz + 3) & ~3
        if len(desc) != descsz:
            raise ElfError(f"note {name!r} type {ntype}: descriptor runs past its section")
        out.append(Note(name, ntype, desc))
    return out


def parse_elf(data: bytes) -> ElfFile:
    """Parse an ELF64 little-endian file; ElfError when it is not one or its tables overrun the file."""
    if len(data) < _EHDR.size or data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file (no \\x7fELF magic)")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"only ELF64 little-endian is supported (EI_CLASS={data[4]}, EI_DATA={data[5]})")
    ident, _type, machine, _ver, _entry, _phoff, shoff, flags, _ehs, _phes, _phn, shes, shnum, shstrndx = (
        _EHDR.unpack_from(data, 0)
    )
    if shoff + shnum * shes > len(data) or (shnum and shes != _SHDR.size):
        raise ElfError(f"section header table ({shnum} x {shes} bytes at {shoff:#x}) overruns the file")
    raw = [_SHDR.unpack_from(data, shoff + i * shes) for i in range(shnum)]
    if shnum and shstrndx >= shnum:
        raise ElfError(f"section name table index {shstrndx} out of range ({shnum} sections)")
    names = data[raw[shstrndx][4] : raw[shstrndx][4] + raw[shstrndx][5]] if shnum else b""
    sections = [Section(_cstr(names, r[0]), r[1], r[3], r[4], r[5], r[6]) for r in raw]
    for s in sections:
        if s.type != 8 and s.offset + s.size > len(data):
            raise ElfError(f"section {s.name!r} ({s.size} bytes at {s.offset:#x}) overruns the file")
    return ElfFile(data, machine, ident[8], flags, sections, _symbols(data, sections))


def _symbols(data: bytes, sections: list[Section]) -> list[Symbol]:
    out: list[Symbol] = []
    for s in sections:
        if s.type not in (SHT_SYMTAB, SHT_DYNSYM):
            continue
        strtab = sections[s.link]
        strings = data[strtab.offset : strtab.offset + strtab.size]
        for pos in range(s.offset, s.offset + s.size - _SYM.size + 1, _SYM.size):
            name, info, _other, shndx, value, size = _SYM.unpack_from(data, pos)
            out.append(Symbol(_cstr(strings, name), value, size, info & 0xF, shndx))
    return out


def read_elf(path: Path | str) -> ElfFile:
    """Read and parse an ELF file from disk."""
    return parse_elf(Path(path).read_bytes())
