// BF16 causal attention forward for gfx950 (MI355X, CDNA4): eight waves, K and V through LDS,
// two wave groups in ping-pong.
//
// Computes out = softmax(scale * q k^T, causal) v for flash-attn's layouts (q [b, sq, hq, d_qk],
// k [b, sk, hkv, d_qk], v [b, sk, hkv, d_v], out [b, sq, hq, d_v] bf16; optional lse float32
// [b, hq, sq]) with the ZYFA BF16 numerics (docs/numerics.md): online softmax in base 2 over key
// blocks of ZYFA_TILE_N keys, P rounded to bf16 for P.V, row sum l of the unrounded fp32 P, final
// acc * (vd / l). The design is described in docs/gfx950-bf16-kernel.md.
//
// Configuration: ZYFA_THREADS = 512 (8 wave64s), ZYFA_TILE_M = 256 query rows per workgroup (32 per
// wave), ZYFA_TILE_N = 64 keys per block. Grid = (ceil(sq / 256), hq, b); ZYFA_TILE_DESCENDING (the
// variant's tile_order) maps workgroups to query tiles, longest rows first (see below). ZYFA_STALE_TAU:
// the stale running max of docs/numerics.md (the O rescale is skipped while no row of a wave raises its
// max by more than tau).
// ZYFA_VARLEN = 1 / 2: the packed builds (layout "varlen" / "paged", ABI 5): a second parameter,
// zyfa_varlen_args, grid (ceil(max_seqlen_q / 256), hq, sequences); each workgroup runs this code on its
// sequence's view (gfx950/varlen.h), a paged build loading K and V rows through the page table.
//
// MFMA v_mfma_f32_32x32x16_bf16 (D = A.B + C, A 32x16, B 16x32; lane l = j + 32h, h = l / 32):
//   A: lane holds row i = l % 32, k = 8h .. 8h+7      B: lane holds column j = l % 32, same k
//   D: lane holds column j = l % 32, register r holds row 8*(r/4) + 4h + r%4
// Products are transposed so that every lane owns ONE query row (column j of D):
//   S^T[key][row] = K . Q^T   (A = 32 keys x 16 dims of K by ds_read_b128 from LDS;
//                              B = Q^T: 16 contiguous dims of one query row, kept in VGPRs)
//   O^T[dv][row] += V^T . P^T (B = P^T straight from the S^T registers; A = V^T by two
//                              ds_read_b64_tr_b16 from the row-major V block in LDS)
// The row max needs one v_permlane32_swap with the partner lane l ^ 32 per block; each lane sums its
// own half of the row's p, and the two halves are added once, at the end. The rescale is per lane.
// 32x32x16 over 16x16x32: the same matrix rate, but each K and V element read from LDS feeds 32 query
// rows instead of 16 (half the LDS reads per FLOP) and a row lives in 2 lanes, not 4.
//
// LDS (static): three K stages [64][d_qk] and three V stages [64][d_v] of bf16, rows padded by 16
// bytes (d128: 104,448 B; d192/128: 129,024 B). Registers: Q^T d_qk/4 VGPRs, O^T d_v/2, S^T 32, P 16, and
// the next blocks' K and V in flight (16 or 20).
//
// Requirements checked by the launcher: d_qk == ZYFA_D_QK, d_v == ZYFA_D_V (the kernel writes
// nothing otherwise); q, k, v and out rows 16-byte aligned (base pointers 16-byte aligned, batch, seq
// and head strides multiples of 8 elements); heads_q % heads_kv == 0; k and v seq strides below 2^24
// elements (the manifest row's max_kv_seq_stride: a block's buffer byte count and lane offsets are
// 32-bit, 63 strides of 2 bytes). Rows with no visible key write 0 and lse = +inf.
#include "abi/zyfa_abi.h"

// The contract fixes each rounding step (l * alpha, then + sum; alpha = exp2(m - m_new)); HIP's
// default fp-contract=fast would fuse them. The one fused step, t - m as fma(S, C, -m), is explicit.
#pragma clang fp contract(off)

#ifndef ZYFA_KERNEL_NAME
#error "build with -DZYFA_KERNEL_NAME=<kernel key>"
#endif
#ifndef ZYFA_STALE_TAU  // the variant's stale_tau (docs/numerics.md "Stale running max"); 0 = exact running max
#define ZYFA_STALE_TAU 0.0f
#endif
// The variant's tile_order: 2 = "global_descending", 1 = "descending", absent or 0 = "ascending".
#ifndef ZYFA_TILE_DESCENDING
#define ZYFA_TILE_DESCENDING 0
#endif
// The variant's layout: 1 = "varlen" (packed q / k / v; the second parameter zyfa_varlen_args, gfx950/varlen.h),
// 2 = "paged" (packed q, K / V in a paged cache), absent or 0 = "dense".
#ifndef ZYFA_VARLEN
#define ZYFA_VARLEN 0
#endif

