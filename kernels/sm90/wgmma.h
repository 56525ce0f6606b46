// wgmma.h — Hopper warpgroup MMA (wgmma) helpers used by the sm_90a attention kernel (fa_fwd_wgmma.cu):
// shared-memory matrix descriptors, the fences and commit / wait of the async group, and the m64nN
// instructions with their accumulator operand lists written out.
//
// Accumulator layout (per warp w of the warpgroup: rows 16w..16w+15; g = lane / 4, t = lane % 4):
//   d[4j + e] = D[16w + g + 8 (e >> 1)][8j + 2t + (e & 1)],  j = 0..N/8-1.
// RS A fragment (per warp: 16 rows x 32 bytes of K): a0 = (row g, bytes 4t..4t+3 of the k-step),
// a1 = (row g + 8, same), a2 = (row g, bytes 16 + 4t..), a3 = (row g + 8, bytes 16 + 4t..); for
// bf16 / f16 that is k = 2t, 2t+1 / 8 + 2t, 9 + 2t (the mma.sync m16n8k16 A layout).
#pragma once

#include <stdint.h>

// Shared-memory matrix descriptor, 128B swizzle. K-major operands: SBO = 1024 (8 rows of 128 B),
// LBO unused (1). MN-major (bf16 V): LBO = stride between 64-element MN regions, SBO = 1024
// (8 keys of 128 B).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((saddr & 0x3ffffu) >> 4) | (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads/writes of wgmma registers across wgmma issue/wait points.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Operand element types of the wgmmas below.
enum class WgmmaType { kBf16, kF16, kE4m3 };

#define ZYFA_ACC4E "+f"(e[0]), "+f"(e[1]), "+f"(e[2]), "+f"(e[3])
#define ZYFA_ACC8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define ZYFA_ACC64 \
  ZYFA_ACC8(0), ZYFA_ACC8(8), ZYFA_ACC8(16), ZYFA_ACC8(24), ZYFA_ACC8(32), ZYFA_ACC8(40), ZYFA_ACC8(48), ZYFA_ACC8(56)
#define ZYFA_ACC80 ZYFA_ACC64, ZYFA_ACC8(64), ZYFA_ACC8(72)
#define ZYFA_ACC88 ZYFA_ACC80, ZYFA_ACC8(80)
#define ZYFA_ACC96 ZYFA_ACC88, ZYFA_ACC8(88)
#define ZYFA_R64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, " \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, " \
  "%62, %63"
#define ZYFA_R80 ZYFA_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define ZYFA_R88 ZYFA_R80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define ZYFA_R96 ZYFA_R88 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define ZYFA_D64 "{" ZYFA_R64 "}"
#define ZYFA_D80 "{" ZYFA_R80 "}"
#define ZYFA_D88 "{" ZYFA_R88 "}"
#define ZYFA_D96 "{" ZYFA_R96 "}"

// One wgmma with its scale-d predicate from register operand P: INSTR its PTX name and shape, D / ACC the
// accumulator list and its constraints, OPS the A and B operands (register list or descriptor numbers), IMM the
// immediates after the predicate (scale-a, scale-b and, for 16-bit types, the transpose flags), IN the inputs.
#define ZYFA_WGMMA(INSTR, D, ACC, OPS, P, IMM, ...)                                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                              \
               "wgmma.mma_async.sync.aligned." INSTR " " D ", " OPS ", p, " IMM ";\n}\n" : ACC : __VA_ARGS__)
#define ZYFA_SS_IN "l"(desc_a), "l"(desc_b), "r"(scale_d)
#define ZYFA_RS_IN "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(scale_d)

