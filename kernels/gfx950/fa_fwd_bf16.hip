// BF16 causal attention forward for gfx950 (MI355X, CDNA4): the first, simple ZYFA kernel.
//
// Computes out = softmax(scale * q k^T, causal) v for flash-attn's layouts (q [b, sq, hq, d_qk],
// k [b, sk, hkv, d_qk], v [b, sk, hkv, d_v], out [b, sq, hq, d_v] bf16; optional lse float32
// [b, hq, sq]) with exactly the ZYFA BF16 numerics: online softmax in base 2 over key blocks of
// ZYFA_TILE_N keys, P rounded to bf16 for P.V, row sum l of the unrounded fp32 P, final acc * (vd / l).
//
// Configuration: one wave64 per workgroup, ZYFA_TILE_M = 32 query rows, ZYFA_TILE_N = 32 keys per
// block, no LDS (ZYFA_SMEM_BYTES = 0). Grid = (ceil(sq / 32), hq, b).
//
// MFMA v_mfma_f32_32x32x16_bf16 (D = A.B + C, A 32x16, B 16x32; lane l = j + 32h, h = l / 32):
//   A: lane holds row i = l % 32, k = 8h .. 8h+7      B: lane holds column j = l % 32, same k
//   D: lane holds column j = l % 32, register r holds row 8*(r/4) + 4h + r%4
// We compute transposed products so that every lane owns ONE query row (column j of D):
//   S^T[key][row] = K . Q^T   (A = K block: 16 contiguous bytes of one key row per lane;
//                              B = Q^T: 16 contiguous bytes of one query row, kept in VGPRs)
//   O^T[dv][row] += V^T . P^T (B = P^T straight from the S^T registers, A = V^T gathered with
//                              2-byte loads, keys permuted the same way as P's registers)
// so row max / row sum need one exchange with the partner lane l ^ 32 (ds_bpermute) and the
// rescale by alpha is per lane. Registers: Q d_qk/4 VGPRs, O d_v/2 (64) VGPRs, S 16 VGPRs.
//
// Requirements checked by the launcher: d_qk == ZYFA_D_QK, d_v == ZYFA_D_V (the kernel writes
// nothing otherwise); q, k and out rows 16-byte aligned (base pointers 16-byte aligned, batch, seq
// and head strides multiples of 8 elements: 16-byte loads, 8-byte stores; v is read 2 bytes at a
// time); heads_q % heads_kv == 0. Rows with no visible key write 0 and lse = +inf.
#include "abi/zyfa_abi.h"

// The contract fixes each rounding step (t = S * C, then t - m, then exp2; l * alpha, then + sum);
// HIP's default fp-contract=fast would fuse them into FMAs and drift from the reference.
#pragma clang fp contract(off)

#ifndef ZYFA_KERNEL_NAME
#error "build with -DZYFA_KERNEL_NAME=<kernel key>"
#endif

#define ZYFA_DEVICE __attribute__((device)) __attribute__((always_inline)) static inline

typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
typedef unsigned short u16x8 __attribute__((ext_vector_type(8)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef __bf16 bf16x4 __attribute__((ext_vector_type(4)));

namespace {

constexpr int kTileM = ZYFA_TILE_M;
constexpr int kTileN = ZYFA_TILE_N;
constexpr int kThreads = ZYFA_THREADS;
constexpr int kDqk = ZYFA_D_QK;
constexpr int kDv = ZYFA_D_V;
constexpr int kQkSteps = kDqk / 16;  // MFMA k-steps of 16 dims for S
constexpr int kDvTiles = kDv / 32;   // 32-wide output column tiles for O
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;

static_assert(ZYFA_DTYPE_E4M3 == 0, "fa_fwd_bf16.hip is the BF16 kernel");
static_assert(ZYFA_SMEM_BYTES == 0, "this kernel uses no LDS");
static_assert(kTileM == 32 && kTileN == 32, "the 32x32x16 MFMA tiling needs tile_m = tile_n = 32");
static_assert(kThreads == 64, "one wave64 per workgroup");
static_assert(kDqk % 16 == 0 && kDqk <= 256, "d_qk must be a multiple of 16, at most 256");
static_assert(kDv % 32 == 0 && kDv <= 256, "d_v must be a multiple of 32, at most 256");

typedef zyfa_fwd_args __attribute__((aligned(16))) __attribute__((address_space(4))) kernarg_args;

ZYFA_DEVICE float f32_from_bits(int x) { return __builtin_bit_cast(float, x); }
ZYFA_DEVICE int bits_from_f32(float x) { return __builtin_bit_cast(int, x); }

// Value of the partner lane l ^ 32 (the other half of the same query row).
ZYFA_DEVICE float partner(float x, int lane) {
  return f32_from_bits(__builtin_amdgcn_ds_bpermute((lane ^ 32) << 2, bits_from_f32(x)));
}

ZYFA_DEVICE float fmax_(float a, float b) { return a > b ? a : b; }

ZYFA_DEVICE bf16x8 load_bf16x8(const __bf16 *p) { return *reinterpret_cast<const bf16x8 *>(p); }

// Register r of a 32x32 MFMA result in this lane's half h holds row/key 8*(r/4) + 4h + r%4.
ZYFA_DEVICE int d_row(int r, int h) { return 8 * (r / 4) + 4 * h + (r % 4); }

}  // namespace

extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(kThreads, kThreads)))
void ZYFA_KERNEL_NAME(zyfa_fwd_args args) {
  // The by-value struct is packed (align 1), so reading `args` directly gives unaligned vector
  // loads. It sits at offset 0 of the kernarg segment, which is 16-byte aligned: read it from there
  // with the alignment stated, so the wave-uniform fields arrive in SGPRs through s_load.
  (void)args;
  const kernarg_args &a = *(const kernarg_args *)__builtin_amdgcn_kernarg_segment_ptr();
  if (a.d_qk != kDqk || a.d_v != kDv) return;

  const int lane = __builtin_amdgcn_workitem_id_x();
  const int j = lane & 31;  // query row inside the tile (column of every D)
  const int h = lane >> 5;  // which half of the row's keys / dv this lane holds
  const int m0 = __builtin_amdgcn_workgroup_id_x() * kTileM;
  const int hq = __builtin_amdgcn_workgroup_id_y();
  const int bz = __builtin_amdgcn_workgroup_id_z();
  const int sq = a.seqlen_q;
  const int sk = a.seqlen_k;
  const unsigned group = static_cast<unsigned>(a.heads_q) / static_cast<unsigned>(a.heads_kv);
  const int hkv = static_cast<int>(static_cast<unsigned>(hq) / group);
  const bool causal = (a.flags & ZYFA_FLAG_CAUSAL) != 0;

  // Keys visible to a row: [0, limit). Bottom-right causal: key <= row + sk - sq.
  const int row = m0 + j;
  const bool row_ok = row < sq;
  const long long diag = static_cast<long long>(sk) - sq;
  const long long row_limit_ll = causal ? row + 1 + diag : sk;
  const int row_limit = static_cast<int>(row_limit_ll < sk ? row_limit_ll : sk);
  // Keys any row of this tile sees (wave-uniform): the loop covers ceil(tile_limit / 32) blocks.
  const int last_row = (m0 + kTileM - 1 < sq ? m0 + kTileM - 1 : sq - 1);
  const long long tile_limit_ll = causal ? last_row + 1 + diag : sk;
  const int tile_limit = static_cast<int>(tile_limit_ll < sk ? tile_limit_ll : sk);
  const int n_blocks = tile_limit > 0 ? (tile_limit + kTileN - 1) / kTileN : 0;

  const float c = a.softmax_scale * a.q_descale * a.k_descale * kLog2e;
  const float neg_inf = -__builtin_inff();

  // Q^T operand (B of the S MFMA): this lane's row, dims 16s + 8h .. +7. Rows past sq read the last
  // row instead (their results are never stored).
  const __bf16 *q_row = static_cast<const __bf16 *>(a.q) + bz * a.q_stride_batch +
                        static_cast<long long>(row_ok ? row : sq - 1) * a.q_stride_seq +
                        hq * a.q_stride_head;
  bf16x8 q_frag[kQkSteps];
  #pragma unroll
  for (int s = 0; s < kQkSteps; ++s) q_frag[s] = load_bf16x8(q_row + 16 * s + 8 * h);

  const __bf16 *k_head = static_cast<const __bf16 *>(a.k) + bz * a.k_stride_batch + hkv * a.k_stride_head;
  const unsigned short *v_head = static_cast<const unsigned short *>(a.v) + bz * a.v_stride_batch +
                                 hkv * a.v_stride_head;

  float m = neg_inf;  // running row max of t (base-2 units)
  float l = 0.0f;     // running row sum of unrounded p
  f32x16 acc[kDvTiles];
  #pragma unroll
  for (int t = 0; t < kDvTiles; ++t) acc[t] = (f32x16){};

  for (int nb = 0; nb < n_blocks; ++nb) {
    const int n0 = nb * kTileN;

    // S^T = K . Q^T. This lane feeds key n0 + j (zeros past sk; the load reads a valid key).
    const int key_a = n0 + j;
    const bool key_a_ok = key_a < sk;
    const __bf16 *k_row = k_head + static_cast<long long>(key_a_ok ? key_a : sk - 1) * a.k_stride_seq;
    f32x16 st = (f32x16){};
    #pragma unroll
    for (int s = 0; s < kQkSteps; ++s) {
      bf16x8 k_frag = load_bf16x8(k_row + 16 * s + 8 * h);
      if (!key_a_ok) k_frag = (bf16x8){};
      st = __builtin_amdgcn_mfma_f32_32x32x16_bf16(k_frag, q_frag[s], st, 0, 0, 0);
    }

    // t = S * C, masked keys -inf; block max over the row's 32 keys (16 here, 16 in lane ^ 32).
    float tv[16];
    float bmax = neg_inf;
    #pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int key = n0 + d_row(r, h);
      tv[r] = key < row_limit ? st[r] * c : neg_inf;
      bmax = fmax_(bmax, tv[r]);
    }
    bmax = fmax_(bmax, partner(bmax, lane));
    const float m_new = fmax_(m, bmax);
    const bool live = m_new != neg_inf;  // false: nothing visible yet, the block changes nothing
    const float alpha = m == neg_inf ? 0.0f : __builtin_amdgcn_exp2f(m - m_new);

    float p[16];
    float psum = 0.0f;
    #pragma unroll
    for (int r = 0; r < 16; ++r) {
      p[r] = live ? __builtin_amdgcn_exp2f(tv[r] - m_new) : 0.0f;
      psum = psum + p[r];
    }
    psum = psum + partner(psum, lane);
    if (live) {
      l = l * alpha + psum;
      m = m_new;
      #pragma unroll
      for (int t = 0; t < kDvTiles; ++t) acc[t] *= alpha;
    }

    // O^T += V^T . P^T over two k-steps of 16 keys. B element e of step s is p[8s + e], i.e. key
    // n0 + 16s + 8(e/4) + 4h + e%4; A element e must be V at that same key, column 32t + j.
    #pragma unroll
    for (int s = 0; s < 2; ++s) {
      bf16x8 p_frag;
      long long v_off[8];
      bool v_ok[8];
      #pragma unroll
      for (int e = 0; e < 8; ++e) {
        p_frag[e] = static_cast<__bf16>(p[8 * s + e]);
        const int key = n0 + d_row(8 * s + e, h);
        v_ok[e] = key < sk;
        v_off[e] = static_cast<long long>(v_ok[e] ? key : sk - 1) * a.v_stride_seq + j;
      }
      #pragma unroll
      for (int t = 0; t < kDvTiles; ++t) {
        u16x8 v_bits;
        #pragma unroll
        for (int e = 0; e < 8; ++e) {
          const unsigned short x = v_head[v_off[e] + 32 * t];  // always a valid key: no branch
          v_bits[e] = v_ok[e] ? x : 0;
        }
        acc[t] = __builtin_amdgcn_mfma_f32_32x32x16_bf16(__builtin_bit_cast(bf16x8, v_bits), p_frag,
                                                         acc[t], 0, 0, 0);
      }
    }
  }

  if (!row_ok) return;
  // out = acc * (v_descale / l), bf16 RNE; a row that saw no key (l == 0) writes 0.
  const float vd = a.v_descale;
  __bf16 *out_row = static_cast<__bf16 *>(a.out) + bz * a.out_stride_batch +
                    static_cast<long long>(row) * a.out_stride_seq + hq * a.out_stride_head;
  // A row that saw a key has l >= 1 (its max key adds exp2(0) = 1, and rescaling never takes that
  // away), a row that saw none has l == 0 and acc == 0: scaling by vd / max(l, 1) writes 0 for it with
  // no select. One IEEE division per row, then a multiply per element (as the sm90 ws kernels do since
  // their run 15, where 64 divisions per thread cost 2-10% at 2K-8K); within ~2 ulp of fp32 of
  // (acc / l) * vd before the bf16 rounding.
  const float scale = vd / fmax_(l, 1.0f);
  #pragma unroll
  for (int t = 0; t < kDvTiles; ++t) {
    #pragma unroll
    for (int g = 0; g < 4; ++g) {
      bf16x4 o;
      #pragma unroll
      for (int e = 0; e < 4; ++e) o[e] = static_cast<__bf16>(acc[t][4 * g + e] * scale);
      *reinterpret_cast<bf16x4 *>(out_row + 32 * t + d_row(4 * g, h)) = o;
    }
  }
  // lse = (m + log2 l) * ln 2 in natural-log units; +inf for a row that saw no key.
  if ((a.flags & ZYFA_FLAG_LSE) != 0 && h == 0) {
    const float lse = l == 0.0f ? __builtin_inff() : (m + __builtin_amdgcn_logf(l)) * kLn2;
    a.lse[(static_cast<long long>(bz) * a.heads_q + hq) * sq + row] = lse;
  }
}
