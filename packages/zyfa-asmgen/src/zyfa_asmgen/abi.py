"""The kernel-argument layout, read from the C header `kernels/abi/zyfa_abi.h`.

zyfa-asmgen must not import zyfa-core, so the ABI reaches the generator as input: this module
parses the header text (the packed `zyfa_fwd_args` struct, `ZYFA_ABI_VERSION`, the `ZYFA_FLAG_*`
macros, and `zyfa_varlen_args`, the second parameter of packed-batch kernels) and computes every
field's offset from the C types and the `#pragma pack`. The offsets the header writes in its
comments are checked against the computed ones, so a header edited by hand cannot drift from what
the generated assembly reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

STRUCT_NAME = "zyfa_fwd_args"
VARLEN_STRUCT_NAME = "zyfa_varlen_args"

# C type spelling -> (kind, size in bytes). Pointers are 8 bytes on both amdgcn and x86-64.
_SCALAR_TYPES: dict[str, tuple[str, int]] = {
    "int64_t": ("i64", 8),
    "uint64_t": ("u64", 8),
    "int32_t": ("i32", 4),
    "uint32_t": ("u32", 4),
    "float": ("f32", 4),
    "double": ("f64", 8),
}
_POINTER_SIZE = 8

_FIELD_RE = re.compile(
    r"^\s*(?P<type>(?:const\s+)?[A-Za-z_][A-Za-z_0-9]*)\s*(?P<ptr>\*?)\s*(?P<name>[A-Za-z_][A-Za-z_0-9]*)\s*;"
    r"\s*(?:/\*\s*(?P<comment>.*?)\s*\*/)?\s*$"
)


class AbiError(ValueError):
    """The header does not have the shape this parser understands, or its comments disagree."""


@dataclass(frozen=True)
class Field:
    """One member of the argument struct."""

    name: str
    ctype: str  # as spelled in the header, e.g. "const void *", "int64_t"
    kind: str  # "ptr", "i64", "u64", "i32", "u32", "f32", "f64"
    offset: int  # bytes from the start of the struct (= of the kernarg segment)
    size: int  # bytes


@dataclass(frozen=True)
class StructLayout:
    """A second kernel parameter's parsed layout: its fields, size and alignment (natural, not packed)."""

    name: str
    fields: tuple[Field, ...]
    size: int
    align: int


