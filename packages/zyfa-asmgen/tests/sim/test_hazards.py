"""Hazard checker: s_waitcnt tracking, LDS races, wait-state rules (each rule violated by one wait
state and met exactly), and seeded bugs in compiled kernels."""

from __future__ import annotations

import re

import numpy as np
import pytest

from zyfa_asmgen.sim import GlobalMemory, Simulator
from zyfa_asmgen.sim.hazard_rules import MFMA_PASSES
from zyfa_asmgen.sim.snippet import run_snippet


def kinds(res) -> set[str]:
    return {f.kind for f in res.report.findings}


def _buf(mem: GlobalMemory, n: int = 4096) -> int:
    return mem.map(np.arange(n, dtype=np.uint32))


# ---- s_waitcnt ------------------------------------------------------------------------------------


def _load_snippet(body: str, n: int = 4096) -> set[str]:
    mem = GlobalMemory()
    a = _buf(mem, n)
    lane4 = np.arange(64, dtype=np.uint32) * 4
    r = run_snippet(body, vgpr={0: lane4}, sgpr={10: a & 0xFFFFFFFF, 11: a >> 32}, mem=mem)
    return kinds(r)


def test_read_before_vmcnt_is_reported() -> None:
    assert "waitcnt" in _load_snippet("  global_load_dword v1, v0, s[10:11]\n  v_add_u32 v2, v1, v1")
    assert not _load_snippet(
        "  global_load_dword v1, v0, s[10:11]\n  s_waitcnt vmcnt(0)\n  v_add_u32 v2, v1, v1"
    )


def test_vmcnt_retires_in_order() -> None:
    two = "  global_load_dword v1, v0, s[10:11]\n  global_load_dword v2, v0, s[10:11] offset:256\n"
    assert not _load_snippet(two + "  s_waitcnt vmcnt(1)\n  v_mov_b32 v3, v1")
    assert "waitcnt" in _load_snippet(two + "  s_waitcnt vmcnt(1)\n  v_mov_b32 v3, v2")


def test_overwriting_a_pending_load_destination_is_reported() -> None:
    assert "waitcnt" in _load_snippet("  global_load_dword v1, v0, s[10:11]\n  v_mov_b32 v1, 0")


def test_lgkmcnt_with_scalar_loads_needs_zero() -> None:
    body = (
        "  s_load_dword s12, s[10:11], 0x0\n  ds_read_b32 v1, v0\n  s_waitcnt lgkmcnt(1)\n"
        "  v_mov_b32 v2, v1\n"
    )
    mem = GlobalMemory()
    a = _buf(mem)
    r = run_snippet(body, vgpr={0: np.zeros(64, np.uint32)}, sgpr={10: a & 0xFFFFFFFF, 11: a >> 32}, mem=mem,
                    lds_bytes=1024)  # fmt: skip
    assert "waitcnt" in kinds(r)  # the s_load may have returned first: the ds_read is not proven done
    r = run_snippet(body.replace("lgkmcnt(1)", "lgkmcnt(0)"), vgpr={0: np.zeros(64, np.uint32)},
                    sgpr={10: a & 0xFFFFFFFF, 11: a >> 32}, mem=mem, lds_bytes=1024)  # fmt: skip
    assert not kinds(r)


def test_lds_reads_return_in_order() -> None:
    body = "  ds_read_b32 v1, v0\n  ds_read_b32 v2, v0 offset:4\n  s_waitcnt lgkmcnt(1)\n  v_mov_b32 v3, {}\n"
    z = {0: np.zeros(64, np.uint32)}
    assert not kinds(run_snippet(body.format("v1"), vgpr=z, lds_bytes=64))
    assert "waitcnt" in kinds(run_snippet(body.format("v2"), vgpr=z, lds_bytes=64))


def test_lds_dma_read_before_vmcnt_is_reported() -> None:
    mem = GlobalMemory()
    a = _buf(mem)
    body = (
        "  s_mov_b32 m0, 0\n  s_nop 0\n  global_load_lds_dwordx4 v0, s[10:11]\n{}"
        "  ds_read_b128 v[4:7], v1\n  s_waitcnt lgkmcnt(0)\n"
    )
    regs = {0: np.arange(64, dtype=np.uint32) * 16, 1: np.arange(64, dtype=np.uint32) * 16}
    s = {10: a & 0xFFFFFFFF, 11: a >> 32}
    r = run_snippet(body.format(""), vgpr=regs, sgpr=s, mem=mem, lds_bytes=1024)
    assert "waitcnt" in kinds(r)
    r = run_snippet(body.format("  s_waitcnt vmcnt(0)\n"), vgpr=regs, sgpr=s, mem=mem, lds_bytes=1024)
    assert not kinds(r)
    np.testing.assert_array_equal(r.wave.v[4:8].T.reshape(-1), np.arange(256, dtype=np.uint32))


