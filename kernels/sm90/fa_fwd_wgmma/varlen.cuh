// fa_fwd_wgmma: packed variable-length batches (ZYFA_WS_VARLEN; kernels/abi/zyfa_abi.h, ABI 4).
//
// The work items of a packed batch are (query tile, head) pairs: item lin belongs to rank lin / heads_q, for
// lin below the compact bound ZYFA_VARLEN_TILES(total_q, batch, max_seqlen_q, 128) x heads_q; varlen_item maps
// an item to a sequence (its batch index), a q tile of it and a head (varlen_tiles.h, item_tile: ranks longest
// first), or to nothing past the last tile. A persistent build (grid "persistent", launched
// (min(SMs, items), 1, 1)) walks its items as the dense persistent kernel does (scheduler.cuh, cta_item),
// the producer's first warp mapping each and handing it to the other warps (ItemSlots); a tile-grid build
// (grid "tiles", launched (bound, heads_q, 1)) computes item blockIdx.x + gridDim.x * blockIdx.y and exits
// at once when it has none. Either way the item then runs on the sequence's own
// zyfa_fwd_args (sequence_args): q, out (and packed k, v) moved to the sequence's first row, seqlen_q /
// seqlen_k its counts, its descales from the descale table: the dense kernel's code, unchanged.
// A paged build ("paged", 2) reads K and V rows through the page table (load_tile_paged,
// load_v_staging_paged): key j of the sequence is slot j % page_size of page pages[j / page_size].
// Every count and page index is clamped to what the launcher sized (max_seqlen_*, total_*, num_pages), so
// a bad index tensor reads and writes only inside q, k, v, out and lse.
#pragma once

#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/load.cuh"
#include "sm90/fa_fwd_wgmma/page_div.h"
#include "sm90/fa_fwd_wgmma/ptx.cuh"
#include "sm90/fa_fwd_wgmma/scheduler.cuh"
#if ZYFA_WS_PERSISTENT
#define ZYFA_MAP_LOOP _Pragma("unroll 1")
#endif
#include "sm90/fa_fwd_wgmma/varlen_tiles.h"

