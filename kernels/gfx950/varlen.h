// fa_fwd_bf16.hip's packed builds (kernels/abi/zyfa_abi.h, ABI 5): one sequence of a packed batch seen as a
// dense batch of one. ZYFA_VARLEN = 1: packed k and v; 2: k and v in a paged cache, key j of a sequence in
// slot j % page_size of page page_table[b][j / page_size] (PagedStream loads its rows).
//
// The launch grid is (ceil(max_seqlen_q / tile_m), heads_q, batch): the workgroup of (query tile, head,
// batch b) computes that tile of sequence b, and exits at once when the tile starts past the sequence's
// length (no compact map of the items). sequence_view gives the rest of the kernel the sequence's own
// zyfa_fwd_args, so the dense code runs unchanged on it: q, out, k and v moved to the sequence's first row
// with batch strides 0, seqlen_q / seqlen_k its counts (causal masking is then bottom-right per sequence).
// Every row start and count is clamped to what the launcher sized (total_q, total_k, max_seqlen_q / _k),
// so a bad cu_seqlens tensor reads and writes only inside q, k, v, out and lse.
#pragma once

#include "abi/zyfa_abi.h"

namespace {

typedef zyfa_varlen_args __attribute__((aligned(8))) __attribute__((address_space(4))) kernarg_varlen;

// Rows of one sequence: its first q (out) row and first k (v) row (0 when paged), its counts, and (paged)
// its row of the page table.
struct Sequence {
  long long q_start, k_start;
  int len_q, len_k;
  const int *pages;
};

ZYFA_DEVICE long long clamp64(long long x, long long lo, long long hi) { return x < lo ? lo : (x > hi ? hi : x); }

// The second kernel parameter, at its ABI offset (sizeof(zyfa_fwd_args) = 192, a multiple of its 8-byte
// alignment) of the kernarg segment, so its wave-uniform fields arrive in SGPRs through s_load.
ZYFA_DEVICE const kernarg_varlen &varlen_kernarg() {
  return *(const kernarg_varlen *)((const __attribute__((address_space(4))) unsigned char *)
                                       __builtin_amdgcn_kernarg_segment_ptr() +
                                   sizeof(zyfa_fwd_args));
}

// Sequence b's rows and counts (zyfa_abi.h's rules), each clamped: rows inside q and k, len_q <= the
// launch's seqlen_q (max_seqlen_q), len_k <= seqlen_k (max_seqlen_k) and the k rows left after k_start.
// seqused_k, when non-NULL, gives len_k instead of cu_seqlens_k.
ZYFA_DEVICE Sequence sequence_of(const kernarg_args &packed, const kernarg_varlen &vl, int b) {
  Sequence s;
  s.q_start = clamp64(vl.cu_seqlens_q[b], 0, vl.total_q);
  const long long q_end = clamp64(vl.cu_seqlens_q[b + 1], s.q_start, vl.total_q);
  s.len_q = static_cast<int>(clamp64(q_end - s.q_start, 0, packed.seqlen_q));
  const long long len_k = vl.seqused_k != nullptr
                              ? static_cast<long long>(vl.seqused_k[b])
                              : static_cast<long long>(vl.cu_seqlens_k[b + 1]) - vl.cu_seqlens_k[b];
#if ZYFA_VARLEN == 2
  // Paged: the keys the sequence's row of the table addresses (none without a positive page size).
  s.k_start = 0;
  s.pages = vl.page_table + static_cast<long long>(b) * vl.page_table_stride;
  const long long k_rows = vl.page_size > 0 ? static_cast<long long>(vl.max_pages) * vl.page_size : 0;
#else
  s.k_start = clamp64(vl.cu_seqlens_k[b], 0, vl.total_k);
  s.pages = nullptr;
  const long long k_rows = vl.total_k - s.k_start;
#endif
  s.len_k = static_cast<int>(clamp64(len_k, 0, k_rows < packed.seqlen_k ? k_rows : packed.seqlen_k));
  return s;
}

// The dense view of sequence s: batch 0 of itself (batch strides 0), q / out / k / v at its first rows,
// seqlen_q / seqlen_k its counts. lse ([heads_q, total_q]) moves to the sequence's first row; its head
// stride stays total_q (the kernel's varlen store). A paged cache keeps its base and page stride (the
// k / v batch strides), which PagedStream reads.
ZYFA_DEVICE zyfa_fwd_args sequence_view(const kernarg_args &packed, const Sequence &s) {
  zyfa_fwd_args a;
  a.q = static_cast<const __bf16 *>(packed.q) + s.q_start * packed.q_stride_seq;
  a.k = static_cast<const __bf16 *>(packed.k) + s.k_start * packed.k_stride_seq;
  a.v = static_cast<const __bf16 *>(packed.v) + s.k_start * packed.v_stride_seq;
  a.out = static_cast<__bf16 *>(packed.out) + s.q_start * packed.out_stride_seq;
  a.lse = packed.lse == nullptr ? nullptr : packed.lse + s.q_start;
  a.q_stride_batch = a.out_stride_batch = 0;
  a.k_stride_batch = ZYFA_VARLEN == 2 ? packed.k_stride_batch : 0;
  a.v_stride_batch = ZYFA_VARLEN == 2 ? packed.v_stride_batch : 0;
  a.q_stride_seq = packed.q_stride_seq;
  a.q_stride_head = packed.q_stride_head;
  a.k_stride_seq = packed.k_stride_seq;
  a.k_stride_head = packed.k_stride_head;
  a.v_stride_seq = packed.v_stride_seq;
  a.v_stride_head = packed.v_stride_head;
  a.out_stride_seq = packed.out_stride_seq;
  a.out_stride_head = packed.out_stride_head;
  a.batch = 1;
  a.heads_q = packed.heads_q;
  a.heads_kv = packed.heads_kv;
  a.seqlen_q = s.len_q;
  a.seqlen_k = s.len_k;
  a.d_qk = packed.d_qk;
  a.d_v = packed.d_v;
  a.flags = packed.flags;
  a.softmax_scale = packed.softmax_scale;
  a.q_descale = packed.q_descale;
  a.k_descale = packed.k_descale;
  a.v_descale = packed.v_descale;
  a.reserved = 0;
  return a;
}

#if ZYFA_VARLEN == 2
// BlockStream's interface (fa_fwd_bf16.hip) over a paged cache: thread t loads row key0 + t / 8 of the block,
// 16-byte pieces 8c + t % 8, from slot key % page_size of page pages[key / page_size] (clamped to the
// cache's pages); rows at or past seqlen_k are zeros and read nothing.
template <int kChunks, int kD>
struct PagedStream {
  const unsigned char *head;  // the cache base at this kv head
  long long page_bytes, slot_bytes;
  const int *pages;
  int page_size, num_pages;
  int key;    // this thread's row of the next block
  int piece;  // its 16-byte piece in each 128-byte column group: t % 8
  int sk;
  u32x4 r[kChunks];

