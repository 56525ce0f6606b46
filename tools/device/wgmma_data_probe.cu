// Does the Hopper tensor pipe's speed depend on the operand values? A microbenchmark for the sixteenth
// session's open question (kernels/sm90/NOTES.md, "Sixteenth session calls 2-6"): ZYFA's lean FP8 and BF16
// d=128 kernels take 11-20% more cycles on model-like inputs than on Gaussian ones, exact FP8 (whose MUFU
// phase would hide a slower tensor pipe) does not.
//
// Every SM runs one CTA of two warpgroups (as the attention kernels' two consumers), each issuing a long chain
// of m64n128 wgmmas (bf16 k16 or e4m3 k32) from shared memory (SS, like S = Q K^T) or with A from registers
// (RS, like P.V), four k-steps per commit group and one group in flight, for about a second per case. The
// operand bytes come from one of several value patterns; the layout is irrelevant here (any 128-byte-swizzled
// reading of i.i.d. values draws from the same distribution). Printed per case: cycles per wgmma per
// warpgroup (clock64, the SM's own cycles), TFLOP/s over the whole grid, and the implied SM clock.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernels tools/device/wgmma_data_probe.cu -o /tmp/probe
//   /tmp/probe [seconds per case, default 1.0] [TILES_DIR WORKLOAD...]
// With TILES_DIR, each WORKLOAD also runs on operand bytes captured from that workload's real q, k, v and P
// (python3 tools/device/operand_tiles.py TILES_DIR WORKLOAD...).
//
// Equal cycles across patterns: the tensor pipe is data-blind and the attention kernels' slowdown is theirs.
// More cycles for some pattern: the pattern, not the kernel, costs (power or current management inside the
// SM), and the kernels can only hide it.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sm90/wgmma.h"

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

constexpr int kATileBytes = 64 * 128;   // one warpgroup's A: 64 rows x 128 bytes (K-major, 128B swizzle)
constexpr int kBTileBytes = 128 * 128;  // B: 128 rows (n) x 128 bytes
constexpr int kSmemBytes = 2 * kATileBytes + kBTileBytes + 1024;
constexpr int kThreads = 256;
constexpr int kKSteps = 4;  // 128 bytes of K per row: 4 k-steps of 32 bytes

