"""docs/benchmarks/index.md's headline tables against the committed runs they quote.

"Where things stand" is written by hand beside a product run's report; a figure typed wrong or left from an
older run would tell users something no run measured. Each of its three tables is checked here against the
JSON of the run it names: the TFLOP/s table cell by cell (rounded to the TFLOP/s), the targets table's ratios
as zyfa_bench.report computes them from that JSON (column "measured (call N)": call N's Gaussian sweep;
"model-like (call M)": call M's model-like sweep, with "Gaussian in call M: x" its Gaussian one), and the
accuracy table's columns that come from the run's accuracy.json. A new product run that changes the section
must keep this layout or change this test with it. Skipped outside a repository checkout (an installed
zyfa-bench has no docs) and where the dated folders were held back (a device call's tree).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zyfa_bench.report import targets_table
from zyfa_bench.results import load_results

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
    if not folder.is_dir() and not (BENCH / link.group(1)).parent.is_dir():
        # A device call's tree travels without the dated folders (tools/device/travel.py hold).
        pytest.skip(f"{folder.parent.name}/ is not in this tree")
    return folder


def _rows(folder: Path, kind: str = "throughput") -> tuple[list[dict], dict]:
    rows, ceilings = [], {}
    for path in sorted(folder.glob(f"{kind}*.json")):
        doc = load_results(path)
        rows += doc["rows"]
        ceilings.update(doc.get("ceilings") or {})
    assert rows, f"no {kind} JSON in {folder}"
    return rows, ceilings


def _measured_targets(folder: Path) -> dict[str, tuple[int, float] | None]:
    """zyfa_bench.report's targets of a run, in its order: name -> (seqlen, ratio), None where the run has
    no data for it; workloads other than Gaussian are named "<target> (<workload>)"."""
    out = {}
    for row in _tables(targets_table(*_rows(folder)))[0][1:]:
        ratio = re.match(r"([\d.]+)×", row[2])
        out[row[0]] = (int(row[1]), float(ratio.group(1))) if ratio else None
    return out


def test_tflops_table_is_the_runs():
    table = _tables(_section())[0]
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
    table = _tables(_section())[1]
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
    table = _tables(_section())[2]
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
