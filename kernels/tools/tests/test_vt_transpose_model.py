"""The sm90 kernel's e4m3 V transposer (staging -> Vt) modelled byte for byte.

The producer (kernels/sm90/fa_fwd_wgmma/load.cuh) turns a block of V rows (kTileN keys x 128 bytes of d,
in a staging buffer) into Vt, the K-major B operand of the FP8 P.V wgmma: row d, 16-byte chunk h (16 keys) at
position (h & 7) ^ (d & 7) of the 128-byte swizzle, region h >> 3, word tq of the chunk holding the bytes of
keys 16 h + 2 tq + {0, 1, 8, 9} (the key order of the packed P registers).

`transpose_staging_ldsm` does it with ldmatrix.x4.trans, two PRMT per pair of words and stmatrix.x4.

This test executes it as written in the kernel, lane by lane, on a model of shared memory with the
documented warp-collective semantics of ldmatrix / stmatrix (m8n8, b16: lanes 8 j .. 8 j + 7 give the row
addresses of matrix j; without .trans lane t holds row t / 4, elements 2 (t % 4) and 2 (t % 4) + 1;
with .trans it holds column t / 4, rows 2 (t % 4) and 2 (t % 4) + 1, the lower index in the low half),
and checks that it produces the Vt image the wgmma expects, for tile_n 128 and 192 and random bytes.
It also checks the bank claims of the ldmatrix path: each 8-row matrix a warp reads or writes covers
8 distinct 16-byte positions of its 128-byte rows (one wavefront per matrix).
"""

from __future__ import annotations

import numpy as np
import pytest

DV = 128  # d_v: Vt rows; one staging row is one 128-byte V row of e4m3