def test_lds_dma_lands_at_the_wait_that_retires_it() -> None:
    """Before its s_waitcnt vmcnt an LDS-DMA load has not written LDS (the read sees the old bytes,
    and is reported); the wait lands it; a wait that leaves it outstanding does not."""
    mem = GlobalMemory()
    a = _buf(mem)
    regs = {0: np.arange(64, dtype=np.uint32) * 16, 1: np.arange(64, dtype=np.uint32) * 16}
    s = {10: a & 0xFFFFFFFF, 11: a >> 32}
    old = np.full(1024, 0xEE, dtype=np.uint8)
    body = "  s_mov_b32 m0, 0\n  s_nop 0\n  global_load_lds_dwordx4 v0, s[10:11]\n{}  ds_read_b32 v4, v1\n"
    body += "  s_waitcnt lgkmcnt(0)\n"
    r = run_snippet(body.format(""), vgpr=regs, sgpr=s, mem=mem, lds_bytes=1024, lds_init=old)
    assert (r.wave.v[4] == 0xEEEEEEEE).all() and "waitcnt" in kinds(r)
    two = "  global_load_dword v8, v0, s[10:11]\n  s_waitcnt vmcnt(1)\n"  # retires the DMA, not the load
    r = run_snippet(body.format(two), vgpr=regs, sgpr=s, mem=mem, lds_bytes=1024, lds_init=old)
    np.testing.assert_array_equal(r.wave.v[4], np.arange(64, dtype=np.uint32) * 4)
    wait_none = "  global_load_dword v8, v0, s[10:11]\n  s_waitcnt vmcnt(2)\n"
    r = run_snippet(body.format(wait_none), vgpr=regs, sgpr=s, mem=mem, lds_bytes=1024, lds_init=old)
    assert (r.wave.v[4] == 0xEEEEEEEE).all()


def test_in_order_load_write_after_write_is_not_a_finding() -> None:
    """A newer LDS read (or vector-memory load) may overwrite the registers of an older one on the
    same counter: they return in order. A VALU overwrite, or one across counters, is still reported."""
    z = {0: np.zeros(64, np.uint32)}
    lds = "  ds_read_b64 v[2:3], v0\n  ds_read_b32 v3, v0 offset:8\n  s_waitcnt lgkmcnt(0)\n"
    assert not kinds(run_snippet(lds, vgpr=z, lds_bytes=64))
    assert "waitcnt" in kinds(run_snippet("  ds_read_b32 v3, v0\n  v_mov_b32 v3, 0\n", vgpr=z, lds_bytes=64))
    vm = "  global_load_dword v1, v0, s[10:11]\n  global_load_dword v1, v0, s[10:11] offset:4\n"
    vm += "  s_waitcnt vmcnt(0)\n"
    assert not _load_snippet(vm)
    mixed = "  global_load_dword v1, v0, s[10:11]\n  ds_read_b32 v1, v0\n  s_waitcnt vmcnt(0) lgkmcnt(0)\n"
    mem = GlobalMemory()
    a = _buf(mem)
    r = run_snippet(mixed, vgpr=z, sgpr={10: a & 0xFFFFFFFF, 11: a >> 32}, mem=mem, lds_bytes=64)
    assert "waitcnt" in kinds(r)


def test_buffer_range_check_counts_soffset() -> None:
    """Raw buffer: out of range iff soffset + offset + size > num_records (the lanes read 0)."""
    mem = GlobalMemory()
    a = _buf(mem, 128)
    s = {8: a & 0xFFFFFFFF, 9: a >> 32, 10: 64 * 4, 11: 0x00027000, 12: 8}  # soffset 8: last 2 lanes out
    r = run_snippet("  buffer_load_dword v1, v0, s[8:11], s12 offen\n  s_waitcnt vmcnt(0)",
                    vgpr={0: np.arange(64, dtype=np.uint32) * 4}, sgpr=s, mem=mem)  # fmt: skip
    want = np.arange(2, 66, dtype=np.uint32)
    want[62:] = 0
    np.testing.assert_array_equal(r.wave.v[1], want)


