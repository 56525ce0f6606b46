// fa_fwd_wgmma: key index -> (page, slot) of a paged KV cache by one multiply-high, for any page size.
//
// The paged builds (ZYFA_WS_VARLEN 2) split every key row j they gather as page j / page_size, slot
// j % page_size. A hardware division is ~20 instructions on sm_90 and the producer warps would run one per
// row (16 rows per thread per K / V block): the producer then issues more instructions than the consumers'
// whole block and the tensor core waits for it. Here the quotient is floor(2n * m / 2^(32 + l)) with
// l = ceil(log2 d) and m = ceil(2^(31 + l) / d), exact for every 0 <= n < 2^31 and 1 <= d < 2^31:
// m * d = 2^(31 + l) + e with 0 <= e < d <= 2^l, so n * m / 2^(31 + l) = n / d + n * e / (d * 2^(31 + l)),
// and n * e < 2^31 * 2^l keeps the second term below 1 / d, too small to carry floor(n / d) past the next
// integer. m < 2^32 since d > 2^(l - 1) (m = 2^31 when d = 1). The magic number is made once per work item.
// kernels/tools/tests/test_page_div.py runs this header on the host against `/` and `%`.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define ZYFA_PD_HD __host__ __device__ __forceinline__
#else
#define ZYFA_PD_HD inline
#endif

namespace zyfa_sm90_ws {

// Division by a fixed divisor d in [1, 2^31) of numerators in [0, 2^31).
struct PageDiv {
  uint32_t d;      // the divisor (the page size)
  uint32_t magic;  // ceil(2^(31 + shift) / d)
  uint32_t shift;  // ceil(log2 d)

  ZYFA_PD_HD uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    return __umulhi(2u * n, magic) >> shift;
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(2u * n) * magic) >> 32) >> shift;
#endif
  }
};

ZYFA_PD_HD PageDiv make_page_div(uint32_t d) {
  uint32_t l = 0;
  while (l < 31 && (1u << l) < d) ++l;  // ceil(log2 d); once per item
  PageDiv p;
  p.d = d;
  p.shift = l;
  p.magic = static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + d - 1) / d);
  return p;
}

}  // namespace zyfa_sm90_ws
