"""Cross-lane data movement and EXEC masking: DPP controls, SDWA selects, permlane swaps,
ds_bpermute/ds_permute/ds_swizzle, readlane/writelane, partially active waves.

Expected values are written out from the ISA's rules with plain Python loops (not with the
simulator's own lane tables)."""

from __future__ import annotations

import numpy as np
import pytest

from zyfa_asmgen.sim.snippet import run_snippet

L = np.arange(64, dtype=np.uint32)


def _dpp_expect(ctrl, old, src, exec_mask, row_mask, bank_mask, bound_ctrl) -> np.ndarray:
    out = old.copy()
    active = [(exec_mask >> i) & 1 == 1 for i in range(64)]
    for lane in range(64):
        row, pos = lane // 16, lane % 16
        if not active[lane] or not (row_mask >> row) & 1 or not (bank_mask >> (pos // 4)) & 1:
            continue
        kind, _, arg = ctrl.partition(":")
        if kind == "quad_perm":
            perm = [int(x) for x in arg.strip("[]").split(",")]
            s = lane - lane % 4 + perm[lane % 4]
        elif kind == "row_shr":
            s = lane - int(arg) if pos - int(arg) >= 0 else None
        elif kind == "row_shl":
            s = lane + int(arg) if pos + int(arg) < 16 else None
        elif kind == "row_ror":
            s = row * 16 + (pos - int(arg)) % 16
        elif kind == "wave_shr":
            s = lane - 1 if lane > 0 else None
        elif kind == "wave_shl":
            s = lane + 1 if lane < 63 else None
        elif kind == "row_mirror":
            s = row * 16 + 15 - pos
        elif kind == "row_half_mirror":
            s = lane - lane % 8 + 7 - lane % 8
        elif kind == "row_bcast" and arg == "15":
            s = row * 16 - 1 if row > 0 else None
        elif kind == "row_bcast" and arg == "31":
            s = 31 if row >= 2 else None
        elif kind == "row_newbcast":
            s = row * 16 + int(arg)
        else:
            raise AssertionError(ctrl)
        if s is None or not active[s]:
            if bound_ctrl:
                out[lane] = 0
            continue
        out[lane] = src[s]
    return out


CTRLS = ["quad_perm:[1,0,3,2]", "quad_perm:[3,3,0,1]", "row_shr:1", "row_shr:7", "row_shl:3", "row_ror:8",
         "wave_shr:1", "wave_shl:1", "row_mirror", "row_half_mirror", "row_bcast:15", "row_bcast:31",
         "row_newbcast:5"]  # fmt: skip


@pytest.mark.parametrize("ctrl", CTRLS)
@pytest.mark.parametrize("bound_ctrl", [False, True])
def test_dpp_mov(ctrl: str, bound_ctrl: bool) -> None:
    rng = np.random.default_rng()
    src = rng.integers(0, 2**32, 64, dtype=np.uint32)
    old = rng.integers(0, 2**32, 64, dtype=np.uint32)
    exec_mask = int(rng.integers(0, 2**63)) | (1 << 63) | 1
    masks = "row_mask:0xd bank_mask:0xb"
    bc = " bound_ctrl:0" if bound_ctrl else ""  # LLVM spells the set bit bound_ctrl:0
    r = run_snippet(f"  v_mov_b32_dpp v2, v1 {ctrl} {masks}{bc}", vgpr={1: src, 2: old}, exec_mask=exec_mask,
                    check=False)  # fmt: skip
    want = _dpp_expect(ctrl, old, src, exec_mask, 0xD, 0xB, bound_ctrl)
    np.testing.assert_array_equal(r.wave.v[2], want)


def test_dpp_applies_to_src0_of_a_vop2_with_modifiers() -> None:
    a = np.arange(64, dtype=np.float32) - 20
    b = np.full(64, 0.5, dtype=np.float32)
    vgpr = {1: a.view(np.uint32), 2: b.view(np.uint32), 3: np.zeros(64, np.uint32)}
    r = run_snippet(
        "  v_max_f32_dpp v3, -v1, |v2| row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0", vgpr=vgpr
    )
    shifted = np.array([a[i - 1] if i % 16 else 0.0 for i in range(64)], dtype=np.float32)
    np.testing.assert_array_equal(r.wave.v[3].view(np.float32), np.maximum(-shifted, 0.5))


@pytest.mark.parametrize("sel,shift,n", [("BYTE_0", 0, 8), ("BYTE_3", 24, 8), ("WORD_1", 16, 16)])
def test_sdwa_source_select_and_dst_preserve(sel: str, shift: int, n: int) -> None:
    rng = np.random.default_rng()
    a = rng.integers(0, 2**32, 64, dtype=np.uint32)
    b = rng.integers(0, 2**16, 64, dtype=np.uint32)
    old = rng.integers(0, 2**32, 64, dtype=np.uint32)
    sdwa = f"dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:{sel} src1_sel:WORD_0"
    body = f"  v_add_u32_sdwa v3, v1, v2 {sdwa}"
    r = run_snippet(body, vgpr={1: a, 2: b, 3: old})
    field = ((a >> shift) & ((1 << n) - 1)) + (b & 0xFFFF)
    want = (old & 0xFFFF) | ((field & 0xFFFF) << 16)
    np.testing.assert_array_equal(r.wave.v[3], want.astype(np.uint32))


def test_permlane32_swap_per_pseudocode() -> None:
    rng = np.random.default_rng()
    d, s = rng.integers(0, 2**32, 64, dtype=np.uint32), rng.integers(0, 2**32, 64, dtype=np.uint32)
    r = run_snippet("  v_permlane32_swap_b32 v1, v2", vgpr={1: d, 2: s}, check=False)
    wd, ws = d.copy(), s.copy()
    for lane in range(32):  # for lane in 0..31: swap src0[lane] <-> vdst[lane + 32]
        ws[lane], wd[lane + 32] = d[lane + 32], s[lane]
    np.testing.assert_array_equal(r.wave.v[1], wd)
    np.testing.assert_array_equal(r.wave.v[2], ws)


def test_permlane16_swap_per_pseudocode() -> None:
    rng = np.random.default_rng()
    d, s = rng.integers(0, 2**32, 64, dtype=np.uint32), rng.integers(0, 2**32, 64, dtype=np.uint32)
    r = run_snippet("  v_permlane16_swap_b32 v1, v2", vgpr={1: d, 2: s}, check=False)
    wd, ws = d.copy(), s.copy()
    for p in range(2):
        for lane in range(16):
            ws[32 * p + lane], wd[32 * p + lane + 16] = d[32 * p + lane + 16], s[32 * p + lane]
    np.testing.assert_array_equal(r.wave.v[1], wd)
    np.testing.assert_array_equal(r.wave.v[2], ws)


def test_ds_bpermute_and_permute_per_pseudocode() -> None:
    rng = np.random.default_rng()
    data = rng.integers(0, 2**32, 64, dtype=np.uint32)
    addr = (rng.integers(0, 256, 64, dtype=np.uint32) * 4) + 3  # low bits ignored after /4
    exec_mask = int(rng.integers(0, 2**63)) | 1
    active = [(exec_mask >> i) & 1 for i in range(64)]
    old = np.full(64, 0xDEAD, dtype=np.uint32)
    body = "  ds_bpermute_b32 v3, v1, v2\n  ds_permute_b32 v4, v1, v2\n  s_waitcnt lgkmcnt(0)"
    r = run_snippet(body, vgpr={1: addr, 2: data, 3: old, 4: old}, exec_mask=exec_mask)
    back = np.zeros(64, np.uint32)
    push = np.zeros(64, np.uint32)
    for i in range(64):
        s = (int(addr[i]) // 4) % 64
        back[i] = data[s] if active[s] else 0
    for i in range(64):  # highest-numbered source lane wins
        if active[i]:
            push[(int(addr[i]) // 4) % 64] = data[i]
    np.testing.assert_array_equal(r.wave.v[3], np.where(np.array(active, bool), back, old))
    np.testing.assert_array_equal(r.wave.v[4], np.where(np.array(active, bool), push, old))


def test_ds_swizzle_bitmask_and_quad_perm() -> None:
    data = L * 7 + 1
    # offset = and_mask | or_mask << 5 | xor_mask << 10 (bit-mask mode, 32-lane groups)
    off = 0x1F | (0 << 5) | (1 << 10)  # swap neighbours
    r = run_snippet(f"  ds_swizzle_b32 v2, v1 offset:{off}\n  s_waitcnt lgkmcnt(0)", vgpr={1: data})
    np.testing.assert_array_equal(r.wave.v[2], data[L ^ 1])
    r = run_snippet("  ds_swizzle_b32 v2, v1 offset:swizzle(SWAP,16)\n  s_waitcnt lgkmcnt(0)", vgpr={1: data})
    np.testing.assert_array_equal(r.wave.v[2], data[L ^ 16])
    qp = 0x8000 | (3 << 0) | (2 << 2) | (1 << 4) | (0 << 6)
    r = run_snippet(f"  ds_swizzle_b32 v2, v1 offset:{qp}\n  s_waitcnt lgkmcnt(0)", vgpr={1: data})
    lanes = np.arange(64)
    np.testing.assert_array_equal(r.wave.v[2], data[(lanes & ~3) + (3 - (lanes & 3))])


def test_readlane_writelane_readfirstlane() -> None:
    data = L * 3
    exec_mask = 0xFFFF0000_00000000
    body = "  v_readfirstlane_b32 s12, v1\n  v_readlane_b32 s13, v1, 5\n  v_writelane_b32 v2, s13, 7"
    r = run_snippet(body, vgpr={1: data, 2: np.zeros(64, np.uint32)}, exec_mask=exec_mask, check=False)
    assert r.wave.s[12] == 48 * 3  # first active lane
    assert r.wave.s[13] == 15  # readlane ignores EXEC
    assert r.wave.v[2][7] == 15 and r.wave.v[2].sum() == 15  # writelane ignores EXEC


def test_exec_masked_lanes_keep_their_values() -> None:
    rng = np.random.default_rng()
    old = rng.integers(0, 2**32, 64, dtype=np.uint32)
    exec_mask = int(rng.integers(0, 2**63))
    r = run_snippet("  v_add_u32 v2, v1, v1\n  v_cvt_pk_bf16_f32 v3, v1, v1\n  v_fma_f32 v4, v1, v1, v1",
                    vgpr={1: L, 2: old, 3: old, 4: old}, exec_mask=exec_mask)  # fmt: skip
    off = np.array([not (exec_mask >> i) & 1 for i in range(64)])
    for reg in (2, 3, 4):
        np.testing.assert_array_equal(r.wave.v[reg][off], old[off])
    np.testing.assert_array_equal(r.wave.v[2][~off], (2 * L)[~off])


def test_vcmp_writes_zero_for_inactive_lanes_and_cmpx_sets_exec() -> None:
    exec_mask = 0x0000FFFF_0000FFFF
    r = run_snippet("  v_cmp_gt_u32 s[12:13], v1, 3\n  v_cmpx_gt_u32 s[14:15], v1, 40", vgpr={1: L},
                    exec_mask=exec_mask, check=False)  # fmt: skip
    assert r.wave.s[12] | (r.wave.s[13] << 32) == exec_mask & ~0xF
    want = exec_mask & ~((1 << 41) - 1)
    assert r.wave.exec_int == want and r.wave.s[14] | (r.wave.s[15] << 32) == want
