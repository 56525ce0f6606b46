/* Self-test of one sm90a variant of fa_fwd_simple.cu on an H100/H200 (compute capability 9.0).
 *
 * Built with the same -D macros as the kernel (tools/device/sm90_selftest.sh does it for every
 * sm90a entry of kernels/variants.bzl); it includes the kernel source, launches it through the
 * launch contract (grid (ceil(sq/tile_m), heads_q, batch), dynamic smem raised first) and checks:
 *   - every output element of rows < seqlen_q is written and finite (outputs are poisoned with NaN
 *     before the launch); padding between rows/heads of `out` and the lse guard stay untouched;
 *   - relative L2 error against the CONTRACT reference (below) is small:
 *       bf16 <= 5e-3: both sides round P to bf16 the same way; what is left is the bf16 rounding
 *            of the output (~1.1e-3 relative L2) and fp32 summation order;
 *       e4m3 <= 2e-2: the same e4m3 codes except rare rounding ties (device exp2f / tensor-core
 *            accumulation order vs host float64 dot products move a value across a code boundary),
 *            plus the bf16 output rounding. A layout or masking bug gives errors of order 0.1..1;
 *   - relative L2 error against a plain float64 softmax on the dequantised inputs is at most
 *     2 x (contract reference's own error) + 4e-3 (FA3's rule: no worse than the numerics allow);
 *   - lse: +inf exactly where the reference has no visible key; elsewhere |kernel - contract| max
 *     <= 1e-3 (bf16) / 0.07 (e4m3: one flipped code of a large p moves the rounded row sum by up to
 *     6 %), mean <= 1e-4 / 3e-3; |kernel - float64 lse| max <= 2e-3 (bf16) / 0.1 (e4m3: e4m3 P is
 *     up to 6.25 % off per element, lean P's codes sit up to 6.1 % above 2^x);
 *   - a second launch gives bitwise identical out and lse (no atomics).
 * The harness (inputs, references, launch, checks) is kernels/sm90/test_harness.cu, shared with
 * test_fa_fwd_wgmma.cu; the thresholds below are this kernel's Tolerances.
 * Contract reference: the ZYFA numerics exactly (per-block online softmax in base 2, fp32 t, m,
 * alpha, exp2f, e4m3 RNE/satfinite or the lean FMA code, P fed to P.V rounded as the kernel does),
 * with S = q.k computed in float64 and rounded to fp32 once, and the P.V and row sums accumulated in
 * float64 (an order-free version of the fp32 accumulation).
 * Exit status 0 when every case passes, 1 when a check fails, 2 on a CUDA or setup error.
 */
#include "sm90/fa_fwd_simple.cu"

#define ZYFA_TEST_KERNEL_NS zyfa_sm90_simple  // the kernel the harness tests
#include "sm90/test_harness.cu"

namespace {

// The thresholds of the header comment (the same for every case of this kernel).
Tolerances case_tolerances(const Case&) {
  return {kFp8 ? 2e-2 : 5e-3, kFp8 ? 0.07 : 1e-3, kFp8 ? 3e-3 : 1e-4};
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("self-test of %s: dtype %s, p %s, d_qk %d, d_v %d, tile %dx%d, %d threads, smem %d B\n",
              ZYFA_STR(ZYFA_KERNEL_NAME), kFp8 ? "e4m3fn" : "bf16", kFp8 ? (kLeanP ? "lean" : "exact") : "-",
              kDQk, kDV, kTileM, kTileN, kThreads, kSmemBytes);
  const Case cases[] = {
      {"causal b2 s256 GQA 4/2", 2, 256, 256, 4, 2, true, true, kContiguous, 1.0f},
      {"causal b2 s200 (ragged)", 2, 200, 200, 4, 2, true, true, kContiguous, 1.0f},
      {"causal b2 s333 padded strides", 2, 333, 333, 4, 2, true, true, kPadded, 1.0f},
      {"causal sq100 sk300", 2, 100, 300, 4, 2, true, true, kContiguous, 1.0f},
      {"causal sq300 sk100 (empty rows)", 2, 300, 100, 4, 2, true, true, kContiguous, 1.0f},
      {"non-causal sq200 sk333", 2, 200, 333, 4, 2, false, true, kContiguous, 1.0f},
      {"causal s150 misaligned strides", 1, 150, 150, 4, 2, true, true, kMisaligned, 1.0f},
      {"causal s256 MQA 4/1 sharp (q x4)", 1, 256, 256, 4, 1, true, true, kContiguous, 4.0f},
      {"causal sq65 sk1 (one visible key)", 1, 65, 1, 2, 2, true, true, kContiguous, 1.0f},
      {"causal sq1 sk77 no lse", 1, 1, 77, 2, 1, true, false, kContiguous, 1.0f},
  };
  const int n_cases = static_cast<int>(sizeof(cases) / sizeof(cases[0]));
  if (kFp8 && !check_e4m3_encoder()) {
    std::printf("0 passed, 1 failed\n");
    return 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "--refs-only") == 0) return refs_only(cases, n_cases);
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  if (prop.major != 9 || prop.minor != 0) {
    std::fprintf(stderr, "this sm_90a build needs a compute capability 9.0 GPU\n");
    return 2;
  }
  CHECK_CUDA(cudaFuncSetAttribute(ZYFA_KERNEL_NAME, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));

  int passed = 0, failed = 0;
  uint32_t seed = 1234;
  for (int i = 0; i < n_cases; ++i) {
    if (run_case(cases[i], seed++, case_tolerances(cases[i]))) ++passed; else ++failed;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
