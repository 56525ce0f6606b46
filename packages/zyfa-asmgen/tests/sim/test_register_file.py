"""The unified VGPR/AGPR file of a kernel descriptor, and v_nop (met first in shipped code objects).

gfx950 allocates VGPRs and AGPRs from one file; AGPRs start at accum_offset. A kernel that uses no
AGPR may use VGPRs up to the whole allocation (AITER's fmha_v3_fwd d=128 kernels, which run on
MI355X, use v160-v255 with accum_offset 160); one that uses AGPRs must keep its VGPRs below it.
"""

from __future__ import annotations

import numpy as np
import pytest

from zyfa_asmgen.sim import Simulator, UnsupportedOperand
from zyfa_asmgen.sim.snippet import run_snippet

KERNEL = """
.text
k:
  v_mov_b32 v12, 1
{extra}
  s_endpgm
.amdhsa_kernel k
  .amdhsa_next_free_vgpr 16
  .amdhsa_accum_offset 8
  .amdhsa_next_free_sgpr 8
.end_amdhsa_kernel
"""


def test_vgprs_may_fill_the_allocation_without_agprs() -> None:
    assert Simulator(KERNEL.format(extra="")).register_findings == []


def test_vgprs_above_accum_offset_clash_with_agprs() -> None:
    found = Simulator(KERNEL.format(extra="  v_accvgpr_write_b32 a0, 0")).register_findings
    assert [msg for _, msg in found] == ["uses v12 but the descriptor allocates 8 VGPRs"]


def test_v_nop_changes_nothing() -> None:
    rng = np.random.default_rng()
    v = {i: rng.integers(0, 2**32, 64, dtype=np.uint32) for i in range(4)}
    res = run_snippet("v_nop\nv_nop", vgpr=v, sgpr={4: 7})
    for i in range(4):
        np.testing.assert_array_equal(res.wave.v[i], v[i])
    assert res.wave.s[4] == 7 and not res.report.findings


def test_v_nop_rejects_operands() -> None:
    with pytest.raises(UnsupportedOperand, match="v_nop takes no operands"):
        run_snippet("v_nop v1")
