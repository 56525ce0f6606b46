"""argparse types of `zyfa-bench`'s options: every value is checked when the command line is parsed.

Each type returns the parsed value, or raises argparse.ArgumentTypeError naming the problem and what is
accepted; argparse then prints the usage line and exits with status 2 before any work starts.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path

from zyfa_bench.spec import parse_shape

__all__ = [
    "choice_list",
    "device",
    "existing_parent",
    "kernel_dir",
    "non_negative_float",
    "non_negative_int",
    "non_negative_int_list",
    "one_shape",
    "positive_float",
    "positive_int",
    "positive_int_list",
    "shape_list",
]

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (counts: --repeats, --seeds, --seqlen, --tokens, ...)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (--warmup)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (--seconds, sampling periods)."""
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {value:g}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (--time-budget: 0 starts nothing)."""
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {value:g}")
    return value


def _int_list(text: str, item: Callable[[str], int], what: str) -> str:
    """`text` when it is a comma-separated, non-empty list whose items `item` accepts."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"needs at least one {what}")
    for x in items:
        item(x)
    return text


def positive_int_list(text: str) -> str:
    """A comma-separated, non-empty list of integers >= 1 (--seqlens); returned as given."""
    return _int_list(text, positive_int, "integer >= 1")


def non_negative_int_list(text: str) -> str:
    """A comma-separated, non-empty list of integers >= 0 (serving --prefix); returned as given."""
    return _int_list(text, non_negative_int, "integer >= 0")


def choice_list(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A type accepting a comma-separated, non-empty list drawn from `choices`; returned as given."""

    def parse(text: str) -> str:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"{', '.join(bad) or 'nothing'} not accepted; "
                f"use a comma-separated list of {', '.join(choices)}"
            )
        return text

    parse.__name__ = "list of " + "/".join(choices)  # argparse names the type in its messages
    return parse


def shape_list(text: str) -> str:
    """A comma-separated, non-empty list of head shapes (`zyfa_bench.spec.parse_shape`); returned as given."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("needs at least one head shape")
    for item in items:
        try:
            parse_shape(item)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def device(text: str) -> str:
    """A torch device this harness runs on: cpu, cuda or cuda:N (ROCm builds of torch call GPUs cuda)."""
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"unsupported device {text!r}: use cpu, cuda or cuda:N")
    return text


def existing_parent(text: str) -> str:
    """An output file path whose directory exists (nothing is created on the way)."""
    parent = Path(text).expanduser().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"directory {str(parent)!r} does not exist; create it first")
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; name a file")
    return text


# A ZYFA kernel build is a directory holding this manifest beside its code objects (zyfa_core.manifest's
# MANIFEST_NAME; zyfa-bench does not import zyfa_core).
MANIFEST_NAME = "manifest.json"


def holds_kernel_build(directory: str | Path) -> bool:
    """Whether `directory` holds a kernel build (its manifest)."""
    return (Path(directory) / MANIFEST_NAME).is_file()


def kernel_dir(text: str) -> str:
    """A kernel build's directory: it must hold a manifest.json."""
    path = Path(text).expanduser()
    if not holds_kernel_build(path):
        raise argparse.ArgumentTypeError(f"{text!r} holds no manifest.json; give a kernel build's directory")
    return str(path.resolve())


def one_shape(text: str) -> str:
    """Exactly one head shape (clocks --shape); returned as given."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"one head shape here, got {text!r}")
    return shape_list(text)
