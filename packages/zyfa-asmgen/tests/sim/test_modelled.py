"""The steady-state launch model, the calibration against AITER's published MI355X speeds, and the
`zyfa-asmgen modelled` scoreboard on a small shape. Every figure here is MODELLED.

AITER's code objects come from the pinned wheel (aiter_inputs.py); the tests that need them skip
with the reason when they cannot be had.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from zyfa_asmgen.__main__ import main
from zyfa_asmgen.sim.aiter import AiterKernel, kernel_of
from zyfa_asmgen.sim.anchors import ANCHORS, calibrate
from zyfa_asmgen.sim.cli import Shape
from zyfa_asmgen.sim.modelled import zyfa_contender
from zyfa_asmgen.sim.steady import WorkgroupCost, attention_flops, estimate
from zyfa_asmgen.sim.timing import MI355X

from .aiter_inputs import cache_dir
from .conftest import REPO
from .timing_kernels import kernel, timed

CALIBRATION_TOLERANCE = 0.15  # every anchor within +-15% with the one machine model


def test_causal_pairs_balance_the_work() -> None:
    """A causal AITER workgroup runs tiles x and T-1-x: every workgroup visits the same key blocks."""
    k = AiterKernel(128, True)
    blocks = {k.key_blocks(x, 8192, 8192) for x in range(k.grid(1, 1, 8192)[0])}
    assert blocks == {4 * (8192 // 256 + 1)}
    assert AiterKernel(192, False).key_blocks(0, 128, 1000) == 8  # ragged: ceil(1000 / 128)
    group = kernel_of("fwd_hd192_hd128_bf16_causal_group.co")
    assert group == AiterKernel(192, True, True) and group.grid(3, 16, 1000) == (16, 3, 4)
    with pytest.raises(ValueError, match="not an fmha_v3_fwd BF16 code object"):
        kernel_of("fwd_hd128_fp8.co")


def test_estimate_spreads_waves_of_workgroups() -> None:
    """One full wave of workgroups takes one cost; one more workgroup adds a second wave (the tail)."""
    slots = 2
    n = MI355X.cus * slots
    cost = WorkgroupCost(1000.0, 100.0, slots, 0.0, ())
    one = estimate([cost.cycles(10)] * n, slots, 1e12, 0.0)
    two = estimate([cost.cycles(10)] * (n + 1), slots, 1e12, 0.0)
    assert one.seconds == pytest.approx(2000 / (MI355X.clock_ghz * 1e9))
    assert two.seconds == pytest.approx(2 * one.seconds)
    hbm = estimate([1.0], slots, 1e12, 8e12)  # 8 TB at 8 TB/s: one second, HBM-bound
    assert hbm.hbm_bound and hbm.seconds == pytest.approx(1.0)
    assert attention_flops(1, 2, 4, 4, 128, 128, True) == 2 * 2 * 16 * 256 / 2


def test_interpolated_cost_follows_the_traced_points() -> None:
    """Interpolated costs pass through every traced point, are linear between neighbours and extend
    with the end segments' slopes; the least-squares form stays a + b x blocks."""
    rng = np.random.default_rng()
    blocks = np.sort(rng.choice(np.arange(1, 300), size=5, replace=False))
    cycles = np.cumsum(rng.uniform(1000, 3000, size=5))
    pts = tuple((int(b), float(c)) for b, c in zip(blocks, cycles, strict=True))
    cost = WorkgroupCost(17.0, 3.0, 2, 0.0, pts[::-1], interpolate=True)  # point order does not matter
    for b, c in pts:
        assert cost.cycles(b) == pytest.approx(c)
    inside = np.arange(blocks[0], blocks[-1] + 1)
    assert [cost.cycles(int(b)) for b in inside] == pytest.approx(np.interp(inside, blocks, cycles))
    last = (cycles[-1] - cycles[-2]) / (blocks[-1] - blocks[-2])
    assert cost.cycles(int(blocks[-1]) + 10) == pytest.approx(cycles[-1] + 10 * last)
    first = (cycles[1] - cycles[0]) / (blocks[1] - blocks[0])
    assert cost.cycles(int(blocks[0]) - 1) == pytest.approx(cycles[0] - first)
    assert dataclasses.replace(cost, interpolate=False).cycles(10) == pytest.approx(17.0 + 30.0)


