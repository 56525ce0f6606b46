"""What a user learns about an incomplete install or a machine without a GPU: a missing zyfa._C is
reported (zyfa.hot_path, and a warning at import where a GPU is present), and `python -m zyfa.overhead`
on a machine without a GPU ends with a message and status 2, not a traceback."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import zyfa


def test_hot_path_names_a_path():
    path = zyfa.hot_path()
    assert path == "C++ (zyfa._C)" or path.startswith("Python ("), path


def test_missing_extension_warns_only_with_a_gpu(monkeypatch):
    missing = "Python (zyfa._C is not built (No module named 'zyfa._C'); install with `...`)"
    monkeypatch.setattr(zyfa, "hot_path", lambda: missing)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.warns(RuntimeWarning, match="--no-build-isolation"):
        zyfa._warn_without_extension()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zyfa._warn_without_extension()  # a CPU machine needs no extension: quiet
    monkeypatch.setattr(zyfa, "hot_path", lambda: "Python (ZYFA_NO_CPP is set)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zyfa._warn_without_extension()  # an explicit opt-out: quiet


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_overhead_without_a_gpu_says_so():
    run = subprocess.run([sys.executable, "-m", "zyfa.overhead"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "needs a CUDA or ROCm GPU" in run.stderr and "Traceback" not in run.stderr
