"""The command line the build tools call: `python -m zyfa_asmgen emit|build ...`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from asmgen_testlib import REPO
from test_generator import CASES

import zyfa_asmgen
from zyfa_asmgen.__main__ import main
from zyfa_asmgen.abi import parse_abi_header
from zyfa_asmgen.generators import generate
from zyfa_asmgen.variant import Variant


def test_emit_writes_the_generated_file(abi_header, tmp_path):
    out = tmp_path / "k.s"
    rc = main(["emit", "mfma_fp8", "--variant-json", json.dumps(CASES[0]), "--abi-header", str(abi_header),
               "-o", str(out)])  # fmt: skip
    assert rc == 0
    assert out.read_text() == generate("mfma_fp8", Variant.from_dict(CASES[0]), parse_abi_header(abi_header))


def test_errors_exit_1_with_a_message(abi_header, tmp_path, capsys):
    args = ["emit", "mfma_fp8", "--abi-header", str(abi_header), "-o", str(tmp_path / "k.s")]
    assert main([*args, "--variant-json", "{not json"]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    assert main([*args, "--variant-json", json.dumps({**CASES[0], "src": "other"})]) == 1
    assert "names generator 'other'" in capsys.readouterr().err
    assert not (tmp_path / "k.s").exists()


def test_build_as_a_module(abi_header, toolchain, tmp_path):
    out = tmp_path / "k.hsaco"
    src = str(Path(zyfa_asmgen.__file__).parents[1])  # works installed or from the checkout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "zyfa_asmgen", "build", "mfma_fp8", "--variant-json", json.dumps(CASES[0]),
         "--abi-header", str(abi_header), "-o", str(out), "--asm", str(tmp_path / "k.s")],
        capture_output=True, text=True, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:4] == b"\x7fELF" and (tmp_path / "k.s").exists()