def test_per_launch_fit_traces_the_launch_seqlen() -> None:
    """By default our kernels are fitted at each launch's own seqlen, and each traced workgroup's
    modelled cycles are what the launch charges a workgroup of its key-block count."""
    name = "fa_fwd_e4m3fn_hd128_causal_leanp_gfx950"
    c = zyfa_contender(name, None, REPO / "kernels" / "variants.bzl")
    est = c.launch(Shape(1, 512, 512, 2, 1))
    assert 0 < est.tflops < c.peak and set(c.fits) == {512}
    cost = c.fits[512]
    assert cost.interpolate and len(cost.points) == 5  # tiles 0, 1, 2, 4, 7 of 8 (64-row tiles)
    assert [b for b, _ in cost.points] == [1, 2, 3, 5, 8]
    for b, cyc in cost.points:
        assert cost.cycles(b) == pytest.approx(cyc)
    c.launch(Shape(1, 256, 256, 2, 1))
    assert set(c.fits) == {256, 512}  # a second seqlen is traced on its own


def test_valu_waits_for_the_matrix_core() -> None:
    """The calibrated machine does not overlap a SIMD's VALU work with its MFMAs; the what-if does."""
    body = "\n".join(["v_mfma_f32_32x32x16_bf16 v[0:15], v[32:35], v[36:39], v[0:15]"] + [
        f"v_add_f32 v{40 + i}, v{40 + i}, v{40 + i}" for i in range(8)
    ])  # fmt: skip
    asm = kernel(body, iters=8)
    _, calibrated = timed(asm, waves_per_simd=2)
    _, coexec = timed(asm, waves_per_simd=2, spec=dataclasses.replace(MI355X, valu_mfma_coexec=True))
    # 8 VALU ops (32 cycles) beside a 32-cycle MFMA: overlapped with the other wave's, or in series.
    assert coexec.wg_cycles[0] < 0.8 * calibrated.wg_cycles[0]


@pytest.mark.parametrize("anchor", ANCHORS, ids=lambda a: a.kernel)
def test_calibration_anchor_within_tolerance(aiter, anchor) -> None:
    """Each published AITER figure is matched within +-15% by the one machine model (MODELLED)."""
    (row,) = calibrate(cache_dir(), anchors=(anchor,))
    assert abs(row["ratio"] - 1) <= CALIBRATION_TOLERANCE, row


def test_scoreboard_small(aiter, tmp_path, capsys) -> None:
    """The scoreboard on one small shape: our d=192/128 kernel and AITER's, JSON + table + plot."""
    out = tmp_path / "board"
    rc = main(["modelled", "--variants", str(REPO / "kernels" / "variants.bzl"), "--kernels",
               "fa_fwd_bf16_hd192x128_causal_gfx950", "--aiter-dir", str(cache_dir()), "--seqlens", "2048",
               "--tokens", "4096", "--fit-seqlen", "256", "--out", str(out)])  # fmt: skip
    assert rc == 0
    doc = json.loads((out / "scoreboard.json").read_text())
    assert doc["label"] == "MODELLED"
    kernels = {r["kernel"] for r in doc["rows"]}
    assert "fa_fwd_bf16_hd192x128_causal_gfx950" in kernels and "aiter fwd_hd192_hd128_bf16_causal" in kernels
    for r in doc["rows"]:
        assert r["label"] == "MODELLED" and r["batch"] == 2 and r["seqlen"] == 2048
        assert 0 < r["tflops"] < r["peak_tflops"]
        assert np.isclose(r["pct_peak"], 100 * r["tflops"] / r["peak_tflops"], rtol=1e-2)
    md = (out / "scoreboard.md").read_text()
    assert "MODELLED" in md and "| `fa_fwd_bf16_hd192x128_causal_gfx950` | bf16 | 2048 | 2 |" in md
    err = capsys.readouterr().err
    if _has_matplotlib():
        assert (out / "scoreboard.png").stat().st_size > 1000
    else:
        assert "plot skipped: matplotlib is not installed" in err


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