// One CTA per SM; each warpgroup issues `iters` commit groups of kKSteps wgmmas on its own A and the shared B.
template <bool kFp8, bool kRs>
__global__ void __launch_bounds__(kThreads, 1) probe(const uint8_t* a_src, const uint8_t* b_src, int iters,
                                                     long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  for (int i = threadIdx.x * 16; i < kSmemBytes - 1024; i += kThreads * 16) {
    const uint8_t* src = i < 2 * kATileBytes ? a_src + i : b_src + (i - 2 * kATileBytes);
    *reinterpret_cast<uint4*>(base + i) = *reinterpret_cast<const uint4*>(src);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const uint32_t a_addr = static_cast<uint32_t>(__cvta_generic_to_shared(base + wg * kATileBytes));
  const uint32_t b_addr = static_cast<uint32_t>(__cvta_generic_to_shared(base + 2 * kATileBytes));
  const uint64_t da = make_desc(a_addr, 16, 1024), db = make_desc(b_addr, 16, 1024);
  constexpr WgmmaType kType = kFp8 ? WgmmaType::kE4m3 : WgmmaType::kBf16;
  uint32_t a_regs[kKSteps][4];  // RS: each thread's A words, read once from its warpgroup's A bytes
  for (int k = 0; k < kKSteps; ++k)
    for (int r = 0; r < 4; ++r)
      a_regs[k][r] = reinterpret_cast<const uint32_t*>(base + wg * kATileBytes)[(threadIdx.x % 128) * 16 + k * 4 + r];
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      if constexpr (kRs) {
        wgmma_rs<kType>(d, a_regs[k][0], a_regs[k][1], a_regs[k][2], a_regs[k][3], db + 2 * k, 1u);
      } else {
        wgmma_ss<128, kType>(d, da + 2 * k, db + 2 * k, 1u);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  const long long t1 = clock64();
  float acc = 0.0f;
  for (int i = 0; i < 64; ++i) acc += d[i];
  if (acc == 12345.678f) sink[threadIdx.x] = acc;  // keeps the chain live; never true in practice
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 2 + wg] = t1 - t0;
}

// ------------------------------------------------------------------------------------------------- host
struct Pattern {
  const char* name;
  const char* what;
};
const Pattern kPatterns[] = {
    {"gaussian", "i.i.d. N(0, 1)"},
    {"zeros", "all zero"},
    {"tiny", "N(0, 1) * 2^-11 (BF16 P after an attention sink; in e4m3 the per-tensor scale undoes it)"},
    {"outliers", "N(0, 1), the first 4 of every 64 elements +12 (K's outlier channels)"},
    {"sparse", "N(0, 1) on 10% of the elements, zero elsewhere"},
};

// Operand bytes captured from real attention inputs (tools/device/operand_tiles.py): DIR/W-DT-OP.a.bin and
// .b.bin for workload W, DT bf16 / e4m3, OP ss (A = Q rows, B = K rows) / rs (A = P rows, B = V rows).
std::vector<uint8_t> read_tile(const std::string& path, size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::vector<uint8_t> out(bytes);
  if (f == nullptr || std::fread(out.data(), 1, bytes, f) != bytes) {
    std::fprintf(stderr, "%s: cannot read %zu bytes\n", path.c_str(), bytes);
    std::exit(1);
  }
  std::fclose(f);
  return out;
}

// n values of one pattern, then encoded: bf16 (2 bytes) or e4m3 with a per-tensor power-of-two scale
// (which undoes any overall factor: "tiny" equals "gaussian" in e4m3).
std::vector<uint8_t> encode(const char* pattern, size_t bytes, bool fp8, uint32_t seed) {
  const size_t n = fp8 ? bytes : bytes / 2;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> x(n);
  const std::string p = pattern;
  for (size_t i = 0; i < n; ++i) {
    float v = normal(rng);
    if (p == "zeros") v = 0.0f;
    if (p == "tiny") v = std::ldexp(v, -11);
    if (p == "outliers" && (i % 64) < 4) v += 12.0f;
    if (p == "sparse" && uni(rng) > 0.1f) v = 0.0f;
    x[i] = v;
  }
  std::vector<uint8_t> out(bytes);
  if (fp8) {
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float scale = amax > 0.0f ? std::exp2(std::floor(std::log2(448.0f / amax))) : 1.0f;
    for (size_t i = 0; i < n; ++i) {
      const __nv_fp8_e4m3 q(x[i] * scale);
      out[i] = *reinterpret_cast<const uint8_t*>(&q);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const __nv_bfloat16 b = __float2bfloat16(x[i]);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

// A pattern name, or "file:W" for the captured tiles of workload W in `tiles_dir`.
template <bool kFp8, bool kRs>
void run_case(const std::string& pattern, const std::string& tiles_dir, double seconds, int sms, int clock_khz) {
  std::vector<uint8_t> a, b;
  if (pattern.rfind("file:", 0) == 0) {
    const std::string stem = tiles_dir + "/" + pattern.substr(5) + (kFp8 ? "-e4m3" : "-bf16") + (kRs ? "-rs" : "-ss");
    a = read_tile(stem + ".a.bin", 2 * kATileBytes);
    b = read_tile(stem + ".b.bin", kBTileBytes);
  } else {
    a = encode(pattern.c_str(), 2 * kATileBytes, kFp8, 1);
    b = encode(pattern.c_str(), kBTileBytes, kFp8, 2);
  }
  uint8_t *da, *db;
  long long* dcyc;
  float* dsink;
  CHECK(cudaMalloc(&da, a.size()));
  CHECK(cudaMalloc(&db, b.size()));
  CHECK(cudaMalloc(&dcyc, sizeof(long long) * 2 * sms));
  CHECK(cudaMalloc(&dsink, sizeof(float) * kThreads));
  CHECK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
  auto kernel = probe<kFp8, kRs>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int iters = 20000;
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  kernel<<<sms, kThreads, kSmemBytes>>>(da, db, iters, dcyc, dsink);  // warm-up
  CHECK(cudaDeviceSynchronize());
  std::vector<double> cyc_per_mma, tflops;
  double elapsed = 0.0;
  while (elapsed < seconds) {
    CHECK(cudaEventRecord(e0));
    kernel<<<sms, kThreads, kSmemBytes>>>(da, db, iters, dcyc, dsink);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    elapsed += ms * 1e-3;
    std::vector<long long> cyc(2 * sms);
    CHECK(cudaMemcpy(cyc.data(), dcyc, sizeof(long long) * cyc.size(), cudaMemcpyDeviceToHost));
    double mean = 0.0;
    for (long long c : cyc) mean += static_cast<double>(c);
    mean /= static_cast<double>(cyc.size());
    cyc_per_mma.push_back(mean / (static_cast<double>(iters) * kKSteps));
    const double flops = 2.0 * 64 * 128 * (kFp8 ? 32 : 16) * kKSteps * static_cast<double>(iters) * 2 * sms;
    tflops.push_back(flops / (ms * 1e-3) / 1e12);
  }
  // The second half of the case: the clock state the card settles into under this load.
  auto median_tail = [](std::vector<double> v) {
    v.erase(v.begin(), v.begin() + static_cast<long>(v.size() / 2));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double c = median_tail(cyc_per_mma), t = median_tail(tflops);
  const double mhz = t * 1e12 / (2.0 * 64 * 128 * (kFp8 ? 32 : 16) * 2 * sms / c) / 1e6;
  std::printf("%-5s %-2s %-9s %8.1f cycles/wgmma  %7.1f TFLOP/s  ~%5.0f MHz  (%zu launches; max %d MHz)\n",
              kFp8 ? "e4m3" : "bf16", kRs ? "RS" : "SS", pattern.c_str(), c, t, mhz, tflops.size(), clock_khz / 1000);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dcyc));
  CHECK(cudaFree(dsink));
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  const std::string tiles_dir = argc > 2 ? argv[2] : "";  // then the workloads whose tiles it holds
  std::vector<std::string> names;
  for (const Pattern& p : kPatterns) names.push_back(p.name);
  for (int i = 3; i < argc; ++i) names.push_back(std::string("file:") + argv[i]);
  int dev = 0, sms = 0, clock_khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  for (const Pattern& p : kPatterns) std::printf("pattern %-9s %s\n", p.name, p.what);
  for (int i = 3; i < argc; ++i) std::printf("pattern file:%s  tiles of %s from %s\n", argv[i], argv[i], tiles_dir.c_str());
  for (const std::string& n : names) run_case<false, false>(n, tiles_dir, seconds, sms, clock_khz);
  for (const std::string& n : names) run_case<false, true>(n, tiles_dir, seconds, sms, clock_khz);
  for (const std::string& n : names) run_case<true, false>(n, tiles_dir, seconds, sms, clock_khz);
  for (const std::string& n : names) run_case<true, true>(n, tiles_dir, seconds, sms, clock_khz);
  return 0;
}
