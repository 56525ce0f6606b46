// fa_fwd_wgmma: the V pre-pass (kVPre builds). e4m3 V is transposed in global memory by a separate entry,
// <kernel>_vprep, which launchers run first into a workspace (kernels/abi/zyfa_abi.h versions 3 and 6 are its
// launch contract). args.v then points at Vt [batch][heads_kv][kDV][vt_row_bytes(seqlen_k)] bytes (a packed
// batch: [heads_kv][kDV][ZYFA_VT_PACKED_ROW_BYTES], each sequence from its own column), each row's keys
// padded with zeros and permuted inside each 16-key group as the in-kernel transpose permutes them (position
// 16h + 4t + i <- key 16h + 2t + (i&1) + 8(i>>1), load.cuh); the kernel does not read args.v's strides for V.
#pragma once

#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/load.cuh"
#if ZYFA_WS_VARLEN
#include "sm90/fa_fwd_wgmma/varlen.cuh"
#endif

namespace zyfa_sm90_ws {

// Bytes of one Vt row (the keys padded with zeros to a multiple of both kTileN and vt_prep's
// keys per block: kernels/abi/zyfa_abi.h's rule, which the launchers size the workspace by).
__host__ __device__ constexpr int64_t vt_row_bytes(int seqlen_k) { return ZYFA_VT_ROW_BYTES(seqlen_k, kTileN); }

// Sequence b's first Vt column in a packed batch's layout (zyfa_abi.h, ZYFA_VT_PACKED_COLUMN).
__device__ __forceinline__ int64_t vt_packed_column(int b, int64_t k_start) { return ZYFA_VT_PACKED_COLUMN(b, k_start); }

#if ZYFA_WS_VPRE  // only there: its static shared memory must not appear in the other builds
// The pass's body for one block of 128 Vt columns (keys) of one kv head, all kDV = 128 rows (d). Its 256 threads
// copy the 128 key rows into shared memory (16-byte chunk c of row r at chunk c ^ (r / 16 % 8)), then thread
// (g = t % 8, w = t / 8) reads word w (d 4w .. 4w + 3) of the 16 rows of key group g (the swizzle puts the 8
// groups of a warp on distinct banks), byte-transposes them with 24 PRMT into the 4 d rows' 16 bytes in P's
// key order (position 4q + i <- key 2q + (i & 1) + 8 (i >> 1)), and stores them; the 8 lanes of one w write
// 128 contiguous bytes of each d row. `row_of(r, row)` says whether column r of the block holds a key (else
// zeros) and sets `row` to its V row; `dst` is the block's first column of Vt row d = 0, `rb` the bytes from
// one Vt row to the next.
template <class RowOf>
__device__ __forceinline__ void vt_prep_block(RowOf row_of, bool vec_ok, uint8_t* dst, int64_t rb) {
  static_assert(kDV == 128, "one 128-byte V row per key");
  static_assert(ZYFA_VPREP_KEYS == 128 && ZYFA_VPREP_THREADS == 256, "the body below is written for 128 keys x 256 threads");
  __shared__ __align__(16) uint8_t rows[128 * 128];
  const int t = static_cast<int>(threadIdx.x);
  uint4 in[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // all four loads in flight before the first store
    const int r = (t >> 3) + 32 * i, c = t & 7;
    in[i] = make_uint4(0u, 0u, 0u, 0u);
    const uint8_t* row = nullptr;
    if (row_of(r, row)) in[i] = vec_ok ? __ldg(reinterpret_cast<const uint4*>(row + c * 16)) : load16_bytes(row + c * 16);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = (t >> 3) + 32 * i, c = t & 7;
    *reinterpret_cast<uint4*>(rows + r * 128 + ((c ^ ((r >> 4) & 7)) << 4)) = in[i];
  }
  __syncthreads();
  const int grp = t & 7, w = t >> 3;
  uint32_t k[16];  // word w of key rows 16 grp + 0..15
#pragma unroll
  for (int r = 0; r < 16; ++r)
    k[r] = *reinterpret_cast<const uint32_t*>(rows + (16 * grp + r) * 128 + (((w >> 2) ^ grp) << 4) + 4 * (w & 3));
  uint32_t out[4][4];  // out[q][b]: positions 4q .. 4q + 3 of d row 4 w + b
#pragma unroll
  for (int q = 0; q < 4; ++q) transpose4x4(k[2 * q], k[2 * q + 1], k[2 * q + 8], k[2 * q + 9], out[q]);
#pragma unroll
  for (int b = 0; b < 4; ++b)
    *reinterpret_cast<uint4*>(dst + 16 * grp + static_cast<int64_t>(4 * w + b) * rb) =
        make_uint4(out[0][b], out[1][b], out[2][b], out[3][b]);
}

// 16-byte loads of V rows are legal (every row start 16-byte aligned; uniform per launch).
__device__ __forceinline__ bool v_rows_aligned(const zyfa_fwd_args& args) {
  return ((reinterpret_cast<uintptr_t>(args.v) |
           static_cast<uintptr_t>((args.v_stride_batch | args.v_stride_seq | args.v_stride_head) * kESize)) & 15u) == 0u;
}

// The dense pass (the body of <kernel>_vprep): V (args.v with its strides) -> Vt. Block (x, kv head, batch)
// takes keys 128 x .. 128 x + 127; keys >= seqlen_k are zeros. Grid (vt_row_bytes / 128, heads_kv, batch).
__device__ __forceinline__ void vt_prep(const zyfa_fwd_args& args, uint8_t* vt) {
  const int key0 = static_cast<int>(blockIdx.x) * 128;
  const int64_t rb = vt_row_bytes(args.seqlen_k);
  const uint8_t* const g = static_cast<const uint8_t*>(args.v) +
      (static_cast<int64_t>(blockIdx.z) * args.v_stride_batch + static_cast<int64_t>(blockIdx.y) * args.v_stride_head) * kESize;
  auto row_of = [&](int r, const uint8_t*& row) {
    row = g + static_cast<int64_t>(key0 + r) * args.v_stride_seq * kESize;
    return key0 + r < args.seqlen_k;
  };
  uint8_t* const dst = vt + (static_cast<int64_t>(blockIdx.z) * args.heads_kv + blockIdx.y) * kDV * rb + key0;
  vt_prep_block(row_of, v_rows_aligned(args), dst, rb);
}

#if ZYFA_WS_VARLEN
// The packed pass (the body of a varlen build's <kernel>_vprep): V [total_k, heads_kv, 128] -> Vt [heads_kv]
// [128][ZYFA_VT_PACKED_ROW_BYTES(batch, total_k)], sequence b's keys (sequence_of: the counts the attention
// kernel uses) from column vt_packed_column(b, k_start), zeros elsewhere. Block (x, kv head) writes columns
// 128 x .. 128 x + 127: their sequence is the last one starting at or before the column. Columns of
// consecutive sequences start more than 128 apart, so a block meets at most two: one search for its first
// column (last_at_or_before, varlen_tiles.h), one comparison per row; both sequences' counts load together.
// (Decreasing cu_seqlens_k break that order; the rows then come out wrong, still inside V and Vt.)
__device__ __forceinline__ void vt_prep_packed(const zyfa_fwd_args& packed, const zyfa_varlen_args& vl, uint8_t* vt) {
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * 128;
  const int64_t rb = ZYFA_VT_PACKED_ROW_BYTES(packed.batch, vl.total_k);
  auto start_of = [&](int b) { return vt_packed_column(b, clamp64(__ldg(vl.cu_seqlens_k + b), 0, vl.total_k)); };
  const int b0 = last_at_or_before(WarpLanes{static_cast<int>(threadIdx.x) & 31}, packed.batch, col0, start_of);
  const bool has1 = b0 + 1 < packed.batch;
  // Both sequences' counts read unconditionally (at clamped indices: batch >= 1), so their loads issue together.
  const Sequence r0 = sequence_of(packed, vl, max(b0, 0));
  const Sequence r1 = sequence_of(packed, vl, min(b0 + 1, packed.batch - 1));
  const Sequence s0 = b0 >= 0 ? r0 : Sequence{};
  const Sequence s1 = has1 ? r1 : Sequence{};
  const int64_t start0 = b0 >= 0 ? vt_packed_column(b0, s0.k_start) : 0;
  const int64_t start1 = has1 ? vt_packed_column(b0 + 1, s1.k_start) : INT64_MAX;
  const uint8_t* const g = static_cast<const uint8_t*>(packed.v) +
      static_cast<int64_t>(blockIdx.y) * packed.v_stride_head * kESize;
  auto row_of = [&](int r, const uint8_t*& row) {
    const int64_t col = col0 + r;
    const bool second = col >= start1;
    // Field by field: a reference to one of the two structs puts both in local memory.
    const int64_t k_start = second ? s1.k_start : s0.k_start;
    const int len_k = second ? s1.len_k : s0.len_k;
    const int64_t key = col - (second ? start1 : start0);
    row = g + (k_start + key) * packed.v_stride_seq * kESize;
    return (second || b0 >= 0) && key < len_k;
  };
  uint8_t* const dst = vt + static_cast<int64_t>(blockIdx.y) * kDV * rb + col0;
  vt_prep_block(row_of, v_rows_aligned(packed), dst, rb);
}
#endif
#endif

}  // namespace zyfa_sm90_ws
