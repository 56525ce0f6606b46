/* ZYFA sm90 persistent kernels: which work item the k-th item of a CTA is (ZYFA_WS_PSCHED 3, an
 * experiment). Plain integer C++, host and device, so the host tests can run the same code
 * (kernels/tools/tests/test_persistent_schedule.py).
 *
 * Items are (pair, q tile) with pair-major numbering: item = pair * n_qtiles + rank, where rank 0 is
 * the pair's last q tile (the longest causal rows) and costs fall with rank. CTAs take rounds of G
 * scheduled positions, odd rounds reversed (boustrophedon). Pair-major positions used as they are
 * (PSCHED 2) leave the CTAs' total costs about 3% apart at every product shape (a model of the
 * causal block counts: kernels/sm90/NOTES.md "Predictions, run 24"), because G is not a multiple of
 * n_qtiles and the costs along a round repeat with the pairs. PSCHED 3 sorts each window of 2G
 * consecutive pair-major items by rank (longest first; ties in pair-major order): the window's
 * forward round hands CTA x the x-th largest item and the reversed round the x-th smallest, so every
 * CTA's pair of items sums to about the window's mean, while a window still spans the same few pairs
 * (L2 reuse of their K and V as in PSCHED 2). The mapping is a bijection of [0, n_items).
 */
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define ZYFA_SCHED_FN __host__ __device__ __forceinline__
#else
#define ZYFA_SCHED_FN inline
#endif

namespace zyfa_sched {

// Items in [0, x) whose rank (item % nq) is below r, for r in [0, nq].
ZYFA_SCHED_FN uint32_t count_rank_below(uint32_t x, uint32_t nq, uint32_t r) {
  const uint32_t full = x / nq, rest = x % nq;
  return r * full + (r < rest ? r : rest);
}

// The pair-major item at scheduled position pos (< n_items). Windows of 2 g positions hold the same
// pair-major items, except that the last whole window also takes the remainder (n_items % 2 g): its
// third, partial round then gets that window's shortest items, the whole launch's tail. Inside a
// window, position p goes to the p-th item ordered by (rank, item).
ZYFA_SCHED_FN uint32_t window_sorted_item(uint32_t pos, uint32_t n_items, uint32_t nq, uint32_t g) {
  const uint32_t width = 2u * g;
  const uint32_t n_full = n_items / width;  // whole windows; the remainder joins the last one
  uint32_t w = pos / width;
  if (n_full > 0u && w >= n_full) w = n_full - 1u;
  const uint32_t a = w * width;
  const uint32_t b = (n_full == 0u || w == n_full - 1u) ? n_items : a + width;
  const uint32_t p = pos - a;
  // The smallest rank r with (items of rank <= r in [a, b)) > p: binary search over r in [0, nq).
  uint32_t lo = 0u, hi = nq - 1u;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2u;
    const uint32_t upto = count_rank_below(b, nq, mid + 1u) - count_rank_below(a, nq, mid + 1u);
    if (upto > p) {
      hi = mid;
    } else {
      lo = mid + 1u;
    }
  }
  const uint32_t before = count_rank_below(b, nq, lo) - count_rank_below(a, nq, lo);
  const uint32_t first = a + (lo + nq - a % nq) % nq;  // the first item of rank lo at or after a
  return first + (p - before) * nq;
}

}  // namespace zyfa_sched

#undef ZYFA_SCHED_FN