namespace zyfa_sm90_ws {

// One sequence of a packed batch, clamped to the launch's sizes.
struct Sequence {
  int64_t q_start;        // first row of q / out
  int64_t k_start;        // first row of packed k / v (0 when paged)
  int len_q, len_k;
  const int32_t* pages;   // paged: this sequence's row of the page table
};

__device__ __forceinline__ PackedQ packed_q(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl) {
  PackedQ p;
  p.cu_seqlens_q = vl.cu_seqlens_q;
  p.total_q = vl.total_q;
  p.max_len_q = packed.seqlen_q;
  p.batch = packed.batch;
  return p;
}

// varlen_tiles.h's Lanes on the device: the 32 lanes of the calling warp (all active), each computing f of
// its own lane; the results are warp-uniform.
struct WarpLanes {
  int lane;
  template <class F>
  __device__ __forceinline__ int sum(F f) const { return __reduce_add_sync(0xffffffffu, f(lane)); }
  template <class F>
  __device__ __forceinline__ uint32_t ballot(F f) const { return __ballot_sync(0xffffffffu, f(lane)); }
};

// Sequence b's rows and counts (zyfa_abi.h's rules), each clamped: rows inside q (k), counts <= the
// max_seqlen bounds (seqlen_q / seqlen_k of the packed args) and, paged, <= its table row's pages.
__device__ __forceinline__ Sequence sequence_of(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl, int b) {
  Sequence s;
  const QRows q = q_rows_of(packed_q(packed, vl), b);
  s.q_start = q.start;
  s.len_q = q.len;
  int64_t len_k;
  if (vl.seqused_k != nullptr) {
    len_k = __ldg(vl.seqused_k + b);
  } else {
    len_k = static_cast<int64_t>(__ldg(vl.cu_seqlens_k + b + 1)) - __ldg(vl.cu_seqlens_k + b);
  }
  int64_t k_rows;  // keys the sequence may address
  if constexpr (kPaged) {
    s.k_start = 0;
    s.pages = vl.page_table + static_cast<int64_t>(b) * vl.page_table_stride;
    k_rows = static_cast<int64_t>(vl.max_pages) * vl.page_size;
  } else {
    s.k_start = clamp64(__ldg(vl.cu_seqlens_k + b), 0, vl.total_k);
    s.pages = nullptr;
    k_rows = vl.total_k - s.k_start;
  }
  s.len_k = static_cast<int>(clamp64(len_k, 0, min(k_rows, static_cast<int64_t>(packed.seqlen_k))));
  return s;
}

// The dense view of one sequence: what the rest of the kernel reads as `args`. Packed q / out (and k / v)
// start at the sequence's first row; their batch strides are 0 (the sequence is batch 0 of itself); a
// paged cache keeps its base (the page gather adds the page offsets). With a descale table, the sequence's
// descales of kv head `kv_head` replace the per-tensor ones.
__device__ __forceinline__ zyfa_fwd_args sequence_args(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl,
                                                       const Sequence& s, int b, int kv_head) {
  zyfa_fwd_args a = packed;
  a.q = static_cast<const uint8_t*>(packed.q) + s.q_start * packed.q_stride_seq * kESize;
  a.out = static_cast<__nv_bfloat16*>(packed.out) + s.q_start * packed.out_stride_seq;
  if (packed.lse != nullptr) a.lse = packed.lse + s.q_start;  // lse [heads_q, total_q]: row stride total_q
  if constexpr (!kPaged) {
    a.k = static_cast<const uint8_t*>(packed.k) + s.k_start * packed.k_stride_seq * kESize;
    a.v = static_cast<const uint8_t*>(packed.v) + s.k_start * packed.v_stride_seq * kESize;
  }
  a.q_stride_batch = a.k_stride_batch = a.v_stride_batch = a.out_stride_batch = 0;
  a.seqlen_q = s.len_q;
  a.seqlen_k = s.len_k;
  if (kFp8 && (packed.flags & ZYFA_FLAG_DESCALE_TABLE) != 0u) {
    const int64_t at = static_cast<int64_t>(b) * packed.heads_kv + kv_head;
    const int64_t plane = static_cast<int64_t>(packed.batch) * packed.heads_kv;
    a.q_descale = __ldg(vl.descales + at);
    a.k_descale = __ldg(vl.descales + plane + at);
    a.v_descale = __ldg(vl.descales + 2 * plane + at);
  }
  return a;
}

// One work item of a packed batch: the sequence's view, the sequence and the block. blk.batch < 0: no tile
// (the rank is past the last tile); nothing else is set then.
struct VarlenItem {
  zyfa_fwd_args args;
  Sequence seq;
  Block blk;
};

// The item of tile `tile` (item_tile's answer for item lin): the sequence's view and the block. A few
// independent loads of the sequence's counts; no warp reduction. Tile-major, every warp takes the head as
// lin % heads_q itself, as item_tile does: the item slots then carry no head, and those builds keep the code
// they were timed with.
__device__ __forceinline__ VarlenItem varlen_item_of(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl,
                                                     VarlenTile tile, uint32_t lin) {
  VarlenItem it;
  it.blk.batch = tile.batch;  // its view's batch strides are 0
  if (tile.batch < 0) return it;
  const int ratio = packed.heads_q / packed.heads_kv;
  it.blk.head = kSeqMajor ? tile.head : static_cast<int>(lin % static_cast<uint32_t>(packed.heads_q));
  it.blk.q_row0 = tile.q_tile * kTileM;
  it.seq = sequence_of(packed, vl, tile.batch);
  it.args = sequence_args(packed, vl, it.seq, tile.batch, it.blk.head / ratio);
  finish_block(it.blk, ratio, (it.args.flags & ZYFA_FLAG_CAUSAL) != 0u,
               static_cast<int64_t>(it.args.seqlen_k) - it.args.seqlen_q, it.args.seqlen_q, it.args.seqlen_k);
  return it;
}

// Item lin in item_tile's order (GQA heads that share K / V rows adjacent, so they read them while they are
// in L2), mapped by the calling warp (all 32 lanes active: warp reductions, no shared memory, no barrier).
// Every warp that calls it computes the same item, so a block's exit on batch < 0 is uniform. (Persistent
// builds: ItemSlots.)
__device__ __forceinline__ VarlenItem varlen_item(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl,
                                                  uint32_t lin) {
  const WarpLanes lanes{static_cast<int>(threadIdx.x & 31u)};
  const int ratio = packed.heads_q / packed.heads_kv;
  const VarlenTile tile = item_tile<kTileM, kSeqMajor>(lanes, packed_q(packed, vl), lin, packed.heads_q, ratio);
  return varlen_item_of(packed, vl, tile, lin);
}

// Persistent packed builds: the tiles of a CTA's items, mapped once per item by the producer's first warp and
// handed to every warp of the CTA through two shared-memory slots, so no other warp walks cu_seqlens_q (a
// consumer would do it between one item's epilogue and the next one's first S). Slot k % 2 holds item k's
// tile; its full mbarrier (one arrival: the mapping warp's lane 0) publishes it, its empty one (one arrival
// per warp of the CTA, kThreads / 32) frees it once every warp has read it. The two phases of each barrier
// alternate as the CTA's items go: item k is use k / 2 of its slot. The mapping warp walks its ranks with
// varlen_tile_walk, its position (TileIndex) kept in shared memory between items. A dynamic build (kDynamic)
// claims each item on the launch's counter (claim) and passes the item itself in its slot too: no other
// warp can compute it.
struct ItemSlots {
  // kItemSlotBytes from `bars`: full[2], empty[2] (8 B each), the slots (2 x kItemSlotStride B: batch, q_tile,
  // sequence-major the head, dynamic the item), then the walk's position (t, from_next, from_t).
  uint32_t bars;

