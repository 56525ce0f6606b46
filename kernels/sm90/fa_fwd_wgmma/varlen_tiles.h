// fa_fwd_wgmma: which (sequence, query tile) a work item of a packed batch computes (ZYFA_WS_VARLEN).
//
// The launcher counts the items from host values only (ZYFA_VARLEN_TILES in abi/zyfa_abi.h: an upper bound
// on the tiles of all sequences, times heads_q); an item finds its tile from cu_seqlens_q on the device,
// with no table and no atomics. Sequence b has n_b = ceil(len_q(b) / tile_m) query tiles, len_q clamped as
// sequence_of (varlen.cuh) clamps it, so the tiles an item is given always exist in the sequence it reads.
// The ranks that get a tile are exactly 0 .. sum_b n_b - 1, a prefix: a persistent CTA, whose items (and
// so ranks) only grow, stops at its first item without one.
//
// Two orders, a build's choice (kSeqMajor below; the manifest row's tile_order). Both give the costliest
// items first: causal masking is bottom-right, so tile t of a sequence sees (t + 1) * tile_m + len_k - len_q
// keys at most, and with no cached prefix its cost grows with t alone.
// - Tile-major ("ascending", the default): rank r walks the tiles by tile index t, descending: every
//   sequence's tile t = T - 1 first (T = the largest n_b), then tile T - 2 of every sequence that has one,
//   ..., tile 0 last; inside one t, sequences in batch order. This is the longest-first order of the dense
//   kernels (scheduler.cuh) over the whole packed batch, a prefix only shifting each sequence's costs.
// - Sequence-major ("sequence_major"): sequences by tile count n_b, descending (batch order among equal
//   counts), each sequence's tiles on consecutive ranks, longest first; its items then go kv head by kv head
//   (item_tile below). The items that run together read one kv head's K / V of one sequence, which stays in
//   L2 across its tiles; tile-major deals every sequence's tile t out before tile t - 1, so a sequence's K / V
//   is read again for each of its tiles once the batch's K / V outgrows L2. It pays where K / V is large
//   (192/128 with 16 K / V heads) and loses where the kernel is short of load balance rather than bandwidth
//   (kernels/sm90/NOTES.md has the figures).
//
// A warp computes the map with no shared memory. Ranks fall into classes t = T - 1 .. 0, in that order:
// tile-major, class t holds every sequence's tile t (the sequences with n_b > t); sequence-major, every tile
// of the sequences with n_b = t + 1. One pass over the batch, 32 sequences per step, gives tiles_from(t),
// the ranks of the classes >= t; rank r lies in class t where tiles_from(t + 1) <= r < tiles_from(t),
// found by bisection over t in [0, T) (or, along a persistent CTA's rising ranks, by stepping down from the
// last rank's class: varlen_tile_walk); then one ballot pass picks the sequence (tile_at). The per-lane
// steps are written once, over a Lanes type: the warp's lanes on the device (WarpLanes, varlen.cuh), a loop
// over 32 lanes in the host test (kernels/tools/tests/test_varlen_tiles.py), so the test runs this code,
// not a model of it. The V pre-pass's column search (last_at_or_before, below; vprep.cuh) is written over the
// same Lanes and tested the same way (test_last_at_or_before.py).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define ZYFA_HD __host__ __device__ __forceinline__
#else
#define ZYFA_HD inline
#endif
// The batch loops' pragma: empty here; a persistent build sets it to _Pragma("unroll 1") before including
// this header (varlen.cuh): there one producer warp maps the items within 56 registers, which unrolled
// loads overflow.
#ifndef ZYFA_MAP_LOOP
#define ZYFA_MAP_LOOP
#endif