// D (+)= A B with A and B from shared memory, both K-major; N = 128, 160, 192 (bf16, e4m3) or 176 (bf16);
// scale_d = 0 overwrites D.
template <int N, WgmmaType T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  static_assert(T != WgmmaType::kF16, "no f16 SS wgmma is instantiated");
  static_assert(N == 128 || N == 160 || N == 192 || (N == 176 && T == WgmmaType::kBf16), "instantiated N");
  constexpr bool kE4m3 = T == WgmmaType::kE4m3;
  if constexpr (N == 128 && kE4m3) {
    ZYFA_WGMMA("m64n128k32.f32.e4m3.e4m3", ZYFA_D64, ZYFA_ACC64, "%64, %65", 66, "1, 1", ZYFA_SS_IN);
  } else if constexpr (N == 128) {
    ZYFA_WGMMA("m64n128k16.f32.bf16.bf16", ZYFA_D64, ZYFA_ACC64, "%64, %65", 66, "1, 1, 0, 0", ZYFA_SS_IN);
  } else if constexpr (N == 160 && kE4m3) {
    ZYFA_WGMMA("m64n160k32.f32.e4m3.e4m3", ZYFA_D80, ZYFA_ACC80, "%80, %81", 82, "1, 1", ZYFA_SS_IN);
  } else if constexpr (N == 160) {
    ZYFA_WGMMA("m64n160k16.f32.bf16.bf16", ZYFA_D80, ZYFA_ACC80, "%80, %81", 82, "1, 1, 0, 0", ZYFA_SS_IN);
  } else if constexpr (N == 176) {
    ZYFA_WGMMA("m64n176k16.f32.bf16.bf16", ZYFA_D88, ZYFA_ACC88, "%88, %89", 90, "1, 1, 0, 0", ZYFA_SS_IN);
  } else if constexpr (kE4m3) {
    ZYFA_WGMMA("m64n192k32.f32.e4m3.e4m3", ZYFA_D96, ZYFA_ACC96, "%96, %97", 98, "1, 1", ZYFA_SS_IN);
  } else {
    ZYFA_WGMMA("m64n192k16.f32.bf16.bf16", ZYFA_D96, ZYFA_ACC96, "%96, %97", 98, "1, 1, 0, 0", ZYFA_SS_IN);
  }
}

// D (+)= A B, m64n128, A from registers (a0..a3, see above); B from shared memory: bf16 / f16 MN-major (transpose
// flag set), e4m3 K-major (8-bit B has no transpose); scale_d = 0 overwrites D.
template <WgmmaType T>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t desc_b, uint32_t scale_d) {
  if constexpr (T == WgmmaType::kF16) {
    ZYFA_WGMMA("m64n128k16.f32.f16.f16", ZYFA_D64, ZYFA_ACC64, "{%64, %65, %66, %67}, %68", 69, "1, 1, 1", ZYFA_RS_IN);
  } else if constexpr (T == WgmmaType::kE4m3) {
    ZYFA_WGMMA("m64n128k32.f32.e4m3.e4m3", ZYFA_D64, ZYFA_ACC64, "{%64, %65, %66, %67}, %68", 69, "1, 1", ZYFA_RS_IN);
  } else {
    ZYFA_WGMMA("m64n128k16.f32.bf16.bf16", ZYFA_D64, ZYFA_ACC64, "{%64, %65, %66, %67}, %68", 69, "1, 1, 1", ZYFA_RS_IN);
  }
}

// e (+)= A B, m64n8k32 e4m3, A from registers (as wgmma_rs), B K-major from shared memory (e.g. 8 rows of
// ones: the row sums of A); e[0] / e[2]: rows g / g + 8.
__device__ __forceinline__ void wgmma_rs_n8_e4m3(float (&e)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint64_t desc_b, uint32_t scale_d) {
  ZYFA_WGMMA("m64n8k32.f32.e4m3.e4m3", "{%0, %1, %2, %3}", ZYFA_ACC4E, "{%4, %5, %6, %7}, %8", 9, "1, 1", ZYFA_RS_IN);
}

#undef ZYFA_D96
#undef ZYFA_D88
#undef ZYFA_D80
#undef ZYFA_D64
#undef ZYFA_R96
#undef ZYFA_R88
#undef ZYFA_R80
#undef ZYFA_R64
#undef ZYFA_ACC96
#undef ZYFA_ACC88
#undef ZYFA_ACC80
#undef ZYFA_ACC64
#undef ZYFA_ACC8
#undef ZYFA_ACC4E
#undef ZYFA_RS_IN
#undef ZYFA_SS_IN
#undef ZYFA_WGMMA
