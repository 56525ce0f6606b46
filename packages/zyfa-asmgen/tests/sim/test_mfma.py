"""MFMA semantics against the independent oracles: layout tables element by element, golden vectors,
and random matrices through whole kernels (VGPR and AGPR accumulators)."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from zyfa_asmgen.sim import GlobalMemory, Simulator, parse_asm
from zyfa_asmgen.sim._gen_layouts import FILES
from zyfa_asmgen.sim.ops_mfma import MfmaSemantics, layout, reference_mfma
from zyfa_asmgen.sim.snippet import run_snippet

GOLDEN = {
    "cdna4_v_mfma_f32_32x32x16_bf16": ("v_mfma_f32_32x32x16_bf16", "bf16"),
    "cdna4_v_mfma_f32_16x16x32_bf16": ("v_mfma_f32_16x16x32_bf16", "bf16"),
    "cdna4_v_mfma_f32_32x32x64_f8f6f4_fp8e4m3": ("v_mfma_f32_32x32x64_f8f6f4", "e4m3"),
    "cdna4_v_mfma_f32_16x16x128_f8f6f4_fp8e4m3": ("v_mfma_f32_16x16x128_f8f6f4", "e4m3"),
    "cdna3_v_mfma_f32_32x32x8_bf16": ("v_mfma_f32_32x32x8_bf16", "bf16"),
}


@pytest.mark.parametrize("stem", sorted(FILES))
def test_packaged_layout_equals_oracle_element_by_element(stem: str, oracle) -> None:
    d = json.loads(oracle(f"mfma_layouts/{stem}.json").read_text())
    t = layout(FILES[stem])
    for key, (rk, ck) in {"A": ("i", "k"), "B": ("k", "j"), "D": ("i", "j")}.items():
        assert len(d[key]) == t[key].shape[0] * t[key].shape[1]
        for e in d[key]:
            assert tuple(t[key][e[rk], e[ck]]) == (e["lane"], e["vgpr"], e["bits"][0]), (key, e)


def _regs(rows: list[list[str]]) -> np.ndarray:
    """Oracle [lane][reg] hex strings -> (nregs, 64) uint32."""
    return np.array([[int(x, 16) for x in r] for r in rows], dtype=np.uint32).T.copy()


@pytest.mark.parametrize("stem", sorted(GOLDEN))
def test_golden_vectors_semantics(stem: str, oracle) -> None:
    g = json.loads(oracle(f"mfma_golden/golden_{stem}.json").read_text())
    name, fmt = GOLDEN[stem]
    sem = MfmaSemantics(name, fmt, fmt)
    d = sem.run(_regs(g["A_regs"]), _regs(g["B_regs"]), _regs(g["C_regs"]))
    np.testing.assert_array_equal(d, _regs(g["D_regs_expected"]))


@pytest.mark.parametrize("stem", sorted(GOLDEN))
@pytest.mark.parametrize("acc", ["v", "a"])
def test_golden_vectors_through_the_executor(stem: str, acc: str, oracle) -> None:
    """The instruction as written in assembly, with VGPR or AGPR C/D, gives the golden D."""
    g = json.loads(oracle(f"mfma_golden/golden_{stem}.json").read_text())
    name, _ = GOLDEN[stem]
    a, b, c, dexp = (_regs(g[k]) for k in ("A_regs", "B_regs", "C_regs", "D_regs_expected"))
    na, nb, nd = a.shape[0], b.shape[0], c.shape[0]
    vgpr = {i: a[i] for i in range(na)} | {32 + i: b[i] for i in range(nb)}
    body = (
        f"  {name} {acc}[64:{64 + nd - 1}], v[0:{na - 1}], v[32:{32 + nb - 1}], {acc}[64:{64 + nd - 1}]\n"
        "  s_nop 15\n  s_nop 3"
    )
    if acc == "v":
        vgpr |= {64 + i: c[i] for i in range(nd)}
        r = run_snippet(body, vgpr=vgpr)
        out = r.wave.v[64 : 64 + nd]
    else:
        r = run_snippet(body, vgpr=vgpr, agpr={64 + i: c[i] for i in range(nd)})
        out = r.wave.a[64 : 64 + nd]
    np.testing.assert_array_equal(out, dexp)


def _random_codes(rng: np.random.Generator, shape: tuple, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Random finite element codes and their float64 values."""
    if fmt == "bf16":
        x = rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
        return x.view(np.uint16).astype(np.uint32), x.astype(np.float64)
    dt = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    x = (rng.standard_normal(shape) * 8).astype(dt)
    return x.view(np.uint8).astype(np.uint32), x.astype(np.float64)


