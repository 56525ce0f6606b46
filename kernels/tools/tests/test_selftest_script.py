"""tools/device/sm90_wgmma_selftest.sh's own logic, without a GPU: builds, tests, timing passes and tables.

A broken branch of the script would otherwise only show on a GPU machine, after the whole build. Here
NVCC points at a stand-in compiler that writes a cubin and its ptxas lines, or a stand-in test program
that prints the lines the real one prints (its TFLOP/s set per build and input by the environment), and
the summary must hold: the resources lines, a PASS per variant, one TFLOP/s table and one
TFLOP/s-per-GHz table per input of ZYFA_BENCH_INPUTS, and exit status 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "tools" / "device" / "sm90_wgmma_selftest.sh"

FAKE_NVCC = r"""#!/usr/bin/env python3
# Stand-in nvcc: `-o X.cubin` gets a cubin and ptxas -v lines on stderr, any other -o a test program.
import os, stat, sys
out = sys.argv[sys.argv.index("-o") + 1]
if out.endswith(".cubin"):
    open(out, "w").write("cubin")
    sys.stderr.write("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
                     "ptxas info    : Used 168 registers, 0 bytes stack frame, 0 bytes spill stores, "
                     "0 bytes spill loads\n")
else:
    open(out, "w").write(open(os.environ["FAKE_TEST_PROGRAM"]).read())
    os.chmod(out, os.stat(out).st_mode | stat.S_IEXEC)
"""

# Stand-in test program: TFLOP/s = FAKE_TFLOPS_<input> (default 1000) at a 2 GHz SM clock (the clock line
# after each shape): per GHz half the TFLOP/s.
FAKE_TEST_PROGRAM = r"""#!/usr/bin/env python3
import os, sys
if sys.argv[1:2] != ["--bench-only"]:
    print("21 passed, 0 failed")
    sys.exit(0)
inp = os.environ.get("ZYFA_BENCH_INPUT", "gaussian")
tflops = float(os.environ.get("FAKE_TFLOPS_" + inp, "1000"))
per_ghz = tflops / 2.0
for b, s in ((16, 2048), (2, 16384)):
    print(f"bench e4m3-l b{b} s{s:<5d} hq32 hkv8  | ws    1.000 ms {tflops:6.1f} TFLOP/s | simple 9.0 ms "
          "400.0 TFLOP/s | x2.50 | ws vs simple out rel L2 1.0e-02 | "
          "vs f64 (16 rows) ws 1.0e-02 simple 1.0e-02 | "
          "ws vs contract (16 rows) out 1.0e-03 lse max 1.0e-04 | repeat bitwise")
    print(f"bench clock ws 2000 MHz    1.00 Mcycles {per_ghz:6.1f} TFLOP/s/GHz")
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_two_inputs_two_tables(tmp_path: Path) -> None:
    nvcc, program = tmp_path / "nvcc", tmp_path / "program"
    nvcc.write_text(FAKE_NVCC.replace("/usr/bin/env python3", sys.executable, 1))
    program.write_text(FAKE_TEST_PROGRAM.replace("/usr/bin/env python3", sys.executable, 1))
    nvcc.chmod(0o755)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "NVCC": str(nvcc),
        "FAKE_TEST_PROGRAM": str(program),
        "FAKE_TFLOPS_sink": "800",
        "OUT": str(out),
        "ZYFA_ONLY": "hd128_causal_leanp",
        "ZYFA_BENCH_INPUTS": "gaussian sink",
        "PATH": os.environ.get("PATH", ""),
    }
    run = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "work")], env=env, capture_output=True, text=True, timeout=300
    )
    summary = (out / "sm90_wgmma_summary.txt").read_text()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    name = "fa_fwd_e4m3fn_hd128_causal_leanp_sm90a"
    assert re.search(
        rf"^{name}: Used 168 registers; 0 bytes stack frame; 0 bytes spill stores", summary, re.M
    )
    assert f"-- {name}: PASS" in summary
    tables = re.findall(
        r"^== TFLOP/s per build and shape, (\w+) inputs.*?\n(.*?)(?=^==|^total)", summary, re.M | re.S
    )
    assert [t[0] for t in tables] == ["gaussian", "sink"]
    for inp, body in tables:
        base = 800.0 if inp == "sink" else 1000.0
        row = re.search(rf"^{name} +(.*)$", body, re.M)[1]
        assert len(re.findall(rf"{base:.1f}/ *{base:.1f}", row)) == 2, (inp, row)
    # The same per GHz of SM clock, from the clock lines.
    per_ghz = re.findall(
        r"^== TFLOP/s per GHz of SM clock per build and shape, (\w+) inputs.*?\n(.*?)(?=^==|^total)",
        summary,
        re.M | re.S,
    )
    assert [t[0] for t in per_ghz] == ["gaussian", "sink"]
    for inp, body in per_ghz:
        base = (800.0 if inp == "sink" else 1000.0) / 2.0
        assert len(re.findall(rf"{base:.1f}/ *{base:.1f}", re.search(rf"^{name} +(.*)$", body, re.M)[1])) == 2
    # Both passes of both inputs ran the variant: four logs.
    with tarfile.open(out / "sm90_wgmma_logs.tgz") as tgz:
        logs = tgz.getnames()
    for pass_ in ("bench_", "bench2_", "bench_sink_", "bench2_sink_"):
        assert f"./{pass_}{name}.log" in logs, pass_