  ZYFA_MEMBER PagedStream(const __bf16 *head_base, long long page_stride, long long slot_stride, const int *table,
                          const kernarg_varlen &vl, int seqlen_k, int tid)
      : head(reinterpret_cast<const unsigned char *>(head_base)), page_bytes(2 * page_stride),
        slot_bytes(2 * slot_stride), pages(table), page_size(vl.page_size), num_pages(vl.num_pages),
        key(tid / 8), piece(tid % 8), sk(seqlen_k) {}

  ZYFA_MEMBER void issue() {
    if (key < sk) {  // sk > 0 implies page_size > 0 (sequence_of)
      const int page = static_cast<int>(clamp64(pages[key / page_size], 0, num_pages - 1));
      const unsigned char *row = head + page * page_bytes + static_cast<long long>(key % page_size) * slot_bytes;
      #pragma unroll
      for (int c = 0; c < kChunks; ++c) r[c] = *reinterpret_cast<const u32x4 *>(row + 16 * (8 * c + piece));
    } else {
      #pragma unroll
      for (int c = 0; c < kChunks; ++c) r[c] = (u32x4){0u, 0u, 0u, 0u};
    }
    key += kTileN;
  }

  ZYFA_MEMBER void store(lds_byte *stage, int tid) const {
    #pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int row = tid / 8, col = 8 * c + tid % 8;
      *reinterpret_cast<lds_u32x4 *>(stage + row * (2 * kD + 16) + 16 * col) = r[c];
    }
  }
};
#endif

}  // namespace
