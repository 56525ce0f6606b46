"""The paged kernels' key -> (page, slot) division (kernels/sm90/fa_fwd_wgmma/page_div.h), compiled with the
host C++ compiler so the header's own code runs: against `/` and `%` for every page size 1-4096 on every
key below 2^17 and on the keys near multiples of the page size up to 2^31 - 1, and for random page sizes
up to 2^31 - 1 on random and extreme keys."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "sm90/fa_fwd_wgmma/page_div.h"

using zyfa_sm90_ws::make_page_div;

static int check(uint32_t d, uint32_t n) {
  const auto p = make_page_div(d);
  if (p.quotient(n) != n / d) {
    std::printf("d=%u n=%u: quotient %u, expected %u\n", d, n, p.quotient(n), n / d);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::mt19937_64 rng(std::strtoull(argv[1], nullptr, 10));
  const uint32_t top = 0x7fffffffu;
  for (uint32_t d = 1; d <= 4096; ++d) {
    for (uint32_t n = 0; n < (1u << 17); ++n)
      if (check(d, n)) return 1;
    for (int i = 0; i < 64; ++i) {  // around multiples of d, up to the largest key
      const uint32_t m = static_cast<uint32_t>(rng() % (top / d + 1)) * d;
      for (int64_t n = int64_t{m} - 2; n <= int64_t{m} + 2; ++n)
        if (n >= 0 && n <= top && check(d, static_cast<uint32_t>(n))) return 1;
    }
    if (check(d, top)) return 1;
  }
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t d = 1 + static_cast<uint32_t>(rng() % top);
    const uint32_t n = static_cast<uint32_t>(rng() % (uint64_t{top} + 1));
    if (check(d, n) || check(d, top) || check(d, d - 1) || check(d, d)) return 1;
  }
  std::printf("ok\n");
  return 0;
}
"""


def compiler() -> list[str]:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    return [cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'kernels'}"]


def build(tmp_path: Path, program: str) -> Path:
    (tmp_path / "main.cpp").write_text(program)
    exe = tmp_path / "page_div"
    subprocess.run([*compiler(), str(tmp_path / "main.cpp"), "-o", str(exe)], check=True)
    return exe


def test_quotient_matches_division(tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**63)
    done = subprocess.run([str(build(tmp_path, PROGRAM)), str(seed)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", f"seed {seed}: {done.stdout}"


def test_the_check_catches_a_short_magic(tmp_path: Path) -> None:
    """A magic number rounded down instead of up is wrong for some divisor: the harness must say so."""
    header = (REPO / "kernels/sm90/fa_fwd_wgmma/page_div.h").read_text()
    broken = header.replace("((uint64_t{1} << (31 + l)) + d - 1) / d", "(uint64_t{1} << (31 + l)) / d")
    assert broken != header
    (tmp_path / "sm90/fa_fwd_wgmma").mkdir(parents=True)
    (tmp_path / "sm90/fa_fwd_wgmma/page_div.h").write_text(broken)
    program = PROGRAM.replace(
        '#include "sm90/fa_fwd_wgmma/page_div.h"', f'#include "{tmp_path}/sm90/fa_fwd_wgmma/page_div.h"'
    )
    done = subprocess.run([str(build(tmp_path, program)), "1"], capture_output=True, text=True)
    assert done.returncode != 0 and "expected" in done.stdout
