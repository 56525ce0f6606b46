/* ZYFA sm90a warp-specialised causal-prefill attention forward: BF16, and FP8 (e4m3fn in, BF16 out),
 * built on wgmma (HGMMA / QGMMA in SASS) in raw PTX. Same ABI, launch contract and numerics contract as
 * fa_fwd_simple.cu (docs/numerics.md): online softmax in base 2 over KV blocks of ZYFA_TILE_N keys in
 * increasing order; BF16: P rounded to bf16 for P.V, row sum of the fp32 p; FP8: P scaled by 2^8, exact
 * (exp2 + RNE/satfinite), lean (one FMA to the e4m3 code) or f16 (P.V in f16), row sum of the P fed to
 * P.V; out = acc * (v_descale / l) (the contract's acc / l * v_descale to ~2 ulp of fp32).
 *
 * The pieces, one role per header under sm90/fa_fwd_wgmma/:
 *   config.cuh     the variant (build macros -> constexpr), shared-memory layout, register split
 *   ptx.cuh        PTX wrappers (mbarriers, cp.async, TMA, fences, named barriers, ldmatrix / stmatrix)
 *   scheduler.cuh  which (q tile, head, batch) a CTA computes: tile grid or persistent items
 *   load.cuh       the producer's global -> shared copies, the e4m3 V transpose / f16 conversion
 *   vprep.cuh      the V pre-pass entry's body (lean d128: V transposed in global memory first)
 *   mma.cuh        S = Q K^T and O += P V as wgmma groups, the FP8 row sums
 *   softmax.cuh    the online softmax of one block and the packing of P
 *   epilogue.cuh   the normalised O stores (staged through shared memory, or from registers)
 *   varlen.cuh     packed batches (ZYFA_WS_VARLEN): each item's sequence and q tile (varlen_tiles.h), the
 *                  items' hand-over from the producer's first warp (ItemSlots), the paged K / V gather
 * This file is the kernel: barrier setup, then the producer warpgroup and the two consumer warpgroups.
 *
 * Block structure (FA3-class; 384 threads, tile_m = 128):
 *   warpgroup 0  producer: loads Q once per tile, then K_j and V_j for every visible KV block into
 *                separate K and V rings of kStages stages (full + empty mbarrier per stage, so K_{j+1} is
 *                released as soon as S_{j+1} is computed while V_j is still being read); setmaxnreg.dec.
 *   warpgroups 1, 2  consumers: 64 query rows each; setmaxnreg.inc. S = Q K^T with wgmma SS, O += P V
 *                with wgmma RS (P from registers, straight from the S accumulators).
 * Grid: "tiles" variants launch (ceil(seqlen_q / 128), heads_q, batch), one CTA per q tile; "persistent"
 *   variants (ZYFA_WS_PERSISTENT) launch (min(SMs, items), 1, 1) and each CTA walks its items
 *   (scheduler.cuh), carrying the ring position, a Q-empty mbarrier and the ping-pong hand-over across
 *   items. Either way the longest causal tiles start first, and the output bits do not depend on the order.
 * Loads: Q / K (BF16 also V) by TMA (cp.async.bulk.tensor, 128-byte swizzle, completing on the full
 *   mbarriers with expect_tx) from one producer thread in "tma" variants (ZYFA_WS_TMA: the kernel takes
 *   zyfa_tma_maps, encoded by the launcher, as its last parameter; maps.valid == 0 keeps the cp.async path;
 *   packed BF16 builds load V by TMA on a sequence's whole blocks, its last partial block by cp.async:
 *   kTmaVWhole);
 *   otherwise 128 producer threads copy by 16-byte cp.async (zero-fill past seqlen) straight into the
 *   swizzled layout and signal the full mbarrier with cp.async.mbarrier.arrive.noinc. Strides or base
 *   pointers that are not 16-byte aligned take a byte-load path (uniform per launch). e4m3 V is always
 *   loaded by the 128 threads: cp.async into a staging buffer one block ahead, then transposed to Vt by
 *   ldmatrix.trans / stmatrix (wgmma takes 8-bit B only K-major), or read pre-transposed (vprep.cuh).
 * Intra-warpgroup overlap (FA3): iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} as two wgmma
 *   groups, waits for the first only, runs the softmax of S_j while P_{j-1} V_{j-1} runs, then waits for
 *   it, rescales O and packs P_j (P registers are written only outside any wgmma's flight, which keeps
 *   ptxas from serialising the wgmmas).
 * Ping-pong (FA3): the two consumer warpgroups take turns issuing their wgmmas (named barriers 1 and 2),
 *   so one runs its softmax while the other's GEMMs occupy the tensor cores.
 * Causal blocks wholly past the tile's last row are never loaded; per-element masks only in blocks that
 *   cross the diagonal or seqlen_k.
 * Shared memory (config.cuh; all tiles 1024-byte aligned, 128B swizzle):
 *     Q     kTileM rows x kQkRowBytes               (regions of 128 rows x 128 B)
 *     K[s]  kTileN rows x kQkRowBytes, s < kStages  (K-major B of S = Q K^T)
 *     V[s]  bf16 / f16: kTileN key rows x 256 B (MN-major B of O = P V, wgmma transpose flag);
 *           e4m3: Vt kDV rows (+ 8 rows of ones for lean d128) x kTileN key bytes (K-major B)
 *     the ones region (lean 192/128), the two e4m3 V staging buffers (none with the pre-pass),
 *     mbarriers (128 B; packed builds 256 B, with the item slots), the epilogue's O staging, plus 1024 B of
 *     slack to align the base at run time.
 * No atomics: deterministic.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/epilogue.cuh"
#include "sm90/fa_fwd_wgmma/load.cuh"
#include "sm90/fa_fwd_wgmma/mma.cuh"
#include "sm90/fa_fwd_wgmma/ptx.cuh"
#include "sm90/fa_fwd_wgmma/scheduler.cuh"
#include "sm90/fa_fwd_wgmma/softmax.cuh"
#include "sm90/fa_fwd_wgmma/varlen.cuh"
#include "sm90/fa_fwd_wgmma/vprep.cuh"
#include "sm90/warp_ptx.h"
#include "sm90/wgmma.h"

// A persistent CTA's k-th item: every gridDim.x-th (cta_item), the walk ending at the first past n_items; a
// dynamic build's items come from its slots (ItemSlots::take sets `item`), its end with the first tile-less.
#if ZYFA_WS_DYNAMIC
#define ZYFA_ITEM_OF_CTA(k) uint32_t item = 0u
#else
#define ZYFA_ITEM_OF_CTA(k)            \
  uint32_t item = cta_item(k);         \
  if (item >= n_items) break
#endif

#if ZYFA_WS_VARLEN
// The names the rest of the kernel reads for one work item of a packed batch (varlen.cuh, VarlenItem): the
// sequence's dense view `args`, its counts, the block and the sequence. `none` runs when the item has no tile
// (the same in every warp that computes or takes the item).
#define ZYFA_VARLEN_ITEM(item_expr, none)                            \
  const VarlenItem vl_item = (item_expr);                            \
  if (vl_item.blk.batch < 0) none;                                   \
  const zyfa_fwd_args& args = vl_item.args;                          \
  [[maybe_unused]] const Sequence& seq = vl_item.seq;                \
  const int seqlen_q = args.seqlen_q;                                \
  const int seqlen_k = args.seqlen_k;                                \
  const Block& blk = vl_item.blk

#if ZYFA_WS_TMA
extern "C" __global__ void __launch_bounds__(ZYFA_THREADS, 1) ZYFA_KERNEL_NAME(
    const zyfa_fwd_args packed, const zyfa_varlen_args varlen, const __grid_constant__ zyfa_tma_maps maps) {
  const bool tma_on = maps.valid != 0;
#else
extern "C" __global__ void __launch_bounds__(ZYFA_THREADS, 1)
    ZYFA_KERNEL_NAME(const zyfa_fwd_args packed, const zyfa_varlen_args varlen) {
  constexpr bool tma_on = false;
#endif
#elif ZYFA_WS_TMA
extern "C" __global__ void __launch_bounds__(ZYFA_THREADS, 1)
    ZYFA_KERNEL_NAME(const zyfa_fwd_args args, const __grid_constant__ zyfa_tma_maps maps) {
  const bool tma_on = maps.valid != 0;
#else
extern "C" __global__ void __launch_bounds__(ZYFA_THREADS, 1) ZYFA_KERNEL_NAME(const zyfa_fwd_args args) {
  constexpr bool tma_on = false;
#endif
  using namespace zyfa_sm90_ws;
#if ZYFA_WS_VARLEN && !ZYFA_WS_PERSISTENT
  // Tile grid: one work item per CTA, item blockIdx.x + gridDim.x * blockIdx.y (varlen.cuh). A block with no
  // tile exits here, uniformly, before any barrier exists. (Persistent: each item in the loops below.)
  ZYFA_VARLEN_ITEM(varlen_item(packed, varlen, blockIdx.x + gridDim.x * blockIdx.y), return);
#endif
  // Arrivals that complete a full barrier's phase: the 128 producer threads, or the one TMA thread
  // (e4m3 V: always the 128 threads of the transpose).
  const uint32_t full_arrivals = tma_on ? 1u : 128u;
  const uint32_t v_full_arrivals = (tma_on && kTmaV) ? 1u : 128u;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = kRawSmemBase ? smem_u32(smem_raw) : (smem_u32(smem_raw) + 1023u) & ~1023u;
  if constexpr (kRawSmemBase) {
    if ((base & 1023u) != 0u) __trap();  // the layout's 1024-byte alignment (swizzle atoms) would not hold
  }
  const uint32_t q_s = base;  // Q tile b at q_s + b kQBytes (kQBuffers)
  const uint32_t k_s = q_s + kQBuffers * kQBytes;
  const uint32_t v_s = k_s + kStages * kKStageBytes;
  // Layout: Q, K stages, V stages, the ones region, the e4m3 V staging buffers, the mbarriers, the O staging
  // (kSmemBytes counts each). No load may write the mbarriers' bytes.
  const uint32_t bars = v_s + kStages * kVStageBytes + kOnesBytes + kStagingBytes;
  const uint32_t bar_q = bars;
  // Q tile b's full mbarrier (kQBuffers): tile 0's first, tile 1's after the item slots, its empty one after it.
  const uint32_t bar_q1 = bars + 8u * (2 + 4 * kStages) + kItemSlotBytes;
  auto bar_q_of = [&](uint32_t b) { return b == 0u ? bar_q : bar_q1; };
  auto bar_full_k = [&](int s) { return bars + 8u * (1 + s); };
  auto bar_full_v = [&](int s) { return bars + 8u * (1 + kStages + s); };
  auto bar_empty_k = [&](int s) { return bars + 8u * (1 + 2 * kStages + s); };
  auto bar_empty_v = [&](int s) { return bars + 8u * (1 + 3 * kStages + s); };

#if !ZYFA_WS_VARLEN  // a packed batch's counts are its items' (ZYFA_VARLEN_ITEM)
  const int seqlen_q = args.seqlen_q;
  const int seqlen_k = args.seqlen_k;
#endif
#if ZYFA_WS_PERSISTENT
#if ZYFA_WS_VARLEN
  // Items 0 .. n_items - 1 (varlen.cuh), walked in the dense schedule's order (scheduler.cuh, cta_item); their
  // tiles mapped by the producer's first warp, one item ahead, and taken by every warp (ItemSlots).
  const uint32_t n_items = varlen_items(packed, varlen);
  const ItemSlots items{bars + 8u * (2 + 4 * kStages)};
#else
  // The per-launch values of the persistent schedule (scheduler.cuh: persistent_block, cta_item).
  const uint32_t n_qtiles = seqlen_q > 0 ? static_cast<uint32_t>((seqlen_q + kTileM - 1) / kTileM) : 0u;
  const uint32_t n_pairs = static_cast<uint32_t>(args.heads_q) * static_cast<uint32_t>(args.batch);
  const uint32_t n_items = n_qtiles * n_pairs;
  const bool causal_all = (args.flags & ZYFA_FLAG_CAUSAL) != 0u;
  const int64_t diag_all = static_cast<int64_t>(seqlen_k) - seqlen_q;
  const int group_ratio = args.heads_q / args.heads_kv;
  // Few pairs stay longest-first even when their K / V overflow L2: pair-major order breaks the boustrophedon
  // balance of the persistent walk (lean 192/128 at 32K keys, 16 pairs: 0.74x FA3 pair-major, kernels/sm90/NOTES.md).
  const bool pair_major = n_pairs > kLptPairs;
  auto item_block = [&](uint32_t item) {
    return persistent_block(item, pair_major, n_qtiles, n_pairs, args, group_ratio, causal_all, diag_all, seqlen_q,
                            seqlen_k);
  };
#endif
  const uint32_t bar_q_empty = bars + 8u * (1 + 4 * kStages);  // 8 arrivals: one per consumer warp
  auto bar_q_empty_of = [&](uint32_t b) { return b == 0u ? bar_q_empty : bar_q1 + 8u; };
#elif !ZYFA_WS_VARLEN
  const Block blk = tile_block(args);
#endif

  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    mbar_init(bar_q, full_arrivals);
#if ZYFA_WS_PERSISTENT
    mbar_init(bar_q_empty, 8);
#endif
#if ZYFA_WS_PERSISTENT && ZYFA_WS_VARLEN
    // Every warp takes the items but the producer warps that exit (kTmaV with TMA on: all but the first).
    items.init(tma_on && kTmaV ? kThreads / 32 - 4 + kTmaProducerThreads / 32 : kThreads / 32);
    if constexpr (kQBuffers == 2) {
      mbar_init(bar_q_of(1), full_arrivals);
      mbar_init(bar_q_empty_of(1), 8);
    }
#endif
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_full_k(s), full_arrivals);  // one arrival per producer thread (TMA: its one thread)
      mbar_init(bar_full_v(s), v_full_arrivals);
      mbar_init(bar_empty_k(s), 8);   // one arrival per consumer warp
      mbar_init(bar_empty_v(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    fence_proxy_async();
  }
  if constexpr (kLSumOnes) {
    write_ones_rows(v_s, kStages, tid, kThreads);
    fence_proxy_async();  // generic-proxy writes -> the wgmma (async proxy) reads after the barrier
  }
  __syncthreads();

  // Broadcast from lane 0 so the compiler knows the warpgroup index is warp-uniform (descriptors
  // derived from it then stay in uniform registers, next to the wgmma that reads them).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (wg == 0) {
    // ================================ producer warpgroup ================================
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    // TMA with V (kTmaV): one thread issues every load; the others would only poll (a persistent packed build
    // keeps its first warp, which maps the items: kTmaOneThread). Otherwise all 128 load V.
    if (tma_on && kTmaV && static_cast<uint32_t>(tid) >= kTmaProducerThreads) return;
#if ZYFA_WS_PERSISTENT
#if ZYFA_WS_VARLEN
    // The producer's first warp maps item k while item k - 1 loads (its loads issued, before the wait for Q).
    auto publish_item = [&](uint32_t k) {
#if ZYFA_WS_DYNAMIC
      if (tid >= 32) return;
      const uint32_t next = items.claim(k, varlen.item_counter);
      if (next < n_items) items.publish(k, items.map(packed, varlen, next), next);
      else items.publish(k, VarlenTile{-1, 0, 0}, next);  // the end: every warp of the CTA stops here
#else
      const uint32_t next = cta_item(k);
      if (tid < 32 && next < n_items) items.publish(k, items.map(packed, varlen, next), next);
#endif
    };
#endif
    int kv_base = 0;       // K / V blocks loaded by this CTA before this item (ring position)
    uint32_t q_loads = 0;  // Q tiles loaded before this item (Q full / empty phases)
#pragma unroll 1
    for (uint32_t k_item = 0;; ++k_item) {
    ZYFA_ITEM_OF_CTA(k_item);
#if ZYFA_WS_VARLEN
    // Items grow with k_item and ranks with items: after the first item with no tile, none of this CTA's has one.
    if (k_item == 0) publish_item(0);  // here, not before the loop: a second copy there spills the producer
    const VarlenTile tile = items.take(k_item, item);
    ZYFA_VARLEN_ITEM(varlen_item_of(packed, varlen, tile, item), break);
#else
    const Block blk = item_block(item);
#endif
    // The thread index re-read per item (volatile: not hoisted), so the per-thread shared-memory
    // addresses derived from it are recomputed per item instead of held live across the item loop
    // (the e4m3 producer spilled 20 B at 72 registers otherwise).
    int t;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
#else
    const int t = tid;
    constexpr int kv_base = 0;
    constexpr uint32_t q_loads = 0;
#endif
    const uint8_t* const q_base = static_cast<const uint8_t*>(args.q) +
        (static_cast<int64_t>(blk.batch) * args.q_stride_batch + static_cast<int64_t>(blk.head) * args.q_stride_head) * kESize;
#if ZYFA_WS_VARLEN != 2  // a paged build reads K through the page table (k_rows below)
    const uint8_t* const k_base = static_cast<const uint8_t*>(args.k) +
        (static_cast<int64_t>(blk.batch) * args.k_stride_batch + static_cast<int64_t>(blk.kv_head) * args.k_stride_head) * kESize;
#endif
#if ZYFA_WS_VARLEN  // Vt of a packed batch: one row per (kv head, d), each sequence from its own column
    [[maybe_unused]] const int64_t vt_row = ZYFA_VT_PACKED_ROW_BYTES(packed.batch, varlen.total_k);
    [[maybe_unused]] const uint8_t* const vt_base = static_cast<const uint8_t*>(packed.v) +
        static_cast<int64_t>(blk.kv_head) * kDV * vt_row + vt_packed_column(blk.batch, seq.k_start);
#else
    [[maybe_unused]] const int64_t vt_row = vt_row_bytes(seqlen_k);
    [[maybe_unused]] const uint8_t* const vt_base = static_cast<const uint8_t*>(args.v) +
        (static_cast<int64_t>(blk.batch) * args.heads_kv + blk.kv_head) * kDV * vt_row;
#endif
    const uint8_t* const v_base = kVPre
        ? vt_base
        : static_cast<const uint8_t*>(args.v) +
              (static_cast<int64_t>(blk.batch) * args.v_stride_batch + static_cast<int64_t>(blk.kv_head) * args.v_stride_head) * kESize;
#if ZYFA_WS_VARLEN == 2
    const PagedRows k_rows = paged_rows(packed, varlen, seq, packed.k, packed.k_stride_batch, packed.k_stride_seq,
                                        packed.k_stride_head, blk.kv_head);
    const PagedRows v_rows = paged_rows(packed, varlen, seq, packed.v, packed.v_stride_batch, packed.v_stride_seq,
                                        packed.v_stride_head, blk.kv_head);
#endif
    // 16-byte copies are legal only if every row start is 16-byte aligned (uniform per launch).
    const bool vec_ok =
        ((reinterpret_cast<uintptr_t>(args.q) | reinterpret_cast<uintptr_t>(args.k) |
          reinterpret_cast<uintptr_t>(args.v)) & 15u) == 0u &&
        (((args.q_stride_batch | args.q_stride_seq | args.q_stride_head | args.k_stride_batch | args.k_stride_seq |
           args.k_stride_head | args.v_stride_batch | args.v_stride_seq | args.v_stride_head) * kESize) & 15) == 0;
#if ZYFA_WS_TMA
    // TMA coordinates: a packed batch's maps span all its rows (batch 1), a sequence starts at its first row.
    // The Vt map (kTmaV e4m3): columns, d, kv head, plane; a packed sequence's keys from its own column.
#if ZYFA_WS_VARLEN
    const int tma_q_row0 = static_cast<int>(seq.q_start), tma_k_row0 = static_cast<int>(seq.k_start);
    constexpr int tma_batch = 0;
    [[maybe_unused]] const int vt_col0 = static_cast<int>(vt_packed_column(blk.batch, seq.k_start));
    [[maybe_unused]] constexpr int vt_plane = 0;
#else
    constexpr int tma_q_row0 = 0, tma_k_row0 = 0;
    const int tma_batch = blk.batch;
    [[maybe_unused]] constexpr int vt_col0 = 0;
    [[maybe_unused]] const int vt_plane = blk.batch;
#endif
#endif
    auto signal = [&](uint32_t bar) {
      if (vec_ok) {
        cp_async_arrive_noinc(bar);
      } else {
        fence_proxy_async();
        mbar_arrive(bar);
      }
    };
#if ZYFA_WS_TMA
    // V block j (BF16 rows, kVChunks / 8 boxes) into stage s by TMA, completing on its full barrier.
    [[maybe_unused]] auto tma_v_block = [&](int s, int j) {
#pragma unroll
      for (int r = 0; r < kVChunks / 8; ++r)
        tma_load_4d(v_s + s * kVStageBytes + r * kTileN * 128, &maps.v, kBoxElems * r, tma_k_row0 + j * kTileN,
                    blk.kv_head, tma_batch, bar_full_v(s));
    };
#endif
    const uint32_t q_b = q_loads % kQBuffers;  // this item's Q tile
    const uint32_t q_dst = q_s + q_b * kQBytes, q_full = bar_q_of(q_b);
    if (blk.n_blocks > 0) {
#if ZYFA_WS_PERSISTENT
      // The tile's previous Q is free once every consumer warp's last S wgmma of that item has completed.
      mbar_wait(bar_q_empty_of(q_b), ((q_loads / kQBuffers) & 1u) ^ 1u);
      ++q_loads;
#endif
#if ZYFA_WS_TMA
      if (tma_on) {
        if (kTmaOneThread || t == 0) {  // kTmaOneThread: thread 0 is the only producer thread left
          mbar_arrive_expect_tx(q_full, kQBytes);
#pragma unroll
          for (int r = 0; r < kQkRegions; ++r)
            tma_load_4d(q_dst + r * kTileM * 128, &maps.q, kBoxElems * r, tma_q_row0 + blk.q_row0, blk.head, tma_batch,
                        q_full);
        }
      } else
#endif
      {
        load_tile<kTileM, kQkChunks>(q_dst, q_base, args.q_stride_seq * kESize, blk.q_row0, seqlen_q, vec_ok, t);
        signal(q_full);
      }
    }
    const uint32_t stg = v_s + kStages * kVStageBytes + kOnesBytes;  // kVStaged: two staging buffers (the mbarriers after them)
    if constexpr (kVStaged) {
#if ZYFA_WS_VARLEN == 2
      if (blk.n_blocks > 0) load_v_staging_paged(stg, v_rows, 0, seqlen_k, vec_ok, t);
#else
      if (blk.n_blocks > 0) load_v_staging(stg, v_base, args.v_stride_seq, 0, seqlen_k, vec_ok, t);
#endif
      cp_async_commit();
    }
#pragma unroll 1
    for (int j = 0; j < blk.n_blocks; ++j) {
      const int s = (j + kv_base) % kStages;
      const uint32_t parity = (((j + kv_base) / kStages) & 1) ^ 1;
      if (kTmaV || !tma_on) mbar_wait(bar_empty_k(s), parity);  // TMA of Q / K only: the issuing thread waits
#if ZYFA_WS_TMA
      if (tma_on) {
        if (kTmaOneThread || t == 0) {
          if constexpr (!kTmaV) mbar_wait(bar_empty_k(s), parity);
          mbar_arrive_expect_tx(bar_full_k(s), kKStageBytes);
#pragma unroll
          for (int r = 0; r < kQkRegions; ++r)
            tma_load_4d(k_s + s * kKStageBytes + r * kTileN * 128, &maps.k, kBoxElems * r, tma_k_row0 + j * kTileN,
                        blk.kv_head, tma_batch, bar_full_k(s));
        }
        if constexpr (kTmaV) {
          mbar_wait(bar_empty_v(s), parity);
          if (kTmaOneThread || t == 0) {
            mbar_arrive_expect_tx(bar_full_v(s), kVTmaBytes);
            if constexpr (kFp8) {  // Vt (the pre-pass): regions of kDV rows x 128 key bytes, keys from vt_col0
#pragma unroll
              for (int r = 0; r < kVtRegions; ++r)
                tma_load_4d(v_s + s * kVStageBytes + r * kVtRows * 128, &maps.v, vt_col0 + j * kTileN + 128 * r, 0,
                            blk.kv_head, vt_plane, bar_full_v(s));
            } else {
              tma_v_block(s, j);
            }
          }
          continue;
        }
      } else
#endif
      {
#if ZYFA_WS_VARLEN == 2
        load_tile_paged<kTileN, kQkChunks>(k_s + s * kKStageBytes, k_rows, j * kTileN, seqlen_k, vec_ok, t);
#else
        load_tile<kTileN, kQkChunks>(k_s + s * kKStageBytes, k_base, args.k_stride_seq * kESize, j * kTileN, seqlen_k,
                                     vec_ok, t);
#endif
        signal(bar_full_k(s));
      }
      if constexpr (kVStaged) {
        // Groups: ..., V_j staging (issued last iteration), K_j, V_{j+1} staging.
        cp_async_commit();
        const bool ahead = j + 1 < blk.n_blocks;
#if ZYFA_WS_VARLEN == 2
        if (ahead) load_v_staging_paged(stg + ((j + 1) & 1) * kTileN * 128, v_rows, (j + 1) * kTileN, seqlen_k, vec_ok, t);
#else
        if (ahead) load_v_staging(stg + ((j + 1) & 1) * kTileN * 128, v_base, args.v_stride_seq, (j + 1) * kTileN,
                                  seqlen_k, vec_ok, t);
#endif
        cp_async_commit();
        cp_async_wait_group<2>();     // V_j staging has landed (this thread's copies)
        named_bar_sync(3, 128);       // ... and every producer thread's
        mbar_wait(bar_empty_v(s), parity);
        if constexpr (kPvF16) {
          convert_staging(v_s + s * kVStageBytes, stg + (j & 1) * kTileN * 128, t);
        } else {
          transpose_staging_ldsm(v_s + s * kVStageBytes, stg + (j & 1) * kTileN * 128, t);
        }
        fence_proxy_async();
        mbar_arrive(bar_full_v(s));
        named_bar_sync(3, 128);       // staging buffer j & 1 is free for V_{j+2}
      } else {
        mbar_wait(bar_empty_v(s), parity);
        if constexpr (kVPre) {  // Vt rows are d, a tile's chunks the 16-key groups: K's load, K's layout
          load_tile<kDV, kTileN / 16>(v_s + s * kVStageBytes, v_base + j * kTileN, vt_row, 0, kDV, vec_ok, t);
          signal(bar_full_v(s));
        } else {
#if ZYFA_WS_VARLEN == 2
          load_tile_paged<kTileN, kVChunks>(v_s + s * kVStageBytes, v_rows, j * kTileN, seqlen_k, vec_ok, t);
#else
#if ZYFA_WS_TMA
          // kTmaVWhole: a block wholly inside the sequence by TMA (thread 0's arrival carries its bytes, the
          // others arrive at once); the last, partial block by cp.async, whose zero fill keeps the next
          // sequence's V rows out of P.V.
          if (kTmaVWhole && tma_on && (j + 1) * kTileN <= seqlen_k) {
            if (t == 0) {
              mbar_arrive_expect_tx(bar_full_v(s), kVTmaBytes);
              tma_v_block(s, j);
            } else {
              mbar_arrive(bar_full_v(s));
            }
            continue;
          }
#endif
          load_tile<kTileN, kVChunks>(v_s + s * kVStageBytes, v_base, args.v_stride_seq * kESize, j * kTileN, seqlen_k,
                                      vec_ok, t);
#endif
          signal(bar_full_v(s));
        }
      }
    }
#if ZYFA_WS_PERSISTENT
#if ZYFA_WS_VARLEN
    publish_item(k_item + 1);  // the next item's map, while this one's last loads land
#endif
    kv_base += blk.n_blocks;
    }  // item loop
#endif
    cp_async_wait_all();
  } else {
  // ================================ consumer warpgroups ================================
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int cw = wg - 1;              // consumer 0 / 1: rows 64 cw .. 64 cw + 63 of the tile
  const int wt = tid - 128 * wg;      // thread within the warpgroup
  const int warp = wt >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int tig = lane & 3;
#if ZYFA_WS_PERSISTENT
  int ring_s = 0;         // K / V ring stage and phase parity of this item's block 0
  uint32_t ring_ph = 0;
  uint32_t q_buf = 0;     // Q tile of this item (kQBuffers), and its full-barrier parity
  uint32_t q_phase = 0;
#pragma unroll 1
  for (uint32_t k_item = 0;; ++k_item) {
  ZYFA_ITEM_OF_CTA(k_item);
#if ZYFA_WS_VARLEN
  const VarlenTile tile = items.take(k_item, item);  // the producer's items
  ZYFA_VARLEN_ITEM(varlen_item_of(packed, varlen, tile, item), break);
#else
  const Block blk = item_block(item);
#endif
#else
  constexpr int ring_s = 0;
  constexpr uint32_t ring_ph = 0;
  constexpr uint32_t q_buf = 0;
  constexpr uint32_t q_phase = 0;
#endif
  const int n = item_uniform(blk.n_blocks);
  const int64_t wg_row0 = static_cast<int64_t>(blk.q_row0) + 64 * cw;  // first row of this warpgroup
  const int64_t row_a = wg_row0 + 16 * warp + g;                        // this thread's rows: row_a, row_a + 8

  // Last key each of this thread's rows sees, clamped to [-1, seqlen_k - 1].
  int row_lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int64_t lim = static_cast<int64_t>(seqlen_k) - 1;
    if (blk.causal) lim = min(lim, row_a + 8 * r + blk.diag);
    row_lim[r] = static_cast<int>(max(lim, static_cast<int64_t>(-1)));
  }

  const float qk_scale = item_uniform(kFp8 ? args.softmax_scale * args.q_descale * args.k_descale * kLog2e
                                           : args.softmax_scale * kLog2e);  // the softmax branches on its sign
  const float lean_a = 8.0f * qk_scale;
  const float v_descale = kFp8 ? args.v_descale : 1.0f;

  // Ping-pong (FA3): the two consumer warpgroups take turns issuing their wgmmas, so one runs its softmax
  // while the other's GEMMs occupy the tensor cores. Consumer cw waits on named barrier 1 + cw before
  // issuing, then hands the turn over.
  const uint32_t pp_mine = 1u + cw;
  const uint32_t pp_other = 2u - cw;
  auto pp_sync = [&]() { named_bar_sync(pp_mine, 256); };
  auto pp_arrive = [&](bool last) {
    if (!(last && cw == 1)) named_bar_arrive(pp_other, 256);  // keeps arrivals == syncs per barrier
  };
  if (cw == 1 && n > 0) named_bar_arrive(pp_other, 256);  // consumer 0 goes first

  const uint32_t q_tile = q_s + q_buf * kQBytes + cw * 64 * 128;  // this warpgroup's rows of Q

  float o[kOAcc];
  float lones[4];  // kLSumOnes: the row sums of the P.V in flight
  // Never read. Zeroing it changes only NVVM's virtual-register numbering, which ptxas's register allocation
  // follows: it keeps the FP8 TMA variants' (192/128 exact and f16) SASS the timed one, which ptxas schedules
  // differently without it (kernels/tools/sass_compare.py shows the difference). Remove it together with a GPU
  // timing run of those two variants.
  float sass_pin[kOAcc];
  float sacc[kSAcc];
  uint32_t p[kPRegs];
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) sass_pin[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kSAcc; ++i) sacc[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kPRegs; ++i) p[i] = 0u;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};  // bf16: this thread's partial row sums (quad-summed at the end); FP8: whole rows
  float lblk[2] = {0.0f, 0.0f};   // FP8: the sums of the block just packed (row_sums_e4m3)
#pragma unroll
  for (int i = 0; i < 4; ++i) lones[i] = 0.0f;

  const uint64_t dq = make_desc(q_tile, 16, 1024);
  const uint64_t dk0 = make_desc(k_s, 16, 1024);
  const uint64_t dv0 = v_desc(v_s);
  auto issue_s_block = [&](int st) { issue_s_desc(sacc, dq, dk0 + static_cast<uint32_t>(st * (kKStageBytes >> 4))); };
  auto issue_pv_block = [&](int st) {
    issue_pv_desc(o, lones, p, dv0 + static_cast<uint32_t>(st * (kVStageBytes >> 4)), ones_desc(dv0, kStages));
  };
  // FP8, contract order: l = l * alpha_j + sum(P_j), alpha_j the rescale of block j's max. The sums of P_j
  // are taken right after P_j V_j has finished (lean P: from the ones wgmma inside that group), before
  // P_{j+1} overwrites the P registers. (Taking them while the P.V group runs queues the HMMA behind the
  // in-flight wgmmas: reading wgmma inputs in flight is fine, defining them makes ptxas serialise, C7513.)
  float alpha_prev[2] = {1.0f, 1.0f};
  auto add_block_sums = [&]() {
    if constexpr (kFp8) {
      if constexpr (kLSumOnes) {
        lblk[0] = lones[0];
        lblk[1] = lones[2];
      } else if constexpr (kPvF16) {
        row_sums_f16(p, lblk);
      } else {
        row_sums_e4m3(p, lblk);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha_prev[r] + lblk[r];
    }
  };
  // Block j needs the tail / causal mask iff it is not whole and fully visible to every row of this warpgroup.
  auto need_mask = [&](int j) {
    const int key0 = j * kTileN;
    return key0 + kTileN > seqlen_k || (blk.causal && key0 + kTileN - 1 > wg_row0 + blk.diag);
  };
  // need_mask is monotonic in j: it holds from this block on (at most n) and for none before it. Block j
  // is whole iff its keys end within seqlen_k and, causal, within the warpgroup's first row's view.
  auto first_masked_block = [&]() {
    int64_t j_first = seqlen_k / kTileN;
    if (blk.causal) {
      const int64_t seen = wg_row0 + blk.diag + 1;  // keys the first row sees
      j_first = min(j_first, seen <= 0 ? int64_t{0} : seen / kTileN);
    }
    return static_cast<int>(min(j_first, static_cast<int64_t>(n)));
  };
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbar_arrive(bar);
  };
  auto run_softmax = [&](float (&alpha)[2], int j) {
    softmax_block(sacc, m_run, l_run, alpha, j * kTileN, need_mask(j), row_lim, qk_scale, lean_a, tig);
  };
  // kRescaleEarly: the O rescale still owed (alpha of the block last packed), applied before the next P.V
  // issue.
  bool pend_rescale = false;
  float alpha_pend[2] = {1.0f, 1.0f};
  auto apply_pending_rescale = [&]() {
    if constexpr (kRescaleEarly) {
      if (pend_rescale) {  // warp-uniform
#pragma unroll
        for (int i = 0; i < kOAcc; ++i) o[i] *= alpha_pend[(i >> 1) & 1];
      }
    }
  };

  if (n > 0) {
    mbar_wait(bar_q_of(q_buf), q_phase);
    // ---- block 0: S_0 only
    mbar_wait(bar_full_k(ring_s), ring_ph);
    pp_sync();
    fence_regs(sacc);
    wgmma_fence();
    issue_s_block(ring_s);
    pp_arrive(false);
    wgmma_wait<0>();
    fence_regs(sacc);
    release(bar_empty_k(ring_s));
    float alpha[2];
    run_softmax(alpha, 0);
    pack_p(sacc, p);
    alpha_prev[0] = alpha[0];
    alpha_prev[1] = alpha[1];

    // ---- blocks 1..n-1: S_j overlapped with P_{j-1} V_{j-1}. s / ph: stage and phase parity of
    // block j (j % kStages, (j / kStages) & 1), kept incrementally.
    // ZYFA_BLOCK_STEP(SOFTMAX): iteration j's body, SOFTMAX its softmax of S_j into alpha (one text, two loops).
    // A macro, not a lambda: a lambda renumbers NVVM's values, which moves ptxas's register allocation of the
    // FP8 builds (one loop) away from their timed SASS.
    int s = ring_s;
    uint32_t ph = ring_ph;
#define ZYFA_BLOCK_STEP(SOFTMAX)                                                                        \
      const int sp = s;                                                                                 \
      const uint32_t php = ph;                                                                          \
      if (++s == kStages) {                                                                             \
        s = 0;                                                                                          \
        ph ^= 1u;                                                                                       \
      }                                                                                                 \
      mbar_wait(bar_full_k(s), ph);                                                                     \
      pp_sync();                                                                                        \
      fence_regs(sacc);                                                                                 \
      fence_regs(o);                                                                                    \
      fence_regs(lones);                                                                                \
      fence_regs(p);                                                                                    \
      wgmma_fence();                                                                                    \
      issue_s_block(s);                                                                                 \
      apply_pending_rescale(); /* kRescaleEarly: O *= alpha_{j-1} while S_j runs */                     \
      mbar_wait(bar_full_v(sp), php);                                                                   \
      fence_regs(o);                                                                                    \
      fence_regs(lones);                                                                                \
      fence_regs(p);                                                                                    \
      wgmma_fence(); /* the P.V group has its own fence (FA3 order), ptxas wants one per group */       \
      issue_pv_block(sp);                                                                               \
      pp_arrive(false);                                                                                 \
      wgmma_wait<1>();                                                                                  \
      fence_regs(sacc);                                                                                 \
      release(bar_empty_k(s));                                                                          \
      SOFTMAX;                                                                                          \
      wgmma_wait<0>();                                                                                  \
      fence_regs(o);                                                                                    \
      fence_regs(lones);                                                                                \
      fence_regs(p); /* P_{j-1} stays live until its wgmma has finished reading it */                   \
      release(bar_empty_v(sp));                                                                         \
      add_block_sums(); /* P_{j-1} */                                                                   \
      /* The O rescale only when some row of the warp moved its max (warp-uniform). */                  \
      const bool rescale = __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f);               \
      if constexpr (kRescaleEarly) {                                                                    \
        pend_rescale = rescale; /* applied before P_j V_j is issued (next iteration or the last P V) */ \
        alpha_pend[0] = alpha[0];                                                                       \
        alpha_pend[1] = alpha[1];                                                                       \
      } else if (rescale) {                                                                             \
_Pragma("unroll")                                                                                       \
        for (int i = 0; i < kOAcc; ++i) o[i] *= alpha[(i >> 1) & 1];                                    \
      }                                                                                                 \
      pack_p(sacc, p); /* P registers are written only outside any wgmma's flight (FA3 order) */        \
      alpha_prev[0] = alpha[0];                                                                         \
      alpha_prev[1] = alpha[1];
    int j = 1;
    if constexpr (kSplitLoop) {
      // The whole blocks (those before the first masked one) on the fast path, each body straight-line code:
      // the general softmax until every row of the warp has a running max >= 0, then the kSettled one (the
      // integer row max needs no fallback), in a loop of its own: running maxima never decrease.
      if (qk_scale > 0.0f) {
        const int j_whole = item_uniform(first_masked_block());  // a uniform loop bound
        auto settled = [&]() { return __all_sync(0xffffffffu, m_run[0] >= 0.0f && m_run[1] >= 0.0f); };
#pragma unroll 1
        for (; j < j_whole && !settled(); ++j) {
          ZYFA_BLOCK_STEP(softmax_block_whole<false>(sacc, m_run, l_run, alpha, qk_scale, lean_a))
        }
#pragma unroll 1
        for (; j < j_whole; ++j) {
          ZYFA_BLOCK_STEP(softmax_block_whole<true>(sacc, m_run, l_run, alpha, qk_scale, lean_a))
        }
        // The masked blocks (the diagonal, the tail) of a settled warp: the mask, then the same softmax.
        if (j < n && settled()) {
#pragma unroll 1
          for (; j < n; ++j) {
            ZYFA_BLOCK_STEP(mask_block(sacc, j * kTileN, row_lim, tig);
                            softmax_block_whole<true>(sacc, m_run, l_run, alpha, qk_scale, lean_a))
          }
        }
      }
    }