#define ZYFA_DEVICE __attribute__((device)) __attribute__((always_inline)) static inline
#define ZYFA_MEMBER __attribute__((device)) __attribute__((always_inline)) inline

typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
typedef __bf16 bf16x4 __attribute__((ext_vector_type(4)));
typedef short i16x4 __attribute__((ext_vector_type(4)));
typedef unsigned u32x4 __attribute__((ext_vector_type(4)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef float f32x2 __attribute__((ext_vector_type(2)));
typedef __attribute__((address_space(3))) i16x4 lds_i16x4;
typedef __attribute__((address_space(3))) u32x4 lds_u32x4;
typedef __attribute__((address_space(3))) unsigned char lds_byte;

namespace {

constexpr int kTileM = ZYFA_TILE_M;
constexpr int kTileN = ZYFA_TILE_N;
constexpr int kThreads = ZYFA_THREADS;
constexpr int kDqk = ZYFA_D_QK;
constexpr int kDv = ZYFA_D_V;
constexpr int kWaves = kThreads / 64;
constexpr int kQkSteps = kDqk / 16;       // MFMA k-steps of 16 dims for S
constexpr int kDvTiles = kDv / 32;        // 32-wide output column tiles for O
constexpr int kKeyTiles = kTileN / 32;    // 32-key S^T tiles per block
constexpr int kKRow = 2 * kDqk + 16;      // LDS bytes per K row (16 B pad: rows start on other banks)
constexpr int kVRow = 2 * kDv + 16;
constexpr int kKStage = kTileN * kKRow;
constexpr int kVStage = kTileN * kVRow;
constexpr int kKChunks = kDqk / 64;  // 16-byte pieces of a K block per thread (8 threads per row)
constexpr int kVChunks = kDv / 64;
// Three K and three V stages, both staged in the MFMA half (the softmax half is then VALU work only): a
// stage is written two barrier intervals or more after its last read and before its next one, as the
// ping-pong's one-interval skew between the wave groups requires.
constexpr int kStages = 3;
constexpr int kLdsBytes = kStages * (kKStage + kVStage);
constexpr float kStaleTau = ZYFA_STALE_TAU;
constexpr float kFltMin = 1.17549435e-38f;   // the smallest normal float, 2^-126
constexpr float kFltMax = 3.40282347e+38f;
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
// Instruction classes of __builtin_amdgcn_sched_group_barrier (LLVM's SchedGroupMask).
constexpr int kSchedMfma = 0x008;
constexpr int kSchedDsRead = 0x100;
constexpr int kKAhead = 8;  // K reads in flight ahead of the S MFMAs (even)
constexpr int kKPre = 4;    // of which read before the MFMA half (<= kKAhead)
// gfx9 buffer descriptor word 3 for raw 32-bit loads (DATA_FORMAT 32); rows past seqlen_k read 0.
constexpr int kBufferWord3 = 0x00020000;

static_assert(ZYFA_DTYPE_E4M3 == 0, "fa_fwd_bf16.hip is the BF16 kernel");
static_assert(ZYFA_SMEM_BYTES == 0, "the LDS is static; the build reads its size from the code object");
static_assert(kThreads == 512 && kTileM == 32 * kWaves, "eight waves of 32 query rows: tile_m = 256");
static_assert(kTileN == 64, "tile_n = 64: two 32-key S^T tiles per block");
static_assert(kDqk % 16 == 0 && kDqk <= 256, "d_qk must be a multiple of 16, at most 256");
static_assert(kDv % 32 == 0 && kDv <= 256, "d_v must be a multiple of 32, at most 256");
static_assert(kThreads == 8 * kTileN && kDqk % 64 == 0 && kDv % 64 == 0,
              "K and V blocks are loaded by 8 threads per row, 16 bytes each per 128-byte column group");
static_assert(kLdsBytes <= 160 * 1024, "three K and V stages must fit gfx950's 160 KiB of LDS");

typedef zyfa_fwd_args __attribute__((aligned(16))) __attribute__((address_space(4))) kernarg_args;

ZYFA_DEVICE float fmax_(float a, float b) { return a > b ? a : b; }
// The max of a row's 64 scores (this lane's 32 of the two S^T tiles and the partner lane's 32) in one
// inline-assembly statement: sixteen chained v_max3_f32, then one v_permlane32_swap with the partner
// lane l ^ 32 and a v_max_f32. The compiler's fmax (IEEE mode) would first quiet each MFMA result with
// a v_max_f32 x, x, and it puts an s_nop between two asm statements of which one reads the other's
// result. No NaN reaches it (-inf marks masked keys); v_max3_f32 reading VALU results needs no wait
// states, and the MFMAs that wrote the scores are a barrier and many instructions back. The s_nop 1
// gives the two wait states gfx950 needs between a VALU write of an operand and the swap.
ZYFA_DEVICE float row_max_of_64(const f32x16 &x, const f32x16 &y) {
  float r, t;
  asm("v_max3_f32 %0, %2, %3, %4\n\t"
      "v_max3_f32 %0, %0, %5, %6\n\tv_max3_f32 %0, %0, %7, %8\n\tv_max3_f32 %0, %0, %9, %10\n\t"
      "v_max3_f32 %0, %0, %11, %12\n\tv_max3_f32 %0, %0, %13, %14\n\tv_max3_f32 %0, %0, %15, %16\n\t"
      "v_max3_f32 %0, %0, %17, %18\n\tv_max3_f32 %0, %0, %19, %20\n\tv_max3_f32 %0, %0, %21, %22\n\t"
      "v_max3_f32 %0, %0, %23, %24\n\tv_max3_f32 %0, %0, %25, %26\n\tv_max3_f32 %0, %0, %27, %28\n\t"
      "v_max3_f32 %0, %0, %29, %30\n\tv_max3_f32 %0, %0, %31, %32\n\tv_max_f32 %0, %0, %33\n\t"
      "v_mov_b32 %1, %0\n\ts_nop 1\n\tv_permlane32_swap_b32 %0, %1\n\tv_max_f32 %0, %0, %1"
      : "=&v"(r), "=&v"(t)
      : "v"(x[0]), "v"(x[1]), "v"(x[2]), "v"(x[3]), "v"(x[4]), "v"(x[5]), "v"(x[6]), "v"(x[7]), "v"(x[8]),
        "v"(x[9]), "v"(x[10]), "v"(x[11]), "v"(x[12]), "v"(x[13]), "v"(x[14]), "v"(x[15]), "v"(y[0]),
        "v"(y[1]), "v"(y[2]), "v"(y[3]), "v"(y[4]), "v"(y[5]), "v"(y[6]), "v"(y[7]), "v"(y[8]), "v"(y[9]),
        "v"(y[10]), "v"(y[11]), "v"(y[12]), "v"(y[13]), "v"(y[14]), "v"(y[15]));
  return r;
}

// Register r of a 32x32 MFMA result in this lane's half h holds row/key 8*(r/4) + 4h + r%4.
ZYFA_DEVICE int d_row(int r, int h) { return 8 * (r / 4) + 4 * h + (r % 4); }

// The pair {x of lane l, x of lane l ^ 32} in every lane: one VALU swap of the two 32-lane halves.
// Inline assembly: the pinned clang's __builtin_amdgcn_permlane32_swap returns its first result in
// both elements. The s_nop 1 gives the two wait states gfx950 needs between a VALU write of an
// operand and the swap, which the compiler does not count inside an asm statement.
struct Pair {
  float a, b;
};
ZYFA_DEVICE Pair with_partner(float x) {
  float a = x, b = x;
  asm("s_nop 1\n\tv_permlane32_swap_b32 %0, %1" : "+v"(a), "+v"(b));
  return {a, b};
}
ZYFA_DEVICE float row_sum(float x) {
  const Pair p = with_partner(x);
  return p.a + p.b;
}

// All LDS writes of this wave done and visible to the workgroup, then the barrier. The fences are
// limited to LDS ("local"), so global loads in flight stay in flight across the barrier.
ZYFA_DEVICE void lds_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup", "local");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup", "local");
}

// One block of kTileN rows (K or V) streamed from global memory: `next` is the first byte of the next
// block to load. Thread t loads row t / 8, 16-byte pieces 8c + t % 8 (no division, so the index math
// stays in 32-bit VALU and SALU instructions). Loads go through a raw buffer that ends at row seqlen_k:
// rows past it read 0, so a block past the end may be loaded (and stored) without a branch.
template <int kChunks, int kD>
struct BlockStream {
  const unsigned char *next;
  long long row_bytes;
  int rows_left;  // rows from `next` to seqlen_k; <= 0 past the end
  int lane_off[kChunks];
  u32x4 r[kChunks];

  ZYFA_MEMBER BlockStream(const __bf16 *head, long long stride, int sk, int tid)
      : next(reinterpret_cast<const unsigned char *>(head)), row_bytes(2 * stride), rows_left(sk) {
    #pragma unroll
    for (int c = 0; c < kChunks; ++c) lane_off[c] = static_cast<int>(tid / 8 * row_bytes) + 16 * (8 * c + tid % 8);
  }

  // Issue the loads of the next block. The buffer covers at most kTileN rows, so its byte count
  // (and every lane offset) stays below 64 rows of the tensor.
  ZYFA_MEMBER void issue() {
    // (rows - 1) row strides + one row, 0 past the end (rows <= 0: at most 2 kD - row_bytes <= 0); a
    // select, not a branch. The launcher keeps 64 rows of the tensor below 2^31 bytes.
    const int rows = rows_left < kTileN ? rows_left : kTileN;
    const int span = (rows - 1) * static_cast<int>(row_bytes) + 2 * kD;
    const int bytes = span > 0 ? span : 0;
    const __amdgpu_buffer_rsrc_t rsrc =
        __builtin_amdgcn_make_buffer_rsrc(const_cast<unsigned char *>(next), 0, bytes, kBufferWord3);
    #pragma unroll
    for (int c = 0; c < kChunks; ++c) r[c] = __builtin_amdgcn_raw_buffer_load_b128(rsrc, lane_off[c], 0, 0);
    next += kTileN * row_bytes;
    rows_left -= kTileN;
  }

  // Store the block into an LDS stage of rows padded to kD * 2 + 16 bytes.
  ZYFA_MEMBER void store(lds_byte *stage, int tid) const {
    #pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int row = tid / 8, col = 8 * c + tid % 8;
      *reinterpret_cast<lds_u32x4 *>(stage + row * (2 * kD + 16) + 16 * col) = r[c];
    }
  }
};

}  // namespace

