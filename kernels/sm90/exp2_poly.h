// exp2 on the FMA pipe: the software exp2 that lets the softmax move part of its exponentials off
// Hopper's MUFU (16 results per clock per SM, against 128 FP32 FMAs), as FlashAttention-4 does on
// Blackwell. One piece of code for the kernel (device) and its host test (kernels/tools/tests/
// test_exp2_poly.py compiles this header with the host C++ compiler).
//
//   2^x = 2^n * 2^f,  n = rint(x) (the 1.5 * 2^23 trick: n lands in t's low mantissa bits),
//                     f = x - n in [-0.5, 0.5], 2^f by a cubic (Horner, 3 FMAs),
//   then n is added to the exponent field: bits(t) << 23 == n << 23 (mod 2^32), as bits(t) =
//   0x4B400000 + n and 0x4B400000 << 23 wraps to 0.
// Inputs below -64 are clamped to -64 (2^-64 is far below every P the kernels keep: e4m3's smallest
// code is 2^-9, and BF16 P then only matters relative to a row sum >= 1), so -inf gives 2^-64, not NaN,
// and the exponent field never underflows. Largest input: 64 (the kernels' shifted t is <= 8).
// Relative error: 7.5e-5 at most on [-64, 64] (coefficients: relative-error minimax fit on [-0.5, 0.5]),
// against ex2.approx's 2 ulp; far below BF16's half ulp (2e-3) and e4m3's (6e-2), so a rounded P
// differs from the exact one only where the exact value lies within 7.5e-5 of a rounding midpoint.
#pragma once

#include <cstring>  // std::memcpy: the host bit casts (nvcc's host pass of a .cu needs it too)

#ifdef __CUDACC__
#define ZYFA_EXP2_POLY_FN __host__ __device__ __forceinline__
#else
#include <cmath>
#define ZYFA_EXP2_POLY_FN inline
#endif

namespace zyfa_exp2 {

ZYFA_EXP2_POLY_FN unsigned bits_of(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

ZYFA_EXP2_POLY_FN float float_of(unsigned u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

ZYFA_EXP2_POLY_FN float exp2_poly(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound rounds x to an integer (RN)
  constexpr float c0 = 0.9999281167984009f, c1 = 0.6932609677314758f, c2 = 0.24261054396629333f,
                  c3 = 0.05517132207751274f;
  x = fmaxf(x, -64.0f);
  const float t = x + kRound;
  const float f = x - (t - kRound);  // in [-0.5, 0.5]
  const float p = fmaf(fmaf(fmaf(c3, f, c2), f, c1), f, c0);
  return float_of(bits_of(p) + (bits_of(t) << 23));
}

}  // namespace zyfa_exp2
