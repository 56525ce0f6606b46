"""docs/benchmarks/index.md's headline tables against the committed runs they quote.

"Where things stand" is written by hand beside a product run's report; a figure typed wrong or left from an
older run would tell users something no run measured. Two layouts are checked:
- a run's headline (zyfa_bench.headline, the top of its report.md), marked by `headline.MARKER` before its
  tables: the section's tables must be the headline made again from the linked run's JSON, verbatim;
- the sixteenth session's hand-made layout (no marker): each of its three tables against the JSON of the run
  it names: the TFLOP/s table cell by cell (rounded to the TFLOP/s), the targets table's ratios as
  zyfa_bench.report computes them from that JSON (column "measured (call N)": call N's Gaussian sweep;
  "model-like (call M)": call M's model-like sweep, with "Gaussian in call M: x" its Gaussian one), and the
  accuracy table's columns that come from the run's accuracy.json.
Skipped outside a repository checkout (an installed zyfa-bench has no docs) and where the dated folders were
held back (a device call's tree).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zyfa_bench.headline import MARKER, headline, tables_of
from zyfa_bench.report import build_report, targets_table

BENCH = Path(__file__).resolve().parents[3] / "docs" / "benchmarks"
INDEX = BENCH / "index.md"
pytestmark = pytest.mark.skipif(not INDEX.is_file(), reason="no docs/benchmarks/index.md (not a checkout)")

# The TFLOP/s table's column headers -> the implementations its cells give, in the cell's order.
COLUMNS = {
    "ZYFA BF16": ("zyfa-bf16",),
    "ZYFA FP8 exact / lean / f16": ("zyfa-fp8-exact", "zyfa-fp8-lean", "zyfa-fp8-f16"),
    "FlashAttention-4 BF16": ("fa4-bf16",),
    "cuDNN BF16": ("cudnn-bf16",),
    "cuDNN FP8 (FP8 out)": ("cudnn-fp8",),
}
SHAPES = {"d=128, 32 q / 8 kv heads": "gqa128", "192/128, 16 heads": "mla192"}
# The accuracy table's columns that come from the headline run (the others quote an earlier run).
ACCURACY_COLUMNS = {
    "exact with run 53's sums": "zyfa-fp8-exact",
    "lean": "zyfa-fp8-lean",
    "f16": "zyfa-fp8-f16",
    "cuDNN FP8": "cudnn-fp8",
}


def _section() -> str:
    text = INDEX.read_text()
    start = text.index("## Where things stand")
    return text[start : text.index("\n## ", start + 1)]


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in text, as rows of stripped cells (the |---| rule dropped)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
                current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def _run_dir(call: int | None = None) -> Path:
    """The headline run's folder (its report link), or its sibling folder of another call of that session."""
    link = re.search(r"\[report\]\((\S+)/report\.md\)", _section())
    assert link, "the section links no report"
    folder = BENCH / link.group(1)
    folder = folder if call is None else folder.with_name(re.sub(r"call\d+$", f"call{call}", folder.name))
    if _held((BENCH / link.group(1)).parent):
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


def _rows(folder: Path, kind: str = "throughput") -> tuple[list[dict], dict]:
    _, rows, ceilings = build_report(_result_files(folder, kind))
    assert rows[kind], f"no {kind} JSON in {folder}"
    return rows[kind], ceilings


def _measured_targets(folder: Path) -> dict[str, tuple[int, float] | None]:
    """zyfa_bench.report's targets of a run, in its order: name -> (seqlen, ratio), None where the run has
    no data for it; workloads other than Gaussian are named "<target> (<workload>)"."""
    out = {}
    for row in _tables(targets_table(*_rows(folder)))[0][1:]:
        ratio = re.match(r"([\d.]+)×", row[2])
        out[row[0]] = (int(row[1]), float(ratio.group(1))) if ratio else None
    return out