#if ZYFA_VARLEN
#include "gfx950/varlen.h"
#endif

extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(kThreads, kThreads)))
#if ZYFA_VARLEN
void ZYFA_KERNEL_NAME(zyfa_fwd_args args, zyfa_varlen_args varlen) {
  (void)varlen;  // read from the kernarg segment (varlen_kernarg), as `args` is
#else
void ZYFA_KERNEL_NAME(zyfa_fwd_args args) {
#endif
  // The by-value struct is packed (align 1), so reading `args` directly gives unaligned vector
  // loads. It sits at offset 0 of the kernarg segment, which is 16-byte aligned: read it from there
  // with the alignment stated, so the wave-uniform fields arrive in SGPRs through s_load.
  (void)args;
  const kernarg_args &launch = *(const kernarg_args *)__builtin_amdgcn_kernarg_segment_ptr();
  if (launch.d_qk != kDqk || launch.d_v != kDv) return;
  __attribute__((shared)) static __attribute__((aligned(16))) unsigned char lds_raw[kLdsBytes];
  lds_byte *const lds = (lds_byte *)lds_raw;  // the LDS address space: ds_read / ds_write
  auto k_stage = [&](int stage) { return lds + stage * kKStage; };
  auto v_stage = [&](int stage) { return lds + kStages * kKStage + stage * kVStage; };

  const int tid = __builtin_amdgcn_workitem_id_x();
  const int wave = __builtin_amdgcn_readfirstlane(tid / 64);
  const int lane = tid % 64;
  const int j = lane & 31;  // query row inside the wave's 32 (column of every D)
  const int h = lane >> 5;  // which half of the row's keys / dv this lane holds

  // Longest rows first. "descending": blockIdx.x counts query tiles from the last one down, so the causal
  // tiles with the most keys of each head are dispatched first. "global_descending": the workgroups in
  // dispatch order (x fastest) take the last tile of every head and batch, then the one before it, ...,
  // so the longest tiles of the whole launch start first and the short ones fill its tail.
  const int n_tiles = (launch.seqlen_q + kTileM - 1) / kTileM;
  int tile = __builtin_amdgcn_workgroup_id_x();
  int hq = __builtin_amdgcn_workgroup_id_y();
  int bz = __builtin_amdgcn_workgroup_id_z();
  if (ZYFA_TILE_DESCENDING == 2) {
    // The dispatch position, in 32 bits: a launch of 2^32 workgroups of 256 rows would need a q tensor
    // of more than 2^48 bytes.
    const unsigned heads = static_cast<unsigned>(launch.heads_q);
    const unsigned pairs = heads * static_cast<unsigned>(launch.batch);
    const unsigned pair_in = static_cast<unsigned>(hq) + heads * static_cast<unsigned>(bz);
    const unsigned lin = static_cast<unsigned>(tile) + static_cast<unsigned>(n_tiles) * pair_in;
    const unsigned pair = lin % pairs;
    tile = n_tiles - 1 - static_cast<int>(lin / pairs);
    hq = static_cast<int>(pair % heads);
    bz = static_cast<int>(pair / heads);
  } else if (ZYFA_TILE_DESCENDING == 1) {
    tile = n_tiles - 1 - tile;
  }
#if ZYFA_VARLEN
  // Packed: batch bz is sequence bz; the rest of the kernel runs on its dense view (batch 0 of itself).
  const kernarg_varlen &vl = varlen_kernarg();
  const Sequence seq = sequence_of(launch, vl, bz);
  if (tile * kTileM >= seq.len_q) return;  // past the sequence (or an empty one): nothing to compute
  const zyfa_fwd_args a = sequence_view(launch, seq);
  bz = 0;
#else
  const kernarg_args &a = launch;
#endif
  const int sq = a.seqlen_q;
  const int sk = a.seqlen_k;
  // hq / (heads_q / heads_kv) in one division (heads_q is a multiple of heads_kv, both below 2^16).
  const int hkv = static_cast<int>(static_cast<unsigned>(hq) * static_cast<unsigned>(a.heads_kv) /
                                   static_cast<unsigned>(a.heads_q));
  const bool causal = (a.flags & ZYFA_FLAG_CAUSAL) != 0;

  // Keys visible to a row: [0, limit). Bottom-right causal: key <= row + sk - sq.
  const int m0 = tile * kTileM;
  const int w0 = m0 + 32 * wave;  // this wave's first row
  const int row = w0 + j;
  const bool row_ok = row < sq;
  const long long diag = static_cast<long long>(sk) - sq;
  auto limit_of = [&](int r) {
    const long long lim = causal ? r + 1 + diag : sk;
    return static_cast<int>(lim < sk ? (lim > 0 ? lim : 0) : sk);
  };
  const int row_limit = limit_of(row);
  const int wave_first_limit = limit_of(w0);  // blocks ending at or below it need no mask
  const int tile_limit = limit_of(m0 + kTileM - 1 < sq ? m0 + kTileM - 1 : sq - 1);
  const int n_blocks = (tile_limit + kTileN - 1) / kTileN;  // workgroup-uniform

  // C = scale * log2(e) > 0 by folding its sign into Q (exact in bf16): then max_j(S_j) * C is the
  // max of the t_j = S_j * C of the contract, bit for bit.
  float c = a.softmax_scale * a.q_descale * a.k_descale * kLog2e;
  const bool negative_c = c < 0.0f;
  c = negative_c ? -c : c;
  // C = 0 (softmax_scale 0) runs as the smallest normal float: every |t| is then below 2^-100 and exp2
  // gives exactly 1, as for t = 0, while -inf * C stays -inf (masked keys need no second select).
  c = c > kFltMin ? c : kFltMin;
  const float neg_inf = -__builtin_inff();

  // Indices as non-negative 64-bit values: products with the int64 strides need no sign extension.
  const long long bz64 = static_cast<unsigned>(bz), hq64 = static_cast<unsigned>(hq);
  const long long hkv64 = static_cast<unsigned>(hkv);
  const __bf16 *k_head = static_cast<const __bf16 *>(a.k) + bz64 * a.k_stride_batch + hkv64 * a.k_stride_head;
  const __bf16 *v_head = static_cast<const __bf16 *>(a.v) + bz64 * a.v_stride_batch + hkv64 * a.v_stride_head;
#if ZYFA_VARLEN == 2
  PagedStream<kKChunks, kDqk> k_next(k_head, a.k_stride_batch, a.k_stride_seq, seq.pages, vl, sk, tid);
  PagedStream<kVChunks, kDv> v_next(v_head, a.v_stride_batch, a.v_stride_seq, seq.pages, vl, sk, tid);
#else
  BlockStream<kKChunks, kDqk> k_next(k_head, a.k_stride_seq, sk, tid);
  BlockStream<kVChunks, kDv> v_next(v_head, a.v_stride_seq, sk, tid);
#endif

  // This lane's LDS byte offsets: K rows for the A operand of S^T (key l % 32, dims 8h ..), and the
  // ds_read_b64_tr_b16 source of V^T (lane S = 16g + 4i + u reads key 4(g / 2) + i, dv 16(g % 2) + 4u).
  const int k_lane = j * kKRow + 16 * h;
  const int g = lane / 16, i4 = (lane % 16) / 4, u4 = lane % 4;
  const int v_lane = (4 * (g / 2) + i4) * kVRow + 2 * (16 * (g % 2) + 4 * u4);

  float m = neg_inf;  // running row max of t (base-2 units)
  f32x2 l2 = {0.0f, 0.0f};  // running sums of unrounded p over this lane's half of the row's keys
  f32x16 acc[kDvTiles];
  #pragma unroll
  for (int t = 0; t < kDvTiles; ++t) acc[t] = (f32x16){};
  f32x16 st[kKeyTiles];
  bf16x8 p_frag[kKeyTiles][2];
  // K fragment f (key tile f / kQkSteps, dims 16 (f % kQkSteps) ..) of the block in `stage`: the A operand
  // of S^T. The first kKPre of a block are read in the previous softmax half, after its row max, so the
  // MFMA half starts on data that is already in registers.
  auto read_k = [&](int stage, int f) {
    return *reinterpret_cast<const lds_u32x4 *>(k_stage(stage) + k_lane + 32 * (f / kQkSteps) * kKRow +
                                                32 * (f % kQkSteps));
  };
  u32x4 k_pre[kKPre];

  // Prologue: K_0 and K_1 into stages 0 and 1; V_0 and K_2 in flight; then Q, which only the first MFMA
  // waits for (the barrier waits for the K stores).
  k_next.issue();
  k_next.store(k_stage(0), tid);
  k_next.issue();
  k_next.store(k_stage(1), tid);
  v_next.issue();
  k_next.issue();
  // Q^T operand (B of the S MFMA): this lane's row, dims 16s + 8h .. +7. Rows past sq read the last
  // row instead (their results are never stored).
  const __bf16 *q_row = static_cast<const __bf16 *>(a.q) + bz64 * a.q_stride_batch +
                        static_cast<unsigned>(row_ok ? row : sq - 1) * a.q_stride_seq + hq64 * a.q_stride_head;
  bf16x8 q_frag[kQkSteps];
  #pragma unroll
  for (int s = 0; s < kQkSteps; ++s) q_frag[s] = *reinterpret_cast<const bf16x8 *>(q_row + 16 * s + 8 * h);
  lds_barrier();
  // Ping-pong: waves 4-7 run one barrier interval behind waves 0-3, so that in every interval one
  // group issues its MFMAs (priority 1) while the other does its softmax on the same SIMDs.
  const bool second_group = wave >= kWaves / 2;
  if (second_group) __builtin_amdgcn_s_barrier();
  #pragma unroll
  for (int f = 0; f < kKPre; ++f) k_pre[f] = read_k(0, f);
  if (negative_c) {  // wave-uniform and rare: the flip costs d_qk / 4 VALU ops
    #pragma unroll
    for (int s = 0; s < kQkSteps; ++s) {
      q_frag[s] = __builtin_bit_cast(bf16x8, __builtin_bit_cast(u32x4, q_frag[s]) ^ 0x80008000u);
    }
  }

  // S_nb = K_nb Q^T from the K stage `stage` (the first kKPre fragments are already in k_pre).
  auto s_mfmas = [&](int stage) {
    #pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt) {
      st[kt] = (f32x16){};
      #pragma unroll
      for (int s = 0; s < kQkSteps; ++s) {
        const int f = kt * kQkSteps + s;
        const u32x4 kx = f < kKPre ? k_pre[f] : read_k(stage, f);
        st[kt] = __builtin_amdgcn_mfma_f32_32x32x16_bf16(__builtin_bit_cast(bf16x8, kx), q_frag[s], st[kt],
                                                         0, 0, 0);
      }
    }
    // Schedule: K reads run kKAhead MFMAs ahead (one read per MFMA); the first kKPre were read before
    // the barrier that opened this half.
    __builtin_amdgcn_sched_group_barrier(kSchedDsRead, kKAhead - kKPre, 0);
    #pragma unroll
    for (int g = 0; g < (kKeyTiles * kQkSteps - kKAhead) / 2; ++g) {
      __builtin_amdgcn_sched_group_barrier(kSchedMfma, 2, 0);
      __builtin_amdgcn_sched_group_barrier(kSchedDsRead, 2, 0);
    }
    __builtin_amdgcn_sched_group_barrier(kSchedMfma, kKAhead, 0);
  };
  // O += V P for the V stage `stage` and the P in p_frag.
  auto pv_mfmas = [&](int stage) {
    // B element e of step s of key tile kt is P at key 32kt + 16s + 8(e/4) + 4h + e%4; the two
    // transposing reads give A element e = V at that key, column 32t + j.
    const lds_byte *vs = v_stage(stage) + v_lane;
    #pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt) {
      #pragma unroll
      for (int s = 0; s < 2; ++s) {
        #pragma unroll
        for (int t = 0; t < kDvTiles; ++t) {
          const lds_byte *p0 = vs + (32 * kt + 16 * s) * kVRow + 64 * t;
          const i16x4 lo = __builtin_amdgcn_ds_read_tr16_b64_v4i16((lds_i16x4 *)p0);
          const i16x4 hi = __builtin_amdgcn_ds_read_tr16_b64_v4i16((lds_i16x4 *)(p0 + 8 * kVRow));
          const bf16x8 va = __builtin_bit_cast(bf16x8, __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7));
          acc[t] = __builtin_amdgcn_mfma_f32_32x32x16_bf16(va, p_frag[kt][s], acc[t], 0, 0, 0);
        }
      }
    }
    // Schedule: the V^T reads of the next four MFMAs go out before the current four.
    __builtin_amdgcn_sched_group_barrier(kSchedDsRead, 2 * kDvTiles, 0);
    #pragma unroll
    for (int g = 0; g < 2 * kKeyTiles - 1; ++g) {
      __builtin_amdgcn_sched_group_barrier(kSchedDsRead, 2 * kDvTiles, 0);
      __builtin_amdgcn_sched_group_barrier(kSchedMfma, kDvTiles, 0);
    }
    __builtin_amdgcn_sched_group_barrier(kSchedMfma, kDvTiles, 0);
  };

  // The stages of blocks nb, nb + 1 and nb + 2 (nb % 3, ...), rotated once per block: no select, so the
  // stage offsets stay scalar.
  int cur = 0, nxt = 1, prv = 2;
  for (int nb = 0; nb < n_blocks; ++nb) {
    // ---- MFMA half: S_nb = K_nb Q^T; stage V_nb (read two intervals later) and K_{nb+2} (read four
    // intervals later), load V_{nb+1} and K_{nb+3}; then O += V_{nb-1} P_{nb-1}. The staging sits among
    // the MFMAs, whose wave has the SIMD's issue slots to spare, and needs no branch: a block past the
    // end is zeros.
    __builtin_amdgcn_s_setprio(1);
    s_mfmas(cur);
    v_next.store(v_stage(cur), tid);
    v_next.issue();
    k_next.store(k_stage(prv), tid);
    k_next.issue();
    if (nb > 0) pv_mfmas(prv);
    __builtin_amdgcn_s_setprio(0);
    lds_barrier();

    // ---- Softmax half: mask, row max, the next block's first K fragments, m, the rescale when a row
    // raised its max by more than tau, P_nb and l: VALU work from the barrier to the barrier.
    {
      const int n0 = nb * kTileN;
      if (__builtin_expect(n0 + kTileN > wave_first_limit, 0)) {  // a block crossing some row's limit
        // Key n0 + 32 kt + d_row(r, h) is past the row's limit iff its offset 32 kt + d_row(r, 0) (a
        // constant) reaches row_limit - n0 - 4h: one compare and one select per score.
        const int first_masked = row_limit - n0 - 4 * h;
        #pragma unroll
        for (int kt = 0; kt < kKeyTiles; ++kt) {
          #pragma unroll
          for (int r = 0; r < 16; ++r) {
            if (32 * kt + d_row(r, 0) >= first_masked) st[kt][r] = neg_inf;
          }
        }
      }
      static_assert(kKeyTiles == 2, "row_max_of_64 takes the two S^T tiles of a 64-key block");
      // The block's max of t (S * C, C > 0), clamped to -FLT_MAX: a row with nothing visible yet gets a
      // finite m, so alpha = exp2(m - m_new) is never NaN (the first block: exp2(-inf) = 0; acc and l
      // are still 0) and S * C - m stays -inf for masked keys.
      const float mb = __builtin_fmaxf(row_max_of_64(st[0], st[1]) * c, -kFltMax);
      // The next block's first K fragments (stage nxt was written two intervals ago and is rewritten two
      // intervals from now; reading it on the last block is harmless).
      #pragma unroll
      for (int f = 0; f < kKPre; ++f) k_pre[f] = read_k(nxt, f);
      // Stale max: keep m unless the block raises it by more than tau (m = -inf never stays); mb > m +
      // tau implies mb > m, so the max itself is not needed.
      const float m_new = kStaleTau > 0.0f ? (mb > m + kStaleTau ? mb : m) : __builtin_fmaxf(m, mb);
      // O *= alpha and l *= alpha with alpha = exp2(m - m_new), skipped (exp2 included) when every row of
      // the wave kept its max: alpha is then 1 exactly.
      if (__builtin_expect(__builtin_amdgcn_ballot_w64(m_new != m) != 0, 0)) {
        const float alpha = __builtin_amdgcn_exp2f(m - m_new);
        const f32x2 a2 = {alpha, alpha};
        l2 = l2 * a2;
        #pragma unroll
        for (int t = 0; t < kDvTiles; ++t) {
          #pragma unroll
          for (int r = 0; r < 16; r += 2) {
            const f32x2 o = f32x2{acc[t][r], acc[t][r + 1]} * a2;
            acc[t][r] = o[0];
            acc[t][r + 1] = o[1];
          }
        }
      }
      m = m_new;
      // p = exp2(S * C - m) on pairs of scores (packed FMA and add), P rounded to bf16 for P.V.
      const f32x2 c2 = {c, c}, neg_m2 = {-m_new, -m_new};
      f32x2 psum2 = {0.0f, 0.0f};
      #pragma unroll
      for (int kt = 0; kt < kKeyTiles; ++kt) {
        #pragma unroll
        for (int s = 0; s < 2; ++s) {
          #pragma unroll
          for (int e = 0; e < 8; e += 2) {
            const f32x2 x = {st[kt][8 * s + e], st[kt][8 * s + e + 1]};
            const f32x2 t = __builtin_elementwise_fma(x, c2, neg_m2);
            const f32x2 p = {__builtin_amdgcn_exp2f(t[0]), __builtin_amdgcn_exp2f(t[1])};
            psum2 = psum2 + p;
            p_frag[kt][s][e] = static_cast<__bf16>(p[0]);
            p_frag[kt][s][e + 1] = static_cast<__bf16>(p[1]);
          }
        }
      }
      // This lane's share of l (its half of the row's keys); the two shares are added once, at the end.
      l2 = l2 + psum2;
    }
    lds_barrier();
    const int done = cur;
    cur = nxt;
    nxt = prv;
    prv = done;
  }
  // The last block's O += V P. Nothing writes the LDS after the loop, so it needs no barrier; waves 0-3
  // pass one more, the partner of the one that set the skew of waves 4-7.
  __builtin_amdgcn_s_setprio(1);
  if (n_blocks > 0) pv_mfmas(prv);
  __builtin_amdgcn_s_setprio(0);
  if (!second_group) __builtin_amdgcn_s_barrier();

  if (!row_ok) return;
  // out = acc * (v_descale / l), bf16 RNE; a row that saw no key (l == 0) writes 0. A row that saw a
  // key has l >= 1 (its max key adds exp2(0) = 1), so vd / max(l, 1) needs no select.
  const float l = row_sum(l2[0] + l2[1]);
  const float scale = a.v_descale / fmax_(l, 1.0f);
  __bf16 *out_row = static_cast<__bf16 *>(a.out) + bz64 * a.out_stride_batch +
                    static_cast<unsigned>(row) * a.out_stride_seq + hq64 * a.out_stride_head;
  #pragma unroll
  for (int t = 0; t < kDvTiles; ++t) {
    #pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) {
      bf16x4 o;
      #pragma unroll
      for (int e = 0; e < 4; e += 2) {  // pairs: v_pk_mul_f32
        const f32x2 x = f32x2{acc[t][4 * q4 + e], acc[t][4 * q4 + e + 1]} * f32x2{scale, scale};
        o[e] = static_cast<__bf16>(x[0]);
        o[e + 1] = static_cast<__bf16>(x[1]);
      }
      *reinterpret_cast<bf16x4 *>(out_row + 32 * t + d_row(4 * q4, h)) = o;
    }
  }
  // lse = (m + log2 l) * ln 2 in natural-log units; +inf for a row that saw no key.
  if ((a.flags & ZYFA_FLAG_LSE) != 0 && h == 0) {
    const float lse = l == 0.0f ? __builtin_inff() : (m + __builtin_amdgcn_logf(l)) * kLn2;
#if ZYFA_VARLEN
    a.lse[hq64 * vl.total_q + row] = lse;  // lse [heads_q, total_q], moved to the sequence's first row
#else
    a.lse[(bz64 * a.heads_q + hq64) * sq + row] = lse;
#endif
  }
}
