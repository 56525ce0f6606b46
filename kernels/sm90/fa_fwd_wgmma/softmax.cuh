// fa_fwd_wgmma: the online softmax of one KV block for one consumer thread's two rows, and the packing of
// P into the P.V operand. Base 2: t = S C with C = softmax_scale (x q / k descales) x log2(e); per block
// m_new = max(m, max t), alpha = exp2(m - m_new), BF16 p = exp2(t - m_new) (l += sum p, fp32), FP8 P =
// exp2(t - m_new + 8) (exact: e4m3 RNE / satfinite) or lean P's code (one FMA to the e4m3 code); FP8's l is
// the sum of the e4m3-rounded P (mma.cuh). The accumulator layout: S tile j of the thread's m64 x kTileN
// accumulator holds s[4 j + 2 r + x] = row g + 8 r (r = 0, 1), key 8 j + 2 tig + x.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/ptx.cuh"
#include "sm90/warp_ptx.h"

namespace zyfa_sm90_ws {

// The signed-int max (kMax) or min of the float bits of this thread's values of row R (s[4 j + 2 R + x]):
// VIMNMX3, two new values per instruction, in two chains.
template <int R, bool kMax>
__device__ __forceinline__ int row_bits_minmax(const float (&s)[kSAcc]) {
  constexpr int kN = 2 * kSTiles;  // values of row R: element e at s[4 (e >> 1) + 2 R + (e & 1)]
  auto at = [&](int e) { return __float_as_int(s[4 * (e >> 1) + 2 * R + (e & 1)]); };
  auto op = [](int a, int b) { return kMax ? max(a, b) : min(a, b); };
  int c[2] = {at(0), at(1)};
#pragma unroll
  for (int e = 2; e + 1 < kN; e += 2) {
    int& ch = c[(e >> 1) & 1];
    ch = kMax ? __vimax3_s32(ch, at(e), at(e + 1)) : __vimin3_s32(ch, at(e), at(e + 1));
  }
  if constexpr (kN % 2 != 0) c[0] = op(c[0], at(kN - 1));
  return op(c[0], c[1]);
}

// kMax3: the max of this thread's values of row R from the int max of their float bits (VIMNMX3, one SASS
// instruction for two new values). Signed-int order equals float order on non-negative floats and puts every
// negative float (and -inf, -0) below them, so a non-negative int max IS the float max (exact). When it is
// negative, every value is negative, -0 or -inf, and the int max is their most negative value: a lower bound
// of their max, which is all the running max needs when m_run (the row's running max, log2 units, same sign
// as S: qk_scale > 0) is already >= 0 (the block cannot raise it; kernels/tools/tests/test_row_max3_bound.py).
// Only when m_run is negative too is the exact max taken, as the int MIN (negative floats order in reverse
// as ints).
// kSettled: the caller knows m_run >= 0 (every row of the warp), so the int max is always enough: no branch.
template <int R, bool kSettled>
__device__ __forceinline__ float row_max3(const float (&s)[kSAcc], float m_run) {
  const int m = row_bits_minmax<R, true>(s);
  float res = __int_as_float(m);
  if constexpr (!kSettled) {
    if (m < 0 && !(m_run >= 0.0f)) res = __int_as_float(row_bits_minmax<R, false>(s));
  }
  return res;
}

// Lean P's codes as f16 subnormals: x = fma(S, A 2^-24, B 2^-24) is exactly 2^-24 fl32(S A + B) (power-of-two
// scales), and one cvt.rn.relu.f16x2.f32 per pair of keys rounds it onto f16's subnormal grid (spacing 2^-24):
// each half's bits are rint(fl32(S A + B)), the contract's code itself (no double rounding), and .relu clamps
// negatives and -inf (masked keys) to +0, code 0 (kernels/tools/tests/test_lean_code_f16.py checks it in exact
// arithmetic). pack_p then needs one PRMT per 4 keys.
// The f16x2 word {relu(x0), relu(x1)} of two keys' x = (S A + B) 2^-24.
__device__ __forceinline__ float lean_f16_word(float x0, float x1) {
  uint32_t w;
  asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(x1), "f"(x0));  // x0 in the low half
  return __uint_as_float(w);
}