@dataclass(frozen=True)
class AbiLayout:
    """The parsed `zyfa_fwd_args` layout plus the header's version and flag macros, and `varlen`, the layout
    of `zyfa_varlen_args` (None for a header without it)."""

    fields: tuple[Field, ...]
    size: int
    version: int
    flags: dict[str, int]
    packed: bool
    varlen: StructLayout | None = None

    def varlen_offset(self) -> int:
        """Byte offset of `zyfa_varlen_args` in the kernarg segment: right after `zyfa_fwd_args`, rounded up
        to the struct's alignment (as the compiler places a second by-value parameter)."""
        if self.varlen is None:
            raise AbiError(f"the header has no {VARLEN_STRUCT_NAME}")
        return -(-self.size // self.varlen.align) * self.varlen.align

    def field(self, name: str) -> Field:
        """The field called `name`; KeyError lists the known names."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"zyfa_fwd_args has no field {name!r}; fields: {[f.name for f in self.fields]}")

    def offset(self, name: str) -> int:
        """Byte offset of field `name` in the kernarg segment."""
        return self.field(name).offset

    def span(self, first: str, count: int) -> tuple[int, int]:
        """(offset, bytes) of `count` consecutive fields starting at `first`, checked contiguous.

        The generator loads neighbouring fields with one s_load_dwordxN; this makes sure they
        really are neighbours in the header.
        """
        names = [f.name for f in self.fields]
        i = names.index(first)
        group = self.fields[i : i + count]
        if len(group) != count:
            raise AbiError(f"fewer than {count} fields from {first!r}")
        for a, b in zip(group, group[1:], strict=False):
            if a.offset + a.size != b.offset:
                raise AbiError(f"fields {a.name!r} and {b.name!r} are not contiguous")
        return group[0].offset, group[-1].offset + group[-1].size - group[0].offset


def _struct_body(text: str, name: str = STRUCT_NAME) -> str:
    m = re.search(r"typedef\s+struct\s+" + name + r"\s*\{(?P<body>.*?)\}\s*" + name + r"\s*;", text, re.S)
    if not m:
        raise AbiError(f"no 'typedef struct {name} {{ ... }} {name};' in the header")
    return m.group("body")


def _is_packed(text: str, name: str = STRUCT_NAME) -> bool:
    """True when the struct sits inside `#pragma pack(push, 1)` ... `#pragma pack(pop)`: the last pack
    directive before it is a push to 1."""
    start = text.index("typedef struct " + name)
    directives = list(re.finditer(r"#pragma\s+pack\s*\(\s*(push\s*,\s*1|pop)\s*\)", text[:start]))
    return bool(directives) and directives[-1].group(1) != "pop"


def _type_of(ctype: str, ptr: str) -> tuple[str, int]:
    if ptr:
        return "ptr", _POINTER_SIZE
    base = ctype.replace("const", "").strip()
    if base not in _SCALAR_TYPES:
        raise AbiError(f"unsupported member type {ctype!r}")
    return _SCALAR_TYPES[base]


def _parse_fields(body: str, packed: bool) -> tuple[list[Field], int, int]:
    fields: list[Field] = []
    offset = 0
    max_align = 1
    for line in body.splitlines():
        if not line.strip():
            continue
        m = _FIELD_RE.match(line)
        if not m:
            raise AbiError(f"cannot parse struct member line: {line.strip()!r}")
        kind, size = _type_of(m.group("type"), m.group("ptr"))
        align = 1 if packed else size
        max_align = max(max_align, align)
        offset = -(-offset // align) * align
        name = m.group("name")
        comment = m.group("comment") or ""
        stated = re.match(r"(\d+)", comment)
        if stated and int(stated.group(1)) != offset:
            raise AbiError(
                f"field {name!r}: header comment says offset {stated.group(1)}, layout gives {offset}"
            )
        ctype = m.group("type") + (" *" if m.group("ptr") else "")
        fields.append(Field(name=name, ctype=ctype, kind=kind, offset=offset, size=size))
        offset += size
    size = -(-offset // max_align) * max_align
    return fields, size, max_align


def _int_macro(text: str, name: str) -> int:
    m = re.search(r"#define\s+" + name + r"\s+(0x[0-9A-Fa-f]+|\d+)[uUlL]*", text)
    if not m:
        raise AbiError(f"no #define {name} in the header")
    return int(m.group(1), 0)


def parse_abi_text(text: str) -> AbiLayout:
    """Parse the header text; raises AbiError on anything unexpected or inconsistent."""
    fields, size, packed, _ = _checked_struct(text, STRUCT_NAME)
    varlen = None
    if re.search(r"typedef\s+struct\s+" + VARLEN_STRUCT_NAME + r"\b", text):
        vfields, vsize, _, align = _checked_struct(text, VARLEN_STRUCT_NAME)
        varlen = StructLayout(VARLEN_STRUCT_NAME, tuple(vfields), vsize, align)
    flag_names = re.findall(r"#define\s+(ZYFA_FLAG_[A-Z_0-9]+)\s", text)
    flags = {n: _int_macro(text, n) for n in flag_names}
    return AbiLayout(tuple(fields), size, _int_macro(text, "ZYFA_ABI_VERSION"), flags, packed, varlen)


def _checked_struct(text: str, name: str) -> tuple[list[Field], int, bool, int]:
    """The struct's fields, size, packing and alignment, the size checked against the one the header states
    in a comment and asserts."""
    body = _struct_body(text, name)
    packed = _is_packed(text, name)
    fields, size, align = _parse_fields(body, packed)
    stated = re.search(r"\}\s*" + name + r"\s*;\s*/\*\s*(\d+)\s*bytes", text)
    if stated and int(stated.group(1)) != size:
        raise AbiError(f"{name}: header comment says {stated.group(1)} bytes, layout gives {size}")
    asserted = re.search(r"sizeof\(" + name + r"\)\s*==\s*(\d+)", text)
    if asserted and int(asserted.group(1)) != size:
        raise AbiError(f"{name}: header static_assert says {asserted.group(1)} bytes, layout gives {size}")
    return fields, size, packed, align


def parse_abi_header(path: str | Path) -> AbiLayout:
    """Read and parse `kernels/abi/zyfa_abi.h` (or a copy of it)."""
    return parse_abi_text(Path(path).read_text())
