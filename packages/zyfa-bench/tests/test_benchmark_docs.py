"""docs/benchmarks/index.md's headline tables against the committed run they quote.

"Where things stand" quotes a product run's headline (zyfa_bench.headline, the top of its report.md)
after the line `headline.MARKER`, beside prose written by hand; a figure typed wrong or left from an older
run would tell users something no run measured. The section's tables after the marker must be the headline
made again from the JSON of the run its report link names, verbatim and in order.
Skipped outside a repository checkout (an installed zyfa-bench has no docs) and where the dated folders were
held back (a device call's tree).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zyfa_bench.headline import MARKER, headline, tables_of
from zyfa_bench.report import build_report

BENCH = Path(__file__).resolve().parents[3] / "docs" / "benchmarks"
INDEX = BENCH / "index.md"
pytestmark = pytest.mark.skipif(not INDEX.is_file(), reason="no docs/benchmarks/index.md (not a checkout)")


def _section() -> str:
    text = INDEX.read_text()
    start = text.index("## Where things stand")
    return text[start : text.index("\n## ", start + 1)]


def _run_dir() -> Path:
    """The headline run's folder (its report link)."""
    link = re.search(r"\[report\]\((\S+)/report\.md\)", _section())
    assert link, "the section links no report"
    folder = BENCH / link.group(1)
    if _held(folder.parent):
        pytest.skip(f"{folder.parent.name}/ is not in this tree")
    return folder


def _held(dated: Path) -> bool:
    """Whether a dated folder was held out of this tree: a device call's tree travels without their files
    (tools/device/travel.py hold), and the device's copy can keep their folders, empty (seen on the H200)."""
    return not dated.is_dir() or not any(p.is_file() for p in dated.rglob("*"))


def _result_files(folder: Path, kind: str = "throughput") -> list[Path]:
    """A run's JSON of one kind in h200_run.sh's order (throughput.json, then the other workloads'):
    where two files give GEMM ceilings, the report takes the first file's."""
    first = folder / f"{kind}.json"
    return ([first] if first.is_file() else []) + sorted(folder.glob(f"{kind}-*.json"))


def _headline_of(folder: Path) -> str:
    files = _result_files(folder) + _result_files(folder, "accuracy")
    assert files, f"no result JSON in {folder}"
    _, rows, ceilings = build_report(files)
    return headline(rows, ceilings)


def _check_headline(section: str, folder: Path) -> None:
    """The tables after MARKER are the headline of the run in `folder`, verbatim and in order."""
    want = tables_of(_headline_of(folder))
    got = tables_of(section.split(MARKER, 1)[1])
    assert len(got) >= len(want), (
        f"the section has {len(got)} tables after the marker, the headline {len(want)}"
    )
    for i, (g, w) in enumerate(zip(got[: len(want)], want, strict=True)):
        assert g == w, (
            f"table {i + 1} after the marker is not the run's headline table:\n{g}\n--- the run's:\n{w}"
        )


def test_headline_tables_are_the_runs():
    section = _section()
    assert MARKER in section, f"the section quotes no run's headline (no {MARKER!r} line)"
    _check_headline(section, _run_dir())


def test_a_changed_headline_figure_fails():
    """The verbatim check on a real run (the sixteenth session's product run): its own headline passes, the
    same with a TFLOP/s figure changed, a line's workload renamed, a target dropped or an error ratio changed
    does not."""
    folder = BENCH / "2026-12-04" / "session16_call2"
    if _held(folder.parent):
        pytest.skip(f"{folder.parent.name}/ is not in this tree")
    tables = _headline_of(folder)
    section = f"## Where things stand\n\nprose\n\n{MARKER}\n\n{tables}\n\nmore prose\n"
    _check_headline(section, folder)
    assert "| 761 / 1041 / 636 |" in section
    for broken in (
        section.replace("| 761 / 1041 / 636 |", "| 761 / 1042 / 636 |"),
        section.replace("\n| mla192 | gaussian |", "\n| mla192 | model-like |", 1),
        "\n".join(ln for ln in section.splitlines() if "ZYFA FP8 / ZYFA BF16, 192/128" not in ln),
        section.replace("2.94e-2 | 0.89×", "2.94e-2 | 0.88×"),
    ):
        assert broken != section
        with pytest.raises(AssertionError):
            _check_headline(broken, folder)
