// fa_fwd_wgmma: the epilogue's O stores. out = acc * (v_descale / l) -> bf16, one division per row
// (row_scale) and a multiply per element: differs from the contract's (acc / l) * v_descale by at most about
// 2 ulp of fp32 before the bf16 rounding.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/ptx.cuh"
#include "sm90/fa_fwd_wgmma/scheduler.cuh"

namespace zyfa_sm90_ws {

// The staged epilogue (kOStageCols != 0; outputs whose rows are 16-byte aligned): one consumer warp's 16 rows of out (rows row0 .. row0 + 15 of the
// block; this thread holds rows g, g + 8 at columns 8 j + 2 tig, + 1) through its region ost of 16 rows x
// kOStageCols bf16, in kDV / kOStageCols passes: stmatrix.x4 puts the accumulator fragments of columns
// 8 j .. 8 j + 15 of both row halves into the region (16-byte chunk c of local row lr at chunk
// c ^ (lr & 7): conflict-free for the stmatrix rows and the 16-byte reads), then each group of
// kOStageCols / 8 lanes stores one row's pass-columns per step with 16-byte global stores (instead of
// 32 four-byte stores per row, whose LSU throttle and long-scoreboard stalls the staging removes).
// Same values as the register path: bitwise the same output.

template <int kCols>  // kOStageCols (a template: the kernels without staging never instantiate it)
__device__ __forceinline__ void store_o_staged(const float (&o)[kOAcc], const float (&row_scale)[2],
                                               const zyfa_fwd_args& args, const Block& blk, uint32_t ost,
                                               int64_t row0, int seqlen_q, int lane) {
  static_assert(kCols == 64 || kCols == 128, "a staged pass is 8 or 16 chunks of 16 bytes");
  constexpr int kRowBytes = kCols * 2;
  constexpr int kChunks = kCols / 8;     // 16-byte chunks per staged row = lanes per row in the stores
  constexpr int kRowsPerStep = 32 / kChunks;   // rows one warp-wide 16-byte store covers
  // Matrix m of an x4: rows (m & 1) * 8 .. + 7, columns 8 (j + (m >> 1)) .. + 7; lane L gives the address
  // of row L & 7 of matrix L >> 3.
  const int m = lane >> 3;
  const int lr = (lane & 7) + 8 * (m & 1);
  const int c = lane % kChunks;
#pragma unroll
  for (int pass = 0; pass < kDV / kCols; ++pass) {
    __syncwarp();  // the previous pass's (or item's) reads of this region are done
#pragma unroll
    for (int jl = 0; jl < kChunks; jl += 2) {
      const int j = pass * kChunks + jl;
      const int cs = jl + (m >> 1);
      stmatrix_x4(ost + lr * kRowBytes + ((cs ^ (lr & 7)) << 4),
                  bf16_pair(o[4 * j] * row_scale[0], o[4 * j + 1] * row_scale[0]),
                  bf16_pair(o[4 * j + 2] * row_scale[1], o[4 * j + 3] * row_scale[1]),
                  bf16_pair(o[4 * (j + 1)] * row_scale[0], o[4 * (j + 1) + 1] * row_scale[0]),
                  bf16_pair(o[4 * (j + 1) + 2] * row_scale[1], o[4 * (j + 1) + 3] * row_scale[1]));
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 16 / kRowsPerStep; ++it) {
      const int r = kRowsPerStep * it + lane / kChunks;
      const int64_t row = row0 + r;
      const uint4 v = ld_shared_v4(ost + r * kRowBytes + ((c ^ (r & 7)) << 4));
      if (row < seqlen_q) {
        __nv_bfloat16* const dst = static_cast<__nv_bfloat16*>(args.out) +
                                   static_cast<int64_t>(blk.batch) * args.out_stride_batch +
                                   row * args.out_stride_seq + static_cast<int64_t>(blk.head) * args.out_stride_head +
                                   pass * kCols + 8 * c;
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");  // one 16-byte store (a uint4 assignment became four 4-byte stores)
      }
    }
  }
}

}  // namespace zyfa_sm90_ws
