// fa_fwd_bf16.hip's packed build (ZYFA_VARLEN = 1; kernels/abi/zyfa_abi.h, ABI 4): one sequence of a packed
// batch seen as a dense batch of one.
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

// Rows of one sequence: its first q (out) row and first k (v) row, and its counts.
struct Sequence {
  long long q_start, k_start;
  int len_q, len_k;
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
  s.k_start = clamp64(vl.cu_seqlens_k[b], 0, vl.total_k);
  const long long len_k = vl.seqused_k != nullptr
                              ? static_cast<long long>(vl.seqused_k[b])
                              : static_cast<long long>(vl.cu_seqlens_k[b + 1]) - vl.cu_seqlens_k[b];
  const long long k_rows = vl.total_k - s.k_start;
  s.len_k = static_cast<int>(clamp64(len_k, 0, k_rows < packed.seqlen_k ? k_rows : packed.seqlen_k));
  return s;
}

// The dense view of sequence s: batch 0 of itself (batch strides 0), q / out / k / v at its first rows,
// seqlen_q / seqlen_k its counts. lse ([heads_q, total_q]) moves to the sequence's first row; its head
// stride stays total_q (the kernel's varlen store).
ZYFA_DEVICE zyfa_fwd_args sequence_view(const kernarg_args &packed, const Sequence &s) {
  zyfa_fwd_args a;
  a.q = static_cast<const __bf16 *>(packed.q) + s.q_start * packed.q_stride_seq;
  a.k = static_cast<const __bf16 *>(packed.k) + s.k_start * packed.k_stride_seq;
  a.v = static_cast<const __bf16 *>(packed.v) + s.k_start * packed.v_stride_seq;
  a.out = static_cast<__bf16 *>(packed.out) + s.q_start * packed.out_stride_seq;
  a.lse = packed.lse == nullptr ? nullptr : packed.lse + s.q_start;
  a.q_stride_batch = a.k_stride_batch = a.v_stride_batch = a.out_stride_batch = 0;
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

}  // namespace