// Lean P after the literal softmax path, which makes code floats (1.5 * 2^23 + code): the same words, in s[4 j + 2 r]
// (s[4 j + 2 r + 1] is then dead). Exact: one FFMA gives code 2^-24.
template <int N>
__device__ __forceinline__ void lean_codes_to_f16(float (&s)[N]) {
  const auto x = [](float code_float) { return fmaf(code_float, kLeanF16Scale, -kLeanCodeBase * kLeanF16Scale); };
#pragma unroll
  for (int j = 0; j < N / 4; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) s[4 * j + 2 * r] = lean_f16_word(x(s[4 * j + 2 * r]), x(s[4 * j + 2 * r + 1]));
}

// One block of the online softmax for this thread's two rows (r = 0: row g, r = 1: row g + 8 of the
// warp's 16), first half: updates m, (bf16) rescales l and adds the block's p, returns alpha (the O
// rescale) and leaves in s what pack_p turns into the P operand: bf16: p = exp2(t - m);
// FP8 exact: exp2(t - m + 8); FP8 lean (literal path only): min(max(S A + B, 0), 126) + 1.5 * 2^23.
// It only touches s, m, l: it runs while the previous block's P.V wgmma still reads P.
// key0: first key of the block; row_lim[r]: the last key row r sees (-1: none).
// Fast path (qk_scale > 0, every real use): the row max is taken on the raw S (fl(max S * C) ==
// max fl(S C) since rounding is monotonic) and t - m is fused into one FFMA (FA3's form; it differs
// from the contract's two roundings by at most an ulp of the exponent argument). Lean P: the upper
// clamp at 126 never binds (S A + B = 8 (S C - m) + 120 <= 120 up to rounding) and masked keys
// (S = -inf) land on code 0 through the lower clamp. Other scales take the literal contract path.
template <bool kFast, bool kSettled = false>
__device__ __forceinline__ void softmax_rows(float (&s)[kSAcc], float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                             float qk_scale, float lean_a) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    static_assert(!(kFast && kLeanP), "lean P's fast path is softmax_rows_x2");
    constexpr int kChains = kMaxTree ? 4 : 1;  // independent FMNMX chains (latency)
    float mxc[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) mxc[c] = -INFINITY;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const float v = s[4 * j + 2 * r + x];
        float& mc = mxc[(2 * j + x) % kChains];
        mc = fmaxf(mc, (kFast || !kLeanP) ? v : (v == -INFINITY ? -INFINITY : v * qk_scale));
      }
    }
    float mx = mxc[0];
#pragma unroll
    for (int c = 1; c < kChains; ++c) mx = fmaxf(mx, mxc[c]);
    if constexpr (kMax3 && kFast) {  // mxc then dead
      mx = r == 0 ? row_max3<0, kSettled>(s, m_run[0]) : row_max3<1, kSettled>(s, m_run[1]);
    }
    mx = quad_max(mx);
    float m_new = fmaxf(m_run[r], kFast ? mx * qk_scale : mx);
    if constexpr (kStaleTau > 0.0f) m_new = m_new > m_run[r] + kStaleTau ? m_new : m_run[r];
    alpha[r] = 1.0f;  // m_new == -inf: nothing visible yet, the block changes nothing
    if (kSettled || m_new != -INFINITY) {  // kSettled: m_new >= m_run >= 0, no branch
      alpha[r] = !kSettled && m_run[r] == -INFINITY ? 0.0f : ex2(m_run[r] - m_new);
      m_run[r] = m_new;
    }
    // Keeps exp2(t - m) = 0 for masked t, not NaN.
    const float m_use = !kSettled && m_new == -INFINITY ? 0.0f : m_new;
    const float lean_b = 120.0f - 8.0f * m_use;
    const float neg_m = kPShift - m_use;
    float lsum = 0.0f;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        float& v = s[4 * j + 2 * r + x];
        if constexpr (kFast) {
          v = ex2(fmaf(v, qk_scale, neg_m));
          lsum += v;
        } else {
          if constexpr (kLeanP) {
            const float code = fminf(fmaxf(fmaf(v, lean_a, lean_b), 0.0f), 126.0f) + kLeanCodeBase;
            v = v == -INFINITY ? kLeanCodeBase : code;  // masked: code 0
          } else {
            v = ex2((v - m_use) + kPShift);  // v is t = S C here (softmax_block scaled it)
            lsum += v;
          }
        }
      }
    }
    if constexpr (!kFp8) l_run[r] = l_run[r] * alpha[r] + lsum;
  }
}

