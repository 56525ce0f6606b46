"""The benchmark index: a results page made from the result files of committed runs.

A run folder holds the JSON files zyfa-bench wrote (`throughput.json`, `throughput-<workload>.json`,
`accuracy.json`, `clocks.json`) and the report made from them (`report.md`, `throughput.png`,
`accuracy.png`). `zyfa-bench report FOLDER --index INDEX.md` writes, into INDEX.md, one block per
folder (named by its path from the index's folder) between two marker lines: the device and versions,
links to the folder's files, the commands that measured them, the headline tables (zyfa_bench.headline)
and the figures. Text outside the blocks (a title, how to reproduce the
runs) is left as it is; a folder without a block gets one at the end of the page. `stale_blocks` tells
whether a page's blocks are still what the folders' JSON gives.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from zyfa_bench.headline import headline
from zyfa_bench.report import build_report
from zyfa_bench.results import load_results
from zyfa_bench.tables import VERSION_KEYS, ok_rows

__all__ = ["expand_paths", "index_block", "run_files", "stale_blocks", "update_index"]

KINDS = ("throughput", "accuracy", "clocks")
_BEGIN = "<!-- zyfa-bench report {name}: generated from the JSON, do not edit -->"
_END = "<!-- end of zyfa-bench report {name} -->"
_BLOCK = re.compile(
    r"<!-- zyfa-bench report (?P<name>\S+): generated from the JSON, do not edit -->\n"
    r".*?<!-- end of zyfa-bench report (?P=name) -->",
    re.S,
)
_TITLE = "# Benchmarks\n"


def run_files(folder: str | Path) -> list[Path]:
    """A run folder's result files in report order: per kind, `<kind>.json` first (where two files give GEMM
    ceilings the report takes the first one's), then `<kind>-*.json` by name."""
    folder = Path(folder)
    files: list[Path] = []
    for kind in KINDS:
        first = folder / f"{kind}.json"
        files += ([first] if first.is_file() else []) + sorted(folder.glob(f"{kind}-*.json"))
    return files


def expand_paths(paths: list[str | Path]) -> list[Path]:
    """Result files from command-line paths: a file as given, a folder as its run_files."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = run_files(p)
            if not found:
                names = ", ".join(f"{k}.json" for k in KINDS)
                raise ValueError(f"{p} holds no result files ({names} or <kind>-*.json)")
            out += found
        else:
            out.append(p)
    return out


def _name(folder: Path, base: Path) -> str:
    """A block's name: its folder relative to the index's folder."""
    return Path(os.path.relpath(folder, base)).as_posix()


def _link(path: Path, base: Path) -> str:
    return f"[{path.name}]({Path(os.path.relpath(path, base)).as_posix()})"


def _about(docs: list[dict[str, Any]]) -> str:
    """The device, date and versions of a run's files (their first file's, which all of a run share)."""
    dev, v = docs[0].get("device", {}), docs[0].get("versions", {})
    versions = ", ".join(f"{k} {v[k]}" for k in VERSION_KEYS if v.get(k))
    return (
        f"- device: {dev.get('name')} ({dev.get('backend')}, capability {dev.get('capability')}, "
        f"driver {dev.get('driver')})\n"
        f"- versions: {versions}"
    )


def index_block(folder: str | Path, base: str | Path) -> str:
    """The index's block for one run folder, with links relative to `base` (the index's folder)."""
    folder, base = Path(folder), Path(base)
    files = run_files(folder)
    if not files:
        raise ValueError(f"{folder} holds no result files")
    docs = [load_results(f) for f in files]
    _, rows, ceilings = build_report(files)
    name = _name(folder, base)
    date = str(docs[0].get("created", ""))[:10]
    commands = "\n".join(" ".join(d.get("command", [])) for d in docs)
    links = ", ".join(_link(f, base) for f in files)
    figures = [folder / f"{k}.png" for k in ("throughput", "accuracy") if ok_rows(rows[k])]
    parts = [
        _BEGIN.format(name=name),
        f"## {docs[0].get('device', {}).get('name')}, {date}",
        _about(docs)
        + f"\n- full report: {_link(folder / 'report.md', base)}; result files: {links}"
        + "\n- the commands that measured them:",
        f"```\n{commands}\n```",
        headline(rows, ceilings),
        *(f"![{f.stem}]({Path(os.path.relpath(f, base)).as_posix()})" for f in figures),
        _END.format(name=name),
    ]
    return "\n\n".join(parts)


def update_index(index: str | Path, folder: str | Path) -> Path:
    """Write `folder`'s block into the page `index` (replacing its old block, else appended; a missing page
    is made with a title)."""
    index = Path(index)
    text = index.read_text() if index.is_file() else _TITLE
    block = index_block(folder, index.parent)
    name = _name(Path(folder), index.parent)
    old = next((m for m in _BLOCK.finditer(text) if m.group("name") == name), None)
    if old is not None:
        text = text[: old.start()] + block + text[old.end() :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(text)
    return index


def stale_blocks(text: str, base: str | Path) -> list[str]:
    """Names of the blocks in an index page's `text` that differ from what their folders (under `base`, the
    page's folder) give now; a page without blocks is reported as ["(no blocks)"]."""
    base = Path(base)
    blocks = list(_BLOCK.finditer(text))
    if not blocks:
        return ["(no blocks)"]
    return [m.group("name") for m in blocks if m.group(0) != index_block(base / m.group("name"), base)]
