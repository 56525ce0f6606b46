"""compute-sanitizer memcheck and racecheck over every default kernel and the packed-batch (varlen) and
paged kernels, as a stage of the GPU run.

zyfa_sanitizer_probe.py (beside this file) calls zyfa.flash_attn_func once per default kernel and
shape; each tool runs it as its own process, both at once. Only ZYFA's kernels are instrumented
(`--kernel-name kns=fa_fwd`: the attention kernels and their V pre-pass) when this compute-sanitizer
has that option, and torch's caching allocator is off so memcheck sees each tensor's own bounds.
Skipped without a CUDA GPU, zyfa_core or compute-sanitizer (on PATH or under $CUDA_HOME/bin).
A tool passes when it exits 0, its summary reads "ERROR SUMMARY: 0 errors" (memcheck) or "RACECHECK
SUMMARY: 0 hazards" (racecheck), and the probe ran at least one kernel. The probe makes at most
sixteen small calls; TIMEOUT_S bounds each tool.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.gpu_stress,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.version.hip is not None, reason="needs a CUDA GPU"
    ),
]

PROBE = Path(__file__).with_name("zyfa_sanitizer_probe.py")
TOOLS = ("memcheck", "racecheck")
TIMEOUT_S = 420


def _sanitizer() -> str:
    found = shutil.which("compute-sanitizer")
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        candidate = Path(root or "/nonexistent") / "bin" / "compute-sanitizer"
        if not found and candidate.is_file():
            found = str(candidate)
    if not found:
        pytest.skip("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    return found


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_memcheck_and_racecheck_over_the_default_kernels(tmp_path):
    pytest.importorskip("zyfa_core")
    tool_bin = _sanitizer()
    help_text = subprocess.run([tool_bin, "--help"], capture_output=True, text=True, timeout=60).stdout
    only_zyfa = ["--kernel-name", "kns=fa_fwd"] if "--kernel-name" in help_text else []
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTHONUNBUFFERED": "1"}
    runs = {}
    for tool in TOOLS:
        log = tmp_path / f"{tool}.log"
        argv = [tool_bin, "--tool", tool, "--error-exitcode", "3", *only_zyfa, sys.executable, str(PROBE)]
        runs[tool] = (subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env), log)
    failures = []
    for tool, (proc, log) in runs.items():
        try:
            rc = proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timed out"
        text = log.read_text(errors="replace")
        ran = sum(line.startswith("ok ") for line in text.splitlines())
        summary = next((line for line in text.splitlines() if "SUMMARY" in line), "no summary line")
        clean = re.search(r"SUMMARY: 0 (errors|hazards)", summary) is not None  # memcheck / racecheck wording
        if rc != 0 or ran == 0 or not clean:
            failures.append(
                f"{tool}: exit {rc}, {ran} kernel calls, {summary}\n" + "\n".join(text.splitlines()[-30:])
            )
    assert not failures, "\n\n".join(failures)
