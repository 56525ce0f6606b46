// fa_fwd_wgmma: which (q tile, head, batch) a CTA computes. Both schedules start the longest causal tiles
// first; every tile is computed the same way whatever the order, so the output bits do not depend on it.
// No tables, no atomics: deterministic.
#pragma once

#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/fa_fwd_wgmma/config.cuh"

namespace zyfa_sm90_ws {

// A value of the item, which every lane of the warp computed from the same words: in a packed build those
// come from loads (cu_seqlens, descale tables), and only a shuffle from one lane tells the compiler they are
// equal, which keeps what the main loop derives from them (the K / V ring stage carried from item to item,
// the wgmma descriptors, the branches) in uniform registers as in the dense kernels. Dense items come from
// kernel parameters and the block index: uniform already; a packed build with one item per CTA (grid
// "tiles") starts its ring at stage 0, and the shuffle changes nothing there but the schedule. Every lane
// of the warp must be active.
template <class T>
__device__ __forceinline__ T item_uniform(T x) {
#if ZYFA_WS_VARLEN && ZYFA_WS_PERSISTENT
  return __shfl_sync(0xffffffffu, x, 0);
#else
  return x;
#endif
}

// Everything one consumer warpgroup needs to know about its block.
struct Block {
  int head, kv_head, batch, q_row0, n_blocks;
  int64_t diag;  // row i sees keys <= i + diag
  bool causal;
};

// The rest of a block whose head and q tile are set: its kv head (group_ratio = heads_q / heads_kv), mask
// and the key blocks [0, n_blocks) that at least one of its rows sees (row i sees keys <= i + diag).
__device__ __forceinline__ void finish_block(Block& b, int group_ratio, bool causal, int64_t diag, int seqlen_q,
                                             int seqlen_k) {
  b.kv_head = b.head / group_ratio;
  b.causal = causal;
  b.diag = diag;
  const int rows = min(kTileM, seqlen_q - b.q_row0);
  int64_t kv_end = seqlen_k;  // keys [0, kv_end) are visible to at least one row of the tile
  if (b.causal) kv_end = min(kv_end, static_cast<int64_t>(b.q_row0) + rows - 1 + b.diag + 1);
  b.n_blocks = kv_end > 0 ? static_cast<int>((kv_end + kTileN - 1) / kTileN) : 0;
}

// The tile grid's order: longest-first across the n_pairs (head, batch) pairs, or launch order (config.cuh,
// kLptPairs / kLptL2Bytes): LPT only for a few pairs whose distinct K / V heads fit in L2 together.
__device__ __forceinline__ bool lpt_across_pairs(uint32_t n_pairs, const zyfa_fwd_args& args) {
  // 32-bit arithmetic: at most 16 K / V heads of at most 2^18 keys of at most 640 bytes stay below 2^32;
  // longer keys never take LPT.
  const uint32_t kv_heads = n_pairs * static_cast<uint32_t>(args.heads_kv) / static_cast<uint32_t>(args.heads_q);
  const uint32_t keys = static_cast<uint32_t>(args.seqlen_k);
  return n_pairs <= kLptPairs && keys <= (1u << 18) &&
         kv_heads * keys * static_cast<uint32_t>(kQkRowBytes + kVRowBytes) <= static_cast<uint32_t>(kLptL2Bytes);
}

// Tile grid (ceil(seqlen_q / 128), heads_q, batch), pairs hb = batch * heads + head (GQA groups adjacent),
// lin = x + nx (y + ny z). LPT (lpt_across_pairs): rank r = lin / nhb takes q tile nx - 1 - r of pair
// lin % nhb, so every pair's longest causal tiles start before any pair's shorter ones (LPT order for the
// causal tail). Otherwise blockIdx as launched, q tiles reversed inside each head (L2 reuse of one
// head's K / V). The groups of pairs below are one group (lin < nx * nhb: g0 = 0).
__device__ __forceinline__ Block tile_block(const zyfa_fwd_args& args) {
  const int seqlen_q = args.seqlen_q;
  const int seqlen_k = args.seqlen_k;
  Block blk;
  {
    const uint32_t nx = gridDim.x, ny = gridDim.y, nhb = gridDim.y * gridDim.z;
    const uint32_t lin = blockIdx.x + nx * (blockIdx.y + ny * blockIdx.z);
    uint32_t gsz = nhb;  // pairs per group
    const uint32_t group = lin / (gsz * nx);
    const uint32_t g0 = group * gsz;                 // first pair of this group
    const uint32_t gcur = min(gsz, nhb - g0);        // pairs in this group
    const uint32_t local = lin - g0 * nx;            // < gcur * nx
    const uint32_t rank = local / gcur;              // 0: the longest tiles
    const uint32_t hb = g0 + (local - rank * gcur);
    blk.head = static_cast<int>(hb % ny);
    blk.batch = static_cast<int>(hb / ny);
    blk.q_row0 = static_cast<int>(nx - 1u - rank) * kTileM;
    if (!lpt_across_pairs(nhb, args)) {  // launch order, q tiles reversed (L2 reuse)
      blk.head = static_cast<int>(blockIdx.y);
      blk.batch = static_cast<int>(blockIdx.z);
      blk.q_row0 = static_cast<int>(nx - 1u - blockIdx.x) * kTileM;
    }
  }
  finish_block(blk, args.heads_q / args.heads_kv, (args.flags & ZYFA_FLAG_CAUSAL) != 0u,
               static_cast<int64_t>(seqlen_k) - seqlen_q, seqlen_q, seqlen_k);
  return blk;
}

// Persistent CTAs (grid (min(SMs, n_items), 1, 1)): work items from the ABI args only (never from gridDim.y /
// z), n_items = n_qtiles x n_pairs. Item i -> rank i / n_pairs (0: the longest causal rows, the last q tile)
// of pair i % n_pairs (hb = batch * heads_q + head), or, pair_major (more than kLptPairs pairs), pair i /
// n_qtiles and rank i % n_qtiles (each pair's q tiles longest first, pairs one after another: L2 reuse of
// one head's K / V at a time). The kernel computes the per-launch values once and walks its items with
// cta_item (fa_fwd_wgmma.cu).
__device__ __forceinline__ Block persistent_block(uint32_t item, bool pair_major, uint32_t n_qtiles, uint32_t n_pairs,
                                                  const zyfa_fwd_args& args, int group_ratio, bool causal,
                                                  int64_t diag, int seqlen_q, int seqlen_k) {
  Block b;
  const uint32_t rank = pair_major ? item % n_qtiles : item / n_pairs;
  const uint32_t hb = pair_major ? item / n_qtiles : item - rank * n_pairs;
  b.head = static_cast<int>(hb % static_cast<uint32_t>(args.heads_q));
  b.batch = static_cast<int>(hb / static_cast<uint32_t>(args.heads_q));
  b.q_row0 = static_cast<int>(n_qtiles - 1u - rank) * kTileM;
  finish_block(b, group_ratio, causal, diag, seqlen_q, seqlen_k);
  return b;
}

// The k-th item of this CTA (>= n_items: none left): boustrophedon rounds of G = gridDim.x items (odd
// rounds reversed), so that in the rank-major list, whose costs fall along each round, the CTA that takes
// a round's longest item takes the next round's shortest: per-CTA work balances to within one round's
// spread instead of growing with it.
__device__ __forceinline__ uint32_t cta_item(uint32_t k) {
  const uint32_t lane_in_round = (k & 1u) ? gridDim.x - 1u - blockIdx.x : blockIdx.x;
  return k * gridDim.x + lane_in_round;
}

}  // namespace zyfa_sm90_ws