def test_lds_out_of_range_is_reported() -> None:
    body = "  ds_write_b32 v0, v0 offset:60\n  s_waitcnt lgkmcnt(0)"
    r = run_snippet(body, vgpr={0: np.zeros(64, np.uint32) + 8}, lds_bytes=64)
    assert "lds_oob" in kinds(r)


def test_global_out_of_bounds_faults() -> None:
    from zyfa_asmgen.sim import MemoryFault

    with pytest.raises(MemoryFault, match="outside every buffer"):
        _load_snippet("  global_load_dword v1, v0, s[10:11] offset:3900\n  s_waitcnt vmcnt(0)", n=1000)


def test_buffer_out_of_range_reads_zero() -> None:
    mem = GlobalMemory()
    a = _buf(mem, 64)
    s = {8: a & 0xFFFFFFFF, 9: a >> 32, 10: 64 * 4 - 8, 11: 0x00027000}  # last 2 dwords out of range
    r = run_snippet("  buffer_load_dword v1, v0, s[8:11], 0 offen\n  s_waitcnt vmcnt(0)",
                    vgpr={0: np.arange(64, dtype=np.uint32) * 4}, sgpr=s, mem=mem)  # fmt: skip
    want = np.arange(64, dtype=np.uint32)
    want[62:] = 0
    np.testing.assert_array_equal(r.wave.v[1], want)


def test_unallocated_register_is_reported() -> None:
    text = """
.text
k:
  v_mov_b32 v40, 0
  s_endpgm
.amdhsa_kernel k
  .amdhsa_next_free_vgpr 8
  .amdhsa_accum_offset 8
  .amdhsa_next_free_sgpr 8
.end_amdhsa_kernel
"""
    res = Simulator(text).launch((1, 1, 1), (64, 1, 1), b"", GlobalMemory())
    assert "register" in kinds(res)


# ---- wait-state rules: violated by one, met exactly -----------------------------------------------

