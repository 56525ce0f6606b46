"""gfx950 transposing LDS reads (ds_read_b64_tr_b4/b8/b16, ds_read_b96_tr_b6).

Authority (docs/simulator.md, "Transposing LDS reads"): the GPU tests of ROCm rocRoller's
`shared/rocroller/test/unit/TransposeLoadsTest.cpp` (executeTransposeLoad), which run each
instruction on gfx950 and compare with a host-side index relation; and, for b16, AITER's
`test_tr_load_f16.cu` (a 16x32 tile read into the MFMA 32x32x16 B layout, expected = input.T).
`_replay_rocroller` re-runs rocRoller's kernel (its LDS layout, per-lane addresses and output
layout) in the simulator and checks rocRoller's own assertion for every element; the spot checks
below hold values worked out by hand from the rule those tests pin down:

    within each group of 16 lanes, result lane l element j = source lane j*p + l//n, element l%n
    (n = elements per lane: 16/8/4 -> 16, 8, 4 elements of 64 bits, b6 -> 16 of 96 bits; p = 16//n)
"""

from __future__ import annotations

import itertools
import struct
import subprocess
import sys

import numpy as np
import pytest

from zyfa_asmgen.sim import GlobalMemory, Simulator, parse_asm
from zyfa_asmgen.sim.snippet import run_snippet

from .conftest import _HAVE_ZIG

FULL = (1 << 64) - 1
# element bits -> (mnemonic, bits per lane, destination registers)
FORMS = {
    16: ("ds_read_b64_tr_b16", 64, "v[2:3]"),
    8: ("ds_read_b64_tr_b8", 64, "v[2:3]"),
    4: ("ds_read_b64_tr_b4", 64, "v[2:3]"),
    6: ("ds_read_b96_tr_b6", 96, "v[2:4]"),
}


def _kinds(res) -> set[str]:
    return {f.kind for f in res.report.findings}


def _read(ebits: int, lds: np.ndarray, addrs: np.ndarray, extra: str = "", **kw):
    """Run one transposing read (v0 = per-lane address) and return the result registers."""
    op, _, dst = FORMS[ebits]
    body = f"  {op} {dst}, v0{extra}\n  s_waitcnt lgkmcnt(0)"
    regs = {0: addrs.astype(np.uint32)}
    res = run_snippet(body, vgpr=regs, lds_bytes=max(lds.nbytes, 64), lds_init=lds, **kw)
    n = 3 if ebits == 6 else 2
    return res, [res.wave.v[2 + i].copy() for i in range(n)]


# ---- hand-worked spot checks ------------------------------------------------------------------


def test_b16_by_hand() -> None:
    # LDS halfword h of lane s's 8-byte row = 0x100*s + h; lane s reads its own row.
    lds = (0x100 * np.arange(64)[:, None] + np.arange(4)[None, :]).astype(np.uint16)
    res, (lo, hi) = _read(16, lds, np.arange(64) * 8)
    assert not res.report.findings
    # lane 0 <- halfword 0 of lanes 0, 4, 8, 12; lane 5 <- halfword 1 of lanes 1, 5, 9, 13;
    # lane 63 <- halfword 3 of lanes 51, 55, 59, 63.
    assert (lo[0], hi[0]) == (0x04000000, 0x0C000800)
    assert (lo[5], hi[5]) == (0x05010101, 0x0D010901)
    assert (lo[63], hi[63]) == (0x37033303, 0x3F033B03)


