// A small causal BF16 flash-attention forward kernel for the simulator tests (not a product kernel).
// One wave64 per workgroup handles 32 query rows of one (batch, head); keys in blocks of 32.
// S^T = K Q^T and O^T += V^T P^T with v_mfma_f32_32x32x16_bf16, so each lane owns one query row
// (lane % 32) and the two lanes l and l^32 share it. Launch: grid (ceil(sq/32), heads_q, batch),
// block (64, 1, 1), one zyfa_fwd_args by value. FA_D_QK / FA_D_V: head dims (multiples of 32).
#include "abi/zyfa_abi.h"

#ifndef FA_D_QK
#define FA_D_QK 128
#endif
#ifndef FA_D_V
#define FA_D_V 128
#endif

typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
typedef float f32x16 __attribute__((ext_vector_type(16)));

static __attribute__((device)) inline float partner(float x) {
  // The value of lane ^ 32 (the other half of this query row).
  int lane = __builtin_amdgcn_workitem_id_x();
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((lane ^ 32) * 4, __builtin_bit_cast(int, x)));
}

extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(64, 64))) void
fa_mini(zyfa_fwd_args a) {
  const int lane = __builtin_amdgcn_workitem_id_x();
  const int mblk = __builtin_amdgcn_workgroup_id_x();
  const int h = __builtin_amdgcn_workgroup_id_y();
  const int b = __builtin_amdgcn_workgroup_id_z();
  const int kvh = h / (a.heads_q / a.heads_kv);
  const int r = lane & 31, g = lane >> 5;
  const int q_row = mblk * 32 + r;
  const __bf16 *q = (const __bf16 *)a.q + b * a.q_stride_batch + h * a.q_stride_head;
  const __bf16 *k = (const __bf16 *)a.k + b * a.k_stride_batch + kvh * a.k_stride_head;
  const __bf16 *v = (const __bf16 *)a.v + b * a.v_stride_batch + kvh * a.v_stride_head;
  const bf16x8 zero8 = {};

  bf16x8 qf[FA_D_QK / 16];
  for (int ks = 0; ks < FA_D_QK / 16; ++ks)
    qf[ks] = q_row < a.seqlen_q ? *(const bf16x8 *)(q + q_row * a.q_stride_seq + ks * 16 + 8 * g) : zero8;

  const float C = a.softmax_scale * 1.4426950408889634f;
  const int limit = q_row + a.seqlen_k - a.seqlen_q;  // causal: key j visible iff j <= limit
  int last_key = mblk * 32 + 31 + a.seqlen_k - a.seqlen_q;
  if (last_key > a.seqlen_k - 1) last_key = a.seqlen_k - 1;
  const int nblocks = last_key < 0 ? 0 : last_key / 32 + 1;

  float m = -__builtin_inff(), l = 0.f;
  f32x16 acc[FA_D_V / 32];
  for (int t = 0; t < FA_D_V / 32; ++t) acc[t] = (f32x16){};

  for (int kb = 0; kb < nblocks; ++kb) {
    f32x16 s = {};
    const int key_row = kb * 32 + r;
    for (int ks = 0; ks < FA_D_QK / 16; ++ks) {
      bf16x8 kf = key_row < a.seqlen_k ? *(const bf16x8 *)(k + key_row * a.k_stride_seq + ks * 16 + 8 * g) : zero8;
      s = __builtin_amdgcn_mfma_f32_32x32x16_bf16(kf, qf[ks], s, 0, 0, 0);
    }
    // s[e]: key kb*32 + 8*(e/4) + 4*g + e%4 of this lane's query row.
    float mx = -__builtin_inff();
    for (int e = 0; e < 16; ++e) {
      const int key = kb * 32 + 8 * (e / 4) + 4 * g + e % 4;
      const float tv = (key < a.seqlen_k && key <= limit) ? s[e] * C : -__builtin_inff();
      s[e] = tv;
      mx = __builtin_fmaxf(mx, tv);
    }
    mx = __builtin_fmaxf(mx, partner(mx));
    const float m_new = __builtin_fmaxf(m, mx);
    // A row that sees no key yet keeps m = -inf and gets p = 0. No early 'continue': the MFMAs
    // below must run with the whole wave (a divergent skip leaves them under a partial EXEC).
    const float m_use = m_new == -__builtin_inff() ? 0.f : m_new;
    const float alpha = m == -__builtin_inff() ? 0.f : __builtin_amdgcn_exp2f(m - m_new);
    m = m_new;
    l *= alpha;
    for (int t = 0; t < FA_D_V / 32; ++t) acc[t] *= alpha;
    __bf16 pb[16];
    for (int e = 0; e < 16; ++e) {
      const float p = __builtin_amdgcn_exp2f(s[e] - m_use);
      l += p;
      pb[e] = (__bf16)p;
    }
    // P^T slot (g, e) of k-step ks2 holds s[8*ks2 + e], i.e. key 16*ks2 + 8*(e/4) + 4*g + e%4;
    // the V^T operand uses the same key in the same slot (only the pairing is observable).
    for (int ks2 = 0; ks2 < 2; ++ks2) {
      bf16x8 pf;
      for (int e = 0; e < 8; ++e) pf[e] = pb[8 * ks2 + e];
      for (int t = 0; t < FA_D_V / 32; ++t) {
        bf16x8 vf;
        for (int e = 0; e < 8; ++e) {
          const int key = kb * 32 + 16 * ks2 + 8 * (e / 4) + 4 * g + e % 4;
          vf[e] = key < a.seqlen_k ? v[key * a.v_stride_seq + 32 * t + r] : (__bf16)0.f;
        }
        acc[t] = __builtin_amdgcn_mfma_f32_32x32x16_bf16(vf, pf, acc[t], 0, 0, 0);
      }
    }
  }
  l += partner(l);
  if (q_row >= a.seqlen_q) return;
  const float inv = l == 0.f ? 0.f : a.v_descale / l;
  __bf16 *o = (__bf16 *)a.out + b * a.out_stride_batch + h * a.out_stride_head + q_row * a.out_stride_seq;
  for (int t = 0; t < FA_D_V / 32; ++t)
    for (int e = 0; e < 16; ++e) o[32 * t + 8 * (e / 4) + 4 * g + e % 4] = (__bf16)(acc[t][e] * inv);
  if ((a.flags & ZYFA_FLAG_LSE) && g == 0) {
    a.lse[(b * a.heads_q + h) * a.seqlen_q + q_row] =
        l == 0.f ? __builtin_inff() : (m + __builtin_log2f(l)) * 0.6931471805599453f;
  }
}
