/* ZYFA sm90a "simple" causal-prefill attention forward: BF16, and FP8 (e4m3fn in, BF16 out).
 *
 * Computes, per (batch, q head), out = softmax(scale * q k^T, causal) v with the ZYFA numerics
 * contract (online softmax in base 2 over KV blocks of ZYFA_TILE_N keys; BF16 mode: P rounded to
 * bf16 for P.V, row sum of the fp32 p; FP8 mode: P scaled by 2^8 and stored as e4m3fn, either by
 * exp2 + RNE/satfinite convert ("exact P") or by one FMA straight to the e4m3 code ("lean P"), row
 * sum of the e4m3-rounded values actually fed to P.V; out = acc / l * v_descale; lse optional).
 * This is the first, correct-before-fast Hopper kernel: FA2-style mma.sync, no TMA, no wgmma.
 *
 * Layouts (flash-attn's, strides in elements, last dim contiguous, see abi/zyfa_abi.h):
 *   q [batch, seqlen_q, heads_q, d_qk]   k [batch, seqlen_k, heads_kv, d_qk]
 *   v [batch, seqlen_k, heads_kv, d_v]   out bf16 [batch, seqlen_q, heads_q, d_v]
 *   lse f32 [batch, heads_q, seqlen_q] (contiguous), when args.flags & ZYFA_FLAG_LSE.
 * Causal is bottom-right aligned: row i sees key j iff j <= i + seqlen_k - seqlen_q. Rows that see
 * no key get out = 0 and lse = +inf. Without ZYFA_FLAG_CAUSAL every key < seqlen_k is seen.
 * GQA: kv head = q head / (heads_q / heads_kv). BF16 mode ignores the three descales (contract: 1).
 *
 * Grid (ceil(seqlen_q / TILE_M), heads_q, batch); block TILE_M = 64 query rows = 4 warps x 16 rows
 * (one m16 MMA row block per warp, so softmax row statistics stay inside one warp: a row lives in
 * the 4 lanes of one quad, reduced with two xor-shuffles). The KV loop walks blocks of TILE_N = 64
 * keys from 0 up to the causal limit of the block's last row; fully masked blocks are never
 * visited, per-element masks run only in blocks that cross the diagonal or seqlen_k.
 *   S = Q K^T:  bf16 mma.sync m16n8k16 / e4m3 mma.sync m16n8k32, fp32 accumulate. Both read their
 *               operands as 32-byte k-steps with ldmatrix (the two fragment layouts coincide byte
 *               for byte), Q and K row-major [row][d] in shared memory.
 *   O += P V:   bf16: P from the S accumulators (FA2 register reuse), V row-major [key][d] in shared
 *               memory read with ldmatrix.trans.
 *               e4m3: mma.sync needs B "col" (k-major), i.e. V^T, and ldmatrix.trans only exists
 *               for 16-bit elements on sm_90, so the block loads V and writes it TRANSPOSED into
 *               shared memory (Vt [d][key], a byte transpose with prmt). The transpose also permutes
 *               keys inside every 16-key group (position 4t+i <- key 8(i>>1) + 2t + (i&1)) so that
 *               the A fragment of P.V is exactly the bytes each lane already holds from its S
 *               accumulators: no shuffles between lanes. A key permutation applied to both P and V
 *               leaves P.V unchanged.
 * Note: sm_90 has no native FP8 mma.sync; ptxas lowers m16n8k32.e4m3 to e4m3->f16 unpacks
 * (F2FP.F16.E4M3.UNPACK, exact) and two f16 HMMA.16816 with fp32 accumulate, so this FP8 path is
 * numerically exact per the contract but not faster than BF16; FP8 tensor-core rate needs wgmma.
 * Loads are plain 16-byte global loads into registers then shared stores (zero-filled for rows
 * >= seqlen, never reading past them), synchronous, one K/V buffer: simple, not fast (a TMA/wgmma
 * pipeline is a later issue). If any base pointer or stride is not 16-byte aligned the block falls
 * back to byte loads (uniform branch), so every ABI-legal stride works. No atomics: deterministic.
 *
 * Shared memory (dynamic, == ZYFA_SMEM_BYTES, static_asserted below):
 *   Q  TILE_M rows x (d_qk*esize + 16) bytes   the +16 pad makes the row stride an odd number of
 *   K  TILE_N rows x (d_qk*esize + 16) bytes   16-byte units, so the 8 row addresses of every
 *   V  bf16: TILE_N rows x (d_v*2 + 16)        ldmatrix phase hit 8 distinct bank groups.
 *      e4m3: Vt d_v rows x TILE_N bytes, no pad; 16-byte chunk c of row r stored at c ^ swz(r),
 *      swz(r) = ((r >> 1) ^ (r >> 4)) & 3: conflict-free ldmatrix, 2-way transpose stores.
 *   bf16 hd128: 52224, bf16 hd192x128: 68608, e4m3 hd128: 26624, e4m3 hd192x128: 34816 bytes.
 * Registers per thread: O accumulator d_v/2 floats (64), S tile 32 floats, P fragments; no spills
 * (kernels/sm90/build_check.sh prints ptxas' report).
 *
 * Build macros: ZYFA_KERNEL_NAME, ZYFA_DTYPE_E4M3, ZYFA_D_QK, ZYFA_D_V, ZYFA_TILE_M, ZYFA_TILE_N,
 * ZYFA_THREADS, ZYFA_SMEM_BYTES, ZYFA_LEAN_P (values from kernels/variants.bzl).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/warp_ptx.h"

#if !defined(ZYFA_KERNEL_NAME) || !defined(ZYFA_DTYPE_E4M3) || !defined(ZYFA_D_QK) || \
    !defined(ZYFA_D_V) || !defined(ZYFA_TILE_M) || !defined(ZYFA_TILE_N) ||              \
    !defined(ZYFA_THREADS) || !defined(ZYFA_SMEM_BYTES) || !defined(ZYFA_LEAN_P)
#error "fa_fwd_simple.cu needs -DZYFA_KERNEL_NAME, ZYFA_DTYPE_E4M3, ZYFA_D_QK, ZYFA_D_V, ZYFA_TILE_M, ZYFA_TILE_N, ZYFA_THREADS, ZYFA_SMEM_BYTES, ZYFA_LEAN_P"
#endif

namespace zyfa_sm90_simple {

constexpr bool kFp8 = ZYFA_DTYPE_E4M3 != 0;
constexpr bool kLeanP = ZYFA_LEAN_P != 0;
constexpr int kDQk = ZYFA_D_QK;
constexpr int kDV = ZYFA_D_V;
constexpr int kTileM = ZYFA_TILE_M;
constexpr int kTileN = ZYFA_TILE_N;
constexpr int kThreads = ZYFA_THREADS;
constexpr int kWarps = kThreads / 32;
constexpr int kESize = kFp8 ? 1 : 2;            // bytes per q/k/v element
constexpr int kQkRowBytes = kDQk * kESize;
constexpr int kQkStride = kQkRowBytes + 16;     // padded smem row of Q and K
constexpr int kKSteps = kQkRowBytes / 32;       // one MMA k-step = 32 bytes (k16 bf16 / k32 e4m3)
constexpr int kVStride = kFp8 ? kTileN : kDV * 2 + 16;  // Vt row (e4m3) / padded V row (bf16)
constexpr int kSTiles = kTileN / 8;             // m16n8 tiles of S per warp
constexpr int kOTiles = kDV / 8;                // m16n8 tiles of O per warp
constexpr int kQBytes = kTileM * kQkStride;
constexpr int kKBytes = kTileN * kQkStride;
constexpr int kVBytes = kFp8 ? kDV * kTileN : kTileN * kVStride;
constexpr int kSmemBytes = kQBytes + kKBytes + kVBytes;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kPShift = kFp8 ? 8.0f : 0.0f;  // FP8: row max lands at 2^8 (contract SHIFT)

static_assert(ZYFA_DTYPE_E4M3 == 0 || ZYFA_DTYPE_E4M3 == 1, "ZYFA_DTYPE_E4M3 must be 0 or 1");
static_assert(ZYFA_LEAN_P == 0 || ZYFA_LEAN_P == 1, "ZYFA_LEAN_P must be 0 or 1");
static_assert(!kLeanP || kFp8, "lean P is an FP8-only mode");
static_assert(kThreads % 32 == 0 && kTileM == 16 * kWarps,
              "one warp per 16 query rows: ZYFA_TILE_M must equal 16 * ZYFA_THREADS / 32");
static_assert(kTileN == 64, "ZYFA_TILE_N must be 64 (the e4m3 Vt swizzle assumes 4 16-byte chunks per row)");
static_assert(kQkRowBytes % 32 == 0, "d_qk * element size must be a multiple of 32 bytes (one MMA k-step)");
static_assert(kDV % 16 == 0, "d_v must be a multiple of 16 (ldmatrix x4 covers two n8 tiles)");
static_assert(kDV <= 256 && kDQk <= 256, "head dims above 256 would spill the O accumulator");
static_assert(kSmemBytes == ZYFA_SMEM_BYTES,
              "ZYFA_SMEM_BYTES (variants.bzl smem_bytes) must equal this kernel's shared-memory layout");
static_assert(kSmemBytes <= 227 * 1024, "shared memory layout exceeds the sm_90 per-block limit");

// ---------------------------------------------------------------------------------------------
// Small PTX wrappers (shared-memory addresses, ldmatrix and quad reductions: sm90/warp_ptx.h).

// d += a * b for one m16n8 tile over one 32-byte k-step (bf16 k16 or e4m3 k32).
__device__ __forceinline__ void mma_k32bytes(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  if constexpr (kFp8) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 16 bytes from global memory at any (2-byte or 1-byte aligned) address, as byte loads: the
// fallback for strides or base pointers that are not 16-byte aligned.
__device__ __forceinline__ uint4 load16_bytes(const uint8_t* p) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<uint32_t>(__ldg(p + 4 * i)) | (static_cast<uint32_t>(__ldg(p + 4 * i + 1)) << 8) |
           (static_cast<uint32_t>(__ldg(p + 4 * i + 2)) << 16) |
           (static_cast<uint32_t>(__ldg(p + 4 * i + 3)) << 24);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__host__ __device__ constexpr int largest_divisor_upto(int n, int cap) {
  for (int d = cap; d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

// Rows [row0, row0 + ROWS) of a [seq][ROW_BYTES] global slab into smem rows of STRIDE bytes;
// rows >= nvalid are zero-filled and never read. vec_ok: all row starts are 16-byte aligned, so
// every thread issues its 16-byte vector loads first, then its shared stores; otherwise one chunk
// at a time from byte loads (few live registers; only odd strides take this path).
template <int ROWS, int ROW_BYTES, int STRIDE>
__device__ __forceinline__ void load_rows(uint8_t* smem, const uint8_t* gbase, int64_t row_stride_bytes,
                                          int row0, int nvalid, bool vec_ok) {
  constexpr int kChunks = ROW_BYTES / 16;
  constexpr int kIters = ROWS * kChunks / kThreads;
  static_assert(ROWS * kChunks % kThreads == 0, "tile chunks must divide evenly among the threads");
  if (vec_ok) {
    // Batches of at most 8 loads in flight keep the staging registers (4 per load) bounded.
    constexpr int kBatch = largest_divisor_upto(kIters, 8);
#pragma unroll
    for (int i0 = 0; i0 < kIters; i0 += kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int c = static_cast<int>(threadIdx.x) + (i0 + i) * kThreads;
        const int r = c / kChunks;
        v[i] = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < nvalid) {
          v[i] = __ldg(reinterpret_cast<const uint4*>(gbase + static_cast<int64_t>(row0 + r) * row_stride_bytes +
                                                      (c % kChunks) * 16));
        }
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int c = static_cast<int>(threadIdx.x) + (i0 + i) * kThreads;
        *reinterpret_cast<uint4*>(smem + (c / kChunks) * STRIDE + (c % kChunks) * 16) = v[i];
      }
    }
  } else {
#pragma unroll 1
    for (int i = 0; i < kIters; ++i) {
      const int c = static_cast<int>(threadIdx.x) + i * kThreads;
      const int r = c / kChunks;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (row0 + r < nvalid) v = load16_bytes(gbase + static_cast<int64_t>(row0 + r) * row_stride_bytes + (c % kChunks) * 16);
      *reinterpret_cast<uint4*>(smem + r * STRIDE + (c % kChunks) * 16) = v;
    }
  }
}

// Swizzle of the 16-byte chunk index inside a 64-byte Vt row (e4m3 only).
__device__ __forceinline__ int vt_swz(int row) { return ((row >> 1) ^ (row >> 4)) & 3; }

// 4x4 byte transpose: out[b] = {c0.byte b, c1.byte b, c2.byte b, c3.byte b}.
__device__ __forceinline__ void transpose4x4(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                             uint32_t (&out)[4]) {
  const uint32_t x01lo = __byte_perm(c0, c1, 0x5140);
  const uint32_t x01hi = __byte_perm(c0, c1, 0x7362);
  const uint32_t x23lo = __byte_perm(c2, c3, 0x5140);
  const uint32_t x23hi = __byte_perm(c2, c3, 0x7362);
  out[0] = __byte_perm(x01lo, x23lo, 0x5410);
  out[1] = __byte_perm(x01lo, x23lo, 0x7632);
  out[2] = __byte_perm(x01hi, x23hi, 0x5410);
  out[3] = __byte_perm(x01hi, x23hi, 0x7632);
}

// e4m3: V block [key0, key0 + 64) x d_v -> Vt[d][position], keys permuted inside each 16-key
// group h: position 16h + 4t + i holds key 16h + 2t + (i & 1) + 8 (i >> 1) (see header).
// One unit = (group h, t, 16 d columns dc): 4 key rows x 16 bytes in, 16 words of 4 bytes out
// (word for d = row, positions 16h + 4t .. + 3). Keys >= seqlen_k are zero-filled, never read.
__device__ __forceinline__ void load_vt_e4m3(uint8_t* vt, const uint8_t* vbase, int64_t row_stride_bytes,
                                             int key0, int seqlen_k, bool vec_ok) {
  constexpr int kDc = kDV / 16;
  constexpr int kUnits = (kTileN / 16) * 4 * kDc;
  static_assert(kUnits % kThreads == 0, "Vt transpose units must divide evenly among the threads");
#pragma unroll
  for (int i = 0; i < kUnits / kThreads; ++i) {
    const int u = static_cast<int>(threadIdx.x) + i * kThreads;
    const int t = u & 3;
    const int dc = (u >> 2) % kDc;
    const int h = (u >> 2) / kDc;
    int key[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) key[k] = key0 + 16 * h + 2 * t + (k & 1) + 8 * (k >> 1);
    if (vec_ok) {
      uint4 w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        w[k] = make_uint4(0u, 0u, 0u, 0u);
        if (key[k] < seqlen_k) {
          w[k] = __ldg(reinterpret_cast<const uint4*>(vbase + static_cast<int64_t>(key[k]) * row_stride_bytes + dc * 16));
        }
      }
      const uint32_t c[4][4] = {{w[0].x, w[0].y, w[0].z, w[0].w}, {w[1].x, w[1].y, w[1].z, w[1].w},
                                {w[2].x, w[2].y, w[2].z, w[2].w}, {w[3].x, w[3].y, w[3].z, w[3].w}};
#pragma unroll
      for (int comp = 0; comp < 4; ++comp) {
        uint32_t out[4];
        transpose4x4(c[0][comp], c[1][comp], c[2][comp], c[3][comp], out);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int row = dc * 16 + comp * 4 + b;
          *reinterpret_cast<uint32_t*>(vt + row * kTileN + ((h ^ vt_swz(row)) << 4) + 4 * t) = out[b];
        }
      }
    } else {
#pragma unroll 1
      for (int j = 0; j < 16; ++j) {
        const int row = dc * 16 + j;
        uint32_t word = 0u;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (key[k] < seqlen_k) {
            word |= static_cast<uint32_t>(__ldg(vbase + static_cast<int64_t>(key[k]) * row_stride_bytes + row)) << (8 * k);
          }
        }
        *reinterpret_cast<uint32_t*>(vt + row * kTileN + ((h ^ vt_swz(row)) << 4) + 4 * t) = word;
      }
    }
  }
}

// Two P values of one row -> the packed pair fed to P.V, and their contribution to the row sum.
// BF16: bf16x2 (RNE), l += p unrounded. FP8: e4m3x2 bytes (low byte = first), l += decoded bytes.
__device__ __forceinline__ uint32_t bf16_pair(float p0, float p1) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(p0, p1);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float e4m3_pair_sum(uint32_t pair16) {
  const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair16), __NV_E4M3);
  const float2 f = __half22float2(__half2(hr));
  return f.x + f.y;
}

// Exact P: e4m3fn_rne_satfinite(exp2(t - m + 8)), masked t = -inf gives exp2(-inf) = 0.
__device__ __forceinline__ uint32_t exact_p_pair(float t0, float t1, float m) {
  const float2 x = make_float2(exp2f((t0 - m) + kPShift), exp2f((t1 - m) + kPShift));
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(x, __NV_SATFINITE, __NV_E4M3));
}

// Lean P: code = clamp(rint(S*A + B), 0, 126) with one fp32 FMA; masked (t == -inf) -> code 0.
// After the clamp, adding 1.5 * 2^23 rounds to an integer (ties to even) held in the low bits.
__device__ __forceinline__ uint32_t lean_code(float s, float t, float a, float b) {
  const float x = fminf(fmaxf(fmaf(s, a, b), 0.0f), 126.0f);
  const uint32_t code = __float_as_uint(x + 12582912.0f) & 0xffu;
  return t == -INFINITY ? 0u : code;
}

}  // namespace zyfa_sm90_simple

extern "C" __global__ void __launch_bounds__(ZYFA_THREADS) ZYFA_KERNEL_NAME(const zyfa_fwd_args args) {
  using namespace zyfa_sm90_simple;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const q_smem = smem;
  uint8_t* const k_smem = smem + kQBytes;
  uint8_t* const v_smem = smem + kQBytes + kKBytes;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;    // MMA groupID: accumulator rows g and g + 8
  const int tig = lane & 3;   // thread in group: accumulator columns 2 tig, 2 tig + 1

  const int seqlen_q = args.seqlen_q;
  const int seqlen_k = args.seqlen_k;
  const int head = static_cast<int>(blockIdx.y);
  const int batch = static_cast<int>(blockIdx.z);
  const int kv_head = head / (args.heads_q / args.heads_kv);
  const bool causal = (args.flags & ZYFA_FLAG_CAUSAL) != 0u;
  const int q_row0 = static_cast<int>(blockIdx.x) * kTileM;
  const int q_rows = min(kTileM, seqlen_q - q_row0);
  const int64_t diag = static_cast<int64_t>(seqlen_k) - seqlen_q;  // row i sees keys <= i + diag

  // Keys [0, kv_end) are visible to at least one row of this block.
  int64_t kv_end = seqlen_k;
  if (causal) kv_end = min(kv_end, static_cast<int64_t>(q_row0) + q_rows - 1 + diag + 1);
  const int n_blocks = kv_end > 0 ? static_cast<int>((kv_end + kTileN - 1) / kTileN) : 0;

  const uint8_t* const q_base = static_cast<const uint8_t*>(args.q) +
      (static_cast<int64_t>(batch) * args.q_stride_batch + static_cast<int64_t>(head) * args.q_stride_head) * kESize;
  const uint8_t* const k_base = static_cast<const uint8_t*>(args.k) +
      (static_cast<int64_t>(batch) * args.k_stride_batch + static_cast<int64_t>(kv_head) * args.k_stride_head) * kESize;
  const uint8_t* const v_base = static_cast<const uint8_t*>(args.v) +
      (static_cast<int64_t>(batch) * args.v_stride_batch + static_cast<int64_t>(kv_head) * args.v_stride_head) * kESize;
  const int64_t q_row_bytes = args.q_stride_seq * kESize;
  const int64_t k_row_bytes = args.k_stride_seq * kESize;
  const int64_t v_row_bytes = args.v_stride_seq * kESize;

  // 16-byte vector loads are legal only if every row start is 16-byte aligned (uniform per launch).
  const bool vec_ok =
      ((reinterpret_cast<uintptr_t>(args.q) | reinterpret_cast<uintptr_t>(args.k) |
        reinterpret_cast<uintptr_t>(args.v)) & 15u) == 0u &&
      (((args.q_stride_batch | args.q_stride_seq | args.q_stride_head | args.k_stride_batch |
         args.k_stride_seq | args.k_stride_head | args.v_stride_batch | args.v_stride_seq |
         args.v_stride_head) * kESize) & 15) == 0;

  load_rows<kTileM, kQkRowBytes, kQkStride>(q_smem, q_base, q_row_bytes, q_row0, seqlen_q, vec_ok);

  // C folds scale, descales and log2(e) in the contract's order; A, B are lean P's FMA operands.
  const float qk_scale = kFp8 ? args.softmax_scale * args.q_descale * args.k_descale * kLog2e
                              : args.softmax_scale * kLog2e;
  const float lean_a = 8.0f * qk_scale;
  const float v_descale = kFp8 ? args.v_descale : 1.0f;

  // Per-thread state for rows (q_row0 + warp*16 + g) and (+ 8).
  const int row_a = q_row0 + warp * 16 + g;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};  // this lane's partial row sums (quad-reduced at the end)
  float acc[kOTiles][4];
#pragma unroll
  for (int j = 0; j < kOTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  // Per-lane ldmatrix row addresses (see the fragment layouts in the header).
  const uint32_t q_lane = smem_u32(q_smem) + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kQkStride +
                          (lane >> 4) * 16;
  const uint32_t k_lane = smem_u32(k_smem) + ((lane & 7) + (lane >> 4) * 8) * kQkStride + ((lane >> 3) & 1) * 16;
  const uint32_t v_smem_u32 = smem_u32(v_smem);

  for (int nb = 0; nb < n_blocks; ++nb) {
    const int key0 = nb * kTileN;
    __syncthreads();  // every warp is done with the previous K/V block
    load_rows<kTileN, kQkRowBytes, kQkStride>(k_smem, k_base, k_row_bytes, key0, seqlen_k, vec_ok);
    if constexpr (kFp8) {
      load_vt_e4m3(v_smem, v_base, v_row_bytes, key0, seqlen_k, vec_ok);
    } else {
      load_rows<kTileN, kDV * 2, kVStride>(v_smem, v_base, v_row_bytes, key0, seqlen_k, vec_ok);
    }
    __syncthreads();

    // ---- S = Q K^T (raw dot products, fp32)
    float s[kSTiles][4];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      ldsm_x4(a, q_lane + ks * 32);
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_lane + np * 16 * kQkStride + ks * 32);
        mma_k32bytes(s[2 * np], a, b[0], b[1]);
        mma_k32bytes(s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // ---- t = S * C, masked keys -> -inf (only blocks crossing seqlen_k or the diagonal)
    const bool need_mask = key0 + kTileN > seqlen_k || (causal && key0 + kTileN - 1 > q_row0 + diag);
    float t[kSTiles][4];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        t[j][e] = s[j][e] * qk_scale;
        if (need_mask) {
          const int key = key0 + 8 * j + 2 * tig + (e & 1);
          const int64_t row = row_a + 8 * (e >> 1);
          const bool visible = key < seqlen_k && (!causal || key <= row + diag);
          if (!visible) t[j][e] = -INFINITY;
        }
      }
    }

    // ---- online softmax statistics per row (r = 0: row_a, r = 1: row_a + 8)
    float m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) mx = fmaxf(mx, fmaxf(t[j][2 * r], t[j][2 * r + 1]));
      const float m_new = fmaxf(m_run[r], quad_max(mx));
      float alpha = 1.0f;  // m_new == -inf: nothing visible yet, the block changes nothing
      if (m_new != -INFINITY) {
        alpha = m_run[r] == -INFINITY ? 0.0f : exp2f(m_run[r] - m_new);
        m_run[r] = m_new;
      }
      m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // keeps exp2(t - m) = 0 for masked t, not NaN
      l_run[r] *= alpha;
#pragma unroll
      for (int j = 0; j < kOTiles; ++j) {
        acc[j][2 * r] *= alpha;
        acc[j][2 * r + 1] *= alpha;
      }
    }

    // ---- P pairs: pair[j][r] holds the two values of S tile j, row r (columns 2 tig, 2 tig + 1)
    uint32_t pair[kSTiles][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float lean_b = 120.0f - 8.0f * m_use[r];
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        const float t0 = t[j][2 * r];
        const float t1 = t[j][2 * r + 1];
        if constexpr (!kFp8) {
          const float p0 = exp2f(t0 - m_use[r]);
          const float p1 = exp2f(t1 - m_use[r]);
          l_run[r] += p0 + p1;
          pair[j][r] = bf16_pair(p0, p1);
        } else {
          if constexpr (kLeanP) {
            pair[j][r] = lean_code(s[j][2 * r], t0, lean_a, lean_b) |
                         (lean_code(s[j][2 * r + 1], t1, lean_a, lean_b) << 8);
          } else {
            pair[j][r] = exact_p_pair(t0, t1, m_use[r]);
          }
          l_run[r] += e4m3_pair_sum(pair[j][r]);
        }
      }
    }

    // ---- O += P V
    if constexpr (!kFp8) {
      // A fragment of k-step kk (keys 16kk..16kk+15) = S tiles 2kk, 2kk+1 (FA2 register reuse).
      const uint32_t v_lane = v_smem_u32 + ((lane & 7) + ((lane >> 3) & 1) * 8) * kVStride + (lane >> 4) * 16;
#pragma unroll
      for (int kk = 0; kk < kTileN / 16; ++kk) {
        const uint32_t a[4] = {pair[2 * kk][0], pair[2 * kk][1], pair[2 * kk + 1][0], pair[2 * kk + 1][1]};
#pragma unroll
        for (int np = 0; np < kOTiles / 2; ++np) {
          uint32_t b[4];
          ldsm_x4_trans(b, v_lane + kk * 16 * kVStride + np * 32);
          mma_k32bytes(acc[2 * np], a, b[0], b[1]);
          mma_k32bytes(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    } else {
      // A fragment of 32-key step kc: a0/a1 = S tiles 4kc, 4kc+1 (rows g / g+8), a2/a3 = tiles
      // 4kc+2, 4kc+3: bytes {key 2tig, 2tig+1, 8+2tig, 9+2tig} = Vt positions 4tig..4tig+3.
#pragma unroll
      for (int kc = 0; kc < kTileN / 32; ++kc) {
        const uint32_t a[4] = {pair[4 * kc][0] | (pair[4 * kc + 1][0] << 16),
                               pair[4 * kc][1] | (pair[4 * kc + 1][1] << 16),
                               pair[4 * kc + 2][0] | (pair[4 * kc + 3][0] << 16),
                               pair[4 * kc + 2][1] | (pair[4 * kc + 3][1] << 16)};
#pragma unroll
        for (int np = 0; np < kOTiles / 2; ++np) {
          const int row = np * 16 + (lane & 7) + (lane >> 4) * 8;  // d index
          const int chunk = 2 * kc + ((lane >> 3) & 1);             // 16 key positions
          uint32_t b[4];
          ldsm_x4(b, v_smem_u32 + row * kTileN + ((chunk ^ vt_swz(row)) << 4));
          mma_k32bytes(acc[2 * np], a, b[0], b[1]);
          mma_k32bytes(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
  }

  // ---- epilogue: out = acc / l * v_descale -> bf16 (l == 0 -> 0); lse (l == 0 -> +inf)
  const bool out_vec_ok = (reinterpret_cast<uintptr_t>(args.out) & 3u) == 0u &&
                          ((args.out_stride_batch | args.out_stride_seq | args.out_stride_head) & 1) == 0;
  const bool write_lse = (args.flags & ZYFA_FLAG_LSE) != 0u && args.lse != nullptr;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(l_run[r]);
    const int row = row_a + 8 * r;
    if (row >= seqlen_q) continue;
    __nv_bfloat16* const out_row = static_cast<__nv_bfloat16*>(args.out) + static_cast<int64_t>(batch) * args.out_stride_batch +
                                   static_cast<int64_t>(row) * args.out_stride_seq +
                                   static_cast<int64_t>(head) * args.out_stride_head;
#pragma unroll
    for (int j = 0; j < kOTiles; ++j) {
      const float o0 = l == 0.0f ? 0.0f : (acc[j][2 * r] / l) * v_descale;
      const float o1 = l == 0.0f ? 0.0f : (acc[j][2 * r + 1] / l) * v_descale;
      __nv_bfloat16* const dst = out_row + 8 * j + 2 * tig;
      if (out_vec_ok) {
        *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(o0, o1);
      } else {
        dst[0] = __float2bfloat16_rn(o0);
        dst[1] = __float2bfloat16_rn(o1);
      }
    }
    if (write_lse && tig == 0) {
      const float lse = l == 0.0f ? INFINITY : (m_run[r] + log2f(l) - kPShift) * kLn2;
      args.lse[(static_cast<int64_t>(batch) * args.heads_q + head) * seqlen_q + row] = lse;
    }
  }
}