#pragma unroll 1
    for (; j < n; ++j) {
      ZYFA_BLOCK_STEP(run_softmax(alpha, j))
    }
#undef ZYFA_BLOCK_STEP

#if ZYFA_WS_PERSISTENT
    // Every S of this item (the only Q reads) has completed in this warp: Q may be reloaded.
    release(bar_q_empty_of(q_buf));
#endif
    // ---- last P V
    const int sl = s;  // block n - 1
    mbar_wait(bar_full_v(sl), ph);
    pp_sync();
    apply_pending_rescale();
    fence_regs(o);
    fence_regs(lones);
    fence_regs(p);
    wgmma_fence();
    issue_pv_block(sl);
    pp_arrive(true);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(lones);
    fence_regs(p);
    release(bar_empty_v(sl));
    add_block_sums();  // P_{n-1}
#if ZYFA_WS_PERSISTENT
    // The next item's block 0 takes the ring slot after block n - 1; its Q the next phase.
    ring_s = s + 1;
    ring_ph = ph;
    if (ring_s == kStages) {
      ring_s = 0;
      ring_ph ^= 1u;
    }
    if (++q_buf == kQBuffers) {  // the next item's Q: the next tile, the next phase after the last
      q_buf = 0;
      q_phase ^= 1u;
    }