namespace zyfa_sm90_ws {

ZYFA_HD int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

ZYFA_HD int32_t load_index(const int32_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

ZYFA_HD int popcount32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}

// The last b in [0, n) with value_of(b) <= x, or -1, for values that never decrease with b, in rounds of 32
// probes: lane i probes b = lo + 1 + i step, the probes at or before x are a prefix of the lanes, and the round
// narrows (lo, hi) to one step. Two rounds of one load per lane up to 1024 entries, where a bisection waits out
// log2 n loads one after another. (Values that do decrease break the order; lo still lands in [-1, n).)
template <class Lanes, class ValueOf>
ZYFA_HD int last_at_or_before(const Lanes& lanes, int n, int64_t x, ValueOf value_of) {
  int lo = -1, hi = n;  // value_of(lo) <= x < value_of(hi), with lo = -1 and hi = n as sentinels
  while (hi - lo > 1) {
    const int step = (hi - lo - 1 + 31) / 32;
    const int first = lo + 1;
    const int at = popcount32(lanes.ballot([&](int lane) {
      const int b = first + lane * step;
      return b < hi && value_of(b) <= x;
    }));
    if (at > 0) lo = first + (at - 1) * step;
    const int after = first + at * step;  // the first probe past x
    hi = after < hi ? after : hi;
  }
  return lo;
}

// The query rows of a packed batch, as the kernel may read them: cu_seqlens_q [batch + 1] on the device,
// total_q rows of q, no sequence longer than max_len_q (args.seqlen_q).
struct PackedQ {
  const int32_t* cu_seqlens_q;
  int64_t total_q;
  int max_len_q;
  int batch;
};

// Sequence b's first query row and query count: rows inside [0, total_q), start <= end, count <= max_len_q.
struct QRows {
  int64_t start;
  int len;
};

ZYFA_HD QRows q_rows_of(const PackedQ& p, int b) {
  QRows r;
  r.start = clamp64(load_index(p.cu_seqlens_q + b), 0, p.total_q);
  const int64_t end = clamp64(load_index(p.cu_seqlens_q + b + 1), r.start, p.total_q);
  const int64_t len = end - r.start;
  r.len = static_cast<int>(len < p.max_len_q ? len : p.max_len_q);
  return r;
}

// n_b: sequence b's query tiles (0 for an empty sequence).
template <int kTile>
ZYFA_HD int q_tiles_of(const PackedQ& p, int b) {
  return (q_rows_of(p, b).len + kTile - 1) / kTile;
}

// The ranks of the classes >= t: tile-major sum_b max(n_b - t, 0), sequence-major sum_b n_b [n_b > t]. Each
// lane adds its sequence of every 32; a lane's share of one step is at most 32 * n_b < 2^31
// (n_b <= 2^31 / kTile).
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD int64_t tiles_from(const Lanes& lanes, const PackedQ& p, int t) {
  int64_t total = 0;
  ZYFA_MAP_LOOP
  for (int b0 = 0; b0 < p.batch; b0 += 32) {
    total += lanes.sum([&](int lane) {
      const int b = b0 + lane;
      if (b >= p.batch) return 0;
      if constexpr (kSeqMajor) {
        const int n = q_tiles_of<kTile>(p, b);
        return n > t ? n : 0;
      } else {
        const int above = q_tiles_of<kTile>(p, b) - t;
        return above > 0 ? above : 0;
      }
    });
  }
  return total;
}

// The j-th (from 0) sequence, in batch order, of class t (tile-major n_b > t, sequence-major n_b = t + 1); -1
// when there are <= j.
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD int nth_sequence_with_tile(const Lanes& lanes, const PackedQ& p, int t, int64_t j) {
  ZYFA_MAP_LOOP
  for (int b0 = 0; b0 < p.batch; b0 += 32) {
    uint32_t has = lanes.ballot([&](int lane) {
      const int b = b0 + lane;
      if constexpr (kSeqMajor) {
        return b < p.batch && q_tiles_of<kTile>(p, b) == t + 1;
      } else {
        return b < p.batch && q_tiles_of<kTile>(p, b) > t;
      }
    });
    const int count = popcount32(has);
    if (j < count) {
      for (int skip = static_cast<int>(j); skip > 0; --skip) has &= has - 1u;  // drop the j lowest
      return b0 + popcount32((has & (0u - has)) - 1u);                             // index of the lowest left
    }
    j -= count;
  }
  return -1;
}

// An item's tile: sequence `batch` (-1: past the last tile, nothing to compute), query tile `q_tile`, query
// head `head` (item_tile; the rank maps leave it 0).
struct VarlenTile {
  int batch;
  int q_tile;
  int head;
};

// Where a rank lies in the order: class t with tiles_from(t + 1) = from_next <= rank < from_t =
// tiles_from(t). t = -1: nowhere yet (the start of a varlen_tile_walk).
struct TileIndex {
  int t;
  int64_t from_next;
  int64_t from_t;
};

// The class of `rank` by bisection over t in [0, T): about log2(T) + 1 passes over the batch. t = -1
// when rank >= sum_b n_b (no tile).
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD TileIndex locate_rank(const Lanes& lanes, const PackedQ& p, uint32_t rank) {
  TileIndex at;
  at.t = -1;
  at.from_next = at.from_t = 0;
  if (p.max_len_q <= 0) return at;
  const int64_t all = tiles_from<kTile, kSeqMajor>(lanes, p, 0);
  if (static_cast<int64_t>(rank) >= all) return at;
  // Invariant: tiles_from(lo) = from_lo > rank >= tiles_from(hi) = below_hi; n_b <= ceil(max_len_q / kTile).
  int lo = 0;
  int hi = static_cast<int>((static_cast<int64_t>(p.max_len_q) + kTile - 1) / kTile);
  int64_t from_lo = all, below_hi = 0;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    const int64_t from_mid = tiles_from<kTile, kSeqMajor>(lanes, p, mid);
    if (from_mid > static_cast<int64_t>(rank)) {
      lo = mid;
      from_lo = from_mid;
    } else {
      hi = mid;
      below_hi = from_mid;
    }
  }
  at.t = lo;
  at.from_next = below_hi;
  at.from_t = from_lo;
  return at;
}

