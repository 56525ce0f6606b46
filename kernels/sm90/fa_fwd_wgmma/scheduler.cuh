// fa_fwd_wgmma: which (q tile, head, batch) a CTA computes.
#pragma once

#include <stdint.h>

namespace zyfa_sm90_ws {

// Everything one consumer warpgroup needs to know about its block.
struct Block {
  int head, kv_head, batch, q_row0, n_blocks;
  int64_t diag;  // row i sees keys <= i + diag
  bool causal;
};

}  // namespace zyfa_sm90_ws