#endif
  }

  // ---- epilogue: out = acc * (v_descale / l) -> bf16 (l == 0 -> 0); lse (l == 0 -> +inf)
  const bool out_vec_ok = (reinterpret_cast<uintptr_t>(args.out) & 3u) == 0u &&
                          ((args.out_stride_batch | args.out_stride_seq | args.out_stride_head) & 1) == 0;
  const bool write_lse = (args.flags & ZYFA_FLAG_LSE) != 0u && args.lse != nullptr;
  // The staged epilogue needs 16-byte aligned rows (base and every stride a multiple of 8 elements).
  const bool staged = kOStageCols != 0 && (reinterpret_cast<uintptr_t>(args.out) & 15u) == 0u &&
                      ((args.out_stride_batch | args.out_stride_seq | args.out_stride_head) & 7) == 0;
  float l_row[2], row_scale[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_row[r] = kFp8 ? l_run[r] : quad_sum(l_run[r]);  // FP8 sums: whole rows already
    row_scale[r] = l_row[r] == 0.0f ? 0.0f : v_descale / l_row[r];    // one division per row
  }
  if constexpr (kOStageCols != 0) {
    if (staged)
      store_o_staged<kOStageCols>(o, row_scale, args, blk,
                                  bars + kBarrierBytes + static_cast<uint32_t>(cw * 4 + warp) * 16 * kOStageCols * 2,
                                  wg_row0 + 16 * warp, seqlen_q, lane);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = l_row[r];
    const int64_t row = row_a + 8 * r;
    if (row >= seqlen_q) continue;
    __nv_bfloat16* const out_row = static_cast<__nv_bfloat16*>(args.out) +
                                   static_cast<int64_t>(blk.batch) * args.out_stride_batch + row * args.out_stride_seq +
                                   static_cast<int64_t>(blk.head) * args.out_stride_head;
#pragma unroll
    for (int j = 0; j < (staged ? 0 : 16); ++j) {  // the register path (out not 16-byte aligned, or no staging)
      const float o0 = o[4 * j + 2 * r] * row_scale[r];
      const float o1 = o[4 * j + 2 * r + 1] * row_scale[r];
      __nv_bfloat16* const dst = out_row + 8 * j + 2 * tig;
      if (out_vec_ok) {
        *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(o0, o1);
      } else {
        dst[0] = __float2bfloat16_rn(o0);
        dst[1] = __float2bfloat16_rn(o1);
      }
    }
    if (write_lse && tig == 0) {
      const float lse = l == 0.0f ? INFINITY : (m_run[r] + log2f(l) - kPShift) * kLn2;
#if ZYFA_WS_VARLEN
      args.lse[static_cast<int64_t>(blk.head) * varlen.total_q + row] = lse;  // [heads_q, total_q], from q_start
#else
      args.lse[(static_cast<int64_t>(blk.batch) * args.heads_q + blk.head) * seqlen_q + row] = lse;
#endif
    }
  }
