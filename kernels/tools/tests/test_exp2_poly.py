"""kernels/sm90/exp2_poly.h — the softmax's FMA-pipe exp2 — against float64 2^x and the rounded P.

The header is compiled with the host C++ compiler (the kernel compiles the same code for the device);
a small program maps float32 inputs to exp2_poly outputs.  What the kernels need from it: relative
error within the stated 7.5e-5 over the softmax's input range, the masked input (-inf) giving a P of
zero after rounding, and the rounded P (e4m3 and BF16) equal to the one from the exact exp2 for almost
every input and never more than one code away.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

HEADER = Path(__file__).resolve().parents[2] / "sm90" / "exp2_poly.h"
REL_ERR_BOUND = 7.5e-5  # the header's stated bound (relative-error minimax cubic)

PROGRAM = r"""
#include <cstdio>
#include <vector>
#include "exp2_poly.h"
int main() {
  std::vector<float> x;
  float v;
  while (std::fread(&v, sizeof v, 1, stdin) == 1) x.push_back(v);
  for (float& e : x) e = zyfa_exp2::exp2_poly(e);
  std::fwrite(x.data(), sizeof(float), x.size(), stdout);
  return 0;
}
"""


@pytest.fixture(scope="module")
def exp2_poly(tmp_path_factory: pytest.TempPathFactory):
    """float32 array -> exp2_poly of each element, through the host-compiled header."""
    cxx = next((p for n in ("c++", "g++", "clang++") if (p := shutil.which(n))), None)
    if cxx is None:
        pytest.skip("no host C++ compiler on PATH")
    work = tmp_path_factory.mktemp("exp2_poly")
    (work / "main.cpp").write_text(PROGRAM)
    exe = work / "exp2_poly"
    subprocess.run(
        [cxx, "-O2", "-std=c++17", f"-I{HEADER.parent}", str(work / "main.cpp"), "-o", str(exe)],
        check=True,
        capture_output=True,
    )

    def run(x: np.ndarray) -> np.ndarray:
        data = x.astype(np.float32).tobytes()
        out = subprocess.run([str(exe)], input=data, capture_output=True, check=True)
        return np.frombuffer(out.stdout, dtype=np.float32)

    return run


def softmax_inputs(rng: np.random.Generator) -> np.ndarray:
    """The kernels' shifted t = S C + 8 - m <= 8: fresh random values over [-64, 8] plus a dense grid
    near 0 and the row-max end (where P's codes are largest), and the integer points themselves."""
    return np.concatenate(
        [
            rng.uniform(-64.0, 8.0, 400_000),
            rng.uniform(-12.0, 8.0, 400_000),
            np.arange(-64, 9, dtype=np.float64),
            np.arange(-64, 9, dtype=np.float64) + 0.5,
        ]
    ).astype(np.float32)


def test_relative_error_within_bound(exp2_poly) -> None:
    x = softmax_inputs(np.random.default_rng())
    got = exp2_poly(x).astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    rel = np.abs(got / want - 1.0)
    assert rel.max() <= REL_ERR_BOUND, f"max relative error {rel.max():.3e} at x = {x[rel.argmax()]!r}"


def test_masked_and_clamped_inputs(exp2_poly) -> None:
    x = np.array([-np.inf, -1e30, -64.0, -200.0, np.float32(-63.75)], dtype=np.float32)
    got = exp2_poly(x)
    assert np.all(np.isfinite(got)) and np.all(got > 0)
    np.testing.assert_allclose(got[:4], 2.0**-64, rtol=REL_ERR_BOUND)  # clamped to -64
    codes = torch.from_numpy(got.copy()).to(torch.float8_e4m3fn).view(torch.uint8)
    assert codes.tolist() == [0] * 5  # every one of them rounds to P = 0


@pytest.mark.parametrize(("dtype", "min_agree"), [(torch.float8_e4m3fn, 0.999), (torch.bfloat16, 0.99)])
def test_rounded_p_matches_exact_exp2(exp2_poly, dtype: torch.dtype, min_agree: float) -> None:
    x = softmax_inputs(np.random.default_rng())
    poly = torch.from_numpy(exp2_poly(x).copy()).to(dtype)
    exact = torch.from_numpy(np.exp2(x.astype(np.float64))).to(dtype)  # one rounding, from float64
    bits = torch.int16 if dtype == torch.bfloat16 else torch.uint8
    a, b = poly.view(bits).to(torch.int32), exact.view(bits).to(torch.int32)
    agree = (a == b).double().mean().item()
    assert agree >= min_agree, f"{dtype}: only {agree:.5f} of rounded P equal the exact ones"
    assert (a - b).abs().max().item() <= 1, f"{dtype}: a rounded P more than one code away"
