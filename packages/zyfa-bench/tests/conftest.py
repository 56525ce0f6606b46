"""Shared fixtures of zyfa-bench's tests (CPU only unless marked gpu)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

import fake_zyfa  # noqa: E402


@pytest.fixture
def fake_zyfa_mod(monkeypatch):
    """The fake `zyfa` module installed for this test."""
    return fake_zyfa.install(monkeypatch)


@pytest.fixture
def no_cuda_stream(monkeypatch):
    """Adapters bind libraries to torch's current stream; CPU-only torch has none, so give a dummy."""
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: types.SimpleNamespace(cuda_stream=0))


@pytest.fixture
def cpu() -> torch.device:
    return torch.device("cpu")


HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    """Skip this package's `gpu` tests without a device (other packages' items are left alone)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm device")
    for item in items:
        if "gpu" in item.keywords and HERE in Path(str(item.path)).parents:
            item.add_marker(skip)
