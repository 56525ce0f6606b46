// fa_fwd_wgmma: the producer's loads into the 128B-swizzled shared-memory layout (executed by the 128
// threads of the producer warpgroup), and the e4m3 V staging -> Vt transpose / f16 conversion.
// The 128B swizzle: 16-byte chunk c of row r lives at chunk c ^ (r & 7) of a 128-byte row; wider rows are
// split into 128-byte column regions stored one after another, each rows x 128 bytes.
#pragma once

#include <stdint.h>

#include "sm90/fa_fwd_wgmma/config.cuh"
#include "sm90/fa_fwd_wgmma/ptx.cuh"

namespace zyfa_sm90_ws {

// Byte offset of 16-byte chunk c of row r in a tile of `rows` rows (column regions of 128 bytes).
__device__ __forceinline__ uint32_t swz_offset(int rows, int r, int c) {
  return static_cast<uint32_t>((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// 16 bytes from global memory at any (1- or 2-byte aligned) address, as byte loads: the path for
// strides or base pointers that are not 16-byte aligned.
__device__ __forceinline__ uint4 load16_bytes(const uint8_t* p) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<uint32_t>(__ldg(p + 4 * i)) | (static_cast<uint32_t>(__ldg(p + 4 * i + 1)) << 8) |
           (static_cast<uint32_t>(__ldg(p + 4 * i + 2)) << 16) | (static_cast<uint32_t>(__ldg(p + 4 * i + 3)) << 24);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Rows [row0, row0 + ROWS) of a [seq][CHUNKS * 16 bytes] global slab into a swizzled tile; rows
// >= nvalid are zero-filled and never read. Thread t copies chunk c8 = t % 8 of every 128-byte
// region of rows t / 8 + 16 i (so its swizzle phase r & 7 is fixed and its pointers just step).
// vec_ok: cp.async (the caller signals the barrier with cp_async_arrive_noinc); otherwise
// synchronous byte loads + st.shared (the caller fences and arrives).
template <int ROWS, int CHUNKS>
__device__ __forceinline__ void load_tile(uint32_t tile, const uint8_t* g, int64_t row_bytes, int row0, int nvalid,
                                          bool vec_ok, int t) {
  static_assert(ROWS % 16 == 0, "16 rows per pass of 128 threads");
  constexpr int kRegions = (CHUNKS + 7) / 8;
  const int c8 = t & 7;
  const int r0 = t >> 3;
  const uint32_t dst0 = tile + r0 * 128 + ((c8 ^ (r0 & 7)) << 4);
  const uint8_t* const src0 = g + static_cast<int64_t>(row0 + r0) * row_bytes + c8 * 16;
  const int64_t step = 16 * row_bytes;
#pragma unroll
  for (int reg = 0; reg < kRegions; ++reg) {
    if (CHUNKS % 8 != 0 && reg * 8 + c8 >= CHUNKS) continue;  // last region only partly used
    const uint8_t* src = src0 + reg * 128;
    if (vec_ok && row0 + ROWS <= nvalid) {  // whole tile in range: no per-row bounds selects
#pragma unroll
      for (int i = 0; i < ROWS / 16; ++i) {
        cp_async16(dst0 + reg * ROWS * 128 + i * 16 * 128, src, 16u);
        src += step;
      }
    } else if (vec_ok) {
#pragma unroll
      for (int i = 0; i < ROWS / 16; ++i) {
        const bool valid = row0 + r0 + 16 * i < nvalid;
        cp_async16(dst0 + reg * ROWS * 128 + i * 16 * 128, valid ? src : g, valid ? 16u : 0u);
        src += step;
      }
    } else {
#pragma unroll 1
      for (int i = 0; i < ROWS / 16; ++i) {
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r0 + 16 * i < nvalid) v = load16_bytes(src);
        st_shared_v4(dst0 + reg * ROWS * 128 + i * 16 * 128, v);
        src += step;
      }
    }
  }
}

// 4x4 byte transpose: out[b] = {c0.byte b, c1.byte b, c2.byte b, c3.byte b}.
__device__ __forceinline__ void transpose4x4(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t (&out)[4]) {
  const uint32_t x01lo = __byte_perm(c0, c1, 0x5140);
  const uint32_t x01hi = __byte_perm(c0, c1, 0x7362);
  const uint32_t x23lo = __byte_perm(c2, c3, 0x5140);
  const uint32_t x23hi = __byte_perm(c2, c3, 0x7362);
  out[0] = __byte_perm(x01lo, x23lo, 0x5410);
  out[1] = __byte_perm(x01lo, x23lo, 0x7632);
  out[2] = __byte_perm(x01hi, x23hi, 0x5410);
  out[3] = __byte_perm(x01hi, x23hi, 0x7632);
}

// Staging buffer of V rows (kVStaged): row r at r * 128, its 16-byte chunk c at c ^ stg_swz(r). The
// ldmatrix transposer reads 8 consecutive rows of one chunk per matrix: r & 7 spreads them. The f16
// conversion (kPvF16) reads 4 rows x 8 chunks per warp: ((r >> 4) ^ (r >> 1)) & 7 puts them on distinct
// 16-byte positions.
__device__ __forceinline__ int stg_swz(int r) {
  return !kPvF16 ? r & 7 : ((r >> 4) ^ (r >> 1)) & 7;
}

// V rows [key0, key0 + kTileN) -> staging (cp.async when vec_ok, else byte loads + st.shared); keys
// >= seqlen_k are zeros. Thread t copies chunk t % 8 of rows t / 8 + 16 i.
__device__ __forceinline__ void load_v_staging(uint32_t stg, const uint8_t* g, int64_t row_bytes, int key0,
                                               int seqlen_k, bool vec_ok, int t) {
  static_assert(!kVStaged || kVRowBytes == 128, "one staging row is one 128-byte V row");
  const int c8 = t & 7;
  const int r0 = t >> 3;
  const uint8_t* src = g + static_cast<int64_t>(key0 + r0) * row_bytes + c8 * 16;
  const int64_t step = 16 * row_bytes;
  if (vec_ok && key0 + kTileN <= seqlen_k) {  // whole block in range: no per-row bounds selects
#pragma unroll
    for (int i = 0; i < kTileN / 16; ++i) {
      const int r = r0 + 16 * i;
      cp_async16(stg + r * 128 + ((c8 ^ stg_swz(r)) << 4), src, 16u);
      src += step;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kTileN / 16; ++i) {
    const int r = r0 + 16 * i;
    const uint32_t dst = stg + r * 128 + ((c8 ^ stg_swz(r)) << 4);
    const bool valid = key0 + r < seqlen_k;
    if (vec_ok) {
      cp_async16(dst, valid ? src : g, valid ? 16u : 0u);
    } else {
      st_shared_v4(dst, valid ? load16_bytes(src) : make_uint4(0u, 0u, 0u, 0u));
    }
    src += step;
  }
}

// e4m3 V: wgmma takes 8-bit B only K-major, i.e. Vt[d][key]. Keys are permuted inside each 16-key group
// (position 16h + 4t + i <- key 16h + 2t + (i&1) + 8(i>>1)) so that the RS A fragment of P.V is exactly the
// bytes a lane holds from its own S accumulators (one permutation applied to both P and V leaves P.V unchanged).
// The staging -> Vt transpose by ldmatrix.trans / stmatrix: producer warp w owns d 32 w .. 32 w + 31 (staging chunks
// 2 w, 2 w + 1) and walks the key groups h (16 keys each). ldmatrix block m (lanes 8 m .. 8 m + 7 give its
// rows): keys 16 h + 8 (m & 1) + 0..7 of chunk 2 w + (m >> 1). Lane t then holds, for dp = 8 chunk + t / 4
// and q = t % 4, the words {V[k][2dp], V[k][2dp+1], V[k+1][2dp], V[k+1][2dp+1]} with k = 16 h + 2 q
// (block 0 / 2) and k + 8 (block 1 / 3); PRMT 0x6420 / 0x7531 give the Vt words of d = 2dp / 2dp + 1 at
// quad q of chunk h. stmatrix block j row i (from lane 8 j + i) is Vt row d = 2 (dp0 + i) + e with e = 0
// for i < 4 in blocks 0 / 2 and e = 1 in blocks 1 / 3 (the other way round for i >= 4), so that each
// block's 8 rows fall on 8 distinct 16-byte positions of the swizzle (no bank conflicts); lane t's
// registers follow the same rule through its PRMT selectors.
constexpr int kVtGroups = kTileN / 16;  // 16-key groups per V block

__device__ __forceinline__ void transpose_staging_ldsm(uint32_t vt, uint32_t stg, int t128) {
  static_assert(kDV == 128, "4 producer warps x 32 d");
  const int lane = t128 & 31, w = t128 >> 5;
  const int m = lane >> 3, ii = lane & 7;
  // ldmatrix row address of this lane, relative to key group h's 16 rows (ii = key & 7 for the swizzle).
  const uint32_t ld_off = static_cast<uint32_t>((8 * (m & 1) + ii) * 128 + (((2 * w + (m >> 1)) ^ ii) << 4));
  // stmatrix row of this lane: Vt row d, whose 16-byte position in chunk h is (h & 7) ^ (d & 7).
  const int d = 2 * (16 * w + 8 * (m >> 1) + ii) + ((ii >= 4) != ((m & 1) != 0) ? 1 : 0);
  const uint32_t st_row = vt + static_cast<uint32_t>(d * 128);
  const uint32_t d7 = static_cast<uint32_t>(d & 7);
  const bool lo = (lane >> 2) < 4;  // this lane's stmatrix row index (lane / 4) in the first half
  const uint32_t sel0 = lo ? 0x6420u : 0x7531u, sel1 = lo ? 0x7531u : 0x6420u;
#pragma unroll
  for (int h = 0; h < kVtGroups; ++h) {
    uint32_t r[4];
    ldsm_x4_trans(r, stg + static_cast<uint32_t>(h * 16 * 128) + ld_off);
    const uint32_t addr = st_row + static_cast<uint32_t>((h >> 3) * kVtRows * 128) + ((static_cast<uint32_t>(h & 7) ^ d7) << 4);
    stmatrix_x4(addr, __byte_perm(r[0], r[1], sel0), __byte_perm(r[0], r[1], sel1), __byte_perm(r[2], r[3], sel0),
                __byte_perm(r[2], r[3], sel1));
  }
}

// kPvF16: staging -> the f16 V stage in the bf16 kernel's layout (keys as rows, d in 2 swizzled 128-byte
// regions of 64 columns; swz_offset). Thread t converts chunk c8 = t % 8 (16 e4m3 = d 16 c8 .. + 15) of
// rows t / 8 + 16 i into f16 chunks 2 c8, 2 c8 + 1 (exact: e4m3 values are f16 values). A warp's reads
// cover 8 chunks of 4 rows (stg_swz keeps them on distinct positions) and its 16-byte stores hit each
// bank group 4 times: the minimum for 512 bytes.
__device__ __forceinline__ void convert_staging(uint32_t v, uint32_t stg, int t128) {
  const int c8 = t128 & 7;
#pragma unroll 4
  for (int i = 0; i < kTileN / 16; ++i) {
    const int r = (t128 >> 3) + 16 * i;
    const uint4 w = ld_shared_v4(stg + r * 128 + ((c8 ^ stg_swz(r)) << 4));
    uint4 lo, hi;
    e4m3x4_to_f16x2x2(w.x, lo.x, lo.y);
    e4m3x4_to_f16x2x2(w.y, lo.z, lo.w);
    e4m3x4_to_f16x2x2(w.z, hi.x, hi.y);
    e4m3x4_to_f16x2x2(w.w, hi.z, hi.w);
    st_shared_v4(v + swz_offset(kTileN, r, 2 * c8), lo);
    st_shared_v4(v + swz_offset(kTileN, r, 2 * c8 + 1), hi);
  }
}

}  // namespace zyfa_sm90_ws
