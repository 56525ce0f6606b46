"""The packed V pre-pass's column search, `last_at_or_before` (kernels/sm90/fa_fwd_wgmma/varlen_tiles.h),
compiled with the host C++ compiler: the header's own code runs, its ballot over a loop of 32 lanes. On fresh
random non-decreasing arrays (1 to 5000 entries, repeated values, x below the first and past the last entry)
its answer must be std::upper_bound's index minus one, within ceil(log32 n) rounds of probes (one at n <= 32);
on arrays that do decrease it must still answer inside [-1, n)."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HEADER = REPO / "kernels" / "sm90" / "fa_fwd_wgmma" / "varlen_tiles.h"

PROGRAM = r"""
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "sm90/fa_fwd_wgmma/varlen_tiles.h"

using namespace zyfa_sm90_ws;

// A warp on the host: lane l of 32 computes f(l); `rounds` counts the ballots (one probe round each).
struct HostLanes {
  mutable int rounds = 0;
  template <class F> uint32_t ballot(F f) const {
    ++rounds;
    uint32_t bits = 0;
    for (int lane = 0; lane < 32; ++lane) bits |= f(lane) ? 1u << lane : 0u;
    return bits;
  }
};

int main(int, char** argv) {
  std::mt19937_64 rng(std::strtoull(argv[1], nullptr, 10));
  const int cases = std::atoi(argv[2]);
  const int sizes[] = {1, 2, 31, 32, 33, 64, 100, 1023, 1024, 1025, 5000};
  for (int c = 0; c < cases; ++c) {
    const int n = c % 3 == 0 ? sizes[rng() % 11] : 1 + static_cast<int>(rng() % 5000);
    std::vector<int64_t> v(n);
    int64_t at = static_cast<int64_t>(rng() % 100);
    for (auto& e : v) e = at += static_cast<int64_t>(rng() % 4 == 0 ? 0 : rng() % 300);  // repeats too
    const bool rising = c % 10 != 9;
    if (!rising) std::shuffle(v.begin(), v.end(), rng);
    for (int q = 0; q < 20; ++q) {
      const int64_t x = static_cast<int64_t>(rng() % static_cast<uint64_t>(v.back() + 400)) - 200;
      HostLanes lanes;
      const int got = last_at_or_before(lanes, n, x, [&](int b) { return v[b]; });
      if (got < -1 || got >= n) {
        std::printf("case %d: %d outside [-1, %d)\n", c, got, n);
        return 1;
      }
      if (!rising) continue;
      const int want = static_cast<int>(std::upper_bound(v.begin(), v.end(), x) - v.begin()) - 1;
      int bound = 1;
      for (int64_t span = 32; span < n; span *= 32) ++bound;
      if (got != want || lanes.rounds > bound) {
        std::printf("case %d (n %d, x %lld): %d after %d rounds, want %d within %d\n", c, n,
                    static_cast<long long>(x), got, lanes.rounds, want, bound);
        return 1;
      }
    }
  }
  std::printf("ok %d cases\n", cases);
  return 0;
}
"""


def compiler() -> list[str]:
    """The host C++ compiler's command with the flags of these tests (skips without one)."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    return [cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"]


def run(tmp_path: Path, header_dir: Path, seed: int, cases: int) -> subprocess.CompletedProcess[str]:
    """Build the harness against the kernels tree at `header_dir` and run `cases` cases from `seed`."""
    (tmp_path / "main.cpp").write_text(PROGRAM)
    exe = tmp_path / "search"
    subprocess.run([*compiler(), f"-I{header_dir}", str(tmp_path / "main.cpp"), "-o", str(exe)], check=True)
    return subprocess.run([str(exe), str(seed), str(cases)], capture_output=True, text=True)


def test_answers_as_upper_bound(tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**63)
    done = run(tmp_path, REPO / "kernels", seed, 3000)
    assert done.returncode == 0 and done.stdout.strip() == "ok 3000 cases", f"seed {seed}: {done.stdout}"


def test_the_check_catches_a_wrong_step(tmp_path: Path) -> None:
    """The same harness against the header with the round's step one too small: the search then answers
    wrong or takes more rounds, and the harness must say so."""
    old = "const int step = (hi - lo - 1 + 31) / 32;"
    text = HEADER.read_text(encoding="utf-8")
    assert old in text
    edited = tmp_path / "kernels" / "sm90" / "fa_fwd_wgmma"
    edited.mkdir(parents=True)
    wrong = "const int step = (hi - lo - 1 + 31) / 32 - 1 + (hi - lo <= 33);"
    (edited / "varlen_tiles.h").write_text(text.replace(old, wrong))
    done = run(tmp_path, tmp_path / "kernels", 1, 300)
    assert done.returncode == 1 and "want" in done.stdout, done.stdout
