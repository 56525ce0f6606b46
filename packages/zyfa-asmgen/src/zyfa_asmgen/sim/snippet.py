"""Run a few instructions on one wave without writing a kernel descriptor (for unit tests).

    w = run_snippet("v_add_f32 v2, v0, v1", vgpr={0: a_bits, 1: b_bits})
    w.v[2]  -> the result lanes

The snippet gets a synthetic descriptor with every register allocated and s_endpgm appended.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .asm import parse_asm
from .core import Wave
from .hazards import Report
from .machine import Simulator
from .memory import GlobalMemory

_TEMPLATE = """
.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
.text
snippet:
{body}
  s_endpgm
.rodata
.amdhsa_kernel snippet
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr {nv}
  .amdhsa_accum_offset 256
  .amdhsa_next_free_sgpr 102
  .amdhsa_group_segment_fixed_size {lds}
.end_amdhsa_kernel
"""


@dataclass
class SnippetResult:
    """The wave after the snippet ran, and what the checker found."""

    wave: Wave
    report: Report
    lds: np.ndarray
    mem: GlobalMemory


def run_snippet(
    body: str,
    vgpr: dict[int, np.ndarray] | None = None,
    agpr: dict[int, np.ndarray] | None = None,
    sgpr: dict[int, int] | None = None,
    exec_mask: int = (1 << 64) - 1,
    lds_bytes: int = 0,
    mem: GlobalMemory | None = None,
    lds_init: np.ndarray | None = None,
    check: bool = True,
    scc: int = 0,
) -> SnippetResult:
    """Execute `body` on a single wave64 with the given initial registers."""
    text = _TEMPLATE.format(body=body, nv=512, lds=lds_bytes)
    sim = Simulator(parse_asm(text), "snippet", check=check)
    mem = mem or GlobalMemory()

    captured: dict = {}

    def setup(wg) -> None:
        w = wg.waves[0]
        for i, v in (vgpr or {}).items():
            w.v[i] = np.asarray(v, dtype=np.uint32)
        for i, v in (agpr or {}).items():
            w.a[i] = np.asarray(v, dtype=np.uint32)
        for i, v in (sgpr or {}).items():
            w.s[i] = int(v) & 0xFFFFFFFF
        w.set_exec(exec_mask)
        w.scc = scc
        if lds_init is not None:
            wg.lds[: lds_init.nbytes] = lds_init.view(np.uint8).reshape(-1)
        captured["wave"] = w
        captured["lds"] = wg.lds

    res = sim.launch((1, 1, 1), (64, 1, 1), b"", mem, setup=setup)
    return SnippetResult(captured["wave"], res.report, captured["lds"], mem)
