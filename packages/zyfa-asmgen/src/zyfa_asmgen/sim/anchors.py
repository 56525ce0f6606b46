"""Published MI355X speeds of AITER's gfx950 BF16 attention kernels: the timing model's calibration
points, each with its source, and the modelled / published comparison.

FLOP convention of every figure: 2 x B x H x Sq x Sk x (d_qk + d_v), halved when causal (the
sources use the same). A derived point says how it was derived.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .cli import Shape
from .modelled import aiter_contender
from .timing import MI355X, MachineModel


@dataclass(frozen=True)
class Anchor:
    """One published figure: AITER code object, shapes (averaged when several), TFLOP/s, source."""

    kernel: str  # code object file name
    shapes: tuple[Shape, ...]
    tflops: float
    source: str


ANCHORS = (
    Anchor("fwd_hd128_bf16.co", (Shape(1, 75600, 75600, 5, 5),), 1196.0,
           "AITER asm BF16, b1 h5 s75600 non-causal: ROCm/aiter PR #3495"),
    Anchor("fwd_hd192_hd128_bf16_causal.co", (Shape(1, 16384, 16384, 16, 16),), 1288.0,
           "AITER asm BF16 d=192/128 default fmha_v3_fwd, b1 s16384 h16 causal: ROCm/aiter PR #4205"),
    Anchor("fwd_hd128_bf16_causal.co", (Shape(16, 8192, 8192, 16, 16), Shape(32, 8192, 8192, 8, 8)), 1015.0,
           "AITER asm BF16 causal average, derived from ROCm/FlyDSL PR #225: aiter_ck causal 869.7 and "
           "857.2 TF at these shapes; FlyDSL = 98.7% of aiter_ck's causal average and 84% of aiter_asm's, "
           "so aiter_asm = 0.987 x 863.45 / 0.84"),
)  # fmt: skip


def calibrate(
    aiter_dir: Path, spec: MachineModel = MI355X, anchors: tuple[Anchor, ...] = ANCHORS
) -> list[dict]:
    """Model every anchor whose code object is in aiter_dir: one row each (modelled, published, ratio)."""
    rows = []
    for a in anchors:
        path = aiter_dir / a.kernel
        if not path.is_file():
            rows.append({"kernel": a.kernel, "missing": f"{path} not found", "source": a.source})
            continue
        c = aiter_contender(path, spec=spec)
        modelled = sum(c.launch(s).tflops for s in a.shapes) / len(a.shapes)
        rows.append({
            "kernel": a.kernel, "shapes": [str(s) for s in a.shapes], "modelled_tflops": modelled,
            "published_tflops": a.tflops, "ratio": modelled / a.tflops, "source": a.source,
            "fits": {str(k): (v.a, v.b, v.slots) for k, v in c.fits.items()},  # type: ignore[attr-defined]
        })  # fmt: skip
    return rows


def format_calibration(rows: list[dict]) -> list[str]:
    """A markdown table of the calibration rows."""
    out = ["| AITER kernel | shape(s) | modelled TFLOP/s | published TFLOP/s | ratio | source |",
           "|---|---|---:|---:|---:|---|"]  # fmt: skip
    for r in rows:
        if "missing" in r:
            out.append(f"| `{r['kernel']}` | — | — | — | — | {r['missing']} |")
            continue
        shapes = "; ".join(r["shapes"])
        out.append(f"| `{r['kernel']}` | {shapes} | {r['modelled_tflops']:.0f} (MODELLED) | "
                   f"{r['published_tflops']:.0f} | {r['ratio']:.2f} | {r['source']} |")  # fmt: skip
    return out