  __device__ __forceinline__ uint32_t full(uint32_t k) const { return bars + 8u * (k & 1u); }
  __device__ __forceinline__ uint32_t empty(uint32_t k) const { return bars + 16u + 8u * (k & 1u); }
  __device__ __forceinline__ uint32_t slot(uint32_t k) const { return bars + 32u + kItemSlotStride * (k & 1u); }
  __device__ __forceinline__ uint32_t walk_at() const { return bars + 32u + 2u * kItemSlotStride; }
  // Word i of the walk's position: t, then the low and high halves of from_next and from_t.
  __device__ __forceinline__ uint32_t walk_word(int i) const { return walk_at() + (i == 0 ? 0u : 4u + 4u * i); }

  // By one thread, before the CTA's first barrier sync; `warps` take every item (each frees its slot).
  __device__ __forceinline__ void init(uint32_t warps) const {
    mbar_init(full(0), 1);
    mbar_init(full(1), 1);
    mbar_init(empty(0), warps);
    mbar_init(empty(1), warps);
    st_shared_u32(walk_word(0), static_cast<uint32_t>(-1));  // TileIndex t = -1: the walk has not started
  }

  // The tile of item lin, the CTA's next item (items only grow), by the mapping warp (all 32 lanes). Lane 0
  // alone reads and writes the walk's position (the warp gets it by shuffles), so every shared-memory access
  // is ordered by that thread's program order.
  __device__ __forceinline__ VarlenTile map(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl,
                                           uint32_t lin) const {
    const bool lane0 = (threadIdx.x & 31u) == 0u;
    uint32_t w[5] = {0u, 0u, 0u, 0u, 0u};  // t, from_next (lo, hi), from_t (lo, hi)
    if (lane0) {
#pragma unroll
      for (int i = 0; i < 5; ++i) w[i] = ld_shared_u32(walk_word(i));
    }
#pragma unroll
    for (int i = 0; i < 5; ++i) w[i] = __shfl_sync(0xffffffffu, w[i], 0);
    TileIndex at;
    at.t = static_cast<int>(w[0]);
    at.from_next = static_cast<int64_t>((static_cast<uint64_t>(w[2]) << 32) | w[1]);
    at.from_t = static_cast<int64_t>((static_cast<uint64_t>(w[4]) << 32) | w[3]);
    const WarpLanes lanes{static_cast<int>(threadIdx.x & 31u)};
    const VarlenTile tile = item_tile_walk<kTileM, kSeqMajor>(lanes, packed_q(packed, vl), lin, packed.heads_q,
                                                              packed.heads_q / packed.heads_kv, at);
    if (lane0) {
      const uint64_t next = static_cast<uint64_t>(at.from_next), from = static_cast<uint64_t>(at.from_t);
      const uint32_t out[5] = {static_cast<uint32_t>(at.t), static_cast<uint32_t>(next),
                               static_cast<uint32_t>(next >> 32), static_cast<uint32_t>(from),
                               static_cast<uint32_t>(from >> 32)};
#pragma unroll
      for (int i = 0; i < 5; ++i) st_shared_u32(walk_word(i), out[i]);
    }
    return tile;
  }

  // Dynamic builds: the CTA's k-th item, by the mapping warp (all 32 lanes). Block x takes item x first, then
  // gridDim.x + the next count of the launch's counter (zero at launch: the launcher clears it), which gives
  // every item below n_items to exactly one CTA, in rank order; a CTA stops at its first claim >= n_items
  // (or without a tile). Its claims only grow, as varlen_tile_walk needs.
  __device__ __forceinline__ uint32_t claim(uint32_t k, uint32_t* counter) const {
    uint32_t item = blockIdx.x;
    if (k != 0u) {
      uint32_t got = 0u;
      if ((threadIdx.x & 31u) == 0u) got = atomicAdd(counter, 1u);
      item = gridDim.x + __shfl_sync(0xffffffffu, got, 0);
    }
    return item;
  }