def byte_perm(x: int, y: int, s: int) -> int:
    """__byte_perm(x, y, s): result byte k = byte (s >> 4k) & 7 of the 8 bytes {x (0-3), y (4-7)}."""
    src = x | (y << 32)
    return sum(((src >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))


class Shared:
    """Byte-addressed shared memory with 32-bit accesses (little-endian)."""

    def __init__(self, size: int) -> None:
        self.mem = np.zeros(size, dtype=np.uint8)

    def ld32(self, addr: int) -> int:
        assert addr % 4 == 0
        return int.from_bytes(self.mem[addr : addr + 4].tobytes(), "little")

    def st32(self, addr: int, w: int) -> None:
        assert addr % 4 == 0
        self.mem[addr : addr + 4] = np.frombuffer(w.to_bytes(4, "little"), dtype=np.uint8)


def ldmatrix_x4_trans(sh: Shared, addrs: list[int]) -> list[list[int]]:
    """ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: per lane, its 4 registers (matrix j in register j)."""
    out = [[0] * 4 for _ in range(32)]
    for j in range(4):
        rows = [[sh.ld32(addrs[8 * j + i] + 4 * c) for c in range(4)] for i in range(8)]  # 8 rows x 16 B

        def elem(r: int, c: int, rows: list[list[int]] = rows) -> int:  # b16 element (row r, column c)
            return (rows[r][c // 2] >> (16 * (c % 2))) & 0xFFFF

        for t in range(32):
            q, col = t % 4, t // 4
            out[t][j] = elem(2 * q, col) | (elem(2 * q + 1, col) << 16)
    return out


def stmatrix_x4(sh: Shared, addrs: list[int], regs: list[list[int]]) -> None:
    """stmatrix.sync.aligned.m8n8.x4.shared.b16: lane t's register j is row t / 4, bytes 4 (t % 4) ..
    of matrix j."""
    for j in range(4):
        for t in range(32):
            sh.st32(addrs[8 * j + t // 4] + 4 * (t % 4), regs[t][j])


def stg_swz_ldsm(r: int) -> int:
    return r & 7


def fill_staging(sh: Shared, stg: int, v: np.ndarray, swz) -> None:
    """load_v_staging's image: row r at r * 128, its 16-byte chunk c at c ^ swz(r)."""
    for r in range(v.shape[0]):
        for c in range(8):
            dst = stg + r * 128 + ((c ^ swz(r)) << 4)
            sh.mem[dst : dst + 16] = v[r, 16 * c : 16 * c + 16]


def ldsm_lane_setup(w: int, lane: int) -> tuple[int, int, int, int, int]:
    """transpose_staging_ldsm's per-lane constants: (ld_off, st_row offset d * 128, d & 7, sel0, sel1)."""
    m, ii = lane >> 3, lane & 7
    ld_off = (8 * (m & 1) + ii) * 128 + (((2 * w + (m >> 1)) ^ ii) << 4)
    d = 2 * (16 * w + 8 * (m >> 1) + ii) + (1 if (ii >= 4) != ((m & 1) != 0) else 0)
    lo = (lane >> 2) < 4
    sel0, sel1 = (0x6420, 0x7531) if lo else (0x7531, 0x6420)
    return ld_off, d * 128, d & 7, sel0, sel1


def transpose_staging_ldsm(sh: Shared, vt: int, stg: int, tile_n: int, banks: list[list[int]]) -> None:
    """The transposer, warp by warp (4 producer warps); records each matrix's 16-byte
    positions in `banks`."""
    for w in range(4):
        setup = [ldsm_lane_setup(w, lane) for lane in range(32)]
        for h in range(tile_n // 16):
            ld_addrs = [stg + h * 16 * 128 + s[0] for s in setup]
            r = ldmatrix_x4_trans(sh, ld_addrs)
            st_addrs = [vt + s[1] + (h >> 3) * DV * 128 + (((h & 7) ^ s[2]) << 4) for s in setup]
            regs = [
                [
                    byte_perm(r[t][0], r[t][1], setup[t][3]),
                    byte_perm(r[t][0], r[t][1], setup[t][4]),
                    byte_perm(r[t][2], r[t][3], setup[t][3]),
                    byte_perm(r[t][2], r[t][3], setup[t][4]),
                ]
                for t in range(32)
            ]
            stmatrix_x4(sh, st_addrs, regs)
            for addrs in (ld_addrs, st_addrs):
                for j in range(4):
                    banks.append([(a % 128) // 16 for a in addrs[8 * j : 8 * j + 8]])


def expected_vt(v: np.ndarray, tile_n: int) -> tuple[np.ndarray, np.ndarray]:
    """The Vt image the P.V wgmma reads, (regions x DV x 128) bytes, and the mask of the bytes it reads
    (a last region of fewer than 8 key groups, as at tile_n 192, holds only their chunks)."""
    regions = (tile_n + 127) // 128
    out = np.zeros((regions, DV, 128), dtype=np.uint8)
    used = np.zeros(out.shape, dtype=bool)
    for d in range(DV):
        for h in range(tile_n // 16):
            for tq in range(4):
                pos = (((h & 7) ^ (d & 7)) << 4) + 4 * tq
                keys = [16 * h + 2 * tq + x for x in (0, 1, 8, 9)]
                out[h >> 3, d, pos : pos + 4] = v[keys, d]
                used[h >> 3, d, pos : pos + 4] = True
    return out, used


@pytest.mark.parametrize("tile_n", [128, 192])
def test_transposer_gives_the_wgmma_vt_image(tile_n: int) -> None:
    rng = np.random.default_rng(tile_n)
    v = rng.integers(0, 256, size=(tile_n, DV), dtype=np.uint8)
    want, used = expected_vt(v, tile_n)
    vt_bytes = want.size
    stg = vt_bytes  # staging after Vt, as in the kernel's layout (one staging buffer here)
    sh = Shared(stg + tile_n * 128)
    sh.mem[:vt_bytes] = 0xA5  # poison: every Vt byte the wgmma reads must be written
    fill_staging(sh, stg, v, stg_swz_ldsm)
    banks: list[list[int]] = []
    transpose_staging_ldsm(sh, 0, stg, tile_n, banks)
    assert banks and all(len(set(b)) == 8 for b in banks), "an 8-row matrix hits a 16-byte position twice"
    got = sh.mem[:vt_bytes].reshape(want.shape)
    mismatch = np.argwhere((got != want) & used)
    assert mismatch.size == 0, f"{len(mismatch)} Vt bytes differ, first at {mismatch[0].tolist()}"


def test_byte_perm_model() -> None:
    """The __byte_perm model on the kernel's selectors (CUDA's documented byte order)."""
    x, y = 0x33221100, 0x77665544
    assert byte_perm(x, y, 0x6420) == 0x66442200
    assert byte_perm(x, y, 0x7531) == 0x77553311
    assert byte_perm(x, y, 0x5410) == 0x55441100
