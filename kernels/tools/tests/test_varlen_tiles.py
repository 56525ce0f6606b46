"""The packed kernels' item rank -> (sequence, query tile) map (kernels/sm90/fa_fwd_wgmma/varlen_tiles.h),
compiled with the host C++ compiler: the header's own code runs, its warp steps over a loop of 32 lanes.
On fresh random packed batches (empty, 1-row, tile-multiple and clamped sequences, batches above 32),
every rank below the launcher's bound (ZYFA_VARLEN_TILES, abi/zyfa_abi.h) is checked: each (sequence,
tile) that exists is given to exactly one rank, no rank gets anything else, the ranks with a tile are a
prefix (a persistent CTA's walk stops at its first item without one), and the ranks follow the build's
order: tile-major, the tile index never rises with the rank (longest causal tiles first); sequence-major, a
sequence's tiles take consecutive ranks from its last tile down and the sequences come by tile count,
descending. In both orders a persistent CTA's incremental walk over rising ranks (varlen_tile_walk) gives
every rank the tile varlen_tile gives it. The items (item_tile: a rank's heads_q items) are checked the
same way: each (sequence, tile, head) once, tile-major in rank order with head lin % heads_q,
sequence-major kv head by kv head, each kv head's tiles longest first with its query heads adjacent."""

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

