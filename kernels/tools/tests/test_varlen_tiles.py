"""The packed kernels' item rank -> (sequence, query tile) map (kernels/sm90/fa_fwd_wgmma/varlen_tiles.h),
compiled with the host C++ compiler: the header's own code runs, its warp steps over a loop of 32 lanes.
On fresh random packed batches (empty, 1-row, tile-multiple and clamped sequences, batches above 32),
every rank below the launcher's bound (ZYFA_VARLEN_TILES, abi/zyfa_abi.h) is checked: each (sequence,
tile) that exists is given to exactly one rank, no rank gets anything else, the ranks with a tile are a
prefix (a persistent CTA's walk stops at its first item without one), and the ranks follow the build's
order: tile-major, the tile index never rises with the rank (longest causal tiles first); sequence-major, a
sequence's tiles take consecutive ranks from its last tile down and the sequences come by tile count,
descending. In both orders a persistent CTA's incremental walk over rising ranks (varlen_tile_walk) gives
every rank the tile varlen_tile gives it."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "abi/zyfa_abi.h"
#include "sm90/fa_fwd_wgmma/varlen_tiles.h"

using namespace zyfa_sm90_ws;

// varlen_tiles.h's Lanes on the host: lane l of 32 computes f(l), as a warp's lanes do.
struct HostLanes {
  template <class F> int sum(F f) const {
    int s = 0;
    for (int lane = 0; lane < 32; ++lane) s += f(lane);
    return s;
  }
  template <class F> uint32_t ballot(F f) const {
    uint32_t bits = 0;
    for (int lane = 0; lane < 32; ++lane) bits |= f(lane) ? 1u << lane : 0u;
    return bits;
  }
};

static int fail(const char* what, int c, long long rank) {
  std::printf("case %d rank %lld: %s\n", c, rank, what);
  return 1;
}

// One random packed batch: lengths drawn from a mix of 0, 1, tile multiples and a long tail.
template <int kTile, bool kSeqMajor>
static int check_case(std::mt19937_64& rng, int c) {
  const int batch = 1 + static_cast<int>(rng() % 100);
  std::vector<int32_t> cu(batch + 1, 0);
  int longest = 0;
  for (int b = 0; b < batch; ++b) {
    int len;
    switch (rng() % 6) {
      case 0: len = 0; break;
      case 1: len = 1; break;
      case 2: len = kTile * static_cast<int>(1 + rng() % 4); break;
      case 3: len = kTile * static_cast<int>(1 + rng() % 4) + 1; break;
      default: len = static_cast<int>(rng() % (8 * kTile)); break;
    }
    cu[b + 1] = cu[b] + len;
    if (len > longest) longest = len;
  }
  const int64_t total_q = cu[batch] > 0 ? cu[batch] : 1;  // launchers refuse total_q = 0
  // max_seqlen_q: exact, larger than any sequence, or (a bad bound) smaller, which the kernel clamps to.
  int max_len = longest > 0 ? longest : 1;
  if (rng() % 4 == 0) max_len += static_cast<int>(rng() % (2 * kTile));
  if (rng() % 4 == 0 && max_len > 1) max_len = 1 + static_cast<int>(rng() % max_len);
  const PackedQ p{cu.data(), total_q, max_len, batch};

  std::vector<std::vector<int>> seen(batch);
  int64_t expected = 0;
  for (int b = 0; b < batch; ++b) {
    const int len = cu[b + 1] - cu[b] < max_len ? cu[b + 1] - cu[b] : max_len;
    seen[b].assign((len + kTile - 1) / kTile, 0);
    expected += static_cast<int64_t>(seen[b].size());
  }
  const int64_t bound = ZYFA_VARLEN_TILES(total_q, batch, max_len, kTile);
  if (expected > bound) return fail("the grid bound is below the tile count", c, -1);
  VarlenTile last{-1, 1 << 30};
  int64_t given = 0;
  for (int64_t rank = 0; rank < bound; ++rank) {
    const VarlenTile t = varlen_tile<kTile, kSeqMajor>(HostLanes{}, p, static_cast<uint32_t>(rank));
    if (t.batch < 0) {
      if (rank < expected) return fail("a rank below the tile count got no tile", c, rank);
      continue;
    }
    if (rank >= expected) return fail("a rank past the last tile got a tile", c, rank);
    if (t.batch >= batch) return fail("sequence out of range", c, rank);
    if (t.q_tile < 0 || t.q_tile >= static_cast<int>(seen[t.batch].size())) {
      return fail("tile past its sequence's end", c, rank);
    }
    if (seen[t.batch][t.q_tile]++ != 0) return fail("tile given twice", c, rank);
    if (!kSeqMajor && t.q_tile > last.q_tile) return fail("tile index rose with the rank", c, rank);
    const bool next_of_last = t.batch == last.batch && t.q_tile == last.q_tile - 1;
    if (kSeqMajor && last.batch >= 0 && last.q_tile > 0 && !next_of_last) {
      return fail("a sequence's tiles are not consecutive and descending", c, rank);
    }
    if (kSeqMajor && t.batch != last.batch) {
      if (t.q_tile + 1 != static_cast<int>(seen[t.batch].size())) {
        return fail("a sequence began below its last tile", c, rank);
      }
      if (last.batch >= 0 && seen[t.batch].size() > seen[last.batch].size()) {
        return fail("a sequence with more tiles came later", c, rank);
      }
    }
    last = t;
    ++given;
  }
  if (given != expected) return fail("a tile was given to no rank", c, -1);
  // A persistent CTA's walk (varlen_tile_walk): non-decreasing ranks, steps of 0 to a few tiles' worth,
  // sometimes past the last tile, each answered as varlen_tile answers it.
  for (int walk = 0; walk < 4; ++walk) {
    TileIndex at{-1, 0, 0};
    int64_t rank = static_cast<int64_t>(rng() % 3);
    while (rank < bound + 3) {
      const uint32_t r = static_cast<uint32_t>(rank);
      const VarlenTile want = varlen_tile<kTile, kSeqMajor>(HostLanes{}, p, r);
      const VarlenTile got = varlen_tile_walk<kTile, kSeqMajor>(HostLanes{}, p, r, at);
      if (got.batch != want.batch || (want.batch >= 0 && got.q_tile != want.q_tile)) {
        return fail("the walk's tile differs from varlen_tile's", c, rank);
      }
      rank += static_cast<int64_t>(rng() % (walk + 1 < 4 ? 3 * (walk + 1) : 3 * kTile));
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;  // usage: seed cases
  std::mt19937_64 rng(std::strtoull(argv[1], nullptr, 10));
  const int cases = std::atoi(argv[2]);
  int bad = 0;
  for (int c = 0; c < cases && bad == 0; ++c) {  // both orders on tile sizes 64 and 128
    switch (c % 4) {
      case 0: bad = check_case<64, false>(rng, c); break;
      case 1: bad = check_case<128, false>(rng, c); break;
      case 2: bad = check_case<64, true>(rng, c); break;
      default: bad = check_case<128, true>(rng, c); break;
    }
  }
  if (bad == 0) std::printf("ok %d cases\n", cases);
  return bad;
}
"""


