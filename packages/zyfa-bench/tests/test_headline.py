"""The headline tables of a run (zyfa_bench.headline) from fixture JSON: what the benchmark index quotes."""

from __future__ import annotations

import json
from pathlib import Path

from zyfa_bench.headline import tables_of
from zyfa_bench.report import build_report, summary_text

DATA = Path(__file__).parent / "data"
THROUGHPUT, ACCURACY = DATA / "throughput_fixture.json", DATA / "accuracy_fixture.json"


def _model_like(tmp_path: Path, scale: float) -> Path:
    """The throughput fixture as a model-like sweep, every rate scaled, its GEMM ceilings doubled (the
    report must keep the first file's)."""
    doc = json.loads(THROUGHPUT.read_text())
    for r in doc["rows"]:
        r["workload"] = "model-like"
        if isinstance(r.get("tflops"), (int, float)):
            r["tflops"] *= scale
    doc["ceilings"] = {k: 2 * v for k, v in doc["ceilings"].items()}
    path = tmp_path / "throughput-model-like.json"
    path.write_text(json.dumps(doc))
    return path


def _headline(paths: list[Path]) -> list[list[str]]:
    text, _, _ = build_report(paths)
    section = text.split("## Headline")[1].split("\n## ")[0]
    return [t.splitlines() for t in tables_of(section)]


def _line(table: list[str], start: str) -> str:
    return next(ln for ln in table if ln.startswith(start))


def test_tflops_at_16k_per_shape_and_workload(tmp_path):
    tflops, _ = _headline([THROUGHPUT, _model_like(tmp_path, 0.5)])
    assert tflops[0] == (
        "| shape | workload | zyfa-bf16 | zyfa-fp8 exact / lean | fa4-bf16 | cudnn-bf16 | sdpa-flash "
        "| cudnn-fp8 |"
    )
    assert (
        _line(tflops, "| gqa128 | gaussian |")
        == "| gqa128 | gaussian | 600 | 1050 / 1000 | 632 | 574 | 339 | 885 |"
    )
    # No lean kernel and an unsupported sdpa-flash at 192/128: shown as missing, not dropped or zero.
    assert (
        _line(tflops, "| mla192 | gaussian |") == "| mla192 | gaussian | 650 | 900 / – | 664 | – | – | 630 |"
    )
    assert (
        _line(tflops, "| gqa128 | model-like |")
        == "| gqa128 | model-like | 300 | 525 / 500 | 316 | 287 | 170 | 442 |"
    )


def test_targets_per_workload_and_one_verdict(tmp_path):
    _, targets = _headline([THROUGHPUT, _model_like(tmp_path, 0.5)])
    assert targets[0] == "| target | seqlen | gaussian | model-like | needed |  |"
    # Ratios between two kernels keep when every rate halves; the ratio to the GEMM ceiling (the first
    # file's, 1234) halves with them: met on Gaussian inputs only.
    assert _line(targets, "| FP8 d128 GQA vs cuDNN FP8") == (
        "| FP8 d128 GQA vs cuDNN FP8 (FP8 out) | 16384 | 1.19× (zyfa-fp8-exact) | 1.19× (zyfa-fp8-exact) "
        "| ≥ 1.15× | met |"
    )
    assert _line(targets, "| FP8 d128 GQA vs FP8 GEMM") == (
        "| FP8 d128 GQA vs FP8 GEMM ceiling | 16384 | 0.85× (zyfa-fp8-exact) | 0.43× (zyfa-fp8-exact) "
        "| ≥ 0.80× | met on gaussian only |"
    )
    assert _line(targets, "| BF16 d128 GQA vs the fastest BF16 peer") == (
        "| BF16 d128 GQA vs the fastest BF16 peer | 16384 | 0.95× (zyfa-bf16 / fa4-bf16) "
        "| 0.95× (zyfa-bf16 / fa4-bf16) | ≥ 1.05× | MISSED |"
    )
    # BF16 d128 trails FA4 at every seqlen in the fixture; its worst is 2K (0.949).
    assert _line(targets, "| gqa128 BF16 vs the best peer") == (
        "| gqa128 BF16 vs the best peer, worst seqlen | 2048-32768 | 0.95× at 2048 | 0.95× at 2048 "
        "| ≥ 1.00× | MISSED |"
    )


