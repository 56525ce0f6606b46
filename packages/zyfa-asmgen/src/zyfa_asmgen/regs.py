"""Named registers: an allocator over the VGPR, AGPR and SGPR files of one kernel.

Generators ask for registers by name and size (`alloc("acc0", 16, align=4)`) instead of typing
indices; a range prints as the assembler spells it (`v[32:47]`, `s5`) and can be sliced
(`r[3]`, `r.sub(4, 2)`). Freed ranges are reused first-fit. The allocator refuses to hand out more
than the file holds and names what it was asked for, so a layout that does not fit fails at
generation time, not in the assembler.
"""

from __future__ import annotations

from dataclasses import dataclass

FILE_LIMITS = {"v": 256, "a": 256, "s": 102}


class RegisterError(ValueError):
    """A register request that does not fit, or a free of something not allocated."""


@dataclass(frozen=True)
class R:
    """A contiguous register range of one file."""

    file: str
    first: int
    count: int = 1
    name: str = ""

    def __str__(self) -> str:
        if self.count == 1:
            return f"{self.file}{self.first}"
        return f"{self.file}[{self.first}:{self.first + self.count - 1}]"

    def __getitem__(self, i: int) -> R:
        if not 0 <= i < self.count:
            raise IndexError(f"{self.name or self}: index {i} outside {self.count} registers")
        return R(self.file, self.first + i, 1, f"{self.name}[{i}]")

    def sub(self, start: int, count: int) -> R:
        """The `count` registers from `start` within this range."""
        if start < 0 or count < 1 or start + count > self.count:
            raise IndexError(
                f"{self.name or self}: [{start}, {start + count}) outside {self.count} registers"
            )
        return R(self.file, self.first + start, count, f"{self.name}[{start}:{start + count}]")


class RegFile:
    """First-fit allocator over one register file, from `base` (registers below are preloaded)."""

    def __init__(self, file: str, base: int = 0, limit: int | None = None) -> None:
        self.file = file
        self.limit = FILE_LIMITS[file] if limit is None else limit
        self._used: dict[str, R] = {}
        self._busy = [False] * self.limit
        for i in range(base):
            self._busy[i] = True
        self.high = base  # highest index handed out + 1

    def alloc(self, name: str, count: int = 1, align: int = 1) -> R:
        """Reserve `count` registers aligned to `align` under `name`."""
        if name in self._used:
            raise RegisterError(f"{self.file}-register name {name!r} is already allocated")
        for start in range(0, self.limit - count + 1, align):
            if not any(self._busy[start : start + count]):
                for i in range(start, start + count):
                    self._busy[i] = True
                r = R(self.file, start, count, name)
                self._used[name] = r
                self.high = max(self.high, start + count)
                return r
        used = sum(self._busy)
        raise RegisterError(
            f"no {count} free {self.file}-registers (align {align}) for {name!r}: "
            f"{used} of {self.limit} in use"
        )

    def free(self, r: R) -> None:
        """Return a range obtained from `alloc`."""
        if self._used.get(r.name) != r:
            raise RegisterError(f"{r.name!r} ({r}) was not allocated here")
        del self._used[r.name]
        for i in range(r.first, r.first + r.count):
            self._busy[i] = False
