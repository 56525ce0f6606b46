"""AITER's gfx950 attention code objects as test inputs, fetched from PyPI into a cache outside the
repository (never committed: they are AMD's binaries under AITER's licence).

The pinned wheel (about 40 MB) is downloaded once per cache with `pip download --no-deps`; only the
eight fmha_v3_fwd .co files are kept. Cache: $ZYFA_CACHE/aiter/<version>, else
~/.cache/zyfa/aiter/<version>. ZYFA_OFFLINE=1 forbids the download (the tests then skip unless the
cache is filled). A uniquely named module: see asmgen_testlib.py.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

AITER_VERSION = "0.1.7.post2.dev18"
AITER_REQUIREMENT = f"amd-aiter=={AITER_VERSION}"
WHEEL_DIR = "aiter_meta/hsa/gfx950/fmha_v3_fwd/"
CODE_OBJECTS = tuple(
    f"fwd_{hd}_bf16{causal}{group}.co"
    for hd in ("hd128", "hd192_hd128")
    for causal in ("", "_causal")
    for group in ("", "_group")
)
DOWNLOAD_TIMEOUT_S = 600


def cache_dir() -> Path:
    """Where the extracted .co files live."""
    root = Path(os.environ["ZYFA_CACHE"]) if os.environ.get("ZYFA_CACHE") else Path.home() / ".cache" / "zyfa"
    return root / "aiter" / AITER_VERSION


def _complete(d: Path) -> bool:
    return all((d / name).is_file() for name in CODE_OBJECTS)


def _download(dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--only-binary=:all:", AITER_REQUIREMENT, "-d", tmp]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False)
        wheels = list(Path(tmp).glob("amd_aiter-*.whl"))
        if proc.returncode != 0 or not wheels:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"pip download {AITER_REQUIREMENT} failed: {' / '.join(tail)}")
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for name in CODE_OBJECTS:
                data = z.read(WHEEL_DIR + name)
                part = dest / (name + ".part")
                part.write_bytes(data)
                part.replace(dest / name)


def aiter_code_objects() -> tuple[dict[str, Path], str]:
    """({file name: path} of the eight code objects, "") or ({}, the reason they cannot be had)."""
    d = cache_dir()
    if not _complete(d):
        if os.environ.get("ZYFA_OFFLINE") == "1":
            return (
                {},
                f"AITER's code objects are not in {d}; ZYFA_OFFLINE=1 forbids fetching {AITER_REQUIREMENT}",
            )
        try:
            _download(d)
        except (OSError, RuntimeError, KeyError, subprocess.TimeoutExpired, zipfile.BadZipFile) as e:
            return {}, f"AITER's code objects ({AITER_REQUIREMENT} from PyPI) could not be had: {e}"
    return {name: d / name for name in CODE_OBJECTS}, ""


# ---- kernel arguments ---------------------------------------------------------------------------

# AITER's `fmha_fwd_v3_args` (aiter_meta/csrc/include/mha_fwd.h in the pinned wheel): a packed struct
# of 16-byte slots, an 8-byte pointer or a 4-byte value each, padded. The host fills it in
# `fmha_fwd_v3_dispatcher` (aiter_meta/hsa/gfx950/fmha_v3_fwd/codegen.py): strides in bytes, the
# query tile stride s_Ts = ts_qo rows, tune option 5 and the LSE flag. The kernel's own metadata
# note lists the same slots (.args, 512 bytes), which the test checks.
V3_FIELDS = (
    "ptr_o", "ptr_q", "ptr_k", "ptr_v", "ptr_lse", "scalar", "s_seq_len", "s_Seqs", "s_Ts", "s_Hs",
    "s_Bs", "s_gqa", "s_k_Seqs", "s_k_Hs", "s_k_Bs", "s_opt", "s_lse", "s_kv_seq_len", "s_qk_head_dim",
    "s_v_head_dim", "s_q_head_num", "s_v_Seqs", "s_v_Hs", "s_v_Bs", "s_o_Seqs", "s_o_Hs", "s_o_Bs",
    "ptr_qseq", "ptr_kseq", "s_lse_Hs", "ptr_qseq_padding", "ptr_kseq_padding",
)  # fmt: skip
V3_KERNARG_BYTES = 16 * len(V3_FIELDS)


def fmha_fwd_v3_kernarg(values: dict[str, int | float]) -> bytes:
    """Pack `fmha_fwd_v3_args`: pointers as u64, `scalar` as f32, the rest as u32, one 16-byte slot each."""
    out = bytearray()
    for name in V3_FIELDS:
        v = values.get(name, 0)
        if name.startswith("ptr_"):
            out += struct.pack("<Q8x", v)
        elif name == "scalar":
            out += struct.pack("<f12x", v)
        else:
            out += struct.pack("<I12x", v)
    return bytes(out)