@pytest.mark.parametrize(
    "name,fa,fb,mods",
    [
        ("v_mfma_f32_32x32x16_bf16", "bf16", "bf16", ""),
        ("v_mfma_f32_16x16x32_bf16", "bf16", "bf16", ""),
        ("v_mfma_f32_32x32x64_f8f6f4", "e4m3", "e4m3", ""),
        ("v_mfma_f32_32x32x64_f8f6f4", "e5m2", "e4m3", " cbsz:1"),
        ("v_mfma_f32_16x16x128_f8f6f4", "e4m3", "e5m2", " blgp:1"),
        ("v_mfma_f32_32x32x16_fp8_fp8", "e4m3", "e4m3", ""),
    ],
)
def test_random_matmul(name: str, fa: str, fb: str, mods: str) -> None:
    """Random inputs placed with the layout; D must equal C + A@B in float64 rounded to f32."""
    rng = np.random.default_rng()
    lname = "v_mfma_f32_32x32x16_fp8_fp8" if "fp8_fp8" in name else name
    m, n, k = (int(x) for x in layout(lname)["meta"][:3])
    ac, av = _random_codes(rng, (m, k), fa)
    bc, bv = _random_codes(rng, (k, n), fb)
    cv = rng.standard_normal((m, n)).astype(np.float32)
    regs = reference_mfma(lname, ac, bc, cv.view(np.uint32))
    na, nb, nd = regs["A"].shape[0], regs["B"].shape[0], regs["D"].shape[0]
    vgpr = {i: regs["A"][i] for i in range(na)} | {16 + i: regs["B"][i] for i in range(nb)}
    vgpr |= {32 + i: regs["D"][i] for i in range(nd)}
    d = f"v[32:{32 + nd - 1}]"
    r = run_snippet(f"  {name} {d}, v[0:{na - 1}], v[16:{16 + nb - 1}], {d}{mods}", vgpr=vgpr)
    want = (cv.astype(np.float64) + av @ bv).astype(np.float32)
    got = np.zeros((m, n), dtype=np.uint32)
    t = layout(lname)["D"]
    got[:, :] = r.wave.v[32 + t[..., 1].astype(int), t[..., 0].astype(int)]
    np.testing.assert_array_equal(got.view(np.float32), want)


def test_swapped_operands_give_a_different_answer() -> None:
    """Seeded bug: A and B swapped in the instruction must not give the same D (non-square k layout)."""
    rng = np.random.default_rng(1)
    ac, _ = _random_codes(rng, (32, 16), "bf16")
    bc, _ = _random_codes(rng, (16, 32), "bf16")
    regs = reference_mfma("v_mfma_f32_32x32x16_bf16", ac, bc, np.zeros((32, 32), np.uint32))
    vgpr = {i: regs["A"][i] for i in range(4)} | {8 + i: regs["B"][i] for i in range(4)}
    op = "  v_mfma_f32_32x32x16_bf16 v[16:31]"
    good = run_snippet(f"{op}, v[0:3], v[8:11], 0", vgpr=vgpr).wave.v[16:32].copy()
    bad = run_snippet(f"{op}, v[8:11], v[0:3], 0", vgpr=vgpr).wave.v[16:32].copy()
    assert not np.array_equal(good, bad)


def test_mfma_dump_kernel_runs_golden(oracle) -> None:
    """The oracle's hand-written complete kernel, launched normally, gives A@B of the golden A, B."""
    prog = parse_asm(oracle("toolchain/mfma_dump_kernel_gfx950.s").read_text())
    g = json.loads(oracle("mfma_golden/golden_cdna4_v_mfma_f32_32x32x64_f8f6f4_fp8e4m3.json").read_text())
    a = np.array([[int(x, 16) for x in r] for r in g["A_regs"]], dtype=np.uint32)
    b = np.array([[int(x, 16) for x in r] for r in g["B_regs"]], dtype=np.uint32)
    mem = GlobalMemory()
    out = np.full((64, 16), 0xFFFFFFFF, dtype=np.uint32)
    args = np.array([mem.map(a), mem.map(b), mem.map(out)], dtype="<u8").tobytes()
    res = Simulator(prog).launch((1, 1, 1), (64, 1, 1), args, mem)
    assert not res.findings, [str(f) for f in res.findings]
    want = np.array(g["A_codes_row_major"], dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    wb = np.array(g["B_codes_row_major"], dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    d = (want @ wb).astype(np.float32)
    t = layout("v_mfma_f32_32x32x64_f8f6f4")["D"]
    got = out[t[..., 0].astype(int), t[..., 1].astype(int)].view(np.float32)
    np.testing.assert_array_equal(got, d)