// The tile of rank `rank` in its class `at` (at.t >= 0), o = rank - from_next ranks into it: tile-major, tile t
// of the o-th sequence of the class; sequence-major, each sequence of the class takes t + 1 consecutive
// ranks, its tiles longest first.
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD VarlenTile tile_at(const Lanes& lanes, const PackedQ& p, uint32_t rank, const TileIndex& at) {
  int64_t j = static_cast<int64_t>(rank) - at.from_next;  // the rank's place in its class
  VarlenTile tile;
  tile.q_tile = at.t;
  tile.head = 0;
  if constexpr (kSeqMajor) {  // each sequence of the class takes v = t + 1 consecutive ranks
    const int64_t v = at.t + 1, o = j;
    j = o / v;
    tile.q_tile = static_cast<int>(v - 1 - (o - j * v));
  }
  tile.batch = nth_sequence_with_tile<kTile, kSeqMajor>(lanes, p, at.t, j);
  return tile;
}

// The tile of rank `rank` in the order above. Every rank < sum_b n_b gets a distinct
// (b, t) with t < n_b; every other rank gets batch -1.
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD VarlenTile varlen_tile(const Lanes& lanes, const PackedQ& p, uint32_t rank) {
  const TileIndex at = locate_rank<kTile, kSeqMajor>(lanes, p, rank);
  if (at.t < 0) return VarlenTile{-1, 0, 0};
  return tile_at<kTile, kSeqMajor>(lanes, p, rank, at);
}