#if ZYFA_WS_PERSISTENT
  }  // item loop
#endif
  }
}

#if ZYFA_WS_VPRE
// The V pre-pass entry <kernel>_vprep (manifest row "v_prep"; launch contract in kernels/abi/zyfa_abi.h, ABI 3,
// packed ABI 6): zyfa_sm90_ws::vt_prep for block (x, kv head, batch) or vt_prep_packed for block (x, kv head),
// 256 threads, 16 KiB of static shared memory.
#define ZYFA_VPREP_CAT2(a, b) a##b
#define ZYFA_VPREP_CAT(a, b) ZYFA_VPREP_CAT2(a, b)
#define ZYFA_VPREP_NAME ZYFA_VPREP_CAT(ZYFA_KERNEL_NAME, _vprep)
#if ZYFA_WS_VARLEN  // ABI 6: block (x, kv head), the packed layout
extern "C" __global__ void __launch_bounds__(ZYFA_VPREP_THREADS)
    ZYFA_VPREP_NAME(const zyfa_fwd_args args, const zyfa_varlen_args varlen, uint8_t* vt) {
  zyfa_sm90_ws::vt_prep_packed(args, varlen, vt);
}
#else
extern "C" __global__ void __launch_bounds__(ZYFA_VPREP_THREADS) ZYFA_VPREP_NAME(const zyfa_fwd_args args, uint8_t* vt) {
  zyfa_sm90_ws::vt_prep(args, vt);
}
#endif
#endif