# (name, producer, consumer, required wait states, finding kind)
RULE_CASES = [
    ("mfma->valu read", "v_mfma_f32_32x32x16_bf16 v[32:47], v[0:3], v[4:7], 0", "v_add_f32 v50, v32, v32",
     MFMA_PASSES["v_mfma_f32_32x32x16_bf16"] + 4, "checkMAIVALUHazards:mfma-writes-vgpr-read"),
    ("mfma(16x16x32)->store", "v_mfma_f32_16x16x32_bf16 v[32:35], v[0:3], v[4:7], 0",
     "global_store_dwordx4 v10, v[32:35], s[20:21]", 8, "checkMAIVALUHazards:mfma-writes-vgpr-read"),
    ("mfma(f8f6f4)->accvgpr", "v_mfma_f32_32x32x64_f8f6f4 a[0:15], v[0:7], v[8:15], 0",
     "v_accvgpr_read_b32 v50, a3", 20, "checkMAIVALUHazards:mfma-writes-vgpr-read"),
    ("mfma->valu write", "v_mfma_f32_16x16x128_f8f6f4 v[32:35], v[0:7], v[8:15], 0", "v_mov_b32 v33, 0",
     12, "checkMAIVALUHazards:mfma-writes-vgpr-waw"),
    ("mfma srcc->valu write", "v_mfma_f32_32x32x16_bf16 v[32:47], v[0:3], v[4:7], v[64:79]",
     "v_mov_b32 v70, 0", 7, "checkMAIVALUHazards:mfma-reads-srcc-war"),
    ("mfma->mfma srcA", "v_mfma_f32_16x16x32_bf16 v[32:35], v[0:3], v[4:7], 0",
     "v_mfma_f32_16x16x32_bf16 v[40:43], v[32:35], v[4:7], 0", 8, "checkMAIHazards90A:mfma-writes-srcab"),
    ("mfma->mfma partial srcC", "v_mfma_f32_16x16x32_bf16 v[32:35], v[0:3], v[4:7], 0",
     "v_mfma_f32_32x32x16_bf16 v[32:47], v[0:3], v[4:7], v[32:47]", 6,
     "checkMAIHazards90A:mfma-writes-overlapped-srcc"),
    ("valu->mfma", "v_mov_b32 v1, 0", "v_mfma_f32_32x32x16_bf16 v[32:47], v[0:3], v[4:7], 0", 2,
     "checkMAIHazards90A:valu-writes-vgpr"),
    ("vcmpx->mfma", "v_cmpx_le_u32 vcc, 0, v0", "v_mfma_f32_32x32x16_bf16 v[32:47], v[0:3], v[4:7], 0", 4,
     "checkMAIHazards90A:valu-writes-exec"),
    ("trans->valu", "v_exp_f32 v1, v2", "v_add_f32 v3, v1, v1", 1, "checkVALUHazards:trans-forwarding"),
    ("op_sel dst->valu", "v_cvt_pk_fp8_f32 v1, v2, v3 op_sel:[0,0,1]", "v_mov_b32 v4, v1", 1,
     "checkVALUHazards:dst-sel-forwarding"),
    ("valu sgpr->valu", "v_cmp_gt_f32 s[12:13], v2, v3", "v_cndmask_b32 v4, v2, v3, s[12:13]", 2,
     "checkVALUHazards:valu-writes-sgpr-valu-reads"),
    ("valu vcc->div_fmas", "v_cmp_gt_f32 vcc, v2, v3", "v_div_fmas_f32 v4, v2, v3, v5", 4,
     "checkDivFMasHazards"),
    ("valu->readlane", "v_mov_b32 v1, v2", "v_readfirstlane_b32 s12, v1", 1,
     "checkVALUHazards:valu-writes-readlane-vgpr"),
    ("readfirstlane->readlane select", "v_readfirstlane_b32 s12, v2", "v_readlane_b32 s13, v3, s12", 4,
     "checkRWLaneHazards"),
    ("valu->dpp", "v_mov_b32 v1, v2", "v_mov_b32_dpp v3, v1 row_shr:1 row_mask:0xf bank_mask:0xf", 2,
     "checkDPPHazards:vgpr"),
    ("vcmpx->dpp", "v_cmpx_le_u32 vcc, 0, v0", "v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf", 5,
     "checkDPPHazards:exec"),
    ("store x4->valu write", "global_store_dwordx4 v10, v[4:7], s[20:21]", "v_mov_b32 v5, 0", 2,
     "checkVALUHazardsHelper:store-data-overwritten"),
    ("readfirstlane->vmem sgpr", "v_readfirstlane_b32 s20, v10", "global_load_dword v1, v10, s[20:21]", 5,
     "checkVMEMHazards:valu-writes-sgpr"),
    ("m0->lds dma", "s_mov_b32 m0, 0", "global_load_lds_dword v10, s[20:21]", 1, "checkReadM0Hazards"),
    ("valu->permlane", "v_mov_b32 v1, v2", "v_permlane32_swap_b32 v1, v3", 2,
     "checkPermlaneHazards:valu-writes-vgpr"),
]  # fmt: skip


def _nops(n: int) -> str:
    out = []
    while n > 0:
        k = min(n, 16)
        out.append(f"  s_nop {k - 1}")
        n -= k
    return "\n".join(out)


def _rule_run(producer: str, consumer: str, gap: int):
    mem = GlobalMemory()
    a = _buf(mem, 1 << 16)
    vgpr = {i: np.zeros(64, np.uint32) for i in range(16)}
    vgpr[10] = np.arange(64, dtype=np.uint32) * 16
    body = (
        f"  {producer}\n{_nops(gap)}\n  {consumer}\n  s_nop 15\n  s_nop 15\n  s_waitcnt vmcnt(0) lgkmcnt(0)"
    )
    s = {20: a & 0xFFFFFFFF, 21: a >> 32}
    return run_snippet(body, vgpr=vgpr, sgpr=s, mem=mem, lds_bytes=4096)


