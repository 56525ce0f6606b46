// fa_fwd_wgmma: the V pre-pass (kVPre builds). e4m3 V is transposed in global memory by a separate entry,
// <kernel>_vprep, which launchers run first into a workspace (kernels/abi/zyfa_abi.h version 3 is its launch
// contract). args.v then points at Vt [batch][heads_kv][kDV][vt_row_bytes(seqlen_k)] bytes, each row's keys
// padded with zeros and permuted inside each 16-key group as the in-kernel transpose permutes them (position
// 16h + 4t + i <- key 16h + 2t + (i&1) + 8(i>>1), load.cuh); the kernel does not read args.v's strides for V.
#pragma once

#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/load.cuh"

namespace zyfa_sm90_ws {

// Bytes of one Vt row (the keys padded with zeros to a multiple of both kTileN and vt_prep's
// keys per block: kernels/abi/zyfa_abi.h's rule, which the launchers size the workspace by).
__host__ __device__ constexpr int64_t vt_row_bytes(int seqlen_k) { return ZYFA_VT_ROW_BYTES(seqlen_k, kTileN); }

#if ZYFA_WS_VPRE  // only there: its static shared memory must not appear in the other builds
// The pass (the body of the entry <kernel>_vprep in fa_fwd_wgmma.cu): V (args.v with its strides) -> Vt. Block (x, kv head, batch)
// takes keys 128 x .. 128 x + 127 of all kDV = 128 columns. Its 256 threads copy the 128 key rows into
// shared memory (16-byte chunk c of row r at chunk c ^ (r / 16 % 8)), then thread (g = t % 8, w = t / 8)
// reads word w (d 4w .. 4w + 3) of the 16 rows of key group g (the swizzle puts the 8 groups of a warp on
// distinct banks), byte-transposes them with 24 PRMT into the 4 d rows' 16 bytes in P's key order
// (position 4q + i <- key 2q + (i & 1) + 8 (i >> 1)), and stores them; the 8 lanes of one w write 128
// contiguous bytes of each d row. Keys >= seqlen_k are zeros. Grid (vt_row_bytes / 128, heads_kv, batch).
__device__ __forceinline__ void vt_prep(const zyfa_fwd_args& args, uint8_t* vt) {
  static_assert(kDV == 128, "one 128-byte V row per key");
  static_assert(ZYFA_VPREP_KEYS == 128 && ZYFA_VPREP_THREADS == 256, "the body below is written for 128 keys x 256 threads");
  __shared__ __align__(16) uint8_t rows[128 * 128];
  const int t = static_cast<int>(threadIdx.x);
  const int key0 = static_cast<int>(blockIdx.x) * 128;
  const int64_t rb = vt_row_bytes(args.seqlen_k);
  const uint8_t* const g = static_cast<const uint8_t*>(args.v) +
      (static_cast<int64_t>(blockIdx.z) * args.v_stride_batch + static_cast<int64_t>(blockIdx.y) * args.v_stride_head) * kESize;
  const bool vec_ok = ((reinterpret_cast<uintptr_t>(args.v) |
                        static_cast<uintptr_t>((args.v_stride_batch | args.v_stride_seq | args.v_stride_head) * kESize)) &
                       15u) == 0u;
  uint4 in[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // all four loads in flight before the first store
    const int r = (t >> 3) + 32 * i, c = t & 7;
    in[i] = make_uint4(0u, 0u, 0u, 0u);
    if (key0 + r < args.seqlen_k) {
      const uint8_t* p = g + static_cast<int64_t>(key0 + r) * args.v_stride_seq * kESize + c * 16;
      in[i] = vec_ok ? __ldg(reinterpret_cast<const uint4*>(p)) : load16_bytes(p);
    }
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
  uint8_t* const dst = vt + (static_cast<int64_t>(blockIdx.z) * args.heads_kv + blockIdx.y) * kDV * rb + key0 + 16 * grp;
#pragma unroll
  for (int b = 0; b < 4; ++b)
    *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(4 * w + b) * rb) = make_uint4(out[0][b], out[1][b], out[2][b], out[3][b]);
}
#endif

}  // namespace zyfa_sm90_ws