// kSoftmaxX2: softmax_rows<true> with the two rows as one interleaved, branch-free chain (both rows' max
// chains, then both quad shuffles, then the two rows' exponentials or lean codes alternating, so their
// dependent chains overlap; ptxas cannot move work across softmax_rows' per-row branch on m_new) (same
// per-element arithmetic and per-row summation order, so bitwise the same output).
template <bool kSettled = false>
__device__ __forceinline__ void softmax_rows_x2(float (&s)[kSAcc], float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                                float qk_scale, float lean_a) {
  constexpr int kChains = kMaxTree ? 4 : 2;  // per row; the two rows add two more chains
  float mxc[2][kChains];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < kChains; ++c) mxc[r][c] = -INFINITY;
#pragma unroll
  for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        float& mc = mxc[r][(2 * j + x) % kChains];
        mc = fmaxf(mc, s[4 * j + 2 * r + x]);
      }
    }
  }
  float mx[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = mxc[r][0];
#pragma unroll
    for (int c = 1; c < kChains; ++c) mx[r] = fmaxf(mx[r], mxc[r][c]);
  }
  if constexpr (kMax3) {  // the FMNMX chains above are then dead code
    mx[0] = row_max3<0, kSettled>(s, m_run[0]);
    mx[1] = row_max3<1, kSettled>(s, m_run[1]);
  }
#pragma unroll
  for (int k = 1; k <= 2; k <<= 1) {  // quad max, the two rows' shuffles in flight together
    const float o0 = __shfl_xor_sync(0xffffffffu, mx[0], k);
    const float o1 = __shfl_xor_sync(0xffffffffu, mx[1], k);
    mx[0] = fmaxf(mx[0], o0);
    mx[1] = fmaxf(mx[1], o1);
  }
  float neg_m[2], lean_b[2], lsum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m_new = fmaxf(m_run[r], mx[r] * qk_scale);
    if constexpr (kStaleTau > 0.0f) m_new = m_new > m_run[r] + kStaleTau ? m_new : m_run[r];
    // m_new == -inf implies m_run == -inf (kSettled: m_new >= m_run >= 0, no test).
    const float m_use = !kSettled && m_new == -INFINITY ? 0.0f : m_new;
    // m_new == -inf: nothing visible yet, alpha 1; m_run == -inf < m_new: ex2(-inf) = 0.
    alpha[r] = !kSettled && m_new == -INFINITY ? 1.0f : ex2(m_run[r] - m_use);
    m_run[r] = m_new;
    lean_b[r] = 120.0f - 8.0f * m_use;
    if constexpr (kLeanP) lean_b[r] *= kLeanF16Scale;  // exact: a power-of-two scale
    neg_m[r] = kPShift - m_use;
  }
#pragma unroll
  for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (kLeanP) {
        const float a = lean_a * kLeanF16Scale;
        s[4 * j + 2 * r] = lean_f16_word(fmaf(s[4 * j + 2 * r], a, lean_b[r]), fmaf(s[4 * j + 2 * r + 1], a, lean_b[r]));
      } else {
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          float& v = s[4 * j + 2 * r + x];
          v = ex2(fmaf(v, qk_scale, neg_m[r]));
          lsum[r] += v;
        }
      }
    }
  }
  if constexpr (!kFp8) {
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + lsum[r];
  }
}

