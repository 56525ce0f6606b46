"""What a `device` call sends, and how to make it fit the tool's 64 MiB.

A call sends the working tree's tracked files, its untracked files that git does not ignore, and the
paths named in `carry` (../.library/device/README.md, "Limits"). The product run carries the FA4 archive
(~45 MB) and the cuDNN-frontend wheel (2 MB) beside a tree whose dated benchmark logs grow every session,
so that sum passed the limit in the twelfth session. None of docs/benchmarks/<date>/ is read on the device,
and a tracked file missing from the working tree does not travel, so `hold` moves those folders out of
the tree for the call and `restore` puts them back (git keeps them either way).

    python3 tools/device/travel.py size [CARRY ...]   # bytes that would travel; exit 1 if over the limit
    python3 tools/device/travel.py hold                # docs/benchmarks/20*/ -> /tmp/zyfa-bench-hold/
    python3 tools/device/travel.py restore             # and back
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

LIMIT = 64 * 2**20  # the device tool's limit on what travels
ROOT = Path(__file__).resolve().parents[2]
HOLD = Path("/tmp/zyfa-bench-hold")


def _git_files(*args: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *args], cwd=ROOT, check=True, capture_output=True).stdout
    return [ROOT / p for p in out.decode().split("\0") if p]


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def travel_bytes(carry: list[str]) -> tuple[int, int, int]:
    """(tracked files present, untracked files not ignored, carried paths), in bytes."""
    tracked = sum(_bytes(p) for p in _git_files() if p.is_file())
    untracked = sum(_bytes(p) for p in _git_files("--others", "--exclude-standard"))
    return tracked, untracked, sum(_bytes(ROOT / c) for c in carry)


def _dated() -> list[Path]:
    return sorted(p for p in (ROOT / "docs" / "benchmarks").glob("20*") if p.is_dir())


def main(argv: list[str]) -> int:
    """Entry point; see the module docstring."""
    if not argv or argv[0] not in ("size", "hold", "restore"):
        print(__doc__)
        return 2
    if argv[0] == "size":
        parts = travel_bytes(argv[1:])
        total = sum(parts)
        mib = [f"{x / 2**20:.1f}" for x in (*parts, total)]
        print(f"tracked {mib[0]} + untracked {mib[1]} + carried {mib[2]} = {mib[3]} MiB (limit 64 MiB)")
        return 0 if total <= LIMIT else 1
    if argv[0] == "hold":
        HOLD.mkdir(parents=True, exist_ok=True)
        for d in _dated():
            shutil.move(str(d), HOLD / d.name)
            print(f"held {d.relative_to(ROOT)}")
        return 0
    for d in sorted(HOLD.glob("20*")):
        target = ROOT / "docs" / "benchmarks" / d.name
        if target.exists():
            print(f"not restored: {target.relative_to(ROOT)} exists (merge {d} by hand)")
            return 1
        shutil.move(str(d), target)
        print(f"restored {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