// The items of the batch (item_tile), `heads` query heads, `ratio` per kv head: every (sequence, tile,
// head) that exists goes to exactly one item below expected * heads, none to the others; each item lies in
// its rank's sequence (tile-major: its rank's tile, head lin % heads); sequence-major, a sequence's items
// go kv head by kv head, each kv head's tiles from the last down, its query heads adjacent. The walk along
// rising items (item_tile_walk) answers as item_tile does.
template <int kTile, bool kSeqMajor>
static int check_items(std::mt19937_64& rng, int c, const PackedQ& p, const std::vector<int>& tiles,
                       int64_t expected, int64_t bound) {
  const int ratio = 1 << (rng() % 3), heads = ratio * static_cast<int>(1 + rng() % 3);
  std::vector<std::vector<int>> hit(tiles.size());
  for (size_t b = 0; b < tiles.size(); ++b) hit[b].assign(static_cast<size_t>(tiles[b]) * heads, 0);
  VarlenTile prev{-1, 0, 0};
  for (int64_t lin = 0; lin < bound * heads; ++lin) {
    const uint32_t l = static_cast<uint32_t>(lin);
    const VarlenTile t = item_tile<kTile, kSeqMajor>(HostLanes{}, p, l, heads, ratio);
    if (t.batch < 0) {
      if (lin < expected * heads) return fail("an item below the item count got no tile", c, lin);
      continue;
    }
    if (lin >= expected * heads) return fail("an item past the last tile got a tile", c, lin);
    const VarlenTile r = varlen_tile<kTile, kSeqMajor>(HostLanes{}, p, l / static_cast<uint32_t>(heads));
    if (t.batch != r.batch) return fail("an item left its rank's sequence", c, lin);
    if (t.q_tile < 0 || t.q_tile >= tiles[t.batch] || t.head < 0 || t.head >= heads) {
      return fail("an item's tile or head is out of range", c, lin);
    }
    int& once = hit[t.batch][static_cast<size_t>(t.q_tile) * heads + t.head];
    if (once++ != 0) return fail("item given twice", c, lin);
    if (!kSeqMajor && (t.q_tile != r.q_tile || t.head != static_cast<int>(lin % heads))) {
      return fail("a tile-major item is not its rank's tile and head lin % heads", c, lin);
    }
    if (kSeqMajor) {
      const int last_tile = tiles[t.batch] - 1;
      bool ok;
      if (prev.batch != t.batch) {
        ok = t.head == 0 && t.q_tile == last_tile;
      } else if (t.head / ratio == prev.head / ratio) {
        ok = (t.q_tile == prev.q_tile && t.head == prev.head + 1) ||
             (t.q_tile == prev.q_tile - 1 && t.head % ratio == 0 && prev.head % ratio == ratio - 1);
      } else {
        ok = t.head / ratio == prev.head / ratio + 1 && t.head % ratio == 0 && t.q_tile == last_tile &&
             prev.q_tile == 0 && prev.head % ratio == ratio - 1;
      }
      if (!ok) return fail("a sequence's items are not kv head by kv head, tiles descending", c, lin);
    }
    prev = t;
  }
  for (const auto& h : hit) {
    for (int x : h) {
      if (x != 1) return fail("a (tile, head) was given to no item", c, -1);
    }
  }
  TileIndex at{-1, 0, 0};
  for (int64_t lin = static_cast<int64_t>(rng() % 3); lin < bound * heads + 3; lin += rng() % 7) {
    const uint32_t l = static_cast<uint32_t>(lin);
    const VarlenTile want = item_tile<kTile, kSeqMajor>(HostLanes{}, p, l, heads, ratio);
    const VarlenTile got = item_tile_walk<kTile, kSeqMajor>(HostLanes{}, p, l, heads, ratio, at);
    const bool same = got.q_tile == want.q_tile && got.head == want.head;
    if (got.batch != want.batch || (want.batch >= 0 && !same)) {
      return fail("the item walk differs from item_tile", c, lin);
    }
  }
  return 0;
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
  VarlenTile last{-1, 1 << 30, 0};
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
  std::vector<int> tiles(batch);
  for (int b = 0; b < batch; ++b) tiles[b] = static_cast<int>(seen[b].size());
  return check_items<kTile, kSeqMajor>(rng, c, p, tiles, expected, bound);
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


def run_with_header_edit(tmp_path: Path, old: str, new: str, seed: int, cases: int) -> str:
    """The harness's output against varlen_tiles.h with `old` replaced by `new` (a deliberate bug); fails
    unless the edit applies and the harness then exits non-zero."""
    header = (REPO / "kernels/sm90/fa_fwd_wgmma/varlen_tiles.h").read_text()
    broken = header.replace(old, new)
    assert broken != header
    (tmp_path / "sm90/fa_fwd_wgmma").mkdir(parents=True)
    (tmp_path / "sm90/fa_fwd_wgmma/varlen_tiles.h").write_text(broken)
    (tmp_path / "abi").mkdir()
    (tmp_path / "abi/zyfa_abi.h").write_text((REPO / "kernels/abi/zyfa_abi.h").read_text())
    (tmp_path / "main.cpp").write_text(PROGRAM)
    exe = tmp_path / "broken"
    flags = [f for f in compiler() if not f.startswith("-I")]
    subprocess.run([*flags, f"-I{tmp_path}", str(tmp_path / "main.cpp"), "-o", str(exe)], check=True)
    done = subprocess.run([str(exe), str(seed), str(cases)], capture_output=True, text=True)
    assert done.returncode != 0
    return done.stdout


def test_the_check_catches_a_walk_that_skips_a_step(tmp_path: Path) -> None:
    """A walk that moves at most one tile index per call is caught as soon as ranks jump further."""
    step = "  while (static_cast<int64_t>(rank) >= at.from_t) {"
    out = run_with_header_edit(tmp_path, step, step.replace("while", "if"), 3, 200)
    assert "the walk's tile differs" in out


def test_the_check_catches_sequence_major_items_in_rank_order(tmp_path: Path) -> None:
    """Sequence-major items whose tiles rise inside a kv head's run (still each (tile, head) once) are
    caught by the order check."""
    old = "    tile.q_tile = static_cast<int>(v - 1 - step);"
    out = run_with_header_edit(tmp_path, old, "    tile.q_tile = static_cast<int>(step);", 5, 200)
    assert "kv head by kv head, tiles descending" in out


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