  // Item k's tile, by the mapping warp (with the item itself in dynamic builds). Waits until every warp has
  // read item k - 2's.
  __device__ __forceinline__ void publish(uint32_t k, VarlenTile tile, [[maybe_unused]] uint32_t item) const {
    if ((threadIdx.x & 31u) == 0u) {
      mbar_wait(empty(k), ((k >> 1) & 1u) ^ 1u);
      st_shared_u32(slot(k), static_cast<uint32_t>(tile.batch));
      st_shared_u32(slot(k) + 4u, static_cast<uint32_t>(tile.q_tile));
      if constexpr (kSeqMajor) st_shared_u32(slot(k) + 8u, static_cast<uint32_t>(tile.head));
      if constexpr (kDynamic) st_shared_u32(slot(k) + 12u, item);
      mbar_arrive(full(k));  // release: the stores above are visible to every thread that sees the phase
    }
    __syncwarp();
  }

  // Item k's tile, by every warp of the CTA: lane 0 waits for it, reads it and frees the slot (its reads and
  // its arrival in program order), the warp gets it by shuffles; a dynamic build's item comes to `item`.
  __device__ __forceinline__ VarlenTile take(uint32_t k, [[maybe_unused]] uint32_t& item) const {
    uint32_t batch = 0u, q_tile = 0u, head = 0u, claimed = 0u;
    if ((threadIdx.x & 31u) == 0u) {
      mbar_wait(full(k), (k >> 1) & 1u);
      batch = ld_shared_u32(slot(k));
      q_tile = ld_shared_u32(slot(k) + 4u);
      if constexpr (kSeqMajor) head = ld_shared_u32(slot(k) + 8u);
      if constexpr (kDynamic) claimed = ld_shared_u32(slot(k) + 12u);
      mbar_arrive(empty(k));
    }
    VarlenTile tile;
    tile.batch = static_cast<int>(__shfl_sync(0xffffffffu, batch, 0));
    tile.q_tile = static_cast<int>(__shfl_sync(0xffffffffu, q_tile, 0));
    tile.head = kSeqMajor ? static_cast<int>(__shfl_sync(0xffffffffu, head, 0)) : 0;
    if constexpr (kDynamic) item = __shfl_sync(0xffffffffu, claimed, 0);
    return tile;
  }
};

// The item bound of a launch: ZYFA_VARLEN_TILES x heads_q, the launcher's count (at most 2^31 - 1, which it
// checks). Items past it are never computed, whatever cu_seqlens_q holds.
__device__ __forceinline__ uint32_t varlen_items(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl) {
  return static_cast<uint32_t>(ZYFA_VARLEN_TILES(vl.total_q, packed.batch, packed.seqlen_q, kTileM) *
                               packed.heads_q);
}

// K or V rows of one kv head in a paged cache: row j at head_base + page(j) * page_bytes + slot(j) * slot_bytes.
struct PagedRows {
  const uint8_t* head_base;  // the cache base moved to this kv head
  int64_t page_bytes;        // the cache's page stride (args' batch stride) in bytes
  int64_t slot_bytes;        // its key stride inside a page (args' seq stride) in bytes
  const int32_t* pages;      // the sequence's row of the page table
  PageDiv page_size;         // j -> (j / page_size, j % page_size) by a multiply-high (page_div.h)
  int num_pages;

