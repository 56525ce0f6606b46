"""tools/device/stages.sh, the budgeted stage runner of the device scripts, without a GPU.

A device call has one wall-clock limit and no second chance, so the runner must: run each stage under
min(cap, time left - reserve), go on after a stage fails or times out, skip the stages named in SKIP,
not start a stage the budget cannot hold, and end with a table of every stage's outcome.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DEVICE = REPO / "tools" / "device"

DRIVER = r"""
set -u
LOG=$1/log.txt
: >"$LOG"
TOTAL=$2
SKIP=",skipped_one,"
source "$3/stages.sh"
ok() { echo "ok says $1"; }
fails() { echo "about to fail"; return 3; }
hangs() { sleep 60; }
export -f ok fails hangs
stage first 30 0 ok hello
stage broken 30 0 fails
stage slow "$4" 0 hangs
stage skipped_one 30 0 ok never
stage starved 30 "$(( $(left) + 10 ))" ok never
stage last 30 0 ok again
stage_table
"""


def _run(tmp_path: Path, total: int, slow_cap: int) -> tuple[str, str, float]:
    script = tmp_path / "driver.sh"
    script.write_text(DRIVER)
    start = time.monotonic()
    out = subprocess.run(
        ["bash", str(script), str(tmp_path), str(total), str(DEVICE), str(slow_cap)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return out, (tmp_path / "log.txt").read_text(), time.monotonic() - start


def _table(console: str) -> dict[str, str]:
    rows = console[console.index("stage ") :].splitlines()[1:]
    return {r.split()[0]: " ".join(r.split()[1:-1]) for r in rows}


def test_every_outcome_reaches_the_table(tmp_path):
    console, log, took = _run(tmp_path, total=120, slow_cap=2)
    table = _table(console)
    assert list(table) == ["first", "broken", "slow", "skipped_one", "starved", "last"]
    assert table["first"] == "ok" and table["last"] == "ok"
    assert table["broken"] == "FAILED (exit 3)"
    assert table["slow"] == "TIMED OUT after 2s"  # its cap, not the budget
    assert table["skipped_one"] == "skipped"
    assert table["starved"] == "not started: budget spent"
    # Stage output goes to the log, not the console; skipped and starved stages ran nothing.
    assert "ok says hello" in log and "ok says again" in log and "about to fail" in log
    assert "never" not in log and "ok says" not in console
    assert took < 30  # the hung stage was stopped at its cap (SIGINT), not at the kill-after


def test_budget_shrinks_a_stage_below_its_cap(tmp_path):
    # A budget of 7 s: the hung stage (cap 30 s) gets what is left, ~7 s; then nothing can start.
    console, _, took = _run(tmp_path, total=7, slow_cap=30)
    table = _table(console)
    assert table["first"] == "ok" and table["broken"] == "FAILED (exit 3)"
    assert table["slow"] in ("TIMED OUT after 7s", "TIMED OUT after 6s")
    assert table["last"] == "not started: budget spent"
    assert took < 20


def test_device_scripts_use_the_shared_runner():
    for name in ("h200_run.sh",):
        text = (DEVICE / name).read_text()
        assert "/stages.sh" in text and "stage() {" not in text, name
        subprocess.run(["bash", "-n", str(DEVICE / name)], check=True)


FIT = r"""
set -u
LOG=$1/log.txt
: >"$LOG"
TOTAL=60
SKIP=","
source "$2/stages.sh"
fit_out_files "$1/out" 8 report.tar report.md throughput.png accuracy.png
"""


def _fit(tmp_path: Path, names: list[str]) -> tuple[set[str], str]:
    out = tmp_path / "out"
    out.mkdir()
    for n in names:
        (out / n).write_text(f"content of {n}\n")
    script = tmp_path / "fit.sh"
    script.write_text(FIT)
    subprocess.run(["bash", str(script), str(tmp_path), str(DEVICE)], check=True, timeout=30)
    return {p.name for p in out.iterdir()}, (tmp_path / "log.txt").read_text()


RESULTS = ["log.txt", "pytest.txt", "throughput.json", "accuracy.json", "report.md", "throughput.png"]


def test_eight_files_travel_as_they_are(tmp_path):
    names = [*RESULTS, "accuracy.png", "throughput-model-like.json"]
    left, log = _fit(tmp_path, names)
    assert left == set(names) and log == ""


def test_a_ninth_file_packs_the_report_and_figures(tmp_path):
    # The product run on two workloads, with the caller's console copy: nine files, the tool returns eight.
    names = [*RESULTS, "accuracy.png", "throughput-model-like.json", "product_console.txt"]
    left, log = _fit(tmp_path, names)
    assert len(left) <= 8 and "report.tar" in left
    assert not {"report.md", "throughput.png", "accuracy.png"} & left
    listing = subprocess.run(
        ["tar", "-tf", str(tmp_path / "out" / "report.tar")], capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(listing) == ["accuracy.png", "report.md", "throughput.png"]
    assert "packed into report.tar" in log


def test_too_many_files_are_said_not_hidden(tmp_path):
    names = [*RESULTS, *(f"extra{i}.json" for i in range(6))]
    left, log = _fit(tmp_path, names)
    assert "WARNING: 12 files" in log and "report.tar" in left
