"""The benchmark index (zyfa_bench.index) from fixture JSON: a run folder's block written, replaced in place
and checked, and `zyfa-bench report --index` on a folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from zyfa_bench.cli import main
from zyfa_bench.index import expand_paths, index_block, run_files, stale_blocks, update_index

DATA = Path(__file__).parent / "data"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run folder as a device run leaves it: throughput.json, throughput-model-like.json, accuracy.json."""
    folder = tmp_path / "bench" / "h200-2026-01-01"
    folder.mkdir(parents=True)
    shutil.copy(DATA / "throughput_fixture.json", folder / "throughput.json")
    shutil.copy(DATA / "throughput_fixture.json", folder / "throughput-model-like.json")
    shutil.copy(DATA / "accuracy_fixture.json", folder / "accuracy.json")
    return folder


def test_run_files_order(run_dir):
    names = [p.name for p in run_files(run_dir)]
    assert names == ["throughput.json", "throughput-model-like.json", "accuracy.json"]
    assert expand_paths([run_dir]) == run_files(run_dir)
    with pytest.raises(ValueError, match="holds no result files"):
        expand_paths([run_dir.parent])


def test_block_is_written_kept_and_replaced(run_dir):
    index = run_dir.parent / "index.md"
    index.write_text("# Benchmarks\n\nHand-written intro.\n\n## How to reproduce\n\nsteps\n")
    update_index(index, run_dir)
    text = index.read_text()
    assert text.startswith("# Benchmarks\n\nHand-written intro.") and "## How to reproduce\n\nsteps" in text
    assert "[report.md](h200-2026-01-01/report.md)" in text  # links relative to the index's folder
    assert "| FP8 d128 GQA vs cuDNN FP8 (FP8 out) | 16384 |" in text
    assert stale_blocks(text, index.parent) == []
    # Moved to the top by hand, then regenerated: replaced where it stands, not appended again.
    block = index_block(run_dir, index.parent)
    index.write_text("# Benchmarks\n\n" + block + "\n\nafter\n")
    update_index(index, run_dir)
    assert index.read_text() == "# Benchmarks\n\n" + block + "\n\nafter\n"
    # A figure typed by hand is stale.
    edited = text.replace("| 1.19× (zyfa-fp8-exact) |", "| 1.20× (zyfa-fp8-exact) |")
    assert edited != text and stale_blocks(edited, index.parent) == ["h200-2026-01-01"]
    assert stale_blocks("# Benchmarks\n", index.parent) == ["(no blocks)"]


def test_report_command_with_index(run_dir, capsys):
    index = run_dir.parent / "index.md"
    assert main(["report", str(run_dir), "--index", str(index)]) == 0
    assert (run_dir / "report.md").is_file() and (run_dir / "throughput.png").is_file()
    assert stale_blocks(index.read_text(), index.parent) == []
    # --index needs the one folder it describes as the report's output.
    assert main(["report", str(run_dir), "--out", str(run_dir.parent), "--index", str(index)]) == 2
    assert "--index needs one run folder" in capsys.readouterr().err