def test_b8_by_hand() -> None:
    # byte b of lane s = 8*(s % 16) + b, plus 128 in odd groups of 16 lanes.
    s = np.arange(64)[:, None]
    lds = (8 * (s % 16) + np.arange(8)[None, :] + 128 * ((s // 16) % 2)).astype(np.uint8)
    res, (lo, hi) = _read(8, lds, np.arange(64) * 8)
    assert not res.report.findings
    # lane 0 <- byte 0 of lanes 0, 2, ..., 14 = 0, 16, ..., 112
    assert (lo[0], hi[0]) == (0x30201000, 0x70605040)
    # lane 9 <- byte 1 of lanes 1, 3, ..., 15 = 9, 25, ..., 121
    assert (lo[9], hi[9]) == (0x39291909, 0x79695949)
    # lane 31 (second group, +128) <- byte 7 of lanes 17, 19, ..., 31 = 143, 159, ..., 255
    assert (lo[31], hi[31]) == (0xBFAF9F8F, 0xFFEFDFCF)


def test_b4_by_hand() -> None:
    # Every nibble of lane s's row is s % 16: lane l gets nibble j = j (a 16x16 nibble transpose).
    lds = np.repeat((np.arange(64) % 16 * 0x11).astype(np.uint8), 8)
    res, (lo, hi) = _read(4, lds, np.arange(64) * 8)
    assert not res.report.findings
    assert (lo == 0x76543210).all() and (hi == 0xFEDCBA98).all()
    # Nibble k of every row = k: lane l gets l % 16 everywhere.
    lds = np.tile(np.array([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], np.uint8), 64)
    _, (lo, hi) = _read(4, lds, np.arange(64) * 8)
    assert lo[0] == hi[0] == 0 and lo[17] == hi[17] == 0x11111111 and lo[47] == hi[47] == 0xFFFFFFFF


def test_b6_by_hand() -> None:
    # Every 6-bit element of lane s's 96-bit row is s: lane l gets element j = 16*(l//16) + j.
    rows = np.zeros((64, 16), np.uint8)
    for s in range(64):
        v = sum(s << (6 * k) for k in range(16))
        rows[s, :12] = np.frombuffer(v.to_bytes(12, "little"), np.uint8)
    res, regs = _read(6, rows, np.arange(64) * 16)
    assert not res.report.findings
    got = [sum(int(regs[i][lane]) << (32 * i) for i in range(3)) for lane in (0, 21, 63)]
    # lane 0: elements 0..15; lane 21: 16..31; lane 63: 48..63, element j at bits [6j, 6j+6).
    assert got[0] == sum(j << (6 * j) for j in range(16))
    assert got[1] == sum((16 + j) << (6 * j) for j in range(16))
    assert got[2] == sum((48 + j) << (6 * j) for j in range(16))


# ---- rocRoller's GPU tests replayed ----------------------------------------------------------


def _pack(vals: np.ndarray, ebits: int) -> np.ndarray:
    """Little-endian bit packing (rocRoller packFP4x8 / packF6x16: element i at bits [i*e, ...))."""
    bits = ((vals[:, None].astype(np.int64) >> np.arange(ebits)) & 1).astype(np.uint8).reshape(-1)
    return np.packbits(bits, bitorder="little")


def _unpack(buf: np.ndarray, ebits: int) -> np.ndarray:
    bits = np.unpackbits(buf, bitorder="little").reshape(-1, ebits).astype(np.int64)
    return (bits << np.arange(ebits)).sum(1)


def _rocroller_addr_index(mn: int, ebits: int) -> np.ndarray:
    """trLoadIdx of executeTransposeLoad: which row (of bytesPerTrLoad) each lane reads."""
    n = (96 if ebits == 6 else 64) // ebits
    nx1, p = mn // 16, 16 // n
    idx = np.zeros(64, np.int64)
    for x0, x1, y0, y1 in itertools.product(range(4 // nx1), range(nx1), range(n), range(p)):
        idx[16 * (nx1 * x0 + x1) + p * y0 + y1] = 2 * nx1 * 16 * x0 + nx1 * p * y0 + p * x1 + y1
    return idx


def _rocroller_pairs(mn: int, k: int, ebits: int):
    """The (data index, result index) pairs executeTransposeLoad asserts equal."""
    ny0, ny2 = (2, 16) if ebits == 6 else (4, 32 // ebits)
    ny1, nx0 = k // ny2 // ny0, mn // 16
    ranges = (range(ny0), range(ny1), range(nx0), range(4), range(4), range(ny2))
    for y0, y1, x0, x1, x2, y2 in itertools.product(*ranges):
        d = y1 * ny0 * ny2 * nx0 * 16 + y0 * ny2 * nx0 * 16 + y2 * nx0 * 16 + x0 * 16 + x1 * 4 + x2
        r = y0 * ny1 * nx0 * ny2 * 16 + y1 * nx0 * ny2 * 16 + x0 * 16 * ny2 + x1 * 4 * ny2 + x2 * ny2 + y2
        yield d, r


# rocRoller's GPU tests: B16 16x32 and 32x16, B8 16x64 and 32x32, B6 and B4 16x128 and 32x64.
ROCROLLER_CASES = [(16, 16, 32), (16, 32, 16), (8, 16, 64), (8, 32, 32), (6, 16, 128), (6, 32, 64),
                   (4, 16, 128), (4, 32, 64)]  # fmt: skip


@pytest.mark.parametrize(("ebits", "mn", "k"), ROCROLLER_CASES)
def test_rocroller_gpu_test_replay(ebits: int, mn: int, k: int) -> None:
    op, rbits, dst = FORMS[ebits]
    row, pad = rbits // 8, (4 if ebits == 6 else 0)
    data = np.random.default_rng().integers(0, 1 << min(ebits, 8), mn * k)
    if ebits == 16:
        data = np.random.default_rng().integers(0, 1 << 16, mn * k)
    stream = _pack(data, ebits)  # the kernel copies it to LDS row by row (b6 rows padded to 16 B)
    lds = np.zeros(len(stream) // row * (row + pad), np.uint8)
    for c in range(len(stream) // row):
        lds[c * (row + pad) : c * (row + pad) + row] = stream[c * row : (c + 1) * row]
    addrs = _rocroller_addr_index(mn, ebits) * (row + pad)
    second = mn * (row + pad)
    d1 = "v[6:8]" if ebits == 6 else "v[6:7]"
    body = f"  {op} {dst}, v0\n  {op} {d1}, v0 offset:{second}\n  s_waitcnt lgkmcnt(0)"
    res = run_snippet(body, vgpr={0: addrs.astype(np.uint32)}, lds_bytes=lds.nbytes, lds_init=lds)
    assert not res.report.findings
    v = res.wave.v
    nreg = rbits // 32
    if ebits == 6:  # result: 12 bytes per lane, first read then second read
        regs = [v[2:5], v[6:9]]
        out = np.concatenate([np.ascontiguousarray(r.T).astype("<u4").view(np.uint8).ravel() for r in regs])
    else:  # result words: [(t * 2 + reg) * 64 + lane]
        words = np.concatenate([v[2 + 4 * t + i] for t in range(2) for i in range(nreg)]).astype("<u4")
        out = words.view(np.uint8)
    result = _unpack(out, ebits)
    pairs = np.array(list(_rocroller_pairs(mn, k, ebits)))
    assert len(np.unique(pairs[:, 1])) == mn * k  # the assertion covers every element
    np.testing.assert_array_equal(data[pairs[:, 0]], result[pairs[:, 1]])


def test_aiter_tr_load_f16_replay() -> None:
    """AITER opus test_tr_load_f16: 16x32 row-major tile -> two reads -> MFMA 32x32x16 B operand."""
    tile = np.random.default_rng().integers(0, 1 << 16, (16, 32)).astype(np.uint16)  # [k][n]
    lane = np.arange(64)
    g, i = lane // 16, lane % 16
    addrs = [2 * (((g // 2) * 8 + 4 * y + i // 4) * 32 + (g % 2) * 16 + (i % 4) * 4) for y in range(2)]
    body = "  ds_read_b64_tr_b16 v[2:3], v0\n  ds_read_b64_tr_b16 v[4:5], v1\n  s_waitcnt lgkmcnt(0)"
    res = run_snippet(body, vgpr={0: addrs[0], 1: addrs[1]}, lds_bytes=tile.nbytes, lds_init=tile)
    assert not res.report.findings
    got = np.ascontiguousarray(res.wave.v[2:6].T).view(np.uint16)  # (64 lanes, 8 halfwords)
    # B layout of v_mfma_f32_32x32x16_bf16 (tests/sim/data/oracles/mfma_layouts): lane l, element e
    # holds B[k = 8*(l//32) + e][n = l%32].
    want = np.array([[tile[8 * (ln // 32) + e, ln % 32] for e in range(8)] for ln in range(64)])
    np.testing.assert_array_equal(got, want)


# ---- operands, EXEC, alignment, counters ------------------------------------------------------


def test_agpr_destination_and_offset() -> None:
    lds = np.arange(1024, dtype=np.uint8)
    ref = run_snippet("  ds_read_b64_tr_b8 v[2:3], v0 offset:256\n  s_waitcnt lgkmcnt(0)",
                      vgpr={0: np.arange(64) * 8}, lds_bytes=1024, lds_init=lds)  # fmt: skip
    acc = run_snippet("  ds_read_b64_tr_b8 a[4:5], v1\n  s_waitcnt lgkmcnt(0)",
                      vgpr={1: np.arange(64) * 8 + 256}, lds_bytes=1024, lds_init=lds)  # fmt: skip
    np.testing.assert_array_equal(ref.wave.v[2:4], acc.wave.a[4:6])
    # lane 0 <- byte 0 of lanes 0, 2, ..., 14 at 256 + 8*lane: 0, 16, ..., 112
    assert ref.wave.v[2][0] == 0x30201000


def test_partial_exec_is_reported() -> None:
    lds = np.arange(512, dtype=np.uint8)
    res, _ = _read(8, lds, np.arange(64) * 8, exec_mask=FULL >> 1)
    assert "exec" in _kinds(res)
    res, _ = _read(8, lds, np.arange(64) * 8)
    assert not res.report.findings


def test_misaligned_address_is_reported() -> None:
    lds = np.zeros(2048, np.uint8)
    assert "lds_align" in _kinds(_read(16, lds, np.arange(64) * 8 + 4)[0])
    assert "lds_align" in _kinds(_read(6, lds, np.arange(64) * 12)[0])  # 96-bit rows need 16-byte alignment
    assert not _kinds(_read(6, lds, np.arange(64) * 16)[0])


@pytest.mark.parametrize("ebits", [16, 8, 4, 6])
def test_lgkmcnt_tracks_the_destination(ebits: int) -> None:
    op, _, dst = FORMS[ebits]
    lds = np.zeros(1024, np.uint8)
    addrs = {0: (np.arange(64) * 16).astype(np.uint32)}
    early = run_snippet(f"  {op} {dst}, v0\n  v_mov_b32 v9, v3", vgpr=addrs, lds_bytes=1024, lds_init=lds)
    assert "waitcnt" in _kinds(early)
    body = f"  {op} {dst}, v0\n  s_waitcnt lgkmcnt(0)\n  v_mov_b32 v9, v3"
    ok = run_snippet(body, vgpr=addrs, lds_bytes=1024)
    assert not ok.report.findings


# ---- the pinned clang: assembler forms and the HIP builtins -----------------------------------

_FORMS_ASM = """
  ds_read_b64_tr_b4 v[0:1], v4
  ds_read_b64_tr_b8 v[2:3], v4 offset:8
  ds_read_b64_tr_b16 a[0:1], v5 offset:65528
  ds_read_b96_tr_b6 v[7:9], v4 offset:16
"""


@pytest.mark.skipif(not _HAVE_ZIG, reason="ziglang (pinned clang) not installed")
def test_forms_assemble_with_pinned_clang_and_parse(tmp_path) -> None:
    src = tmp_path / "tr.s"
    src.write_text('.amdgcn_target "amdgcn-amd-amdhsa--gfx950"\n.text\n' + _FORMS_ASM)
    cmd = [sys.executable, "-m", "ziglang", "clang", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx950", "-c",
           str(src), "-o", str(tmp_path / "tr.o")]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    # An odd VGPR pair is rejected for the 64-bit forms (b96_tr_b6 needs no alignment: v[7:9] above).
    src.write_text(".text\n  ds_read_b64_tr_b16 v[1:2], v4\n")
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode != 0 and "invalid operand" in bad.stderr
    prog = parse_asm(_FORMS_ASM)
    got = [(i.op, i.mods.get("offset", 0)) for i in prog.instructions]
    assert got == [("ds_read_b64_tr_b4", 0), ("ds_read_b64_tr_b8", 8),
                   ("ds_read_b64_tr_b16", 65528), ("ds_read_b96_tr_b6", 16)]  # fmt: skip
    assert [len(i.operands) for i in prog.instructions] == [2, 2, 2, 2]
    assert prog.instructions[2].operands[0].reg.file == "a"
    assert prog.instructions[3].operands[0].reg.count == 3


def _tr_reference(rows: np.ndarray, ebits: int, rbits: int) -> np.ndarray:
    """Plain-loop reference of the rule for one wave: rows (64, rbits//8) bytes -> result bytes."""
    n, out = rbits // ebits, np.zeros_like(rows)
    p = 16 // n
    vals = [int.from_bytes(r.tobytes(), "little") for r in rows]
    for lane in range(64):
        g, l16 = lane & ~15, lane & 15
        v = 0
        for j in range(n):
            src = vals[g + j * p + l16 // n]
            v |= ((src >> (ebits * (l16 % n))) & ((1 << ebits) - 1)) << (ebits * j)
        out[lane] = np.frombuffer(v.to_bytes(rbits // 8, "little"), np.uint8)
    return out


def _run_hip_tr(asm: str):
    rows = np.random.default_rng().integers(0, 256, (128, 16)).astype(np.uint8)
    out = np.full(128 * 9, 0x7FBADBAD, np.uint32)
    mem = GlobalMemory()
    args = struct.pack("<QQ", mem.map(rows), mem.map(out))
    res = Simulator(asm, "ds_read_tr").launch((1, 1, 1), (128, 1, 1), args, mem)
    return res, rows, out.reshape(128, 9)


def test_hip_builtins_run_in_the_simulator(hip) -> None:
    res, rows, out = _run_hip_tr(hip("ds_read_tr"))
    assert not res.findings, "\n".join(map(str, res.findings))
    got = out.astype("<u4").view(np.uint8).reshape(128, 36)
    for wave in range(2):
        src = rows[(np.arange(64) + 64 * wave) ^ 64]  # lane t read the row lane t ^ 64 stored
        lanes = slice(64 * wave, 64 * wave + 64)
        for ebits, rbits, col in ((4, 64, 0), (8, 64, 8), (16, 64, 16), (6, 96, 24)):
            want = _tr_reference(src[:, : rbits // 8], ebits, rbits)
            np.testing.assert_array_equal(got[lanes, col : col + rbits // 8], want, err_msg=f"b{ebits}")


def test_hip_builtins_without_barrier_race(hip) -> None:
    res, _, _ = _run_hip_tr(hip("ds_read_tr", NO_BARRIER=1))
    assert "lds_race" in {f.kind for f in res.findings}
