"""Reports from fixture JSON: tables, targets, and the two PNG figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zyfa_bench.report import build_report, ratio_text, summary_text, write_report

DATA = Path(__file__).parent / "data"
FILES = [DATA / "throughput_fixture.json", DATA / "accuracy_fixture.json"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _target(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {name} |"))


def test_targets_are_computed_from_the_rows():
    text, rows, ceilings = build_report(FILES)
    assert ceilings["fp8_gemm_tflops"] == 1234.0
    # Fixture at 16K: zyfa-fp8-exact 1050, cudnn-fp8 885, FP8 GEMM 1234, zyfa-bf16 600, fa4 632.
    line = _target(text, "FP8 d128 GQA vs cuDNN FP8 (FP8 out)")
    assert "| 1.19× (zyfa-fp8-exact) |" in line and "| met |" in line  # names the ZYFA variant it took
    assert "0.85×" in _target(text, "FP8 d128 GQA vs FP8 GEMM ceiling")
    line = _target(text, "BF16 d128 GQA vs the fastest BF16 peer")  # fastest: fa4 632 (cudnn 574, sdpa 339)
    assert "| 0.95× (zyfa-bf16 / fa4-bf16) |" in line and "| MISSED |" in line
    line = _target(text, "FP8 d128 GQA vs the fastest FP8 peer")
    assert "| 1.19× (zyfa-fp8-exact / cudnn-fp8) |" in line and "| met |" in line
    assert "1.43×" in _target(text, "FP8 192/128 vs cuDNN FP8 (FP8 out)")
    assert "1.75×" in _target(text, "ZYFA FP8 / ZYFA BF16, d128 GQA")
    assert "MISSED" in _target(text, "ZYFA FP8 / ZYFA BF16, 192/128")


def test_fa3_counts_as_the_fastest_peer(tmp_path):
    """FlashAttention-3 rows faster than every other peer become the denominator of the fastest-peer targets,
    of the pivot's "zyfa / best peer" and of the worst-seqlen line."""
    doc = json.loads((DATA / "throughput_fixture.json").read_text())
    extra = []
    for r in doc["rows"]:
        if r["impl"] in ("fa4-bf16", "cudnn-fp8") and r["shape"] == "gqa128" and r["status"] == "ok":
            fa3 = "fa3-bf16" if r["precision"] == "bf16" else "fa3-fp8"
            extra.append(
                {**r, "impl": fa3, "tflops": r["tflops"] * (700 / 632 if fa3 == "fa3-bf16" else 1000 / 885)}
            )
    doc["rows"] += extra
    path = tmp_path / "throughput.json"
    path.write_text(json.dumps(doc))
    text, _, _ = build_report([path])
    assert "| 0.86× (zyfa-bf16 / fa3-bf16) |" in _target(text, "BF16 d128 GQA vs the fastest BF16 peer")
    line = _target(text, "FP8 d128 GQA vs the fastest FP8 peer")  # 1050 / 1000
    assert "| 1.05× (zyfa-fp8-exact / fa3-fp8) |" in line and "| MISSED |" in line
    assert "| 1.19× (zyfa-fp8-exact) |" in _target(text, "FP8 d128 GQA vs cuDNN FP8 (FP8 out)")  # unchanged
    pivot = text.split("### gqa128, FP8")[1].split("###")[0]
    assert "| 1.05× |" in next(ln for ln in pivot.splitlines() if ln.startswith("| 16384 |"))


def test_pivot_and_details():
    text, _, _ = build_report(FILES)
    assert "### gqa128, FP8 — TFLOP/s (causal FLOPs)" in text
    pivot = text.split("### gqa128, FP8")[1].split("###")[0]
    line16k = next(line for line in pivot.splitlines() if line.startswith("| 16384 |"))
    assert "| 1050.0 |" in line16k and "1.19×" in line16k  # zyfa / best peer (cudnn-fp8)
    assert "unsupported: sdpa-flash: No available kernel." in text  # failures are shown, not dropped
    assert "## Accuracy" in text and "exact-attention-on-fp8-inputs" in text
    assert "Not measured" in text and "fa4-bf16" in text