def test_fp8_errors_with_their_ratio_to_cudnn():
    (errors,) = _headline([ACCURACY])
    assert errors[0] == (
        "| shape | impl | gaussian rel L2 | gaussian / cudnn-fp8 | gaussian / most accurate peer "
        "| model-like rel L2 | model-like / cudnn-fp8 | model-like / most accurate peer |"
    )
    # Medians over the two seeds: 0.0125 and 0.0335; rotation-on rows and BF16 rows are not in it.
    assert errors[2:] == [
        "| gqa128 | zyfa-fp8-exact | 1.25e-2 | 0.37× | 0.37× cudnn-fp8 | 1.25e-2 | 0.37× | 0.37× cudnn-fp8 |",
        "| gqa128 | cudnn-fp8 | 3.35e-2 | – | – | 3.35e-2 | – | – |",
    ]


def test_fp8_errors_against_the_most_accurate_peer(tmp_path):
    """An FP8 peer more accurate than cuDNN (FA3's BF16-out FP8, say) becomes the reference of that column."""
    doc = json.loads(ACCURACY.read_text())
    extra = [
        {**r, "impl": "fa3-fp8", "rel_l2_vs_dequant": r["rel_l2_vs_dequant"] / 3}
        for r in doc["rows"]
        if r["impl"] == "cudnn-fp8" and r["workload"] == "gaussian"
    ]
    doc["rows"] += extra
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps(doc))
    (errors,) = _headline([path])
    # Gaussian: fa3-fp8 0.0335 / 3 = 0.01117 beats zyfa's 0.0125 (1.12x); model-like has cuDNN only.
    assert _line(errors, "| gqa128 | zyfa-fp8-exact |") == (
        "| gqa128 | zyfa-fp8-exact | 1.25e-2 | 0.37× | 1.12× fa3-fp8 | 1.25e-2 | 0.37× | 0.37× cudnn-fp8 |"
    )
    assert _line(errors, "| gqa128 | fa3-fp8 |") == "| gqa128 | fa3-fp8 | 1.12e-2 | 0.33× | – | – | – | – |"
    text, _, _ = build_report([path])
    line = _line(text.splitlines(), "| gaussian gqa128 | zyfa-fp8-exact / most accurate FP8 peer, fa3-fp8")
    assert line.endswith("| 1.12× | ≤ 1.00× | MISSED |")


def test_the_console_summary_ends_with_the_headline():
    text = summary_text([THROUGHPUT, ACCURACY])
    # Last, so a log that keeps only the output's tail still holds it.
    assert text.rstrip().splitlines()[-1] == "| gqa128 | cudnn-fp8 | 3.35e-2 | – | – | 3.35e-2 | – | – |"


def test_a_run_without_the_targets_seqlen_says_so(tmp_path):
    doc = json.loads(THROUGHPUT.read_text())
    doc["rows"] = [r for r in doc["rows"] if r["seqlen_q"] != 16384]
    path = tmp_path / "throughput.json"
    path.write_text(json.dumps(doc))
    text, _, _ = build_report([path])
    section = text.split("## Headline")[1].split("\n## ")[0]
    assert "No throughput row at seqlen 16384, the targets' seqlen." in section
    (targets,) = [t.splitlines() for t in tables_of(section)]  # no empty TFLOP/s table
    assert _line(targets, "| FP8 d128 GQA vs cuDNN FP8").endswith("| – | ≥ 1.15× | no data |")


def test_the_caption_names_each_ceiling_and_how_it_was_measured(tmp_path):
    doc = json.loads(THROUGHPUT.read_text())
    doc["ceilings"].update(
        {"fp8_gemm_sm_mhz": 1750.0, "fp8_gemm_burst_tflops": 1471.0, "fp8_gemm_burst_sm_mhz": 1980.0}
    )
    path = tmp_path / "throughput.json"
    path.write_text(json.dumps(doc))
    text, _, _ = build_report([path])
    want = (
        "GEMM ceilings in the run: BF16 678, one burst; FP8 1234 at 1750 MHz, sustained (burst 1471 at 1980"
    )
    assert want in text