// The tail / causal mask of one block: element (j, e) holds key key0 + 8j + 2 tig + (e & 1), visible iff
// key <= row_lim[e >> 1]; the others become -inf.
__device__ __forceinline__ void mask_block(float (&s)[kSAcc], int key0, const int (&row_lim)[2], int tig) {
  const int thr0 = row_lim[0] - key0 - 2 * tig;
  const int thr1 = row_lim[1] - key0 - 2 * tig;
#pragma unroll
  for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (8 * j + (e & 1) > ((e >> 1) ? thr1 : thr0)) s[4 * j + e] = -INFINITY;
    }
  }
}

// The fast path (qk_scale > 0) of an unmasked block, kSettled as in row_max3: straight-line code, so ptxas can
// interleave the max, exponentials, sums and the P packing of the loop body that calls it.
template <bool kSettled>
__device__ __forceinline__ void softmax_block_whole(float (&s)[kSAcc], float (&m_run)[2], float (&l_run)[2],
                                                    float (&alpha)[2], float qk_scale, float lean_a) {
  if constexpr (kSoftmaxX2) {
    softmax_rows_x2<kSettled>(s, m_run, l_run, alpha, qk_scale, lean_a);
  } else {
    softmax_rows<true, kSettled>(s, m_run, l_run, alpha, qk_scale, lean_a);
  }
}

__device__ __forceinline__ void softmax_block(float (&s)[kSAcc], float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                              int key0, bool need_mask, const int (&row_lim)[2], float qk_scale,
                                              float lean_a, int tig) {
  // Uniform branch: each path is its own straight-line code (no per-element selects between them).
  const bool fast = qk_scale > 0.0f;
  if (!fast && !kLeanP) {
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) s[i] *= qk_scale;  // t = S C first; masked t are set below
  }
  if (need_mask) mask_block(s, key0, row_lim, tig);
  if (fast) {
    softmax_block_whole<false>(s, m_run, l_run, alpha, qk_scale, lean_a);
  } else {
    softmax_rows<false>(s, m_run, l_run, alpha, qk_scale, lean_a);
    if constexpr (kLeanP) lean_codes_to_f16(s);
  }
}

// Second half, after the previous P.V has finished: s -> packed P operand (see the RS A fragment
// above). FP8's row sums are taken from the packed bytes (row_sums_e4m3).
// e4m3 (RNE, satfinite) of four floats into one word, bytes {a0, a1, b0, b1}: two cvt into 16-bit
// halves joined by a mov (no masking: __nv_cvt_float2_to_fp8x2 + __byte_perm cost a LOP3 per pair).
__device__ __forceinline__ uint32_t e4m3x4(float a0, float a1, float b0, float b1) {
  uint32_t w;
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\ncvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(w)
      : "f"(a0), "f"(a1), "f"(b0), "f"(b1));
  return w;
}

__device__ __forceinline__ void pack_p(const float (&s)[kSAcc], uint32_t (&p)[kPRegs]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int j = 0; j < kSTiles; j += 2) {
      // Tiles j, j + 1 of row r: values s[4 j + 2 r + {0, 1}] and s[4 (j + 1) + 2 r + {0, 1}].
      const float a0 = s[4 * j + 2 * r], a1 = s[4 * j + 2 * r + 1];
      const float b0 = s[4 * (j + 1) + 2 * r], b1 = s[4 * (j + 1) + 2 * r + 1];
      if constexpr (kPv16) {
        // k-step kk = j / 2 of P.V: a = {P[j][r0], P[j][r1], P[j+1][r0], P[j+1][r1]}
        p[2 * j + r] = p16_pair(a0, a1);
        p[2 * (j + 1) + r] = p16_pair(b0, b1);
      } else {
        // k-step kc = j / 4: a0/a1 (rows g, g+8) = tiles 4kc, 4kc+1; a2/a3 = tiles 4kc+2, 4kc+3.
        uint32_t w;
        if constexpr (kLeanP) {  // f16 words {a0, a1} and {b0, b1}: the codes are their bytes 0 and 2
          w = __byte_perm(__float_as_uint(a0), __float_as_uint(b0), 0x6420);
        } else {
          w = e4m3x4(a0, a1, b0, b1);
        }
        p[4 * (j >> 2) + 2 * ((j >> 1) & 1) + r] = w;
      }
    }
  }
}

}  // namespace zyfa_sm90_ws