@pytest.mark.parametrize("case", RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_rule_exact_and_one_short(case) -> None:
    _, producer, consumer, need, rule = case
    ok = _rule_run(producer, consumer, need)
    assert not [f for f in ok.report.findings if f.kind.startswith("hazard")], [
        str(f) for f in ok.report.findings
    ]
    bad = _rule_run(producer, consumer, need - 1)
    assert f"hazard:{rule}" in kinds(bad), [str(f) for f in bad.report.findings]


# ---- calibration against the pinned compiler ---------------------------------------------------


def _wait_states_between(lines: list[str], i: int, j: int) -> int:
    n = 0
    for s in lines[i + 1 : j]:
        m = re.match(r"s_nop (\d+)", s)
        n += int(m.group(1)) + 1 if m else 1
    return n


def test_mfma_padding_matches_pinned_compiler(hip) -> None:
    """For each MFMA, the clang-inserted s_nop before the first dependent store is what our rule asks."""
    asm = hip("mfma_pad")
    sim = Simulator(asm, "m32x32x16_bf16")  # parses; every kernel of the file is checked below
    prog = sim.program
    seen = set()
    for name, k in prog.kernels.items():
        insts = prog.instructions[k.entry :]
        end = next(i for i, x in enumerate(insts) if x.op == "s_endpgm")
        lines = [x.text for x in insts[: end + 1]]
        mi = next(i for i, x in enumerate(insts) if x.op.startswith("v_mfma"))
        dst = insts[mi].operands[0].reg
        ui = next(
            i for i in range(mi + 1, end) for o in insts[i].operands
            if o.kind == "reg" and o.reg.file == dst.file and o.reg.index < dst.index + dst.count
            and dst.index < o.reg.index + o.reg.count
        )  # fmt: skip
        got = _wait_states_between(lines, mi, ui)
        assert got == MFMA_PASSES[insts[mi].op] + 4 - (1 if MFMA_PASSES[insts[mi].op] == 2 else 0), (
            name,
            got,
        )
        seen.add(insts[mi].op)
    assert len(seen) == 8


def test_compiled_kernels_are_clean_and_every_nop_is_needed(hip) -> None:
    """Shorten each compiler-inserted s_nop of mfma_pad by one: the checker must object every time."""
    asm = hip("mfma_pad")
    lines = asm.splitlines()
    nop_lines = [i for i, s in enumerate(lines) if re.match(r"\s*s_nop \d+", s)]
    assert nop_lines
    for name in ("m32x32x16_bf16", "m16x16x128_f8f6f4"):
        assert not _hazards(asm, name)
    for i in nop_lines:
        n = int(re.search(r"s_nop (\d+)", lines[i]).group(1))
        mutated = lines.copy()
        mutated[i] = f"\ts_nop {n - 1}" if n > 0 else ""
        text = "\n".join(mutated)
        kernel = _kernel_of_line(text, i)
        assert _hazards(text, kernel), f"removing one wait state at line {i + 1} ({kernel}) went unnoticed"


def _kernel_of_line(text: str, i: int) -> str:
    name = None
    for s in text.splitlines()[: i + 1]:
        m = re.match(r"^(m\w+):", s)
        if m:
            name = m.group(1)
    return name


def _hazards(asm: str, kernel: str) -> list:
    mem = GlobalMemory()
    bufs = [mem.map(np.zeros(64 * 64, np.uint32)) for _ in range(3)]
    res = Simulator(asm, kernel).launch((1, 1, 1), (64, 1, 1), np.array(bufs, dtype="<u8").tobytes(), mem)
    return [f for f in res.report.findings if f.kind.startswith("hazard")]


# ---- seeded bugs in whole kernels --------------------------------------------------------------


def _drop_line(asm: str, pattern: str, nth: int = 0) -> str:
    lines = asm.splitlines()
    hits = [i for i, s in enumerate(lines) if re.search(pattern, s)]
    del lines[hits[nth]]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def reduce_asm(hip):
    return hip("lds_reduce")


def _run_reduce(asm: str):
    import struct

    rng = np.random.default_rng(0)
    x = rng.standard_normal(512).astype(np.float32)
    out = np.zeros(1, np.float32)
    mem = GlobalMemory()
    args = struct.pack("<QQi", mem.map(x), mem.map(out), 512)
    return Simulator(asm, "lds_reduce").launch((1, 1, 1), (256, 1, 1), args, mem)


def test_seeded_missing_barrier_is_an_lds_race(reduce_asm) -> None:
    assert not _run_reduce(reduce_asm).findings
    assert "lds_race" in kinds(_run_reduce(_drop_line(reduce_asm, r"^\s*s_barrier", 1)))


def test_seeded_missing_waitcnt_before_barrier_is_an_lds_race(reduce_asm) -> None:
    lines = reduce_asm.splitlines()
    b = [i for i, s in enumerate(lines) if re.match(r"\s*s_barrier", s)][0]
    assert "lgkmcnt(0)" in lines[b - 1]
    del lines[b - 1]
    assert "lds_race" in kinds(_run_reduce("\n".join(lines)))


def test_seeded_missing_vmcnt_is_reported(reduce_asm) -> None:
    assert "waitcnt" in kinds(_run_reduce(_drop_line(reduce_asm, r"s_waitcnt vmcnt\(0\)")))


def test_seeded_missing_scalar_waitcnt_is_reported(reduce_asm) -> None:
    assert "waitcnt" in kinds(_run_reduce(_drop_line(reduce_asm, r"s_waitcnt lgkmcnt\(0\)", 0)))


# ---- seeded bugs in the attention kernel ---------------------------------------------------------


def _run_fa(asm: str, sq: int = 40, sk: int = 40):
    """fa_mini on one head; returns (result, out as float64, reference out)."""
    import struct

    import ml_dtypes

    rng = np.random.default_rng(0)
    d = 128
    q, k, v = (rng.standard_normal((1, n, 1, d)).astype(ml_dtypes.bfloat16) for n in (sq, sk, sk))
    out = np.zeros((1, sq, 1, d), ml_dtypes.bfloat16)
    lse = np.zeros((1, 1, sq), np.float32)
    mem = GlobalMemory()
    ptrs = [mem.map(x.view(np.uint16)) for x in (q, k, v, out)] + [mem.map(lse)]
    strides = [s // 2 for t in (q, k, v, out) for s in t.strides[:3]]
    args = struct.pack("<5Q12q7iI4fQ", *ptrs, *strides, 1, 1, 1, sq, sk, d, d, 3, 1 / np.sqrt(d), 1, 1, 1, 0)
    res = Simulator(asm, "fa_mini").launch(((sq + 31) // 32, 1, 1), (64, 1, 1), args, mem)
    s = q[0, :, 0].astype(np.float64) @ k[0, :, 0].astype(np.float64).T / np.sqrt(d)
    s = np.where(np.arange(sk)[None] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v[0, :, 0].astype(np.float64)
    return res, out[0, :, 0].astype(np.float64), ref


@pytest.fixture(scope="module")
def fa_asm(hip):
    return hip("fa_mini", FA_D_QK=128, FA_D_V=128)


def test_fa_mini_every_compiler_nop_is_needed(fa_asm) -> None:
    """Each s_nop clang put into the attention kernel, shortened by one wait state, is reported."""
    lines = fa_asm.splitlines()
    nops = [i for i, s in enumerate(lines) if re.match(r"\s*s_nop \d+", s)]
    assert len(nops) >= 3
    for i in nops:
        n = int(re.search(r"s_nop (\d+)", lines[i]).group(1))
        mutated = lines.copy()
        mutated[i] = f"\ts_nop {n - 1}" if n else ""
        res, _, _ = _run_fa("\n".join(mutated))
        assert any(f.kind.startswith("hazard") for f in res.findings), f"line {i + 1}: {lines[i - 1].strip()}"


def test_fa_mini_missing_waitcnt_is_reported(fa_asm) -> None:
    res, out, ref = _run_fa(fa_asm)
    assert not res.findings and np.abs(out - ref).max() < 2e-2
    for k in range(3):
        res, _, _ = _run_fa(_drop_line(fa_asm, r"s_waitcnt vmcnt", k))
        assert "waitcnt" in kinds(res), k


def test_fa_mini_swapped_mfma_operands_give_wrong_answer(fa_asm) -> None:
    """Seeded bug: swap srcA and srcB of the first P.V MFMA -> the output is wrong."""
    lines = fa_asm.splitlines()
    mf = [i for i, s in enumerate(lines) if "v_mfma" in s]
    i = mf[-1]
    m = re.match(r"(\s*v_mfma\S+\s+[^,]+),\s*([^,]+),\s*([^,]+),(.*)", lines[i])
    lines[i] = f"{m.group(1)}, {m.group(3).strip()}, {m.group(2).strip()},{m.group(4)}"
    res, out, ref = _run_fa("\n".join(lines))
    assert np.abs(out - ref).max() > 0.1
