// fa_fwd_wgmma: the two GEMMs of one KV block for one consumer warpgroup (64 rows), each one committed
// wgmma group (descriptors, fences and the instructions: sm90/wgmma.h), and the FP8 row sums of P.
// S = Q K^T is wgmma SS (A = Q, B = K, both K-major in smem); O += P V is wgmma RS (A = P from registers,
// straight from the S accumulators).
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/ptx.cuh"
#include "sm90/wgmma.h"

namespace zyfa_sm90_ws {

// S = Q K^T. q_tile: this warpgroup's 64 rows inside the Q tile (regions of kTileM rows); k_tile:
// one K stage. k-step ks covers bytes [32 ks, 32 ks + 32) of a row: region ks / 4, offset 32 (ks % 4).
// Descriptor forms: dq / dk describe the tile starts; a k-step's descriptor adds its byte offset / 16 to
// the start-address field (bits 0-13 hold (addr & 0x3ffff) >> 4: shared addresses stay below 2^18, so
// the add never carries out of the field). Keeps the per-wgmma descriptor arithmetic off the
// uniform datapath in the main loop.
__device__ __forceinline__ void issue_s_desc(float (&sacc)[kSAcc], uint64_t dq, uint64_t dk) {
#pragma unroll
  for (int ks = 0; ks < kQkSteps; ++ks) {
    const uint32_t off_q = (ks >> 2) * kTileM * 128 + (ks & 3) * 32;
    const uint32_t off_k = (ks >> 2) * kTileN * 128 + (ks & 3) * 32;
    wgmma_ss<kTileN, kQkType>(sacc, dq + (off_q >> 4), dk + (off_k >> 4), ks > 0 ? 1u : 0u);
  }
  wgmma_commit();
}

__device__ __forceinline__ void issue_s(float (&sacc)[kSAcc], uint32_t q_tile, uint32_t k_tile) {
  issue_s_desc(sacc, make_desc(q_tile, 16, 1024), make_desc(k_tile, 16, 1024));
}

// The V-stage descriptor of issue_pv (LBO / SBO per dtype).
__device__ __forceinline__ uint64_t v_desc(uint32_t v_tile) {
  return kPv16 ? make_desc(v_tile, kTileN * 128, 1024) : make_desc(v_tile, 16, 1024);
}

// O (+)= P V. v_tile: one V stage. bf16: V [key][d] is MN-major (d regions of 64 at LBO = kTileN x
// 128 B), a k-step is 16 keys = 2048 B; e4m3: Vt [d][key position] is K-major, a k-step is 32 bytes.
// kLSumOnes: lsum = the block's row sums (wgmma_rs_n8_e4m3 by the ones rows at d_ones).
__device__ __forceinline__ void issue_pv_desc(float (&o)[kOAcc], float (&lsum)[4], const uint32_t (&p)[kPRegs], uint64_t dv,
                                              uint64_t d_ones) {
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) {
    // e4m3: k-step kk in Vt region kk / 4 (kVtRows rows of 128 B), bytes 32 (kk % 4) of each row.
    const uint64_t desc = dv + ((kPv16 ? kk * 16 * 128 : (kk >> 2) * kVtRows * 128 + (kk & 3) * 32) >> 4);
    wgmma_rs<kPvType>(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], desc, 1u);
    if constexpr (kLSumOnes) {  // the first k-step starts the block's sums fresh
      wgmma_rs_n8_e4m3(lsum, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], d_ones, kk > 0 ? 1u : 0u);
    }
  }
  wgmma_commit();
}

// kLSumOnes: the descriptor of the ones rows every k-step reads, for `stages` V stages from dv0 (the first stage's
// descriptor): the region after them (kOnesRegion), else the first Vt region's own ones rows. Every ones region
// holds the same bytes, so one loop-invariant descriptor serves all stages and k-steps.
__device__ __forceinline__ uint64_t ones_desc(uint64_t dv0, int stages) {
  return dv0 + static_cast<uint32_t>((kOnesRegion ? stages * kVStageBytes : kDV * 128) >> 4);
}

// O += P V on one V stage at v_tile (the layout probe's form; the main loop keeps descriptors in registers).
__device__ __forceinline__ void issue_pv(float (&o)[kOAcc], float (&lsum)[4], const uint32_t (&p)[kPRegs], uint32_t v_tile) {
  issue_pv_desc(o, lsum, p, v_desc(v_tile), ones_desc(v_desc(v_tile), 1));
}

// kLSumOnes: Vt rows kDV .. kDV + 7 of every region of `stages` V stages at v_s = e4m3 1.0 (0x38). Written once
// by the calling threads (t of n); no load ever touches them. The caller fences and syncs.
__device__ __forceinline__ void write_ones_rows(uint32_t v_s, int stages, int t, int n) {
  if constexpr (kOnesRegion) {  // one region after the stages
    for (int i = t; i < 8 * 128 / 4; i += n) st_shared_u32(v_s + static_cast<uint32_t>(stages * kVStageBytes + 4 * i), 0x38383838u);
  } else if constexpr (kLSumOnes) {
    constexpr int kWords = 8 * 128 / 4;  // per region
    for (int i = t; i < stages * kVtRegions * kWords; i += n) {
      const int region = i / kWords;  // stage * kVtRegions + region of the stage
      st_shared_u32(v_s + static_cast<uint32_t>(region * kVtRows * 128 + kDV * 128 + (i % kWords) * 4), 0x38383838u);
    }
  }
}

// d (+)= A x ones, mma.sync m16n8k16 f16 -> f32 (A fragment: a0 / a2 row g, a1 / a3 row g + 8).
__device__ __forceinline__ void hmma_ones(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {
  constexpr uint32_t kOnes = 0x3c003c00u;  // f16x2 (1, 1)
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(kOnes), "r"(kOnes));
}

// Exact FP8: the whole-row sums of this thread's two rows (r = 0: g, 1: g + 8) over the block's packed P
// (pack_p: p[4 kc + 2 h + r] holds 4 keys of row r; every lane of the quad gets the same value): the bytes
// decoded to f16 pairs (exact) are already the m16n8k16 A fragment of an HMMA with ones (products exact, fp32
// accumulation), in two independent chains for latency. (mma.sync m16n8k32 e4m3 straight on the packed bytes
// is no shortcut on sm_90: ptxas lowers it to the same F2FP unpack + HMMA.16816.)
__device__ __forceinline__ void row_sums_e4m3(const uint32_t (&p)[kPRegs], float (&lsum)[2]) {
  float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int i = 0; i < kPRegs / 2; ++i) {  // i = 2 kc + h
    uint32_t lo0, hi0, lo1, hi1;
    e4m3x4_to_f16x2x2(p[2 * i], lo0, hi0);      // row g
    e4m3x4_to_f16x2x2(p[2 * i + 1], lo1, hi1);  // row g + 8
    hmma_ones(d[i & 1], lo0, lo1, hi0, hi1);
  }
  lsum[0] = d[0][0] + d[1][0];
  lsum[1] = d[0][2] + d[1][2];
}

// kPvF16: the same whole-row sums straight from the f16 P operand (k-step kk = p[4 kk .. 4 kk + 3] is
// already the m16n8k16 A fragment: rows g, g + 8, keys 16 kk + 2 tig, + 1, + 8, + 9), no decode.
__device__ __forceinline__ void row_sums_f16(const uint32_t (&p)[kPRegs], float (&lsum)[2]) {
  float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) hmma_ones(d[kk & 1], p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]);
  lsum[0] = d[0][0] + d[1][0];
  lsum[1] = d[0][2] + d[1][2];
}

}  // namespace zyfa_sm90_ws
