"""tools/device/bits_compare.py without a GPU: its comparison must catch one flipped bit and a missing
case, and its cases must run end to end (here on the CPU reference, at small sizes)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("zyfa")

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "device"))
import bits_compare  # noqa: E402


def _results() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(random.randrange(2**31))
    return {
        name: (torch.randn(3, 5, 8, generator=g).to(torch.bfloat16), torch.randn(5, 3, generator=g))
        for name in ("dense-a", "varlen-b")
    }


def test_compare_finds_one_flipped_bit_and_a_missing_case(tmp_path: Path, capsys) -> None:
    a = _results()
    torch.save(a, tmp_path / "a.pt")
    torch.save({k: (o.clone(), lse.clone()) for k, (o, lse) in a.items()}, tmp_path / "same.pt")
    assert bits_compare.main(["compare", str(tmp_path / "a.pt"), str(tmp_path / "same.pt")]) == 0
    assert "bits: all identical" in capsys.readouterr().out

    flipped = {k: (o.clone(), lse.clone()) for k, (o, lse) in a.items()}
    bits = flipped["varlen-b"][0].view(torch.int16).view(-1)
    i = random.randrange(bits.numel())
    bits[i] ^= 1 << random.randrange(16)
    del flipped["dense-a"]
    torch.save(flipped, tmp_path / "b.pt")
    assert bits_compare.main(["compare", str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]) == 1
    out = capsys.readouterr().out
    assert "varlen-b: DIFFERENT (1 elements)" in out
    assert f"dense-a: only in {tmp_path / 'a.pt'}" in out
    assert "bits: 2 of 2 cases differ" in out


def test_every_case_runs_and_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bits_compare, "DENSE", ((1, 70),))
    monkeypatch.setattr(bits_compare, "PACKED_LENS", (1, 0, 70))
    monkeypatch.setattr(bits_compare, "PAGED_LENS", (1, 0, 70))
    monkeypatch.setattr(bits_compare, "PAGED_PREFIX", 64)
    monkeypatch.setattr(bits_compare, "SHAPES", (("small", 4, 2, 128, 128),))
    bits_compare.main(["save", str(tmp_path / "cpu.pt"), "--device", "cpu"])
    saved = torch.load(tmp_path / "cpu.pt")
    assert sorted(saved) == sorted(
        ["dense-small-1x70", "dense-fp8-lean-small-1x70", "varlen-bf16-small", "varlen-fp8-small",
         "paged-bf16-small", "paged-fp8-small"]
    )  # fmt: skip
    assert saved["paged-fp8-small"][0].shape == (71, 4, 128)
    assert all(torch.isfinite(out.float()).all() for out, _ in saved.values())