// varlen_tile for the non-decreasing ranks of one persistent CTA's walk, `at` carried from one call to the
// next (start: t = -1): the class of a rank is the last one's or below it, so after the first call's
// bisection a call steps t down one pass per class crossed (usually none) and then picks the sequence (one
// pass): about two passes per item instead of log2(T) + 2. A rank below the last one bisects again.
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD VarlenTile varlen_tile_walk(const Lanes& lanes, const PackedQ& p, uint32_t rank, TileIndex& at) {
  if (at.t < 0 || static_cast<int64_t>(rank) < at.from_next) at = locate_rank<kTile, kSeqMajor>(lanes, p, rank);
  if (at.t < 0) return VarlenTile{-1, 0, 0};
  while (static_cast<int64_t>(rank) >= at.from_t) {
    if (at.t == 0) {  // rank >= tiles_from(0): past the last tile
      at.t = -1;
      return VarlenTile{-1, 0, 0};
    }
    --at.t;
    at.from_next = at.from_t;
    at.from_t = tiles_from<kTile, kSeqMajor>(lanes, p, at.t);
  }
  return tile_at<kTile, kSeqMajor>(lanes, p, rank, at);
}

// Items: item lin of a launch with `heads` query heads, `ratio` of them per kv head, belongs to rank
// lin / heads (the ranks above; every rank's heads items in a row). Tile-major: the rank's tile, head
// lin % heads (the heads of one tile adjacent). Sequence-major: a sequence's v * heads items (v = at.t + 1
// tiles, its ranks' items) go kv head by kv head, each kv head's tiles longest first, the kv head's `ratio`
// query heads adjacent (FlashAttention-3's varlen order): the items that run together read one kv head's
// K / V rows of one sequence, which stay in L2 across its tiles even where the sequence's K / V of all heads
// does not fit. `tile` is rank lin / heads's tile (batch >= 0) and `at` its class.
template <bool kSeqMajor>
ZYFA_HD VarlenTile item_of_rank_tile(VarlenTile tile, uint32_t lin, int heads, int ratio, const TileIndex& at) {
  const int64_t rank = lin / static_cast<uint32_t>(heads);
  if constexpr (kSeqMajor) {
    const int64_t v = at.t + 1;
    const int64_t first_rank = rank - (v - 1 - tile.q_tile);  // the sequence's first rank (its last tile)
    const int64_t o = static_cast<int64_t>(lin) - first_rank * heads;  // in [0, v * heads)
    const int64_t per_kv = v * ratio;
    const int64_t kv = o / per_kv, in_kv = o - kv * per_kv;
    const int64_t step = in_kv / ratio;  // tiles into the kv head's run, longest first
    tile.q_tile = static_cast<int>(v - 1 - step);
    tile.head = static_cast<int>(kv * ratio + (in_kv - step * ratio));
  } else {
    tile.head = static_cast<int>(lin - rank * heads);
  }
  return tile;
}

// Item lin's tile and head (batch -1 past the last tile).
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD VarlenTile item_tile(const Lanes& lanes, const PackedQ& p, uint32_t lin, int heads, int ratio) {
  const TileIndex at = locate_rank<kTile, kSeqMajor>(lanes, p, lin / static_cast<uint32_t>(heads));
  if (at.t < 0) return VarlenTile{-1, 0, 0};
  const VarlenTile tile = tile_at<kTile, kSeqMajor>(lanes, p, lin / static_cast<uint32_t>(heads), at);
  return item_of_rank_tile<kSeqMajor>(tile, lin, heads, ratio, at);
}

// item_tile along a persistent CTA's non-decreasing items, `at` carried as varlen_tile_walk carries it.
template <int kTile, bool kSeqMajor, class Lanes>
ZYFA_HD VarlenTile item_tile_walk(const Lanes& lanes, const PackedQ& p, uint32_t lin, int heads, int ratio,
                                  TileIndex& at) {
  const VarlenTile tile = varlen_tile_walk<kTile, kSeqMajor>(lanes, p, lin / static_cast<uint32_t>(heads), at);
  if (tile.batch < 0) return tile;
  return item_of_rank_tile<kSeqMajor>(tile, lin, heads, ratio, at);
}

}  // namespace zyfa_sm90_ws
