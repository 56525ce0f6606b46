"""A MessagePack decoder for the AMDGPU metadata note (code object v3 and later store it this way).

It reads every type of the MessagePack specification the metadata uses (nil, booleans, integers,
floats, strings, binary, arrays, maps); extension types are refused by name. Maps keep their order.
"""

from __future__ import annotations

import struct
from typing import Any


class MsgpackError(ValueError):
    """The bytes are not valid MessagePack (or use an extension type)."""


_FIXED = {
    0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
    0xCA: ">f", 0xCB: ">d",
}  # fmt: skip
_LEN = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I",
        0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}  # fmt: skip


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            left = len(self.data) - self.pos
            raise MsgpackError(f"truncated at byte {self.pos} (needs {n} more, has {left})")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def value(self) -> Any:
        b = self.take(1)[0]
        if b <= 0x7F or b >= 0xE0:
            return b if b <= 0x7F else b - 0x100
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0xF)
        if 0x90 <= b <= 0x9F:
            return [self.value() for _ in range(b & 0xF)]
        if 0xA0 <= b <= 0xBF:
            return self.str(b & 0x1F)
        if b in (0xC0, 0xC2, 0xC3):
            return {0xC0: None, 0xC2: False, 0xC3: True}[b]
        if b in _FIXED:
            return self.unpack(_FIXED[b])
        if b in _LEN:
            n = self.unpack(_LEN[b])
            if b <= 0xC6:
                return self.take(n)
            if b <= 0xDB:
                return self.str(n)
            if b <= 0xDD:
                return [self.value() for _ in range(n)]
            return self.map(n)
        raise MsgpackError(f"unsupported MessagePack type byte {b:#04x} at byte {self.pos - 1}")

    def str(self, n: int) -> str:
        return self.take(n).decode("utf-8")

    def map(self, n: int) -> dict[Any, Any]:
        out = {}
        for _ in range(n):
            k = self.value()
            out[k] = self.value()
        return out


def unpackb(data: bytes) -> Any:
    """Decode one MessagePack value that fills `data` exactly."""
    r = _Reader(data)
    v = r.value()
    if r.pos != len(data):
        raise MsgpackError(f"{len(data) - r.pos} bytes left after the value")
    return v
