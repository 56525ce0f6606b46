"""Initial wave state from the kernel descriptor: user/system SGPRs, kernarg preload, packed
work-item IDs, EXEC of partial waves, hidden kernel arguments; and full instruction coverage of
the kernels we ship."""

from __future__ import annotations

import struct

import numpy as np

from zyfa_asmgen.sim import GlobalMemory, Simulator

# Stores s2..s9 of lane 0 and v0 of every lane of every wave into out[wg][...].
KERNEL = """
.text
k:
  s_load_dwordx2 s[16:17], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  s_mul_i32 s18, s{wgx}, {stride}
  s_add_u32 s16, s16, s18
  s_addc_u32 s17, s17, 0
  v_mov_b32 v3, 0
  v_mbcnt_lo_u32_b32 v2, -1, 0
  v_mbcnt_hi_u32_b32 v2, -1, v2
  v_lshlrev_b32 v2, 2, v2
{stores}
  s_endpgm
.amdhsa_kernel k
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_user_sgpr_dispatch_ptr {dispatch}
  .amdhsa_user_sgpr_kernarg_preload_length {preload}
  .amdhsa_user_sgpr_kernarg_preload_offset 2
  .amdhsa_user_sgpr_count {ucount}
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_system_sgpr_workgroup_id_y 1
  .amdhsa_system_sgpr_workgroup_id_z 1
  .amdhsa_system_vgpr_workitem_id 2
  .amdhsa_next_free_vgpr 8
  .amdhsa_accum_offset 8
  .amdhsa_next_free_sgpr 24
  .amdhsa_kernarg_size 16
.end_amdhsa_kernel
"""


def test_initial_state_from_descriptor() -> None:
    # dispatch ptr (2) + kernarg ptr (2) + 2 preloaded dwords -> s0..s5 user, s6..s8 workgroup ids
    # Order (AMDGPUUsage): dispatch ptr s[0:1], kernarg ptr s[2:3], preload s4..s5, then ids.
    stores = "\n".join(
        f"  v_mov_b32 v4, s{i}\n  global_store_dword v3, v4, s[16:17] offset:{4 * i}" for i in range(10)
    ) + "\n  global_store_dword v2, v0, s[16:17] offset:64"  # fmt: skip
    text = KERNEL.format(wgx=6, stride=64 * 4 + 64, stores=stores, dispatch=1, preload=2, ucount=6)
    text = text.replace("s_load_dwordx2 s[16:17], s[0:1], 0x0", "s_load_dwordx2 s[16:17], s[2:3], 0x0")
    mem = GlobalMemory()
    out = np.zeros((4, (64 * 4 + 64) // 4), dtype=np.uint32)
    args = struct.pack("<QII", mem.map(out), 0xAAAA5555, 0x12345678)
    sim = Simulator(text)
    res = sim.launch((4, 1, 1), (4, 2, 2), args, mem, workgroups=[(3, 0, 0)])
    assert not res.findings, [str(f) for f in res.findings]
    row = out[3]
    assert row[4] == 0xAAAA5555 and row[5] == 0x12345678  # preloaded kernarg dwords 2 and 3
    assert (row[6], row[7], row[8]) == (3, 0, 0)  # workgroup id x, y, z
    v0 = row[16 : 16 + 16]
    tid = np.arange(16)
    want = (tid % 4) | (((tid // 4) % 2) << 10) | ((tid // 8) << 20)  # packed x | y << 10 | z << 20
    np.testing.assert_array_equal(v0, want)


def test_partial_wave_exec_and_hidden_args() -> None:
    text = """
.text
k:
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_load_dword s6, s[0:1], 0x8
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  v_mov_b32 v2, s6
  global_store_dword v1, v2, s[4:5]
  s_endpgm
.amdhsa_kernel k
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr 4
  .amdhsa_accum_offset 4
  .amdhsa_next_free_sgpr 8
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.kernels:
  - .name: k
    .kernarg_segment_size: 24
    .args:
      - { .offset: 0, .size: 8, .value_kind: global_buffer }
      - { .offset: 8, .size: 4, .value_kind: hidden_block_count_x }
      - { .offset: 12, .size: 2, .value_kind: hidden_group_size_x }
...
.end_amdgpu_metadata
"""
    mem = GlobalMemory()
    out = np.full(128, 7, dtype=np.uint32)
    res = Simulator(text).launch((5, 1, 1), (100, 1, 1), struct.pack("<Q", mem.map(out)), mem,
                                 workgroups=[(0, 0, 0)])  # fmt: skip
    assert not res.findings
    np.testing.assert_array_equal(out[:100], 5)  # hidden_block_count_x
    np.testing.assert_array_equal(out[100:], 7)  # lanes 100..127 of wave 1 are inactive


def test_shipped_kernels_are_fully_supported(hip, hip_src) -> None:
    """No instruction of the kernels we compile is unknown to the simulator."""
    from .test_fa_fwd_bf16 import VARIANTS, _defines

    texts = [(hip("fa_mini"), "fa_mini"), (hip("lds_reduce"), "lds_reduce")]
    texts += [(hip_src("kernels/gfx950/fa_fwd_bf16.hip", **_defines(v)), v["name"]) for v in VARIANTS]
    for asm, name in texts:
        assert not Simulator(asm, name).compile_errors, name
