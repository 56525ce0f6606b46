"""The command line on CPU: tiny problems through the CPU reference produce valid result files."""

from __future__ import annotations

import json
import re

import pytest

import zyfa_bench
from zyfa_bench.cli import build_parser, main
from zyfa_bench.flops import attention_flops
from zyfa_bench.results import load_results
from zyfa_bench.spec import Spec

TINY = ["--device", "cpu", "--shape", "4x2x32x32,2x2x48x32", "--quiet"]


def test_throughput_on_cpu_writes_valid_json(tmp_path, fake_zyfa_mod, capsys):
    out = tmp_path / "t.json"
    rc = main(
        [
            "throughput",
            *TINY,
            "--seqlens",
            "32,64",
            "--tokens",
            "128",
            "--repeats",
            "3",
            "--warmup",
            "1",
            "--impl",
            "zyfa,sdpa-math,cudnn-fp8,fa4-bf16",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    doc = load_results(out)
    assert doc["kind"] == "throughput" and doc["device"]["backend"] == "cpu"
    assert doc["settings"]["repeats"] == 3 and doc["versions"]["zyfa-bench"] == zyfa_bench.__version__
    assert {p["name"] for p in doc["peers"]} == {
        "zyfa-bf16",
        "zyfa-fp8-exact",
        "zyfa-fp8-lean",
        "zyfa-fp8-f16",
        "sdpa-math",
        "cudnn-fp8",
        "fa4-bf16",
    }
    rows = doc["rows"]
    assert len(rows) == 2 * 2 * 7  # 2 shapes x 2 seqlens x 7 implementations
    ok = [r for r in rows if r["status"] == "ok"]
    zyfa_impls = {"zyfa-bf16", "zyfa-fp8-exact", "zyfa-fp8-lean", "zyfa-fp8-f16"}
    assert {r["impl"] for r in ok} == zyfa_impls | {"sdpa-math"}
    for r in ok:
        spec = Spec(
            r["batch"], r["seqlen_q"], r["seqlen_k"], r["heads_q"], r["heads_kv"], r["d_qk"], r["d_v"]
        )
        assert r["batch"] == 128 // r["seqlen_q"]
        assert r["flops"] == attention_flops(spec)
        assert r["tflops"] == pytest.approx(r["flops"] / (r["ms"] * 1e-3) / 1e12)
        assert r["timing"]["method"] == "wall-clock" and r["timing"]["repeats"] == 3
        assert r["check_rel_l2"] < 1e-2  # the output slice matches float64
    skipped = {r["impl"]: r["reason"] for r in rows if r["status"] == "skipped"}
    # Skipped for lack of the package, or (where it is installed) for lack of a GPU.
    assert re.search("nvidia-cudnn-frontend|GPUs only", skipped["cudnn-fp8"])
    assert re.search("flash-attn-4|GPUs only", skipped["fa4-bf16"])
    printed = capsys.readouterr().out
    assert "TFLOP/s" in printed and "cudnn-fp8: skipped" in printed


def test_throughput_time_budget(tmp_path, fake_zyfa_mod):
    out = tmp_path / "t.json"
    main(
        [
            "throughput",
            *TINY,
            "--seqlens",
            "32",
            "--tokens",
            "32",
            "--impl",
            "zyfa-bf16",
            "--time-budget",
            "0",
            "--json",
            str(out),
        ]
    )
    rows = load_results(out)["rows"]
    assert rows and all(r["status"] == "skipped" and "time budget" in r["reason"] for r in rows)


def test_throughput_baseline_kernels_times_both_builds_in_one_run(tmp_path, fake_zyfa_mod, capsys):
    base = tmp_path / "before"
    base.mkdir()
    (base / "manifest.json").write_text("{}")
    out = tmp_path / "t.json"
    args = ["throughput", *TINY, "--seqlens", "32", "--tokens", "32", "--impl", "zyfa-bf16", "--repeats", "2"]
    assert main([*args, "--baseline-kernels", str(base), "--json", str(out)]) == 0
    rows = load_results(out)["rows"]
    assert {r["impl"] for r in rows if r["status"] == "ok"} == {"zyfa-bf16", "zyfa-bf16-baseline"}
    assert {c["kernel_dir"] for c in fake_zyfa_mod.calls} == {None, str(base.resolve())}
    assert load_results(out)["kernels"]["baseline"]["dir"] == str(base.resolve())  # its manifest: "{}"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*args, "--baseline-kernels", str(tmp_path / "missing")])
    assert exc.value.code == 2 and "holds no manifest.json" in capsys.readouterr().err


def test_throughput_rounds_option(tmp_path, fake_zyfa_mod, capsys):
    out = tmp_path / "t.json"
    args = ["throughput", *TINY, "--seqlens", "32", "--tokens", "32", "--impl", "zyfa-bf16,sdpa-math"]
    assert main([*args, "--repeats", "4", "--rounds", "2", "--warmup", "1", "--json", str(out)]) == 0
    doc = load_results(out)
    assert doc["settings"]["rounds"] == 2
    ok = [r for r in doc["rows"] if r["status"] == "ok"]
    assert ok and all(r["timing"]["rounds"] == 2 and r["timing"]["repeats"] == 4 for r in ok)
    capsys.readouterr()
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit) as exc:
            main([*args, "--rounds", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "argument --rounds" in err and ("must be an integer >= 1" in err or "not an integer" in err)
    with pytest.raises(SystemExit):
        main([*args, "--repeats", "0"])
    assert "argument --repeats: must be an integer >= 1, got 0" in capsys.readouterr().err


def test_accuracy_on_cpu_writes_valid_json(tmp_path, fake_zyfa_mod, capsys):
    out = tmp_path / "a.json"
    rc = main(
        [
            "accuracy",
            "--device",
            "cpu",
            "--shape",
            "4x2x32x32",
            "--seqlens",
            "40",
            "--quiet",
            "--impl",
            "zyfa",
            "--workload",
            "gaussian,model-like",
            "--seeds",
            "2",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    doc = load_results(out)
    assert doc["kind"] == "accuracy" and doc["seeds"]["list"] == [0, 1]
    # 2 workloads x 2 seeds x (1 bf16 + 2 rotations x (3 fp8 p_modes + floor))
    assert len(doc["rows"]) == 2 * 2 * (1 + 2 * 4)
    assert all(r["status"] == "ok" for r in doc["rows"])
    assert "rel L2 vs dequant" in capsys.readouterr().out


def test_report_command(tmp_path, capsys):
    from pathlib import Path

    data = Path(__file__).parent / "data"
    rc = main(
        [
            "report",
            str(data / "throughput_fixture.json"),
            str(data / "accuracy_fixture.json"),
            "--out",
            str(tmp_path),
            "--print",
        ]
    )
    assert rc == 0
    assert (tmp_path / "report.md").exists() and (tmp_path / "throughput.png").exists()
    assert "FP8 d128 GQA vs cuDNN FP8" in capsys.readouterr().out


def test_peers_command(capsys, fake_zyfa_mod):
    assert main(["peers"]) == 0
    out = capsys.readouterr().out
    assert "zyfa-fp8-lean" in out and "cudnn-fp8" in out and "aiter-fp8" in out


def test_bad_values_exit_2(capsys, fake_zyfa_mod):
    assert main(["throughput", "--device", "cpu", "--impl", "nope", "--quiet"]) == 2
    assert "unknown implementation" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # a bad shape now stops the parse
        main(["throughput", "--device", "cpu", "--shape", "weird", "--quiet"])
    assert exc.value.code == 2 and "unknown shape 'weird'" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", ["throughput", "accuracy", "serving", "clocks", "capture", "report", "peers"])
def test_help_explains_each_option(cmd, capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[cmd]
    for action in sub._actions:
        assert action.help and len(action.help) > 8, (
            f"{cmd}: {action.option_strings or action.dest} has no help"
        )
    with pytest.raises(SystemExit) as exc:
        parser.parse_args([cmd, "--help"])
    assert exc.value.code == 0 and "usage: zyfa-bench" in capsys.readouterr().out


def test_clocks_on_cpu_without_a_source(tmp_path, fake_zyfa_mod):
    out = tmp_path / "c.json"
    rc = main(
        [
            "clocks",
            "--device",
            "cpu",
            "--shape",
            "4x2x32x32",
            "--seqlen",
            "32",
            "--tokens",
            "64",
            "--impl",
            "zyfa-bf16",
            "--seconds",
            "0.2",
            "--source",
            "none",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    doc = json.loads(out.read_text())
    row = doc["rows"][0]
    assert row["status"] == "ok" and row["tflops"] > 0 and row["clocks"]["samples"] == 0
    assert doc["clocks"]["source"] == "none"


@pytest.mark.gpu
def test_throughput_on_gpu(tmp_path):
    out = tmp_path / "g.json"
    rc = main(
        [
            "throughput",
            "--device",
            "cuda",
            "--shape",
            "32x8x128x128",
            "--seqlens",
            "1024",
            "--tokens",
            "4096",
            "--impl",
            "sdpa-flash,sdpa-efficient",
            "--precision",
            "bf16",
            "--repeats",
            "5",
            "--no-ceilings",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    rows = load_results(out)["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(r["timing"]["method"] == "device-events" and r["check_rel_l2"] < 2e-2 for r in ok)


def test_cpu_reference_end_to_end(tmp_path):
    """With the real zyfa installed, CPU tensors run zyfa.reference (the kernels' numerics) end to end."""
    try:
        import zyfa  # noqa: F401
    except Exception as exc:  # not installed here (the fake-based tests above still cover the harness)
        pytest.skip(f"the real zyfa (zyfa-torch) is not importable: {exc}")
    t, a = tmp_path / "t.json", tmp_path / "a.json"
    # zyfa's kernels (and so its reference path) serve (d_qk, d_v) = (128, 128) and (192, 128).
    common = ["--device", "cpu", "--quiet", "--shape", "2x1x128x128,2x2x192x128", "--impl", "zyfa"]
    sweep = ["--seqlens", "48", "--tokens", "48", "--repeats", "2", "--warmup", "1", "--json", str(t)]
    assert main(["throughput", *common, *sweep]) == 0
    rows = load_results(t)["rows"]
    assert {r["status"] for r in rows} == {"ok"} and all(r["check_rel_l2"] < 5e-2 for r in rows)
    assert main(["accuracy", *common, "--seqlens", "80", "--json", str(a)]) == 0
    for r in load_results(a)["rows"]:
        assert r["status"] == "ok"
        # BF16: output rounding; FP8: e4m3 P and rounded row sums (the kernels' own error) stay in 5e-2.
        assert r["rel_l2_vs_dequant"] < (1e-2 if r["precision"] == "bf16" else 5e-2)


BAD_ARGS = [
    (["throughput", "--seqlens", "0"], "must be an integer >= 1, got 0"),
    (["throughput", "--seqlens", ","], "needs at least one integer"),
    (["throughput", "--tokens", "-4"], "must be an integer >= 1"),
    (["throughput", "--precision", "fp16"], "fp16 not accepted; use a comma-separated list of bf16, fp8"),
    (["throughput", "--time-budget", "-5"], "must be a number >= 0, got -5"),
    (["throughput", "--time-budget", "nan"], "must be finite"),
    (["throughput", "--warmup", "-1"], "must be an integer >= 0"),
    (["throughput", "--shape", "0x2x32x32"], "every size must be >= 1"),
    (["throughput", "--shape", "6x4x32x32"], "HQ a multiple of HKV"),
    (["throughput", "--device", "tpu"], "unsupported device 'tpu': use cpu, cuda or cuda:N"),
    (["accuracy", "--seeds", "0"], "must be an integer >= 1, got 0"),
    (["accuracy", "--rotate", "maybe"], "maybe not accepted; use a comma-separated list of off, on"),
    (["clocks", "--seqlen", "0"], "must be an integer >= 1, got 0"),
    (["clocks", "--seconds", "-1"], "must be a number > 0, got -1"),
    (["clocks", "--source", "foo"], "invalid choice: 'foo'"),
    (["clocks", "--shape", "gqa128,mla192"], "one head shape here"),
    (["clocks", "--interval-ms", "0"], "must be a number > 0"),
]


@pytest.mark.parametrize(
    ("argv", "message"), BAD_ARGS, ids=lambda x: " ".join(x) if isinstance(x, list) else ""
)
def test_bad_arguments_are_refused_before_any_work(argv, message, capsys, monkeypatch):
    """Each bad value stops the parse (exit 2) with a message naming it; nothing is measured or written."""
    import zyfa_bench.cli as cli

    monkeypatch.setattr(cli, "cmd_throughput", lambda _a: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--device", "cpu"] if "--device" not in argv else argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_json_needs_an_existing_directory(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "dir" / "r.json"
    with pytest.raises(SystemExit) as exc:
        main(["throughput", *TINY, "--seqlens", "32", "--json", str(missing)])
    assert exc.value.code == 2 and "does not exist; create it first" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
    with pytest.raises(SystemExit):
        main(["accuracy", *TINY, "--json", str(tmp_path)])
    assert "is a directory" in capsys.readouterr().err


def test_cuda_device_without_a_gpu_exits_2(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["throughput", "--device", "cuda", "--quiet"]) == 2
    assert "no CUDA or ROCm GPU is visible" in capsys.readouterr().err


def test_nothing_measured_exits_1(tmp_path, fake_zyfa_mod, capsys):
    """A time budget of 0 starts nothing, and an implementation that is unavailable measures nothing:
    both leave their rows in the file and exit 1."""
    out = tmp_path / "t.json"
    args = ["throughput", *TINY, "--seqlens", "32", "--tokens", "32", "--impl", "zyfa-bf16"]
    assert main([*args, "--time-budget", "0", "--json", str(out)]) == 1
    assert "nothing was measured" in capsys.readouterr().err
    assert load_results(out)["rows"]
    acc = ["accuracy", *TINY, "--seqlens", "32", "--impl", "fa4-bf16", "--workload", "gaussian"]
    assert main(acc) == 1
    clocks = ["clocks", "--device", "cpu", "--shape", "4x2x32x32", "--seqlen", "32", "--tokens", "32"]
    assert main([*clocks, "--impl", "fa4-bf16", "--seconds", "0.1", "--source", "none", "--quiet"]) == 1
