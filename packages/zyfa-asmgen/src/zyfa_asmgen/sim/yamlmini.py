"""A small YAML reader for the `.amdgpu_metadata` block.

The metadata LLVM prints (and our generator writes) uses a tiny subset of YAML: block mappings,
block sequences of mappings, flow sequences `[ 1, 2 ]` and flow mappings `{ .a: 1, .b: x }`,
plain scalars. The package depends only on numpy and ml_dtypes, so this reads exactly that subset
and raises on anything else instead of guessing.
"""

from __future__ import annotations

from typing import Any


class YamlError(ValueError):
    """The text is outside the supported YAML subset."""


def _scalar(text: str) -> Any:
    """Convert a plain or quoted scalar to int, float, bool, None or str."""
    t = text.strip()
    if not t:
        return None
    if (t[0] == t[-1]) and t[0] in "'\"" and len(t) >= 2:
        return t[1:-1]
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~"):
        return None
    try:
        return int(t, 0)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def _split_flow(body: str) -> list[str]:
    """Split the inside of a flow collection at top-level commas."""
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def _value(text: str) -> Any:
    """Parse an inline value: flow sequence, flow mapping or scalar."""
    t = text.strip()
    if t.startswith("["):
        if not t.endswith("]"):
            raise YamlError(f"unterminated flow sequence: {t!r}")
        return [_value(p) for p in _split_flow(t[1:-1])]
    if t.startswith("{"):
        if not t.endswith("}"):
            raise YamlError(f"unterminated flow mapping: {t!r}")
        out = {}
        for p in _split_flow(t[1:-1]):
            k, sep, v = p.partition(":")
            if not sep:
                raise YamlError(f"flow mapping entry without ':': {p!r}")
            out[k.strip()] = _value(v)
        return out
    return _scalar(t)


def _lines(text: str) -> list[tuple[int, str]]:
    """(indent, content) for every non-blank, non-comment line; stops at the document end '...'."""
    out = []
    for raw in text.splitlines():
        s = raw.rstrip()
        if not s.strip() or s.strip().startswith("#") or s.strip() == "---":
            continue
        if s.strip() == "...":
            break
        out.append((len(s) - len(s.lstrip(" ")), s.strip()))
    return out


def _parse_block(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[Any, int]:
    """Parse the block starting at lines[pos] whose lines have exactly `indent` spaces."""
    if lines[pos][1].startswith("- ") or lines[pos][1] == "-":
        return _parse_seq(lines, pos, indent)
    return _parse_map(lines, pos, indent)


def _parse_seq(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[list, int]:
    out: list = []
    while pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("-"):
        item = lines[pos][1][1:].strip()
        if not item:
            val, pos = _parse_block(lines, pos + 1, lines[pos + 1][0])
            out.append(val)
            continue
        if ":" in item and not item.startswith(("[", "{")):
            # "- key: value" starts a mapping whose further keys sit at indent + 2.
            sub_indent = indent + (len(lines[pos][1]) - len(item))
            lines[pos] = (sub_indent, item)
            val, pos = _parse_map(lines, pos, sub_indent)
            out.append(val)
            continue
        out.append(_value(item))
        pos += 1
    return out, pos


def _parse_map(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[dict, int]:
    out: dict = {}
    while pos < len(lines) and lines[pos][0] == indent and not lines[pos][1].startswith("- "):
        key, sep, rest = lines[pos][1].partition(":")
        if not sep:
            raise YamlError(f"expected 'key: value', got {lines[pos][1]!r}")
        key = key.strip()
        if rest.strip():
            out[key] = _value(rest)
            pos += 1
            continue
        pos += 1
        if pos < len(lines) and (
            lines[pos][0] > indent or (lines[pos][0] == indent and lines[pos][1].startswith("-"))
        ):
            out[key], pos = _parse_block(lines, pos, lines[pos][0])
        else:
            out[key] = None
    if pos < len(lines) and lines[pos][0] > indent:
        raise YamlError(f"unexpected indentation at {lines[pos][1]!r}")
    return out, pos


def load(text: str) -> Any:
    """Parse one YAML document of the supported subset."""
    lines = _lines(text)
    if not lines:
        return None
    val, pos = _parse_block(lines, 0, lines[0][0])
    if pos != len(lines):
        raise YamlError(f"trailing content at {lines[pos][1]!r}")
    return val
