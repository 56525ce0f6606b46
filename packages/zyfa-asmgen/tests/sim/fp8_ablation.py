"""MODELLED figures of the gfx950 FP8 kernel (generator mfma_fp8) and the value of its schedule ideas.

Run from the repository root:

    PYTHONPATH=packages/zyfa-asmgen/src:packages/zyfa-asmgen/tests python -m sim.fp8_ablation

For each configuration it generates the kernel, runs `zyfa-asmgen sim` on seqlen 512 (one head; the
query tiles are traced and replayed by the timing model) and prints one markdown row: the fitted
cycles of one workgroup at full occupancy, a + b x key blocks (a: prologue, diagonal block and
epilogue; b: one unmasked block), the steady-state matrix-core busy share b implies (MFMA cycles of
a block x workgroups per CU / (b x 4 SIMDs)), and the modelled TFLOP/s of a causal launch at 16K
(2 x 16K tokens; d=128 GQA 32/8, 192/128 with 16 heads). Every figure is from the timing model,
which is calibrated against AITER's published MI355X speeds, not measured on one.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from pathlib import Path

from asmgen_testlib import ABI_HEADER, read_variants

from zyfa_asmgen.__main__ import main
from zyfa_asmgen.abi import parse_abi_header
from zyfa_asmgen.generators import mfma_fp8
from zyfa_asmgen.variant import Variant

MFMA_CYCLES = 16 * 4  # v_mfma_f32_32x32x64_f8f6f4: 16 passes of 4 cycles
ROW_SUM_CYCLES = 8 * 4  # v_mfma_f32_16x16x128_f8f6f4 (the row-sum MFMA): 8 passes
LAUNCH = {128: "2,16384,16384,32,8", 192: "2,16384,16384,16,16"}
LEAN128, EXACT128 = "fa_fwd_e4m3fn_hd128_causal_leanp_gfx950", "fa_fwd_e4m3fn_hd128_causal_gfx950"
LEAN192, EXACT192 = "fa_fwd_e4m3fn_hd192x128_causal_leanp_gfx950", "fa_fwd_e4m3fn_hd192x128_causal_gfx950"
Opt = mfma_fp8.Options
SHIPPED = Opt()
CONFIGS = [  # (variant name, waves, options, label)
    (LEAN128, 2, SHIPPED, "lean, 2 waves, MFMA row sums (shipped)"),
    (LEAN128, 2, Opt(pipeline=True), "lean, 2 waves, pipelined (P.V one block later), MFMA row sums"),
    (LEAN128, 2, Opt(pipeline=True, setprio=True), "lean, 2 waves, pipelined, MFMA row sums, s_setprio"),
    (LEAN128, 2, Opt(mfma_row_sum=False), "lean, 2 waves, VALU row sums"),
    (LEAN128, 2, Opt(share_k_operand=True), "lean, 2 waves, MFMA row sums, shared K operand"),
    (LEAN128, 1, SHIPPED, "lean, 1 wave (tile 32 x 64), MFMA row sums"),
    (LEAN128, 4, SHIPPED, "lean, 4 waves (tile 128 x 64), MFMA row sums"),
    (LEAN128, 8, SHIPPED, "lean, 8 waves (tile 256 x 64), two groups in a ping-pong, MFMA row sums"),
    (LEAN128, 8, Opt(pingpong=False), "lean, 8 waves (tile 256 x 64) in step, MFMA row sums"),
    (EXACT128, 2, SHIPPED, "exact, 2 waves, VALU row sums (shipped)"),
    (EXACT128, 2, Opt(pipeline=True), "exact, 2 waves, pipelined, VALU row sums"),
    (LEAN192, 2, SHIPPED, "lean, 2 waves, pipelined, MFMA row sums, shared K operand (shipped)"),
    (LEAN192, 2, Opt(pipeline=False), "lean, 2 waves, MFMA row sums, shared K operand"),
    (LEAN192, 2, Opt(share_k_operand=False), "lean, 2 waves, pipelined, MFMA row sums"),
    (LEAN192, 2, Opt(mfma_row_sum=False), "lean, 2 waves, pipelined, VALU row sums"),
    (EXACT192, 2, SHIPPED, "exact, 2 waves, VALU row sums (shipped)"),
]


def run_one(name: str, waves: int, opts: mfma_fp8.Options) -> dict[str, float]:
    """Model one configuration; returns a, b, slots, busy and TFLOP/s at 16K."""
    entry = {
        **next(v for v in read_variants() if v["name"] == name),
        "tile_m": 32 * waves,
        "threads": 64 * waves,
    }
    abi = parse_abi_header(ABI_HEADER)
    asm = mfma_fp8.generate_with_operands(Variant.from_dict(entry), abi, opts)[0]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "manifest.json").write_text(json.dumps({"kernels": [entry]}))
        Path(tmp, f"{name}.s").write_text(asm)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            args = [
                "--manifest-dir",
                tmp,
                "--abi-header",
                str(ABI_HEADER),
                "--seqlen-q",
                "512",
                "--heads-q",
                "1",
            ]
            args += ["--heads-kv", "1", "--seed", "1", "--launch-shape", LAUNCH[entry["d_qk"]]]
            rc = main(["sim", name, *args])
    text = out.getvalue()
    if rc != 0:
        raise RuntimeError(f"{name} ({waves} waves, {opts}) did not pass:\n{text}")
    a = float(re.search(r"a = (-?\d+), b = ", text).group(1))
    b = float(re.search(r"b = (\d+) modelled cycles/block", text).group(1))
    slots = int(re.search(r"(\d+) workgroups share a CU", text).group(1))
    tflops = float(re.findall(r"([\d.e+]+) TFLOP/s MODELLED", text)[-1])
    cycles = (2 * entry["d_qk"] // 64 + entry["d_v"] // 32) * MFMA_CYCLES
    cycles += ROW_SUM_CYCLES * opts.row_sum_on_mfma(entry["p_mode"], entry["d_qk"])
    busy = waves * cycles * slots / (b * 4)
    return {"a": a, "b": b, "slots": slots, "busy": busy, "tflops": tflops}


def main_table() -> None:
    """Print the markdown table."""
    print("| kernel | configuration | a (cycles) | b: cycles / key block / workgroup | workgroups / CU "
          "| MFMA busy (steady) | TFLOP/s at 16K |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, waves, opts, label in CONFIGS:
        r = run_one(name, waves, opts)
        busy = f"{100 * r['busy']:.0f} %"
        cells = [
            f"`{name}`",
            label,
            f"{r['a']:.0f}",
            f"{r['b']:.0f}",
            str(r["slots"]),
            busy,
            f"{r['tflops']:.0f}",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main_table()