  // Row j (0 <= j < 2^31): one page-table read, its page clamped into the cache.
  __device__ __forceinline__ const uint8_t* row(int j) const {
    const uint32_t p = page_size.quotient(static_cast<uint32_t>(j));
    const int slot = j - static_cast<int>(p * page_size.d);
    const int page = max(0, min(__ldg(pages + p), num_pages - 1));
    return head_base + page * page_bytes + slot * slot_bytes;
  }
};

__device__ __forceinline__ PagedRows paged_rows(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl,
                                                const Sequence& s, const void* base, int64_t stride_batch,
                                                int64_t stride_seq, int64_t stride_head, int kv_head) {
  PagedRows p;
  p.head_base = static_cast<const uint8_t*>(base) + static_cast<int64_t>(kv_head) * stride_head * kESize;
  p.page_bytes = stride_batch * kESize;
  p.slot_bytes = stride_seq * kESize;
  p.pages = s.pages;
  p.page_size = make_page_div(static_cast<uint32_t>(vl.page_size));
  p.num_pages = vl.num_pages;
  return p;
}

// Rows row0 + r0 + 16 i (i < ROWS / 16) of a paged cache, 16-byte chunk c8 of each of their CHUNKS-chunk
// rows, into shared memory at dst(i, region); rows >= nvalid are zero-filled. kVec: cp.async (the caller
// signals the barrier with cp_async_arrive_noinc), else byte loads and st.shared. A group's page-table
// reads are issued together before its copies (the copies' asm clobbers memory, so a read placed after one
// would wait out its own round trip first); four rows a group keep the producer inside its register budget.
// A row past the keys reads a real row's address (no branch around the read) and copies 0 bytes.
template <int ROWS, int CHUNKS, bool kVec, class Dst>
__device__ __forceinline__ void copy_paged_rows(const PagedRows& rows, int row0, int nvalid, int r0, int c8,
                                                Dst dst) {
  constexpr int kGroup = 4;
  constexpr int kRegions = (CHUNKS + 7) / 8;
  static_assert(ROWS % (16 * kGroup) == 0, "whole groups of 16-row passes");
#pragma unroll
  for (int g = 0; g < ROWS / 16; g += kGroup) {
    const uint8_t* src[kGroup];
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      src[k] = rows.row(max(min(row0 + r0 + 16 * (g + k), nvalid - 1), 0)) + c8 * 16;
    }
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      const bool ok = row0 + r0 + 16 * (g + k) < nvalid;
#pragma unroll
      for (int reg = 0; reg < kRegions; ++reg) {
        if (CHUNKS % 8 != 0 && reg * 8 + c8 >= CHUNKS) continue;  // last region only partly used
        if constexpr (kVec) {
          cp_async16(dst(g + k, reg), src[k] + reg * 128, ok ? 16u : 0u);
        } else {
          st_shared_v4(dst(g + k, reg), ok ? load16_bytes(src[k] + reg * 128) : make_uint4(0u, 0u, 0u, 0u));
        }
      }
    }
  }
}

// load_tile (load.cuh) with the rows gathered through the page table: rows [row0, row0 + ROWS) of the
// sequence's keys into a swizzled tile, rows >= nvalid zero-filled; thread t copies chunk t % 8 of every
// 128-byte region of rows t / 8 + 16 i. vec_ok is tested once, outside the row loops: inside them ptxas
// kept both paths around every copy, and with a division per row the producer issued more instructions
// per block than the consumers (the tensor core waited on it).
template <int ROWS, int CHUNKS>
__device__ __forceinline__ void load_tile_paged(uint32_t tile, const PagedRows& rows, int row0, int nvalid,
                                                bool vec_ok, int t) {
  static_assert(ROWS % 16 == 0, "16 rows per pass of 128 threads");
  const int c8 = t & 7;
  const int r0 = t >> 3;
  const uint32_t dst0 = tile + r0 * 128 + ((c8 ^ (r0 & 7)) << 4);
  const auto dst = [&](int i, int reg) { return dst0 + reg * ROWS * 128 + i * 16 * 128; };
  if (vec_ok) {
    copy_paged_rows<ROWS, CHUNKS, true>(rows, row0, nvalid, r0, c8, dst);
  } else {
    copy_paged_rows<ROWS, CHUNKS, false>(rows, row0, nvalid, r0, c8, dst);
  }
}

// load_v_staging (load.cuh) through the page table: V keys [key0, key0 + kTileN) into the staging buffer.
__device__ __forceinline__ void load_v_staging_paged(uint32_t stg, const PagedRows& rows, int key0, int seqlen_k,
                                                     bool vec_ok, int t) {
  static_assert(!kVStaged || kVRowBytes == 128, "one staging row is one 128-byte V row");
  const int c8 = t & 7;
  const int r0 = t >> 3;
  const auto dst = [&](int i, int) {
    const int r = r0 + 16 * i;
    return stg + r * 128 + ((c8 ^ stg_swz(r)) << 4);
  };
  if (vec_ok) {
    copy_paged_rows<kTileN, 8, true>(rows, key0, seqlen_k, r0, c8, dst);
  } else {
    copy_paged_rows<kTileN, 8, false>(rows, key0, seqlen_k, r0, c8, dst);
  }
}

}  // namespace zyfa_sm90_ws
