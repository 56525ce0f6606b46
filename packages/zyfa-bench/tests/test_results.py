"""Result files: schema, atomic rewrites after each row, JSON-safe values, environment capture."""

from __future__ import annotations

import json

import pytest
import torch

import zyfa_bench
from zyfa_bench.results import SCHEMA, ResultWriter, environment, kernel_build, load_results, versions


def test_writer_rewrites_after_each_row(tmp_path):
    path = tmp_path / "sub" / "r.json"
    w = ResultWriter(path, "throughput", {"device": {"name": "x"}})
    assert load_results(path)["rows"] == []
    w.add({"impl": "a", "tflops": 1.5, "bad": float("nan"), "inf": float("inf"), "t": torch.tensor([1, 2])})
    doc = json.loads(path.read_text())
    assert doc["schema"] == SCHEMA and doc["kind"] == "throughput"
    assert doc["rows"][0] == {"impl": "a", "tflops": 1.5, "bad": "nan", "inf": "inf", "t": [1, 2]}
    w.set("ceilings", {"fp8_gemm_tflops": 1234.0})
    assert load_results(path)["ceilings"]["fp8_gemm_tflops"] == 1234.0
    assert not list(path.parent.glob("*.tmp"))


def test_writer_in_memory():
    w = ResultWriter(None, "accuracy", {})
    w.add({"x": 1})
    assert w.rows == [{"x": 1}]


def test_load_rejects_foreign_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other", "kind": "throughput"}))
    with pytest.raises(ValueError, match="schema"):
        load_results(p)
    p.write_text(json.dumps({"schema": SCHEMA, "kind": "weird"}))
    with pytest.raises(ValueError, match="kind"):
        load_results(p)


def test_environment_names_versions_and_device():
    env = environment(torch.device("cpu"))
    assert env["device"]["backend"] == "cpu"
    assert env["versions"]["zyfa-bench"] == zyfa_bench.__version__ and env["versions"]["torch"]
    assert "flash-attn-4" in env["versions"] and "nvidia-cudnn-frontend" in versions()
    assert "torch" in {k.lower() for k in env["packages"]}


def _build(directory, digest):
    directory.mkdir()
    rows = [{"name": "k_sm90a", "sha256": digest}, {"name": "k_gfx950", "sha256": None}]
    (directory / "manifest.json").write_text(json.dumps({"abi_version": 7, "kernels": rows}))
    return directory


def test_environment_names_the_kernel_builds_it_timed(monkeypatch, tmp_path):
    """$ZYFA_KERNEL_DIR's build and a baseline build are named by directory and code-object sha256s; with
    neither, both are null (the installed zyfa-core's kernels, whose version the header names)."""
    new, base = _build(tmp_path / "new", "a" * 64), _build(tmp_path / "base", "b" * 64)
    monkeypatch.delenv("ZYFA_KERNEL_DIR", raising=False)
    assert environment(torch.device("cpu"))["kernels"] == {"zyfa": None, "baseline": None}
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(new))
    kernels = environment(torch.device("cpu"), baseline_kernels=str(base))["kernels"]
    want = {
        "dir": str(new.resolve()),
        "abi_version": 7,
        "code_objects": {"k_sm90a": "a" * 64, "k_gfx950": None},
    }
    assert kernels["zyfa"] == want
    assert kernels["baseline"]["dir"] == str(base.resolve())
    assert kernels["baseline"]["code_objects"]["k_sm90a"] == "b" * 64


@pytest.mark.parametrize("text", ["{not json", "{}", '{"kernels": [{"sha256": "x"}]}'])
def test_kernel_build_reports_a_manifest_it_cannot_read(tmp_path, text):
    (tmp_path / "manifest.json").write_text(text)
    got = kernel_build(tmp_path)
    assert got["dir"] == str(tmp_path.resolve()) and got["error"] and "code_objects" not in got
    assert kernel_build(tmp_path / "missing")["error"]