def compiler() -> list[str]:
    """The host C++ compiler's command with the flags of these tests (skips without one)."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    return [cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'kernels'}"]


@pytest.fixture(scope="module")
def tiles_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("varlen_tiles")
    (work / "main.cpp").write_text(PROGRAM)
    exe = work / "tiles"
    subprocess.run([*compiler(), str(work / "main.cpp"), "-o", str(exe)], check=True)
    return exe


def test_every_tile_once_longest_first(tiles_exe: Path) -> None:
    seed = random.SystemRandom().randrange(2**63)
    done = subprocess.run([str(tiles_exe), str(seed), "400"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok 400 cases", f"seed {seed}: {done.stdout}"


def test_the_check_catches_a_walk_that_skips_a_step(tmp_path: Path) -> None:
    """A walk that moves at most one tile index per call is caught as soon as ranks jump further."""
    header = (REPO / "kernels/sm90/fa_fwd_wgmma/varlen_tiles.h").read_text()
    step = "  while (static_cast<int64_t>(rank) >= at.from_t) {"
    broken = header.replace(step, step.replace("while", "if"))
    assert broken != header
    (tmp_path / "sm90/fa_fwd_wgmma").mkdir(parents=True)
    (tmp_path / "sm90/fa_fwd_wgmma/varlen_tiles.h").write_text(broken)
    (tmp_path / "abi").mkdir()
    (tmp_path / "abi/zyfa_abi.h").write_text((REPO / "kernels/abi/zyfa_abi.h").read_text())
    (tmp_path / "main.cpp").write_text(PROGRAM)
    exe = tmp_path / "broken"
    flags = [f for f in compiler() if not f.startswith("-I")]
    subprocess.run([*flags, f"-I{tmp_path}", str(tmp_path / "main.cpp"), "-o", str(exe)], check=True)
    done = subprocess.run([str(exe), "3", "200"], capture_output=True, text=True)
    assert done.returncode != 0 and "the walk's tile differs" in done.stdout


def test_the_check_catches_a_wrong_bound(tiles_exe: Path, tmp_path: Path) -> None:
    """The harness fails when the map and the grid disagree: with the bound one short, a batch whose
    tiles fill it exactly reports a missing tile."""
    program = PROGRAM.replace(
        "const int64_t bound = ZYFA_VARLEN_TILES(total_q, batch, max_len, kTile);",
        "const int64_t bound = expected - 1;\n  if (expected == 0) return 0;",
    ).replace('if (expected > bound) return fail("the grid bound is below the tile count", c, -1);', "")
    (tmp_path / "main.cpp").write_text(program)
    exe = tmp_path / "broken"
    subprocess.run([*compiler(), str(tmp_path / "main.cpp"), "-o", str(exe)], check=True)
    done = subprocess.run([str(exe), "1", "50"], capture_output=True, text=True)
    assert done.returncode != 0 and "a tile was given to no rank" in done.stdout
