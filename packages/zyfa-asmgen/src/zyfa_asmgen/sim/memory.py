"""Global memory (a flat 64-bit byte space of caller-registered numpy buffers) and LDS."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import MemoryFault

_BASE = 0x0000_7F00_0000_0000  # first buffer address: canonical-looking, never 0
_GAP = 1 << 20  # unmapped gap between buffers so that small overruns fault instead of aliasing


@dataclass
class Buffer:
    """One registered buffer: its base address and its bytes (a uint8 view of the caller's array)."""

    base: int
    data: np.ndarray
    name: str
    readonly: bool = False

    @property
    def end(self) -> int:
        """One past the last byte."""
        return self.base + self.data.size


class GlobalMemory:
    """The device address space. Buffers are numpy arrays the caller registers with `alloc`/`map`.

    An access that is not wholly inside one buffer raises MemoryFault (the chip would fault or read
    another allocation): a correct kernel never does it. Buffer instructions with a V# do their own
    range checking first (out-of-range lanes read 0 and drop writes, as the ISA defines).
    """

    def __init__(self) -> None:
        self._bufs: list[Buffer] = []
        self._bases = np.zeros(0, dtype=np.uint64)
        self._next = _BASE

    def map(self, array: np.ndarray, name: str = "", readonly: bool = False, align: int = 256) -> int:
        """Register a C-contiguous numpy array (written in place by stores); return its address."""
        if not array.flags.c_contiguous:
            raise ValueError(f"buffer {name!r} must be C-contiguous")
        data = array.reshape(-1).view(np.uint8)
        base = (self._next + align - 1) // align * align
        self._bufs.append(Buffer(base, data, name or f"buf{len(self._bufs)}", readonly))
        self._bases = np.array([b.base for b in self._bufs], dtype=np.uint64)
        self._next = base + max(data.size, 1) + _GAP
        return base

    def alloc(self, nbytes: int, name: str = "", fill: int = 0, align: int = 256) -> int:
        """Allocate a zero- (or `fill`-) initialised buffer of nbytes; return its address."""
        return self.map(np.full(nbytes, fill, dtype=np.uint8), name=name, align=align)

    def buffer_at(self, addr: int) -> Buffer:
        """The buffer containing addr (MemoryFault if none)."""
        i = int(np.searchsorted(self._bases, np.uint64(addr), side="right")) - 1
        if i < 0 or addr >= self._bufs[i].end:
            raise MemoryFault(f"address {addr:#x} is in no buffer")
        return self._bufs[i]

    def _locate(self, addrs: np.ndarray, nbytes: int, what: str) -> tuple[np.ndarray, list[Buffer]]:
        """Buffer index per address; raises MemoryFault naming the first bad lane."""
        idx = np.searchsorted(self._bases, addrs, side="right").astype(np.int64) - 1
        bad = idx < 0
        ends = (
            np.array([b.end for b in self._bufs], dtype=np.uint64) if self._bufs else np.zeros(0, np.uint64)
        )
        ok_idx = np.where(bad, 0, idx)
        if self._bufs:
            bad |= addrs + np.uint64(nbytes) > ends[ok_idx]
        else:
            bad[:] = True
        if bad.any():
            lane = int(np.flatnonzero(bad)[0])
            raise MemoryFault(
                f"{what}: lane {lane} accesses [{int(addrs[lane]):#x}, +{nbytes}) outside every buffer "
                f"({self.describe(int(addrs[lane]))})"
            )
        return ok_idx, self._bufs

    def describe(self, addr: int) -> str:
        """Where addr lies relative to the nearest buffers (for error messages)."""
        for b in self._bufs:
            if b.base <= addr < b.end + _GAP:
                return f"{addr - b.base} bytes from the start of {b.name!r} of {b.data.size} bytes"
        return "unmapped"

    def read(self, addrs: np.ndarray, nbytes: int, what: str = "load") -> np.ndarray:
        """Gather nbytes at each address: (n, nbytes) uint8."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if addrs.size == 0:
            return np.zeros((0, nbytes), dtype=np.uint8)
        idx, bufs = self._locate(addrs, nbytes, what)
        out = np.empty((addrs.size, nbytes), dtype=np.uint8)
        span = np.arange(nbytes, dtype=np.int64)
        for bi in np.unique(idx):
            sel = idx == bi
            b = bufs[int(bi)]
            offs = (addrs[sel] - np.uint64(b.base)).astype(np.int64)
            out[sel] = b.data[offs[:, None] + span]
        return out

    def write(self, addrs: np.ndarray, data: np.ndarray, what: str = "store") -> None:
        """Scatter (n, nbytes) uint8 rows to the addresses (later lanes win on overlap)."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if addrs.size == 0:
            return
        nbytes = data.shape[1]
        idx, bufs = self._locate(addrs, nbytes, what)
        span = np.arange(nbytes, dtype=np.int64)
        for bi in np.unique(idx):
            sel = idx == bi
            b = bufs[int(bi)]
            if b.readonly:
                raise MemoryFault(f"{what}: write to read-only buffer {b.name!r}")
            offs = (addrs[sel] - np.uint64(b.base)).astype(np.int64)
            b.data[offs[:, None] + span] = data[sel]

    def read_scalar(self, addr: int, nbytes: int, what: str = "s_load") -> bytes:
        """Read nbytes at one address (scalar loads)."""
        return self.read(np.array([addr], dtype=np.uint64), nbytes, what)[0].tobytes()