def _hand_made() -> str:
    """The section, when it keeps the hand-made layout; the headline's is checked by its own test."""
    section = _section()
    if MARKER in section:
        pytest.skip("the section quotes a run's headline (test_headline_tables_are_the_runs)")
    return section


def test_tflops_table_is_the_runs():
    table = _tables(_hand_made())[0]
    header, body = table[0], table[1:]
    rows, _ = _rows(_run_dir())
    tflops = {
        (r["impl"], r["shape"]): r["tflops"]
        for r in rows
        if r["status"] == "ok" and r["seqlen_q"] == 16384 and r.get("workload", "gaussian") == "gaussian"
    }
    checked = 0
    for row in body:
        shape = SHAPES[row[0]]
        for title, cell in zip(header[1:], row[1:], strict=True):
            impls = COLUMNS[title]
            values = [int(v) for v in cell.split(" / ")]
            assert len(values) == len(impls), (title, cell)
            for impl, value in zip(impls, values, strict=True):
                assert value == round(tflops[(impl, shape)]), (shape, impl, value, tflops[(impl, shape)])
                checked += 1
    assert checked == 14


def _check_ratio(text: str, want: tuple[int, float] | None, what: str) -> None:
    assert want is not None, (what, text, "the run has no data for this target")
    ratio = float(re.match(r"([\d.]+)×", text).group(1))
    assert ratio == pytest.approx(want[1], abs=0.005), (what, text, want)
    seqlen_k = re.search(r"\((\d+)K\)", text)
    if seqlen_k:  # "0.92× (4K)": the worst seqlen
        assert int(seqlen_k.group(1)) * 1024 == want[0], (what, text, want)


def _model_like(name: str) -> str:
    """A target's report name on model-like inputs: "... (model-like)", "gqa128 model-like bf16: ..."."""
    return name.replace(" ", " model-like ", 1) if ": " in name else f"{name} (model-like)"


def test_targets_table_is_the_runs():
    """Row i of the index's table is the report's Gaussian target i (the same order: the seven of
    zyfa_bench.report.TARGETS, then the worst seqlen per shape and precision)."""
    table = _tables(_hand_made())[1]
    header, body = table[0], table[1:]
    checked = 0
    for i, title in enumerate(header):
        call = re.search(r"\(call (\d+)\)", title)
        if not call:
            continue
        targets = _measured_targets(_run_dir(int(call.group(1))))
        gaussian = [n for n in targets if "model-like" not in n]
        for k, row in enumerate(body):
            name = gaussian[k] if k < len(gaussian) else None
            cell = row[i]
            if not cell:
                continue
            assert name, (row[0], "has no measured target in", title)
            if title.startswith("model-like"):
                _check_ratio(cell, targets[_model_like(name)], row[0])
                also = re.search(r"Gaussian in call \d+: ([\d.]+×)", cell)
                if also:
                    _check_ratio(also.group(1), targets[name], row[0])
            else:
                _check_ratio(cell, targets[name], row[0])
            checked += 1
    assert checked >= 15


def test_accuracy_table_is_the_runs():
    table = _tables(_hand_made())[2]
    header, body = table[0], table[1:]
    rows, _ = _rows(_run_dir(), "accuracy")
    err = {
        (r["impl"], r["workload"]): r["rel_l2_vs_dequant"]
        for r in rows
        if r["status"] == "ok" and r["shape"] == "gqa128" and not r.get("rotate")
    }
    checked = 0
    for title, impl in ACCURACY_COLUMNS.items():
        cell = body[0][header.index(title)]
        for workload, text in zip(("gaussian", "model-like"), cell.split(" / "), strict=True):
            digits = len(text.split("e")[0].replace(".", ""))  # "2.94e-2": the JSON's value to 3 digits
            assert float(text) == float(f"{err[(impl, workload)]:.{digits - 1}e}"), (title, workload, text)
            checked += 1
    assert checked == 8


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
    if MARKER not in section:
        pytest.skip("the section keeps the hand-made layout (checked by the tests above)")
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
