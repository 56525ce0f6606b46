"""Regenerate sim/data/mfma_layouts.npz from the independent layout oracles.

    python -m zyfa_asmgen.sim._gen_layouts [ORACLE_DIR]   # default: tests/sim/data/oracles

The simulator's MFMA semantics read lane/register positions only from this file, and this file is
a lossless re-encoding of the oracle layouts mfma_layouts/*.json (stored gzip-compressed, with
their provenance, in packages/zyfa-asmgen/tests/sim/data/oracles; tests/sim/test_mfma.py compares
every element against the JSON). Per operand X in A, B, D an int16 array of shape (rows, cols, 3)
holds [lane, register, low bit] of element X[row][col].
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

# oracle file stem -> instruction name used by the simulator
FILES = {
    "cdna4_v_mfma_f32_32x32x16_bf16": "v_mfma_f32_32x32x16_bf16",
    "cdna4_v_mfma_f32_16x16x32_bf16": "v_mfma_f32_16x16x32_bf16",
    "cdna4_v_mfma_f32_32x32x64_f8f6f4_fp8e4m3": "v_mfma_f32_32x32x64_f8f6f4",
    "cdna4_v_mfma_f32_16x16x128_f8f6f4_fp8e4m3": "v_mfma_f32_16x16x128_f8f6f4",
    "cdna3_v_mfma_f32_32x32x8_bf16": "v_mfma_f32_32x32x8_bf16",
    "cdna3_v_mfma_f32_16x16x16_bf16": "v_mfma_f32_16x16x16_bf16",
    "cdna3_v_mfma_f32_32x32x16_fp8_fp8": "v_mfma_f32_32x32x16_fp8_fp8",
    "cdna3_v_mfma_f32_16x16x32_fp8_fp8": "v_mfma_f32_16x16x32_fp8_fp8",
}


def table(entries: list[dict], rk: str, ck: str, rows: int, cols: int) -> np.ndarray:
    """Entries {rk, ck, lane, vgpr, bits} -> (rows, cols, 3) [lane, vgpr, lo]."""
    out = np.full((rows, cols, 3), -1, dtype=np.int16)
    for e in entries:
        out[e[rk], e[ck]] = (e["lane"], e["vgpr"], e["bits"][0])
    assert (out >= 0).all(), "layout has holes"
    return out


def main(oracle_dir: str) -> None:
    """Write data/mfma_layouts.npz and data/mfma_layouts_sources.json."""
    src = Path(oracle_dir) / "mfma_layouts"
    arrays, sources = {}, {}
    for stem, name in FILES.items():
        plain = src / f"{stem}.json"
        packed = src / f"{stem}.json.gz"
        raw = plain.read_bytes() if plain.is_file() else gzip.decompress(packed.read_bytes())
        d = json.loads(raw)
        m, n, k = d["M"], d["N"], d["K"]
        arrays[f"{name}/A"] = table(d["A"], "i", "k", m, k)
        arrays[f"{name}/B"] = table(d["B"], "k", "j", k, n)
        arrays[f"{name}/D"] = table(d["D"], "i", "j", m, n)
        arrays[f"{name}/meta"] = np.array(
            [
                m,
                n,
                k,
                d["element_bits"]["A"],
                d["element_bits"]["B"],
                d["vgprs"]["A"],
                d["vgprs"]["B"],
                d["vgprs"]["D"],
            ],
            dtype=np.int32,
        )
        sources[name] = {"file": f"mfma_layouts/{stem}.json", "sha256": hashlib.sha256(raw).hexdigest()}
    out = Path(__file__).parent / "data"
    np.savez_compressed(out / "mfma_layouts.npz", **arrays)
    (out / "mfma_layouts_sources.json").write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    default = Path(__file__).resolve().parents[3] / "tests" / "sim" / "data" / "oracles"
    main(sys.argv[1] if len(sys.argv) > 1 else str(default))
