#!/usr/bin/env python3
"""Compare two `zyfa_kernel_build.py build-all` output folders: cubin bytes, SASS and resources.

For refactors of the sm90 kernels that must not move the generated code: build the tree before and
after the change into two folders, then

    sass_compare.py BEFORE_DIR AFTER_DIR [--only REGEX]

For every cubin in both manifests it prints one line: "identical" (same bytes), "same SASS" (bytes
differ, e.g. in symbol or line tables, but `cuobjdump -sass` text with addresses stripped is equal)
or "SASS DIFFERS" (with the first differing lines), plus the registers and spill bytes of both
manifest rows. Exit status 0 only when every kernel has the same SASS and the same resources.
cuobjdump and nvdisasm come from PATH, /usr/local/cuda/bin or the nvidia-cuda-cuobjdump /
nvidia-cuda-nvdisasm wheels. Standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import json
import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# "/*0a30*/" instruction offsets; the encodings ("/* 0x... */") are kept: they are the instructions.
_OFFSET = re.compile(r"/\*[0-9a-f]{4,}\*/")


def find_cuobjdump() -> str:
    """Path of cuobjdump (PATH, the CUDA install, then the pip wheel); its folder must also hold nvdisasm."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = ["/usr/local/cuda/bin/cuobjdump"]
    for d in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        candidates += glob.glob(os.path.join(d, "nvidia", "cu*", "bin", "cuobjdump"))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    raise SystemExit("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")


def sass_text(cuobjdump: str, cubin: Path) -> list[str]:
    """The cubin's SASS, one instruction per line, with instruction offsets and blank lines removed."""
    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ.get("PATH", ""))
    out = subprocess.run(
        [cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True, env=env
    ).stdout
    lines = [_OFFSET.sub("", line).strip() for line in out.splitlines()]
    return [line for line in lines if line and not line.startswith("Fatbin")]


def rows(folder: Path) -> dict[str, dict]:
    """Manifest rows of a build-all folder by kernel name."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    return {row["name"]: row for row in manifest["kernels"]}


def compare(before: Path, after: Path, only: str | None) -> int:
    """Print one verdict per kernel; return the number of kernels whose SASS or resources moved."""
    cuobjdump = find_cuobjdump()
    rows_b, rows_a = rows(before), rows(after)
    names = [n for n in rows_b if re.search(only or ".", n)]
    bad = 0
    for name in names:
        if name not in rows_a:
            print(f"{name}: MISSING after")
            bad += 1
            continue
        rb, ra = rows_b[name], rows_a[name]
        res = (
            f"registers {rb['registers']} -> {ra['registers']}, "
            f"spill {rb['spill_bytes']} -> {ra['spill_bytes']}"
        )
        moved = (rb["registers"], rb["spill_bytes"]) != (ra["registers"], ra["spill_bytes"])
        fb, fa = before / rb["file"], after / ra["file"]
        if fb.read_bytes() == fa.read_bytes():
            verdict = "identical cubin"
        else:
            sb, sa = sass_text(cuobjdump, fb), sass_text(cuobjdump, fa)
            if sb == sa:
                verdict = f"same SASS ({len(sb)} lines; cubin bytes differ)"
            else:
                diff = list(difflib.unified_diff(sb, sa, "before", "after", n=1, lineterm=""))
                verdict = f"SASS DIFFERS ({len(diff)} diff lines)\n  " + "\n  ".join(diff[:20])
                moved = True
        bad += moved
        print(f"{name}: {verdict}; {res}")
    print(f"{len(names) - bad} of {len(names)} kernels unchanged")
    return bad


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit 0 when no kernel moved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--only", help="only kernels whose name matches this regular expression")
    args = parser.parse_args(argv)
    return 1 if compare(args.before, args.after, args.only) else 0


if __name__ == "__main__":
    sys.exit(main())