def _relabelled(tmp_path: Path, workload: str, scale: float) -> Path:
    """The throughput fixture as if measured on another workload, every rate scaled by `scale`."""
    doc = json.loads((DATA / "throughput_fixture.json").read_text())
    for r in doc["rows"]:
        r["workload"] = workload
        if isinstance(r.get("tflops"), (int, float)):
            r["tflops"] *= scale
    path = tmp_path / f"throughput-{workload}.json"
    path.write_text(json.dumps(doc))
    return path


def test_each_workload_gets_its_own_tables_and_targets(tmp_path):
    # Kernel speed can depend on the data: rows of two workloads must not share a table.
    other = _relabelled(tmp_path, "model-like", 0.5)
    text, _, _ = build_report([DATA / "throughput_fixture.json", other])
    gauss = text.split("### gqa128, FP8")[1].split("###")[0]
    model = text.split("### gqa128 model-like, FP8")[1].split("###")[0]
    assert "| 1050.0 |" in next(ln for ln in gauss.splitlines() if ln.startswith("| 16384 |"))
    assert "| 525.0 |" in next(ln for ln in model.splitlines() if ln.startswith("| 16384 |"))
    # The same ratios, since every rate of both sides halved; the GEMM ceiling did not.
    assert "1.19×" in _target(text, "FP8 d128 GQA vs cuDNN FP8 (FP8 out) (model-like)")
    assert "0.43×" in _target(text, "FP8 d128 GQA vs FP8 GEMM ceiling (model-like)")
    assert "0.85×" in _target(text, "FP8 d128 GQA vs FP8 GEMM ceiling")
    assert "| gqa128 model-like fp8: ZYFA vs best peer, worst seqlen |" in text


def test_accuracy_medians_and_ranges():
    text, _, _ = build_report([DATA / "accuracy_fixture.json"])
    line = next(ln for ln in text.splitlines() if ln.startswith("| gaussian gqa128 | cudnn-fp8 | off |"))
    assert "0.0335 (0.033–0.034)" in line and line.endswith("| 2 |")


def test_accuracy_targets_and_rotation():
    text, _, _ = build_report([DATA / "accuracy_fixture.json"])
    section = text.split("## Accuracy targets")[1]
    # zyfa 0.0125 (median of 0.012, 0.013) vs cudnn 0.0335: 0.37x <= 0.5x
    line = next(
        ln for ln in section.splitlines() if ln.startswith("| gaussian gqa128 | zyfa-fp8-exact / cudnn-fp8")
    )
    assert "0.37×" in line and "| met |" in line
    # the floor halves with rotation in the fixture
    line = next(
        ln for ln in section.splitlines() if ln.startswith("| model-like gqa128 | exact-attention-on-fp8")
    )
    assert line.endswith("| 2.00× |")


def test_write_report_makes_two_pngs(tmp_path):
    written = write_report(FILES, tmp_path)
    assert set(written) == {"markdown", "throughput_png", "accuracy_png"}
    for key in ("throughput_png", "accuracy_png"):
        data = written[key].read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000
    md = written["markdown"].read_text()
    assert "![throughput](throughput.png)" in md and "![accuracy](accuracy.png)" in md


def test_summary_text_is_short():
    text = summary_text(FILES)
    assert "Throughput details" not in text and "FP8 d128 GQA vs cuDNN FP8" in text


def test_report_rejects_non_results(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(ValueError):
        build_report([bad])


@pytest.mark.parametrize(
    ("ratio", "need", "shown"),
    [
        (1.2097, 1.15, "1.21×"),  # clear of the target either way: two decimals
        (1.0466, 1.05, "1.047×"),  # "1.05×" would look met: three decimals
        (1.5997, 1.60, "1.5997×"),  # three decimals still round onto the target: four
        (0.9951, 1.00, "0.995×"),
        (1.0501, 1.05, "1.05×"),  # met and shown met
        (0.7949, 0.80, "0.79×"),  # "0.79×" is on the right side already
    ],
)
def test_a_ratio_near_its_target_shows_the_digit_that_decides(ratio, need, shown):
    assert ratio_text(ratio, need) == shown
