"""Print the timing model's calibration figures quoted in docs/simulator.md (all MODELLED).

    PYTHONPATH=packages/zyfa-asmgen/src:packages/zyfa-asmgen/tests python -m sim.calibration

Dense MFMA loops against the published peaks, and the synthetic FP8 attention loop of
timing_kernels.py against the AITER sanity point (39% of the FP8 peak at 32K tokens).
"""

from __future__ import annotations

from dataclasses import replace

from zyfa_asmgen.sim.timing import MI355X

from .timing_kernels import chip_tflops, fa_fp8_utilisation, kernel, timed

DENSE = {
    "bf16 v_mfma_f32_32x32x16_bf16": ("  v_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], v[0:15]",
                                      ("v_mfma_f32_32x32x16_bf16", 32, 32, 16)),
    "fp8 v_mfma_f32_32x32x64_f8f6f4": ("  v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15]",
                                       ("v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64)),
}  # fmt: skip


def main() -> None:
    """Print the table."""
    print("dense MFMA loop (8 chained MFMAs per iteration), modelled TFLOP/s on the whole chip:")
    for name, (mfma, peak) in DENSE.items():
        for nv, waves in ((512, 1), (32, 8)):
            _, cu = timed(kernel("\n".join([mfma] * 8), iters=16, nv=nv))
            tf = chip_tflops(cu)
            print(f"  {name}, {waves} wave(s)/SIMD: {tf:.0f} of {MI355X.mfma_peak_tflops(*peak):.0f} "
                  f"({100 * tf / MI355X.mfma_peak_tflops(*peak):.1f}%)")  # fmt: skip
    print("synthetic FP8 attention loop (d=128, 32 rows x 64 keys per wave-iteration), % of FP8 peak:")
    for p_mode in ("exact", "lean"):
        for lds in (True, False):
            for w in (None, 1):
                u = fa_fp8_utilisation(p_mode, lds, w)
                print(f"  p {p_mode}, K/V {'from LDS' if lds else 'in registers'}, "
                      f"{'2 (occupancy)' if w is None else w} wave(s)/SIMD: {100 * u:.1f}%")  # fmt: skip
    fast = replace(MI355X, quarter_cycles=8)
    print(f"  what if v_exp_f32 were half rate: exact {100 * fa_fp8_utilisation('exact', spec=fast):.1f}%")


if __name__ == "__main__":
    main()
