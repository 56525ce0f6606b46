"""The serving-engine example of docs/usage.md runs as written: on the CPU here, on a GPU where there is one
(its own assertions compare the packed, paged call with the dense call on one prompt)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

HEADING = "## Serving engines: packed batches and a paged KV cache"


def _usage_page() -> Path | None:
    for directory in Path(__file__).resolve().parents:
        page = directory / "docs" / "usage.md"
        if page.is_file():
            return page
    return None


def _example(text: str) -> str:
    """The first python block of the serving section."""
    section = text[text.index(HEADING) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python example under {HEADING!r}"
    return match.group(1)


def test_serving_example_runs_as_written():
    page = _usage_page()
    if page is None:
        pytest.skip("docs/usage.md is not above this test (an installed copy of the tests)")
    code = _example(page.read_text())
    assert "zyfa.flash_attn_varlen_func" in code and "page_table=page_table" in code
    namespace: dict[str, object] = {}
    exec(compile(code, f"{page}:serving example", "exec"), namespace)
    assert namespace["out"].shape == (163, 8, 128)  # type: ignore[attr-defined]
