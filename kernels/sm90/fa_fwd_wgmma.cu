/* ZYFA sm90a warp-specialised ("ws") causal-prefill attention forward: BF16, and FP8 (e4m3fn in,
 * BF16 out), built on wgmma (HGMMA / QGMMA in SASS), raw PTX (no CuTe: see "Why raw PTX" below).
 * Same ABI, launch contract and numerics contract as fa_fwd_simple.cu (DESIGN.md "Numerics of the
 * FP8 path"): online softmax in base 2 over KV blocks of ZYFA_TILE_N keys in increasing order;
 * BF16: P rounded to bf16 for P.V, row sum of the fp32 p; FP8: P scaled by 2^8, exact (exp2 +
 * RNE/satfinite) or lean (one FMA to the e4m3 code), row sum of the e4m3-rounded values;
 * out = acc * (v_descale / l) (the contract's acc / l * v_descale to ~2 ulp of fp32).
 *
 * Block structure (FA3-class; grid (ceil(seqlen_q / 128), heads_q, batch), 384 threads):
 *   warpgroup 0  producer: loads Q once, then K_j and V_j for every visible KV block into a ring of
 *                kStages shared-memory stages; setmaxnreg.dec to kProducerRegs.
 *   warpgroups 1, 2  consumers: 64 query rows each (tile_m = 128); setmaxnreg.inc to kConsumerRegs.
 *                S = Q K^T with wgmma SS (A = Q, B = K, both K-major in smem), O += P V with wgmma RS
 *                (A = P from registers, straight from the S accumulators).
 * Loads: the ABI passes raw pointers and strides, and a tensor map can only be built on the host,
 *   so TMA tensor copies are out; 1D cp.async.bulk cannot write the 128-byte swizzle that wgmma
 *   wants (it copies contiguous bytes). So the producer warpgroup issues plain 16-byte cp.async
 *   (zero-fill past seqlen) straight into the swizzled layout and signals a full-mbarrier with
 *   cp.async.mbarrier.arrive.noinc (one arrival per producer thread, counted at init); consumers
 *   wait on it and issue wgmma (as CUTLASS's cp.async + GMMA mainloops do, no consumer-side proxy
 *   fence). Strides or base pointers that are not 16-byte aligned take a byte-load path (uniform
 *   per launch): st.shared, fence.proxy.async, mbarrier.arrive.
 * FP8 V: wgmma takes 8-bit B only K-major, i.e. V^T. The producer cp.asyncs V rows into a staging
 *   buffer one block ahead (ZYFA_WS_VSTAGE=1, default; 0 = 16-byte global loads straight into
 *   registers, 7-15% slower), then byte-transposes them (ld.shared, prmt) into Vt[d][key] in the
 *   swizzled layout, permuting keys inside each 16-key group (position 16h + 4t + i <- key 16h + 2t +
 *   (i&1) + 8(i>>1)) so that the RS A fragment of P.V is exactly the bytes a lane holds from its own
 *   S accumulators (a permutation of the keys applied to both P and V leaves P.V unchanged).
 * FP8 row sums: each thread decodes its packed P bytes to f16 pairs and sums them with mma.sync
 *   m16n8k16 f16 x ones -> fp32, giving the fp32 sum of exactly the e4m3 P fed to P.V (see kOTiles),
 *   right after P_j V_j has finished. Lean P instead takes them on the FP8 tensor pipe inside the
 *   P.V group (ones rows in Vt, or one shared ones region at 192/128; a fresh per-block sum through the FP8
 *   adder, 2-6e-4 low) and makes its codes as f16 subnormal pairs (ZYFA_WS_LSUM 6, ZYFA_WS_LEAN_F16; runs 47,
 *   49 and 52: +4..9% each).
 *   ZYFA_WS_LSUM selects the method; the others are measured there.
 * Pipelines: separate K and V rings (full + empty mbarrier per stage), so K_{j+1} is released as
 *   soon as S_{j+1} is computed while V_j is still being read.
 * Intra-warpgroup overlap (FA3): iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} as two
 *   wgmma groups, waits for the first only, runs the softmax of S_j while P_{j-1} V_{j-1} runs, then
 *   waits for it, rescales O and packs P_j (P registers are written only outside any wgmma's
 *   flight, which keeps ptxas from serialising the wgmmas). ZYFA_WS_OVERLAP=0: wait at once (debug).
 * Ping-pong (FA3): the two consumer warpgroups take turns issuing their wgmmas (named barriers 1
 *   and 2), so one runs its softmax while the other's GEMMs occupy the tensor cores.
 *   ZYFA_WS_PINGPONG=0 turns it off (debug; measured within 1% either way on the H200).
 * Causal blocks wholly past the tile's last row are never loaded; per-element masks only in blocks
 *   that cross the diagonal or seqlen_k. blockIdx.x is mapped to q tiles in reverse, so the
 *   longest causal rows of a head start first (the grid rule itself is unchanged).
 * Shared-memory layout (all tiles 1024-byte aligned; the 128B swizzle: 16-byte chunk c of row r
 *   lives at chunk c ^ (r & 7) of a 128-byte row; wider rows are split into 128-byte column regions
 *   stored one after another, each rows x 128 bytes):
 *     Q     kTileM rows x kQkRowBytes               (regions of 128 rows x 128 B)
 *     K[s]  kTileN rows x kQkRowBytes, s < kStages  (K-major B of S = Q K^T)
 *     V[s]  bf16: kTileN key rows x 256 B  (MN-major B of O = P V, wgmma transpose flag)
 *           e4m3: Vt kDV rows (+ 8 rows of ones: ZYFA_WS_LSUM 6, no ONES_REGION) x kTileN key bytes (K-major B),
 *           then 2 staging buffers (none with the V pre-pass)
 *     mbarriers (128 B), plus 1024 B of slack to align the base at run time.
 * No atomics: deterministic.
 * Why raw PTX: the pieces needed are few (one smem layout, two descriptor forms, three wgmma
 *   shapes), the hand layouts are checked on the GPU by the test's layout probe, and building CuTe
 *   here (2 cores) would have cost more time than it saved; CuTe atoms remain an option.
 *
 * Build macros: ZYFA_KERNEL_NAME, ZYFA_DTYPE_E4M3, ZYFA_D_QK, ZYFA_D_V, ZYFA_TILE_M (128),
 * ZYFA_TILE_N (128 or 192 in the variants; 160, bf16 also 176, as experiments: see kSAcc), ZYFA_THREADS (384),
 * ZYFA_SMEM_BYTES, ZYFA_LEAN_P, ZYFA_WS_PV_F16 (p_mode "f16": P.V in f16); optional ZYFA_WS_OVERLAP,
 * ZYFA_WS_PINGPONG (default 1), ZYFA_WS_STAGES (ring depth), ZYFA_WS_VSTAGE (e4m3 V path),
 * ZYFA_WS_FAST_SOFTMAX, ZYFA_WS_RESCALE_SKIP, ZYFA_WS_PREGS, ZYFA_WS_CREGS, ZYFA_WS_OPROMOTE,
 * ZYFA_WS_LSUM, ZYFA_WS_MAXTREE, ZYFA_WS_ORDER, ZYFA_WS_SMX2, ZYFA_WS_MAX3, ZYFA_WS_MAX3_LB,
 * ZYFA_WS_RESCALE_EARLY, ZYFA_WS_LOADFAST, ZYFA_WS_PERSISTENT (persistent CTAs: a different grid), ZYFA_WS_LPT_PAIRS,
 * ZYFA_WS_PSCHED, ZYFA_WS_TMA, ZYFA_WS_LEAN_SAT, ZYFA_WS_VT_LDSM, ZYFA_WS_VPRE, ZYFA_WS_BOUND (timing experiments and schedule
 * switches; see their definitions).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/warp_ptx.h"
#include "sm90/wgmma.h"

#if !defined(ZYFA_KERNEL_NAME) || !defined(ZYFA_DTYPE_E4M3) || !defined(ZYFA_D_QK) || \
    !defined(ZYFA_D_V) || !defined(ZYFA_TILE_M) || !defined(ZYFA_TILE_N) ||              \
    !defined(ZYFA_THREADS) || !defined(ZYFA_SMEM_BYTES) || !defined(ZYFA_LEAN_P)
#error "fa_fwd_wgmma.cu needs -DZYFA_KERNEL_NAME, ZYFA_DTYPE_E4M3, ZYFA_D_QK, ZYFA_D_V, ZYFA_TILE_M, ZYFA_TILE_N, ZYFA_THREADS, ZYFA_SMEM_BYTES, ZYFA_LEAN_P"
#endif
#ifndef ZYFA_WS_OVERLAP
#define ZYFA_WS_OVERLAP 1
#endif
#ifndef ZYFA_WS_PINGPONG
#define ZYFA_WS_PINGPONG 1
#endif
#ifndef ZYFA_WS_STAGES
#define ZYFA_WS_STAGES 0  // 0: the default depth below
#endif
#ifndef ZYFA_WS_FAST_SOFTMAX
#define ZYFA_WS_FAST_SOFTMAX 1  // 0: always the literal contract form (t = S C, then exp2(t - m)); timing experiments
#endif
#ifndef ZYFA_WS_RESCALE_SKIP
#define ZYFA_WS_RESCALE_SKIP 1  // skip the O rescale of a warp when no row's max moved
#endif
#ifndef ZYFA_WS_STALE_TAU
// Stale row max (variants.bzl "stale_tau", docs/numerics.md; FlashAttention-4's rescale threshold, per
// row; BF16 variants 8.0 since run 36, BF16 d128 +2.7% at 2K-8K, 16K +3..9%; FP8 0.75 gained nothing and
// moved the codes off the contract's, so FP8 keeps 0): the fast softmax
// keeps a row's running max m unless the block's max exceeds it by more than tau (log2 units), so P =
// 2^(t - m (+ 8)) may reach 2^tau times its usual top and alpha stays exactly 1 (the O rescale of a warp
// is skipped when all its rows kept m, ZYFA_WS_RESCALE_SKIP). Exact in real arithmetic (l and O share m;
// lse = m + log2 l); in floating point only the binade of each P moves. Bounds: BF16 any tau (8:
// P <= 256); FP8 P <= 448 needs tau < 0.8 (exact: satfinite; lean: code 120 + 8 tau <= 126, which
// LEAN_SAT's t <= 128 argument covers). 0: off (the exact running max of the contract).
#define ZYFA_WS_STALE_TAU 0
#endif
#ifndef ZYFA_WS_ORDER
// Block order (experiment, 2026-12-01, not yet measured). 0 (default): blockIdx.x reversed inside each
// head (the longest causal q tiles of a head first, heads one after another). 1: global longest-first:
// the linear block id (x fastest) is remapped so that rank r = lin / (heads * batch) takes q tile
// ceil(sq / 128) - 1 - r of (head, batch) pair lin % (heads * batch): every head's longest tiles start
// before any head's shorter ones, the shortest tiles of all heads run last (LPT order for the causal
// tail). 2: the same inside groups of (head, batch) pairs whose K + V fit in about 32 MB of L2
// (whole GQA groups), groups one after another (L2 reuse of K/V at long seqlen, LPT order within).
// Same grid, no atomics, deterministic; the kernel only reinterprets blockIdx.
// Run 5 (H200): ORDER 1 BF16 / FP8 2K -4 / -1%, 4K -5 / 0%, 8K (b1, 16 pairs) +8 / +9%, 16K (64 pairs)
// -2.4%; ORDER 2 about the same. 3 (run 6 experiment): ORDER 1 when heads * batch <= ZYFA_WS_LPT_PAIRS
// (32 then, 16 since run 21; uniform per launch), else ORDER 0: the 8K gain without the losses.
// Run 6 (H200): ORDER 3 FP8 exact d128 2K / 4K / 8K / 16K 0.991 / 0.998 / 1.088 / 1.007: the default
// since then, for BF16 too (where it is ORDER 1 exactly at run 5's +8% 8K shape and ORDER 0 elsewhere).
#define ZYFA_WS_ORDER 3
#endif
#ifndef ZYFA_WS_LPT_PAIRS
// At most this many (head, batch) pairs: ORDER 1 / rank-major persistent items (LPT across pairs); more:
// ORDER 0 / pair-major (L2 reuse of one head's K and V). 32 until run 21 (H200, seventh session), where
// 16 moved only b2 s16K h16 (32 pairs) at 192/128 and won there: BF16 1.125, FP8 lean 1.078, FP8 exact
// 0.998 (its default's two passes 823 / 871 TFLOP/s, 16's 865 / 870), the other shapes 0.992..1.010.
// Rank-major streams every pair's K and V at once (168 MB at that shape against 50 MB of L2).
// b1 s8K h16 (16 pairs, run 5's +8% shape) keeps ORDER 1.
#define ZYFA_WS_LPT_PAIRS 16
#endif
// The epilogue's normalisation (ZYFA_WS_EPI_RCP until the seventh session, when its off state was removed)
// as one division per row (scale = v_descale / l) and a multiply per
// element, instead of a division per element ((o / l) * v_descale: 64 IEEE divisions per thread, each
// an MUFU.RCP, ~8 FMA-pipe instructions and a slow-path check, about two KV blocks' worth of softmax
// instructions per item). Differs from the contract's order by at most about 2 ulp of fp32 before the
// BF16 rounding; the contract errors printed by the selftest did not move. Run 15 (H200, 2026-12-02),
// ratio to the division build at 2K / 4K / 8K / 16K: FP8 exact d128 1.087 / 1.055 / 1.030 / 1.039,
// lean d128 1.090 / 1.052 / 1.030 / 1.029, BF16 d128 1.050 / 1.027 / 1.015 / 0.977 (16K: within that
// column's pass-to-pass spread); 192/128 (2K / 4K / b1 8K / 16K) BF16 1.065 / 1.033 / 1.021 / 1.091,
// FP8 exact 1.090 / 1.057 / 1.037 / 1.009, lean 1.099 / 1.054 / 1.031 / 1.024. The only form since.
// Measured and removed (seventh session; kernels/sm90/NOTES.md has the runs): ZYFA_WS_EXP2_POLY (part of
// exact P's exp2 on the FMA pipe, run 15: slower everywhere) and ZYFA_WS_FRESH_O (no per-item accumulator
// zeroing, runs 17-18: lost at 16K and for 192/128).
// The epilogue through shared memory (kOStageCols; the ZYFA_WS_OSTAGE experiment of run 19, H200). Each
// consumer warp writes its 16 rows of O with stmatrix into its own XOR-swizzled region after the
// mbarriers (8 stmatrix.x4 per full row width instead of 32 four-byte global stores, whose LSU throttle
// and long-scoreboard stalls took 16-17% of the consumer's samples at 2K, sixth session call 6), then
// stores whole rows with 16-byte stores. Outputs
// whose rows are not 16-byte aligned keep the register path. Same values: bitwise the same output.
// The width of one pass comes from the shared memory the build gives beyond the rest of the layout
// (variants.bzl smem_bytes): 8 warps x 16 rows x kDV bf16 = 32 KiB for whole rows, half of it for two
// passes of kDV / 2 columns (192/128, whose layout leaves 18 KiB), none for the register path.
// Run 19 (two passes, ratio to the register path at 2K / 4K / 8K / 16K): BF16 d128 1.062 / 1.025 /
// 1.018 / 1.023, FP8 exact 1.036 / 1.024 / 1.012 / 0.997, lean 1.058 / 1.033 / 1.019 / 0.987; run 20
// (the inverse, re-checked): d128 1.04..1.06 at 2K, 0.99..1.01 at 16K (lean's 16K about 0.98, noisy).
// Run 20, 192/128 in two passes: BF16 1.030 / 1.011 / 1.001 / 1.034, FP8 exact 1.068 / 1.033 / 1.016 /
// 1.019, lean 1.071 / 1.037 / 1.022 / 0.999.
// The aligned and unaligned register stores as two loops behind one uniform branch (EPI_BRANCH) were
// measured in the same run at 0.99..1.005 of the if-converted loop and removed.
#ifndef ZYFA_WS_LEAN_SAT
// Lean P's code in 2 FMA-pipe instructions instead of 3 (default). The literal form (0) computes
// t = fma(S, A, B), max(t, 0), + 1.5 * 2^23 (FFMA, FMNMX, FADD per element); this one computes
// u = fma.sat(S, A / 128, B / 128) (clamped to [0, 1], NaN -> 0) and then fma(u, 128, 1.5 * 2^23).
// Scaling by 2^-7 commutes with the rounding, so u = clamp(t, 0, 128) / 128 exactly, and the code is
// bitwise the same whenever t <= 128: always in the fast softmax, where m is this block's true running
// max and so t <= 120 (+ rounding); kernels/tools/tests/test_lean_code_sat.py checks it exactly.
// Run 23 (H200, 2026-12-02, ratio to the literal form at 2K / 4K / 8K / 16K): lean d128 1.058 / 1.061 /
// 1.064 / 1.039, lean 192/128 1.048 / 1.061 / 1.071 / 1.077 (lean's softmax is ALU-bound).
#define ZYFA_WS_LEAN_SAT 1
#endif
#ifndef ZYFA_WS_LSUM
// FP8 row-sum method (kLSum, below): 6 (tensor-pipe sums, kLSumOnes) for lean P: run 47 measured it on lean d=128
// with ZYFA_WS_LEAN_F16 at +4..5%, run 52 on lean 192/128 (with ZYFA_WS_ONES_REGION) at +4..9%. 1 (exact decode +
// HMMA with ones) everywhere else: on the exact kernels run 53 measured 6 at +0.6..2.0% (d128) / +0.8..3.9%
// (192/128), but the FP8 adder's truncated sums raised their model-like error against float64 by 3-6% (sixteenth
// session call 2: d128 1.14e-2 -> 1.20e-2), and exact P is the accuracy-first mode: not taken there.
#define ZYFA_WS_LSUM (ZYFA_LEAN_P ? 6 : 1)
#endif
#ifndef ZYFA_WS_LEAN_F16
// Lean P through f16 subnormals (on with ZYFA_WS_LSUM 6, i.e. lean P at both shapes): the fast softmax makes
// x = fma(S, A 2^-24, B 2^-24), exactly 2^-24 fl32(S A + B) (power-of-two scales), then per pair of keys one
// cvt.rn.relu.f16x2.f32: rounding onto f16's subnormal grid (spacing 2^-24) makes each half's bits rint(fl32(S A + B)),
// the contract's code itself (no double rounding), and .relu clamps negatives and -inf (masked keys) to +0, code 0.
// pack_p then needs one PRMT per 4 keys: 7 instructions per 4 keys instead of 11 (4 FFMA + 2 F2FP + 1 PRMT against
// 8 FFMA + 3 PRMT), and only the PRMT after the P.V wait (16 per thread and block instead of 48);
// kernels/tools/tests/test_lean_code_f16.py checks the codes against the contract in exact arithmetic.
// Runs 46-47 (H200, fourteenth session) measured a first form, x = S A + B + 1024 in f16's [1024, 2048) with an
// HMNMX2 clamp (codes off by one within ~2^-13 of a half-integer): 0.90..0.95 alone, 1.036..1.053 with LSUM 6's
// tensor-pipe row sums. Run 49 (fifteenth session): this form 1.046 / 1.052 / 1.048 / 1.050 at 2K / 4K / 8K / 16K over
// that one on lean d128 (default with LSUM 6); on lean 192/128 with LSUM 1 0.97..0.99, with LSUM 6 (run 52) its
// default.
#define ZYFA_WS_LEAN_F16 ((ZYFA_LEAN_P && ZYFA_WS_LSUM == 6) ? 1 : 0)
#endif
#ifndef ZYFA_WS_ONES_FIXED
// Every ones-row region holds the same bytes, so kLSumOnes' m64n8k32 QGMMAs may all read the first one (stage 0,
// region 0, k-offset 0): one loop-invariant descriptor instead of a fresh one per k-step (ptxas builds each from
// the stage's V descriptor with 2-3 uniform instructions). With ZYFA_WS_NOALIGN, lean d128's default since run 51
// (fifteenth session): the two together 1.011 / 1.012 / 1.007 / 1.044 at 2K / 4K / 8K / 16K (16K noisy), this
// one alone 0.995..1.010.
#define ZYFA_WS_ONES_FIXED (ZYFA_WS_LSUM == 6 ? 1 : 0)
#endif
#ifndef ZYFA_WS_ONES_REGION
// With ZYFA_WS_ONES_FIXED every ones QGMMA reads one 8-row region, so one 1 KiB region of e4m3 ones after the V
// stages (kOnesBytes) replaces the 8 ones rows of every Vt region of every stage (3 KiB on lean d128's three
// stages, 2 KiB net): what lets lean 192/128 (230528 B with three stages, 1920 B below the 227 KiB limit) take the
// tensor-pipe row sums of ZYFA_WS_LSUM 6 at all. Run 52 (fifteenth session): lean 192/128 with it, LSUM 6 and the
// subnormal codes 1.090 / 1.069 / 1.052 / 1.043 at 2K / 4K / 8K / 16K (its default since the sixteenth session).
// The default of every LSUM 6 build but lean d128, where it measured 0.981..0.999 (not taken there: it only frees
// smem lean d128 does not need).
#define ZYFA_WS_ONES_REGION ((ZYFA_WS_LSUM == 6 && !(ZYFA_LEAN_P && ZYFA_D_QK == 128)) ? 1 : 0)
#endif
#ifndef ZYFA_WS_NOALIGN
// The shared-memory base as the dynamic array's address, without the run-time round-up to 1024 (a kernel without
// static shared memory gets its dynamic shared memory 1024-aligned; the kernel traps if not). ptxas rebuilds the
// aligned base every loop iteration (kernels/sm90/NOTES.md, "Tried in SASS only (tenth session)"); the layout and
// kSmemBytes keep the slack. Run 51 on lean d128: 1.016 / 1.017 / 1.014 at 2K-8K, 0.961 at 16K (noisy); its
// default with ZYFA_WS_ONES_FIXED (above); the other variants are not measured with it.
#define ZYFA_WS_NOALIGN (ZYFA_WS_LSUM == 6 ? 1 : 0)
#endif
#ifndef ZYFA_WS_PV_F16
// FP8 with P.V in f16 (p_mode "f16", the _pf16 variants; the build sets it): S = Q K^T stays on the FP8 tensor core,
// P = exp2(t - m + 8) is rounded to f16 (11 significant bits instead of e4m3's 4) and V is converted
// e4m3 -> f16 (exact) by the producer, so P.V runs as an f16 wgmma (half the FP8 rate) with P straight
// from the S accumulators (no e4m3 pack, no key permutation) and l the fp32 sum of the f16-rounded P
// (HMMA with ones on the P registers, no decode). Aims at FP8's accuracy floor (P's e4m3 rounding) and
// its consumer chain (kernels/sm90/NOTES.md, "P.V in f16"). Run 24 (H200): out vs float64 of the dequantised
// inputs 1.5-1.8e-3 on every test case (FP8 exact: 0.8-2.3e-2; the bf16 output's rounding is 1.6e-3), at
// 0.86..1.00 of FP8 exact's speed at d128 (tile_n 128, 3 stages) and 0.85..0.90 at 192/128.
#define ZYFA_WS_PV_F16 0
#endif
#ifndef ZYFA_WS_VT_LDSM
// The producer's e4m3 V transpose (staging -> Vt) by ldmatrix.trans / stmatrix instead of 16-byte loads,
// 4x4 byte transposes and 4-byte stores. Default for e4m3 exact and lean (the f16-P variants convert
// instead of transposing and keep their staging swizzle). ncu source counters of lean d128 (ninth session
// call 4): the old transpose was 110 warp instructions per unit, two units per producer warp and block
// (32 PRMT, 16 STS.32, ~50 address / logic instructions), about 16% of all the instructions the kernel
// issued, on the SMSPs the consumer warps issue from. ldmatrix.x4.trans reads four 8 x 8 b16 blocks of the
// staging (keys as rows, pairs of d as b16 columns): each thread gets {V[k][d], V[k][d+1], V[k+1][d],
// V[k+1][d+1]} for two key blocks 8 apart, two PRMT per pair of words turn them into the Vt words
// {V[k][d], V[k+1][d], V[k+8][d], V[k+9][d]} (the key permutation the packed P uses), and stmatrix.x4
// stores four 8-row blocks of Vt, each row's 16 bytes in the 128-byte swizzle the wgmma descriptor
// expects. Per producer warp and block: kTileN / 16 units of 1 LDSM + 4 PRMT + 1 STSM + ~2 address
// instructions (56 instead of 220 at d128). The staging swizzle becomes r & 7 (conflict-free for the 8
// consecutive keys an ldmatrix block reads). Measured on the H200 (run 27, 2026-12-03, tenth session
// call 1), TFLOP/s ratio to the old transpose at 2K / 4K / 8K / 16K: exact d128 1.081 / 1.093 / 1.081 /
// 1.065, lean d128 1.073 / 1.066 / 1.048 / 1.097; 192/128 (2K / 4K / 8K / 16K) exact 1.043 / 1.057 /
// 1.061 / 1.054, lean 1.041 / 1.027 / 1.013 / 0.987; output bitwise the same; memcheck and racecheck
// clean. 0 restores the old transpose.
#define ZYFA_WS_VT_LDSM 1
#endif
#ifndef ZYFA_WS_SMX2
// Softmax of the thread's two rows as one interleaved, branch-free chain: both rows' max chains, then
// both quad shuffles, then the exponentials (or lean codes) of the two rows alternating, so the two
// rows' dependent chains overlap (ptxas cannot move work across the per-row branch on m_new). Same
// arithmetic in the same per-element order: bitwise identical output. Fast path (qk_scale > 0) only.
// Default for every e4m3 variant (exact, f16-P, lean) and BF16 d128 (run 37), off for BF16 192/128. TFLOP/s
// ratio to the build without it at 2K / 4K / 8K / 16K: run 5 (2026-12-01) e4m3 exact d128 1.000 /
// 1.015 / 1.027 / 1.025, BF16 d128 0.995 / 0.993 / 0.992 / 0.993 (noise, off); run 6: lean P 0.96..0.99
// (slower then); run 29 (2026-12-03, with MAX3, LEAN_SAT and the ldmatrix V transpose) lean d128
// 1.028 / 1.033 / 1.041 / 1.031; run 30 (eleventh session call 1) lean 192/128 (seqlens 2K / 4K / 8K /
// 16K at 16 heads) 1.029 / 1.052 / 1.085 / 1.099. Run 37 (twelfth session, after the stale max): BF16 d128
// 1.009 / 1.013 / 1.006 / 1.005 (on since), BF16 192/128 0.987..1.000 (off).
#define ZYFA_WS_SMX2 ((ZYFA_DTYPE_E4M3 || ZYFA_D_QK == 128) ? 1 : 0)
#endif
#ifndef ZYFA_WS_VSTAGE
#define ZYFA_WS_VSTAGE 1  // e4m3 V: 0 = global loads -> registers -> transpose; 1 = cp.async staging -> smem transpose
#endif
#ifndef ZYFA_WS_VPRE
// e4m3 V pre-transposed in global memory by a separate pass (the entry <kernel>_vprep at the end of this
// file; the build sets it for variants with "v_prep": True, kernels/abi/zyfa_abi.h version 3), so the
// producer loads Vt tiles exactly like K tiles (16-byte cp.async into the swizzle: no staging buffer, no
// ldmatrix / stmatrix transpose on the SMSPs the consumers issue from). args.v then points at Vt
// [batch][heads_kv][kDV][vt_row_bytes(seqlen_k)] bytes, each row's keys padded with zeros and permuted
// inside each 16-key group as the in-kernel transpose permutes them (position 16h + 4t + i <- key 16h +
// 2t + (i&1) + 8(i>>1)); args.v's strides are not read for V. Exact and lean e4m3 only (not f16 P.V).
// Runs 40-41 (H200, thirteenth session), TFLOP/s ratio with the pass inside every timed launch at 2K /
// 4K / 8K / 16K: lean d128 1.027 / 1.052 / 1.029 / 1.054 (the pass: 22 us for 33.5 MB of V; the kernel
// alone +3..9%: lean d128's softmax is issue-bound, run 33); exact d128 0.96..0.99 and 192/128 0.91..0.99
// (their kernels gain ~1% or nothing, and 192/128 has twice the V per call). On for lean d128 only.
#define ZYFA_WS_VPRE 0
#endif
#ifndef ZYFA_WS_MAX3
// Run 7 (H200, 2026-12-01, third session): default for BF16 and lean P. The thread's row max as 3-input integer maxima (VIMNMX3, one SASS
// instruction on sm_90, checked with nvdisasm) on the float bits: two elements per instruction instead of
// one FMNMX each. Signed-int order equals float order on non-negative floats and puts every negative
// float (and -inf, -0) below them, so when the int max is non-negative it IS the float max (exact, so
// the output is bitwise the same); a thread whose int max is negative (all its values of the row < 0 or
// masked) recomputes that row with FMNMX (rare, divergent, only in masked or all-negative rows).
// Measured ratio to the old build at 2K / 4K / 8K / 16K: lean P 1.023 / 1.023 / 1.022 / 1.027;
// FP8 exact 0.979 / 0.987 / 0.996 / 1.020 (off there); BF16 alone 0.99 / 1.00 / 1.01 / 1.01, with
// RESCALE_EARLY and LOADFAST ("all3") 1.012 / 1.030 / 1.034 / 1.062 against LOADFAST alone's
// 1.023 / 1.028 / 1.024 / 1.036.
#define ZYFA_WS_MAX3 ((!ZYFA_DTYPE_E4M3 || ZYFA_LEAN_P) ? 1 : 0)
#endif
#ifndef ZYFA_WS_MAX3_LB
// MAX3's fallback when a thread's int max is negative (eighteenth session; default since run 54).
// That case is not rare on real data: with an attention sink (or any score offset that makes most scores
// negative) a thread's 32 values of a row are all negative in most blocks. On zyfa_bench's model-like
// inputs 86% of (warp, row-half, block) triples took the 32-deep FMNMX chain at 4K, 87% at 16K (Gaussian:
// 1%, 0.3%; `python3 tools/max_moves.py --max3`), ~55 extra instructions per loop iteration per warp: the
// likely cause of BF16 / lean d128's 11-20% more cycles there (exact P, without MAX3, is unaffected).
// 0: that chain (as before). 1: the int max of all-negative values is their most negative value, a lower
// bound of their max, which is all the running max needs when it is already >= 0 (the block cannot raise
// it: m_new is bitwise the same; kernels/tools/tests/test_row_max3_bound.py); only when it is negative too
// (no score >= 0 in m_run so far: 6% at 4K and 2.4% at 16K on model-like, 7% / 4% with BF16's stale max,
// <= 0.03% Gaussian) the exact max is taken, as the int MIN of the values (VIMNMX3 again: negative floats
// order in reverse as ints), 16 instructions in two chains instead of 32 in one.
// Run 54 (H200, twenty-second session call 2; ratio to 0, best of two passes, 2K / 4K / 8K / 16K or the 192/128
// shapes): on sink inputs (most scores negative, as model-like data) BF16 d128 1.075 / 1.077 / 1.074 / 1.105,
// lean d128 1.152 / 1.169 / 1.165 / 1.128, BF16 192/128 1.05..1.08, lean 192/128 1.08..1.11; on Gaussian inputs
// 1.00..1.03; every case passed with the same errors as 0 on all four kernels. Acts only where MAX3 is on.
#define ZYFA_WS_MAX3_LB 1
#endif
#ifndef ZYFA_WS_BOUND
// Timing bounds (experiments only; WRONG OUTPUT, the tests fail by design): what the loop would cost
// without parts of its softmax work. 1: no row sums (FP8: l grows by 1 per block instead of the decode +
// HMMA-with-ones sums); 2: also no softmax (no mask, max, exponentials / lean codes, O rescale: S is
// packed as it is), leaving the loads, the wgmmas, the ping-pong, the P pack and the epilogue: the
// ceiling of this pipeline structure.
#define ZYFA_WS_BOUND 0
#endif
#ifndef ZYFA_WS_RESCALE_EARLY
// Run 7 (H200): default for BF16 (with MAX3 and LOADFAST, see ZYFA_WS_MAX3); FP8 exact alone 0.995 /
// 0.996 / 0.994 / 0.981 (off). FA3's RescaleOBeforeGemm placement: the O rescale by alpha_j is
// applied in iteration j + 1 between the S_{j+1} issue and the P_j V_j issue (while S_{j+1} occupies the
// tensor core), instead of right after the P_{j-1} V_{j-1} wait, so P_j is packed straight after that
// wait. Same arithmetic (O is scaled by the same alpha before the same P.V): bitwise the same output.
#define ZYFA_WS_RESCALE_EARLY (!ZYFA_DTYPE_E4M3 ? 1 : 0)
#endif
#ifndef ZYFA_WS_LOADFAST
// Run 7 (H200): the default. Ratio at 2K / 4K / 8K / 16K: BF16 1.023 / 1.028 / 1.024 / 1.036, FP8
// exact 1.062 / 1.046 / 1.026 / 1.029. Producer copies without per-row bounds selects when the whole
// tile lies inside the sequence (a uniform branch; the last, partial tile keeps the zero-fill path):
// about half of the producer's per-cp.async instructions (compare, two selects) go.
#define ZYFA_WS_LOADFAST 1
#endif

#ifndef ZYFA_WS_PERSISTENT
// Run 7 experiment (issue 5; 2026-12-01, UNMEASURED: built here, no GPU): persistent CTAs. The kernel is
// launched with gridDim = (number of SMs, 1, 1) (the launcher must know: see kernels/sm90/NOTES.md); CTA
// x takes work items x, x + gridDim.x, ... of a static list of (q tile, head, batch) items sorted by
// descending causal KV-block count (ORDER 1's mapping: item i -> rank i / (heads_q * batch) = q tile
// ceil(sq / 128) - 1 - rank of pair i % (heads_q * batch)), computed from the ABI args alone (never from
// gridDim.y / z). No tables, no atomics: every item is computed exactly as in the non-persistent kernel,
// so the output bits do not depend on the order. Pipeline state carried across items: the K / V ring
// position (stage, phase) of producer and consumers as running counters, a Q-empty mbarrier (the producer
// reloads Q only after both consumer warpgroups' last S wgmma of the previous item has completed), the
// ping-pong hand-over (balanced per item, see pp_arrive), O / m / l reset per item. The epilogue (global
// stores straight from registers) overlaps the producer's loads of the next item's Q / K / V.
#define ZYFA_WS_PERSISTENT 0
#endif
#ifndef ZYFA_WS_TMA
// Run 10 experiment (issue 5; UNMEASURED when written): BF16 Q / K / V tiles by TMA
// (cp.async.bulk.tensor.4d, completing on the same full mbarriers with expect_tx) from ONE producer
// thread, instead of 128 producer threads' per-row cp.async (ncu, third session: BF16 "long
// scoreboard" 1.79 stalls per instruction, tensor pipe 65%). The kernel then takes a second parameter,
// zyfa_tma_maps (kernels/abi/zyfa_abi.h, ABI 2): host-encoded tensor maps (cuTensorMapEncodeTiled,
// 128-byte swizzle, boxes of 64 elements x rows over dims (d, seq, head, batch) with the ABI strides;
// rows past the sequence are zero-filled by the hardware, as the cp.async path zero-fills them).
// maps.valid == 0 (pointers or strides not 16-byte multiples) keeps the cp.async path. Variants with
// "loads": "tma" in kernels/variants.bzl are built with it; the launchers then pass the maps.
// Run 10 (H200): BF16 d128 +4.1..6.0%, with persistent CTAs +5.8..13.4%; 192/128 +4.9..6.0%.
// e4m3 (run 11 experiment, UNMEASURED when written): Q and K by TMA (boxes of 128 bytes, byte elements)
// from producer thread 0; V keeps the 128 threads' cp.async staging + byte transpose (wgmma needs V^T,
// which no TMA box gives), so the V full barriers keep 128 arrivals.
#define ZYFA_WS_TMA 0
#endif
#ifndef ZYFA_WS_PSCHED
// Persistent item schedule (run 8 experiment). Run 7 (H200) with round-robin items over a global
// rank-major list (PSCHED 0): BF16 / FP8 d128 2K +4.3 / +12.8%, 4K 0 / +5.9%, b1 8K (16 pairs)
// -7.6 / -5.2% (static round-robin: CTA 0 takes every round's longest item, ~11% above the mean at
// that shape), 16K (64 pairs) -1 / -2% (global rank-major order loses ORDER 0's L2 reuse, as ORDER 1
// did in run 5). 1: boustrophedon rounds (cta_item). 2: 1 + pair-major items when heads * batch >
// ZYFA_WS_LPT_PAIRS. Run 23: 2 with each window of 2G pair-major items sorted longest first (3, which
// the CTAs' modelled work max / mean put at 1.0003..1.009 instead of about 1.03) measured 0.97..1.035 of
// 2 and was removed (kernels/sm90/NOTES.md, "Outcomes, run 23").
#define ZYFA_WS_PSCHED 2
#endif

namespace zyfa_sm90_ws {

constexpr bool kPersistent = ZYFA_WS_PERSISTENT != 0;
[[maybe_unused]] constexpr bool kTma = ZYFA_WS_TMA != 0;
constexpr bool kFp8 = ZYFA_DTYPE_E4M3 != 0;
constexpr bool kLeanP = ZYFA_LEAN_P != 0;
constexpr bool kLeanF16 = kLeanP && ZYFA_WS_LEAN_F16 != 0;  // see the macro
constexpr float kLeanCodeBase = 12582912.0f;  // 1.5 * 2^23: the float kLeanCodeBase + c holds lean code c in its low byte
constexpr float kLeanF16Scale = 0x1p-24f;  // kLeanF16: x = (S A + B) 2^-24, the f16 subnormal whose bits are the code
constexpr float kStaleTau = ZYFA_WS_STALE_TAU;  // see the macro
constexpr bool kOverlap = ZYFA_WS_OVERLAP != 0;
constexpr bool kPingPong = ZYFA_WS_PINGPONG != 0;
constexpr bool kVPre = kFp8 && ZYFA_WS_VPRE != 0;       // V pre-transposed in global memory (see the macro)
constexpr bool kVStaged = kFp8 && ZYFA_WS_VSTAGE != 0 && !kVPre;
constexpr bool kPvF16 = kFp8 && ZYFA_WS_PV_F16 != 0;  // FP8 with P.V in f16 (see the macro)
constexpr bool kPv16 = !kFp8 || kPvF16;                 // P.V on 16-bit operands (bf16 or f16)
constexpr int kDQk = ZYFA_D_QK;
constexpr int kDV = ZYFA_D_V;
constexpr int kTileM = ZYFA_TILE_M;
constexpr int kTileN = ZYFA_TILE_N;
constexpr int kThreads = ZYFA_THREADS;
constexpr int kESize = kFp8 ? 1 : 2;              // bytes per q/k/v element
constexpr int kQkRowBytes = kDQk * kESize;        // one q/k row in global memory
constexpr int kVRowBytes = kDV * kESize;
constexpr int kQkChunks = kQkRowBytes / 16;       // 16-byte chunks per q/k row
constexpr int kVChunks = kVRowBytes / 16;
constexpr int kQkRegions = (kQkRowBytes + 127) / 128;  // 128-byte column regions per q/k row
[[maybe_unused]] constexpr int kBoxElems = 128 / kESize;           // elements of one TMA box row (128 bytes, the swizzle span)
constexpr int kQkSteps = kQkRowBytes / 32;        // wgmma k-steps of S (32 bytes: k16 bf16 / k32 e4m3)
constexpr int kPvSteps = kTileN / (kPv16 ? 16 : 32);  // wgmma k-steps of O (keys)
// K and V ring depth: e4m3 3 (2 above 160 keys per tile: 3 stages of 192 keys do not fit in 227 KiB), bf16 2;
// f16 P.V at d_qk 192: 2 (its V stages are 16-bit, and 3 do not fit).
constexpr int kStages = ZYFA_WS_STAGES > 0 ? ZYFA_WS_STAGES
                                           : ((kFp8 && kTileN <= 160 && !(kPvF16 && kDQk > 128)) ? 3 : 2);
// FP8 row sums (contract: l = fp32 sum of the e4m3-rounded P fed to P.V). Hopper's FP8 wgmma adds with
// a ~14-bit truncating adder (DeepSeek-V3 report 3.3.2), so a ones-GEMM sum is 2-6e-4 low with a fresh
// accumulator per block (run 45; the first session's "3.4% low" was S's truncation on sharp rows) and
// drifts ~1e-2 when accumulated across blocks. ZYFA_WS_LSUM 6 takes that trade on lean d128; by
// default (method 1) each thread decodes its packed e4m3 P bytes to f16
// pairs (cvt.f16x2.e4m3x2, exact: e4m3 values are f16 values) and sums them with a legacy
// mma.sync m16n8k16 f16 x ones -> f32 (the decoded pairs are already the A fragment; products are
// exact and the f16 HMMA accumulates in fp32): 32 cvt + 8 HMMA per thread and block, no shuffles,
// every lane gets its rows' full block sums. See row_sums_e4m3.
constexpr int kOTiles = kDV / 8;
constexpr int kOAcc = 4 * kOTiles;                // O accumulator floats per thread
// ZYFA_WS_LSUM 6 (kLSumOnes; the macro's default is at ZYFA_WS_LEAN_F16): every Vt region carries 8 more rows
// of e4m3 ones, and each P.V k-step is followed by an m64n8k32 wgmma of P by them (wgmma_rs_n8_e4m3) into a fresh
// per-block accumulator: the block's row sums on the tensor pipe, inside the P.V group that already reads P,
// added to the fp32 l on the CUDA cores after the P.V wait. They are the sums of exactly the e4m3 P fed to
// P.V, but through the FP8 wgmma's truncating adder, like O itself: 2-6e-4 low on average, the worst row
// of the layout probe's 1.6e-3 (run 45; the first session's "3.4% low" was S's truncation, not the sums').
// (As a 17th n8 tile of one m64n136k32 P.V, the per-block zeroing of its four accumulators made ptxas
// serialise every wgmma, C7511, at any register budget.)
constexpr bool kOnesRegion = ZYFA_WS_LSUM == 6 && ZYFA_WS_ONES_REGION != 0;  // see the macro
constexpr int kVtRows = kDV + (ZYFA_WS_LSUM == 6 && !kOnesRegion ? 8 : 0);  // e4m3 Vt rows per region
constexpr int kOnesBytes = kOnesRegion ? 8 * 128 : 0;  // kOnesRegion: 8 rows of 128 e4m3 ones after the V stages
constexpr int kQBytes = kQkRegions * kTileM * 128;
constexpr int kKStageBytes = kQkRegions * kTileN * 128;
// bf16 (and f16 for kPvF16): 2 regions x kTileN keys x 128 B; e4m3: kVtRegions regions of kVtRows d rows x 128 key bytes (key
// positions 128 r .. 128 r + 127 in region r; a last region of a kTileN that is not a multiple of 128
// is only partly used).
constexpr int kVtRegions = (kTileN + 127) / 128;
constexpr int kVStageBytes = kPv16 ? kDV * kTileN * 2 : kVtRows * 128 * kVtRegions;
constexpr int kBarrierBytes = kStages > 3 ? 256 : 128;  // (1 + 4 stages) mbarriers of 8 B
constexpr int kAlignSlack = 1024;
// kVStaged: two row-major staging buffers of V rows (128 keys x 128 B) that cp.async fills one block
// ahead of the transpose.
constexpr int kStagingBytes = kVStaged ? 2 * kTileN * kVRowBytes : 0;
constexpr int kSmemNoOStage = kQBytes + kStages * (kKStageBytes + kVStageBytes) + kOnesBytes + kStagingBytes +
                               kBarrierBytes + kAlignSlack;
// The epilogue staging (comment above the ZYFA_WS_SMX2 macro): kOStageCols columns of the warp's 16 rows
// per pass, from the build's shared memory.
constexpr int kOStageCols = ZYFA_SMEM_BYTES - kSmemNoOStage == 8 * 16 * kDV * 2   ? kDV
                            : ZYFA_SMEM_BYTES - kSmemNoOStage == 8 * 16 * kDV      ? kDV / 2
                                                                                   : 0;
constexpr int kOStageBytes = 8 * 16 * kOStageCols * 2;  // 8 consumer warps x 16 bf16 rows x kOStageCols
constexpr int kSmemBytes = kSmemNoOStage + kOStageBytes;
// setmaxnreg budgets: 128 x P + 256 x C <= 168 x 384 (the launch allocation). ZYFA_WS_PREGS /
// ZYFA_WS_CREGS override them (experiments). FP8 (staged V transpose) 72 / 216: with the row sums
// after the P.V wait, 40 / 232 was 2.5% slower on the H200 (b2 s16K hq32/8 exact: 677 vs 694
// TFLOP/s), though 1.2-1.8% faster with the in-flight HMMA sums; BF16 40 / 232: no change.
#ifndef ZYFA_WS_PREGS
#define ZYFA_WS_PREGS 0
#endif
#ifndef ZYFA_WS_CREGS
#define ZYFA_WS_CREGS 0
#endif
// e4m3 with TMA loads 80 / 208: thread 0's TMA state beside the V staging spilled 16 B of the producer
// at 72 (192/128 exact, run 12); 80 / 208 builds with no spill (measured in run 13).
constexpr bool kFp8Tma = kFp8 && kTma;
constexpr int kProducerRegs = ZYFA_WS_PREGS > 0 ? ZYFA_WS_PREGS : (kFp8Tma ? 80 : kVStaged ? 72 : 56);
constexpr int kConsumerRegs = ZYFA_WS_CREGS > 0 ? ZYFA_WS_CREGS : (kFp8Tma ? 208 : kVStaged ? 216 : 224);
// O promotion (experiment, ZYFA_WS_OPROMOTE=1): each block's P.V goes into a fresh wgmma accumulator
// that is added to the fp32 O registers after the block (DeepSeek-style promotion), instead of
// accumulating O inside the (FP8: truncating) wgmma accumulator across all KV blocks. 64 more registers
// (needs ZYFA_WS_PREGS=40 ZYFA_WS_CREGS=232). Measured on the H200 (b2 s16K hq32/8): 2.5-3% slower
// and no accuracy gain (out vs contract 5.8e-3 vs 6.0e-3; 2K diffuse case 2.31e-3 vs 2.32e-3): the
// FP8 deviation from the contract comes from S = Q K^T and within-block P.V accumulation, not from
// the cross-block O accumulation. Off.
#ifndef ZYFA_WS_OPROMOTE
#define ZYFA_WS_OPROMOTE 0
#endif
constexpr bool kOPromote = ZYFA_WS_OPROMOTE != 0;
// FP8 row-sum method (see kOTiles): 1 (default but for lean d128) = decode + HMMA with ones right after the P.V wait;
// 0 = the same HMMA issued while P.V / S run (the mma.sync then queues behind the in-flight QGMMAs
// and stalls the warp before its softmax: ncu "math pipe throttle" on the HMMA; 6% slower);
// 2 = decode + f16 HADD2 tree per row (16 values per half) then fp32, in flight; 3 = decode + one f16
// add per 2 values, then fp32, in flight. 0 and 1 are exact (fp32 accumulation of exact f16 values);
// 2 and 3 round in f16 (grid-case lse 8e-4 / 4e-4). (mma.sync m16n8k32 e4m3 straight on the packed
// bytes is no shortcut on sm_90: ptxas lowers it to the same F2FP unpack + HMMA.16816.) Lean P pays
// more for the CUDA-core sums than exact P (its softmax is already ALU-bound, no MUFU): lean, same
// run, 676 (method 1) / 680 (method 2) vs 762 for the old inexact ones-QGMMA sums. Measured on the H200, b2 s16K hq32/8, exact P:
// 0: 645, 1: 689, 2: 675, 3: 650 TFLOP/s (the old ones-QGMMA row sums: 687-691). Reading wgmma
// inputs in flight is fine; defining them makes ptxas serialise (C7513), so P is never packed early.
constexpr int kLSum = ZYFA_WS_LSUM;
constexpr bool kLSumOnes = kLSum == 6;
// 4 (experiment, not yet measured): no tensor pipe at all: decode to f16 pairs, convert to fp32 and add
// in fp32 per thread (32 keys per row), in flight. Exact: e4m3 values are multiples of 2^-9 below 2^9,
// so every partial sum of 32 of them is an integer multiple of 2^-9 below 2^23 units (fits fp32's 24
// bits); the quad's four partial rows are added in the epilogue. Costs 2.5 ALU instructions per P
// element instead of 0.5 + 1/8 HMMA, but never queues behind the other warpgroup's QGMMAs.
constexpr bool kLSumWhole = kLSum == 0 || kLSum == 1 || kLSumOnes;  // sums of whole rows (else per thread)
[[maybe_unused]] constexpr bool kLSumExact = kLSum == 0 || kLSum == 1 || kLSum == 4;  // fp32 sums of the exact e4m3 values
constexpr bool kLSumInFlight = kLSum != 1 && !kLSumOnes;
// Row max as 4 independent chains per row (ZYFA_WS_MAXTREE=1) instead of one 32-long FMNMX chain
// (the max is exact in any order). H200, b2 s16K hq32/8: BF16 +1.7% and +0.9% in two runs (default
// for BF16), FP8 exact +0.4% / -0.4% (noise; off).
#ifndef ZYFA_WS_MAXTREE
#define ZYFA_WS_MAXTREE (ZYFA_DTYPE_E4M3 ? 0 : 1)
#endif
constexpr int kSAcc = kTileN / 2;                 // S accumulator floats per thread (m64 x kTileN)
constexpr int kSTiles = kTileN / 8;               // 8-column tiles of S per thread row
constexpr int kPRegs = kPv16 ? kTileN / 4 : kTileN / 8;  // packed P of one 64 x kTileN block per thread
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kPShift = kFp8 ? 8.0f : 0.0f;     // FP8: row max lands at 2^8 (contract SHIFT)

static_assert(ZYFA_DTYPE_E4M3 == 0 || ZYFA_DTYPE_E4M3 == 1, "ZYFA_DTYPE_E4M3 must be 0 or 1");
static_assert(ZYFA_LEAN_P == 0 || ZYFA_LEAN_P == 1, "ZYFA_LEAN_P must be 0 or 1");
static_assert(!kLeanP || kFp8, "lean P is an FP8-only mode");
static_assert(!kFp8 || kStaleTau < static_cast<float>(ZYFA_FP8_MAX_STALE_TAU),
              "FP8's P must stay below e4m3's 448: ZYFA_WS_STALE_TAU < ZYFA_FP8_MAX_STALE_TAU (zyfa_abi.h)");
static_assert(!kPvF16 || (!kLeanP && kVStaged && ZYFA_WS_LSUM <= 1 && !ZYFA_WS_OPROMOTE),
              "P.V in f16: exact P, V through the staging buffers, whole-row HMMA sums, no O promotion");
static_assert(!kVPre || (!kPvF16 && kTileN % 64 == 0), "ZYFA_WS_VPRE: exact or lean e4m3, tile_n a multiple of 64");
static_assert(!kOnesRegion || ZYFA_WS_ONES_FIXED != 0, "ZYFA_WS_ONES_REGION needs ZYFA_WS_ONES_FIXED");
static_assert(!kLSumOnes || (kFp8 && !kPvF16 && !kOPromote && (!kVPre || kTileN <= 128)),
              "ZYFA_WS_LSUM 6: e4m3 P.V (exact or lean), no O promotion; with the pre-pass one Vt region");
static_assert(kThreads == 384 && kTileM == 128, "one producer + two consumer warpgroups of 64 rows");
// ZYFA_TILE_N (experiments, ZYFA_TILE_N != 128; kernels/sm90/NOTES.md "run 6"): S is one m64nN wgmma
// accumulator, N one of the instantiated shapes (wgmma_ss); a P.V k-step is 16 bf16 / 32 e4m3 keys.
static_assert(kTileN == 128 || kTileN == 160 || kTileN == 192 || (!kFp8 && kTileN == 176),
              "ZYFA_TILE_N: 128, 160, 192 (bf16 also 176): the instantiated wgmma N");
static_assert(kDV == 128, "O is one m64n128 wgmma accumulator");
static_assert(kQkRowBytes % 32 == 0 && kDQk <= 256, "d_qk * element size must be a multiple of 32 bytes");
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * 384, "setmaxnreg budget exceeds the launch allocation");
static_assert(kSmemBytes == ZYFA_SMEM_BYTES,
              "ZYFA_SMEM_BYTES (variants.bzl smem_bytes) must equal this kernel's shared-memory layout");
static_assert(kSmemBytes <= 227 * 1024, "shared memory layout exceeds the sm_90 per-block limit");
static_assert((1 + 4 * kStages) * 8 <= kBarrierBytes, "mbarriers do not fit their area");
static_assert(!kPersistent || (2 + 4 * kStages) * 8 <= kBarrierBytes, "persistent: the Q-empty mbarrier does not fit");
static_assert(kVStageBytes % 1024 == 0 && kKStageBytes % 1024 == 0, "stages must keep 1024-byte alignment");

// ---------------------------------------------------------------------------------------------
// PTX wrappers: shared memory, mbarriers, cp.async, fences, named barriers, setmaxnreg.

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0u;
}

// Wait until the phase of `bar` with this parity has completed (acquire). A fresh barrier counts
// as having completed the phase of parity 1, so producers start at parity 1 on empty barriers.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrive on `bar` once this thread's earlier cp.async copies have landed (no pending-count change).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// 16 bytes global -> shared; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Arrive on `bar` (this thread's one arrival) and add `bytes` to the phase's expected transaction count.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// One TMA box of a 4-d tensor map (coordinates innermost first) into shared memory; its bytes count
// toward `bar`'s transaction count. `map` is the generic address of a __grid_constant__ CUtensorMap.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* map, int c0, int c1, int c2, int c3, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Generic-proxy shared-memory writes -> visible to the async proxy (wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// ---------------------------------------------------------------------------------------------
// wgmma: descriptors, fences and the instructions are in sm90/wgmma.h; the operand types of the two GEMMs.
constexpr WgmmaType kQkType = kFp8 ? WgmmaType::kE4m3 : WgmmaType::kBf16;
constexpr WgmmaType kPvType = kPvF16 ? WgmmaType::kF16 : (kFp8 ? WgmmaType::kE4m3 : WgmmaType::kBf16);

// ---------------------------------------------------------------------------------------------
// Tile loads into the 128B-swizzled layout (executed by the 128 threads of one warpgroup).

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
    if (ZYFA_WS_LOADFAST != 0 && vec_ok && row0 + ROWS <= nvalid) {  // whole tile in range: no selects
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

// e4m3: V block [key0, key0 + kTileN) x kDV -> Vt[d][position] (kDV rows of 128 bytes, swizzled),
// keys permuted inside each 16-key group h: position 16h + 4t + i <- key 16h + 2t + (i&1) + 8(i>>1).
// Unit u = (t = u & 3, h = (u >> 2) & 7, 16-column group dc = u >> 5): 4 key rows x 16 bytes in,
// 16 words out (d row dc*16 + 4 comp + b, positions 16h + 4t .. +3). Lanes of a warp cover all 8
// h and 4 t of one dc: the 32 word stores of a warp hit 32 distinct banks. Keys >= seqlen_k read
// as zeros. Synchronous; the caller fences and arrives.
// kTileN != 128: unit u = (t = u & 3, h = (u >> 2) % groups, dc = (u >> 2) / groups); group h >= 8 goes
// to Vt region h / 8 (vt_store).
constexpr int kVtGroups = kTileN / 16;
constexpr int kVtUnits = kVtGroups * 4 * (kDV / 16);

__device__ __forceinline__ void vt_unit(int u, int& tq, int& h, int& dc) {
  const uint32_t w = static_cast<uint32_t>(u) >> 2;  // u >= 0; unsigned: % and / by 8 are a mask and a shift
  tq = u & 3;
  h = static_cast<int>(w % kVtGroups);
  dc = static_cast<int>(w / kVtGroups);
}

__device__ __forceinline__ void vt_store(uint32_t vt, int row, int h, int tq, uint32_t w) {
  st_shared_u32(vt + (h >> 3) * kVtRows * 128 + row * 128 + (((h & 7) ^ (row & 7)) << 4) + 4 * tq, w);
}

__device__ __forceinline__ void load_vt_e4m3(uint32_t vt, const uint8_t* g, int64_t row_bytes, int key0, int seqlen_k,
                                             bool vec_ok, int t128) {
#pragma unroll
  for (int i = 0; i < (kVtUnits + 127) / 128; ++i) {
    const int u = t128 + 128 * i;
    if (kVtUnits % 128 != 0 && u >= kVtUnits) break;
    int tq, h, dc;
    vt_unit(u, tq, h, dc);
    uint32_t c[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int key = key0 + 16 * h + 2 * tq + (k & 1) + 8 * (k >> 1);
      uint4 w = make_uint4(0u, 0u, 0u, 0u);
      if (key < seqlen_k) {
        const uint8_t* p = g + static_cast<int64_t>(key) * row_bytes + dc * 16;
        w = vec_ok ? __ldg(reinterpret_cast<const uint4*>(p)) : load16_bytes(p);
      }
      c[k][0] = w.x;
      c[k][1] = w.y;
      c[k][2] = w.z;
      c[k][3] = w.w;
    }
#pragma unroll
    for (int comp = 0; comp < 4; ++comp) {
      uint32_t out[4];
      transpose4x4(c[0][comp], c[1][comp], c[2][comp], c[3][comp], out);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        vt_store(vt, dc * 16 + comp * 4 + b, h, tq, out[b]);
      }
    }
  }
}

// Staging buffer of V rows (kVStaged): row r at r * 128, its 16-byte chunk c at c ^ stg_swz(r). The
// ldmatrix transposer (ZYFA_WS_VT_LDSM, the default) reads 8 consecutive rows of one chunk per matrix:
// r & 7 spreads them. The old transposer's lanes (h = 0..7, t = 0..3, same column dc) read rows
// 16h + 2t + k: with the other swizzle every 16-byte position is hit by 4 lanes, the minimum for a
// 512-byte warp access (the f16-P conversion keeps that swizzle, as measured).
__device__ __forceinline__ int stg_swz(int r) {
  return ZYFA_WS_VT_LDSM != 0 && !kPvF16 ? r & 7 : ((r >> 4) ^ (r >> 1)) & 7;
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
  if (ZYFA_WS_LOADFAST != 0 && vec_ok && key0 + kTileN <= seqlen_k) {  // whole block in range: no selects
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

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// ZYFA_WS_VT_LDSM (see the macro): staging -> Vt. Producer warp w owns d 32 w .. 32 w + 31 (staging chunks
// 2 w, 2 w + 1) and walks the key groups h (16 keys each). ldmatrix block m (lanes 8 m .. 8 m + 7 give its
// rows): keys 16 h + 8 (m & 1) + 0..7 of chunk 2 w + (m >> 1). Lane t then holds, for dp = 8 chunk + t / 4
// and q = t % 4, the words {V[k][2dp], V[k][2dp+1], V[k+1][2dp], V[k+1][2dp+1]} with k = 16 h + 2 q
// (block 0 / 2) and k + 8 (block 1 / 3); PRMT 0x6420 / 0x7531 give the Vt words of d = 2dp / 2dp + 1 at
// quad q of chunk h. stmatrix block j row i (from lane 8 j + i) is Vt row d = 2 (dp0 + i) + e with e = 0
// for i < 4 in blocks 0 / 2 and e = 1 in blocks 1 / 3 (the other way round for i >= 4), so that each
// block's 8 rows fall on 8 distinct 16-byte positions of the swizzle (no bank conflicts); lane t's
// registers follow the same rule through its PRMT selectors.
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

// Staging -> Vt, the same units, key permutation and stores as load_vt_e4m3.
__device__ __forceinline__ void transpose_staging(uint32_t vt, uint32_t stg, int t128) {
#pragma unroll 1
  for (int i = 0; i < (kVtUnits + 127) / 128; ++i) {
    const int u = t128 + 128 * i;
    if (kVtUnits % 128 != 0 && u >= kVtUnits) break;
    int tq, h, dc;
    vt_unit(u, tq, h, dc);
    uint32_t c[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int r = 16 * h + 2 * tq + (k & 1) + 8 * (k >> 1);
      const uint4 w = ld_shared_v4(stg + r * 128 + ((dc ^ stg_swz(r)) << 4));
      c[k][0] = w.x;
      c[k][1] = w.y;
      c[k][2] = w.z;
      c[k][3] = w.w;
    }
#pragma unroll
    for (int comp = 0; comp < 4; ++comp) {
      uint32_t out[4];
      transpose4x4(c[0][comp], c[1][comp], c[2][comp], c[3][comp], out);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        vt_store(vt, dc * 16 + comp * 4 + b, h, tq, out[b]);
      }
    }
  }
}

// ZYFA_WS_VPRE: bytes of one Vt row (the keys padded with zeros to a multiple of both kTileN and vt_prep's
// keys per block: kernels/abi/zyfa_abi.h's rule, which the launchers size the workspace by).
__host__ __device__ constexpr int64_t vt_row_bytes(int seqlen_k) { return ZYFA_VT_ROW_BYTES(seqlen_k, kTileN); }

#if ZYFA_WS_VPRE
// ZYFA_WS_VPRE's pass (the body of the entry <kernel>_vprep, ZYFA_VPREP_NAME below; kernels/abi/zyfa_abi.h
// version 3 is its launch contract): V (args.v with its strides) -> Vt (layout at the macro). Block (x, kv head, batch)
// takes keys 128 x .. 128 x + 127 of all kDV = 128 columns. Its 256 threads copy the 128 key rows into
// shared memory (16-byte chunk c of row r at chunk c ^ (r / 16 % 8)), then thread (g = t % 8, w = t / 8)
// reads word w (d 4w .. 4w + 3) of the 16 rows of key group g (the swizzle puts the 8 groups of a warp on
// distinct banks), byte-transposes them with 24 PRMT into the 4 d rows' 16 bytes in P's key order
// (position 4q + i <- key 2q + (i & 1) + 8 (i >> 1)), and stores them; the 8 lanes of one w write 128
// contiguous bytes of each d row. Keys >= seqlen_k are zeros. Grid (vt_row_bytes / 128, heads_kv, batch).
__device__ __forceinline__ void vt_prep(const zyfa_fwd_args& args, uint8_t* vt) {
  static_assert(kDV == 128, "one 128-byte V row per key");
  static_assert(ZYFA_VPREP_KEYS == 128 && ZYFA_VPREP_THREADS == 256, "the body below is written for 128 keys x 256 threads");
  __shared__ __align__(16) uint8_t rows[128 * 128];
  const int t = static_cast<int>(threadIdx.x);
  const int key0 = static_cast<int>(blockIdx.x) * 128;
  const int64_t rb = vt_row_bytes(args.seqlen_k);
  const uint8_t* const g = static_cast<const uint8_t*>(args.v) +
      (static_cast<int64_t>(blockIdx.z) * args.v_stride_batch + static_cast<int64_t>(blockIdx.y) * args.v_stride_head) * kESize;
  const bool vec_ok = ((reinterpret_cast<uintptr_t>(args.v) |
                        static_cast<uintptr_t>((args.v_stride_batch | args.v_stride_seq | args.v_stride_head) * kESize)) &
                       15u) == 0u;
  uint4 in[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // all four loads in flight before the first store
    const int r = (t >> 3) + 32 * i, c = t & 7;
    in[i] = make_uint4(0u, 0u, 0u, 0u);
    if (key0 + r < args.seqlen_k) {
      const uint8_t* p = g + static_cast<int64_t>(key0 + r) * args.v_stride_seq * kESize + c * 16;
      in[i] = vec_ok ? __ldg(reinterpret_cast<const uint4*>(p)) : load16_bytes(p);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = (t >> 3) + 32 * i, c = t & 7;
    *reinterpret_cast<uint4*>(rows + r * 128 + ((c ^ ((r >> 4) & 7)) << 4)) = in[i];
  }
  __syncthreads();
  const int grp = t & 7, w = t >> 3;
  uint32_t k[16];  // word w of key rows 16 grp + 0..15
#pragma unroll
  for (int r = 0; r < 16; ++r)
    k[r] = *reinterpret_cast<const uint32_t*>(rows + (16 * grp + r) * 128 + (((w >> 2) ^ grp) << 4) + 4 * (w & 3));
  uint32_t out[4][4];  // out[q][b]: positions 4q .. 4q + 3 of d row 4 w + b
#pragma unroll
  for (int q = 0; q < 4; ++q) transpose4x4(k[2 * q], k[2 * q + 1], k[2 * q + 8], k[2 * q + 9], out[q]);
  uint8_t* const dst = vt + (static_cast<int64_t>(blockIdx.z) * args.heads_kv + blockIdx.y) * kDV * rb + key0 + 16 * grp;
#pragma unroll
  for (int b = 0; b < 4; ++b)
    *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(4 * w + b) * rb) = make_uint4(out[0][b], out[1][b], out[2][b], out[3][b]);
}
#endif

// Decodes the 4 e4m3 bytes of w into two f16 pairs (exact): lo = bytes 0, 1; hi = bytes 2, 3.
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n.reg .b16 l16, h16;\nmov.b32 {l16, h16}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l16;\ncvt.rn.f16x2.e4m3x2 %1, h16;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
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

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Softmax pieces (quad_max / quad_sum: sm90/warp_ptx.h).

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}


__device__ __forceinline__ uint32_t bf16_pair(float p0, float p1) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(p0, p1);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t f16_pair(float p0, float p1) {
  const __half2 h = __floats2half2_rn(p0, p1);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The 16-bit P operand pair of P.V: bf16, or f16 for kPvF16.
__device__ __forceinline__ uint32_t p16_pair(float p0, float p1) {
  if constexpr (kPvF16) {
    return f16_pair(p0, p1);
  } else {
    return bf16_pair(p0, p1);
  }
}

// ---------------------------------------------------------------------------------------------
// The two GEMMs of one KV block for one consumer warpgroup (64 rows), each one committed group.

// S = Q K^T. q_tile: this warpgroup's 64 rows inside the Q tile (regions of kTileM rows); k_tile:
// one K stage. k-step ks covers bytes [32 ks, 32 ks + 32) of a row: region ks / 4, offset 32 (ks % 4).
// Descriptor forms: dq / dk describe the tile starts; a k-step's descriptor adds its byte offset / 16 to
// the start-address field (bits 0-13 hold (addr & 0x3ffff) >> 4: shared addresses stay below 2^18, so
// the add never carries out of the field). Keeps the per-wgmma descriptor arithmetic off the
// uniform datapath in the main loop.
__device__ __forceinline__ void issue_s_desc(float (&sacc)[kSAcc], uint64_t dq, uint64_t dk) {
#pragma unroll
  for (int ks = 0; ks < kQkSteps; ++ks) {
    const uint32_t off_q = (ks >> 2) * kTileM * 128 + (ks & 3) * 32;
    const uint32_t off_k = (ks >> 2) * kTileN * 128 + (ks & 3) * 32;
    wgmma_ss<kTileN, kQkType>(sacc, dq + (off_q >> 4), dk + (off_k >> 4), ks > 0 ? 1u : 0u);
  }
  wgmma_commit();
}

__device__ __forceinline__ void issue_s(float (&sacc)[kSAcc], uint32_t q_tile, uint32_t k_tile) {
  issue_s_desc(sacc, make_desc(q_tile, 16, 1024), make_desc(k_tile, 16, 1024));
}

// The V-stage descriptor of issue_pv (LBO / SBO per dtype).
__device__ __forceinline__ uint64_t v_desc(uint32_t v_tile) {
  return kPv16 ? make_desc(v_tile, kTileN * 128, 1024) : make_desc(v_tile, 16, 1024);
}

// O (+)= P V. v_tile: one V stage. bf16: V [key][d] is MN-major (d regions of 64 at LBO = kTileN x
// 128 B), a k-step is 16 keys = 2048 B; e4m3: Vt [d][key position] is K-major, a k-step is 32 bytes.
// fresh: the first k-step overwrites o (O promotion), else it accumulates. kLSumOnes: lsum = the block's
// row sums (wgmma_rs_n8_e4m3).
__device__ __forceinline__ void issue_pv_desc(float (&o)[kOAcc], float (&lsum)[4], const uint32_t (&p)[kPRegs], uint64_t dv,
                                              bool fresh, uint64_t d_ones) {
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) {
    // e4m3: k-step kk in Vt region kk / 4 (kVtRows rows of 128 B), bytes 32 (kk % 4) of each row.
    const uint64_t desc = dv + ((kPv16 ? kk * 16 * 128 : (kk >> 2) * kVtRows * 128 + (kk & 3) * 32) >> 4);
    const uint32_t scale_d = (fresh && kk == 0) ? 0u : 1u;
    wgmma_rs<kPvType>(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], desc, scale_d);
    if constexpr (kLSumOnes) {  // the region's ones rows (after its kDV rows); the first k-step starts fresh
      const uint64_t d1 = ZYFA_WS_ONES_FIXED != 0 ? d_ones : desc + ((kDV * 128) >> 4);  // d_ones: ZYFA_WS_ONES_FIXED
      wgmma_rs_n8_e4m3(lsum, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], d1, kk > 0 ? 1u : 0u);
    }
  }
  wgmma_commit();
}

// kLSumOnes: the descriptor of the ones rows that ZYFA_WS_ONES_FIXED reads, for `stages` V stages from dv0 (the first
// stage's descriptor): the region after them (kOnesRegion), else the first Vt region's own ones rows.
__device__ __forceinline__ uint64_t ones_desc(uint64_t dv0, int stages) {
  return dv0 + static_cast<uint32_t>((kOnesRegion ? stages * kVStageBytes : kDV * 128) >> 4);
}

__device__ __forceinline__ void issue_pv(float (&o)[kOAcc], float (&lsum)[4], const uint32_t (&p)[kPRegs], uint32_t v_tile,
                                         bool fresh) {
  issue_pv_desc(o, lsum, p, v_desc(v_tile), fresh, ones_desc(v_desc(v_tile), 1));
}

// kLSumOnes: Vt rows kDV .. kDV + 7 of every region of `stages` V stages at v_s = e4m3 1.0 (0x38). Written once
// by the calling threads (t of n); no load ever touches them. The caller fences and syncs.
__device__ __forceinline__ void write_ones_rows(uint32_t v_s, int stages, int t, int n) {
  if constexpr (kOnesRegion) {  // one region after the stages
    for (int i = t; i < 8 * 128 / 4; i += n) st_shared_u32(v_s + static_cast<uint32_t>(stages * kVStageBytes + 4 * i), 0x38383838u);
  } else if constexpr (kLSumOnes) {
    constexpr int kWords = 8 * 128 / 4;  // per region
    for (int i = t; i < stages * kVtRegions * kWords; i += n) {
      const int region = i / kWords;  // stage * kVtRegions + region of the stage
      st_shared_u32(v_s + static_cast<uint32_t>(region * kVtRows * 128 + kDV * 128 + (i % kWords) * 4), 0x38383838u);
    }
  }
}

// d (+)= A x ones, mma.sync m16n8k16 f16 -> f32 (A fragment: a0 / a2 row g, a1 / a3 row g + 8).
__device__ __forceinline__ void hmma_ones(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {
  constexpr uint32_t kOnes = 0x3c003c00u;  // f16x2 (1, 1)
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(kOnes), "r"(kOnes));
}

__device__ __forceinline__ uint32_t hadd2_u32(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

__device__ __forceinline__ float f16x2_sum_f32(uint32_t a) {  // low + high half in fp32 (exact conversions)
  const __half2 h = *reinterpret_cast<const __half2*>(&a);
  return __low2float(h) + __high2float(h);
}

// FP8: the sums of this thread's two rows (r = 0: g, 1: g + 8) over the block's packed P (see
// kOTiles and pack_p: p[4 kc + 2 h + r] holds 4 keys of row r). kLSum 0 / 1: whole rows (all 128
// keys; every lane of the quad gets the same value), two independent HMMA chains for latency;
// 2 / 3: this thread's 32 keys per row (quad-summed in the epilogue).
__device__ __forceinline__ void row_sums_e4m3(const uint32_t (&p)[kPRegs], float (&lsum)[2]) {
  if constexpr (kLSum <= 1) {
    float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int i = 0; i < kPRegs / 2; ++i) {  // i = 2 kc + h
      uint32_t lo0, hi0, lo1, hi1;
      e4m3x4_to_f16x2x2(p[2 * i], lo0, hi0);      // row g
      e4m3x4_to_f16x2x2(p[2 * i + 1], lo1, hi1);  // row g + 8
      hmma_ones(d[i & 1], lo0, lo1, hi0, hi1);
    }
    lsum[0] = d[0][0] + d[1][0];
    lsum[1] = d[0][2] + d[1][2];
  } else if constexpr (kLSum == 4) {
    float a[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // [row][chain]
#pragma unroll
    for (int i = 0; i < kPRegs / 2; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        uint32_t lo, hi;
        e4m3x4_to_f16x2x2(p[2 * i + r], lo, hi);
        const __half2 l2 = *reinterpret_cast<const __half2*>(&lo);
        const __half2 h2 = *reinterpret_cast<const __half2*>(&hi);
        a[r][0] += __low2float(l2) + __high2float(l2);  // each pair sum is exact in fp32
        a[r][1] += __low2float(h2) + __high2float(h2);
      }
    }
    lsum[0] = a[0][0] + a[0][1];
    lsum[1] = a[1][0] + a[1][1];
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      uint32_t h[kPRegs];  // 16 f16 pairs of row r
#pragma unroll
      for (int i = 0; i < kPRegs / 2; ++i) e4m3x4_to_f16x2x2(p[2 * i + r], h[2 * i], h[2 * i + 1]);
      if constexpr (kLSum == 2) {
#pragma unroll
        for (int i = 0; i < 8; ++i) h[i] = hadd2_u32(h[i], h[i + 8]);  // 16 pairs -> 8 -> 4 -> 2 -> 1
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = hadd2_u32(h[i], h[i + 4]);
        h[0] = hadd2_u32(h[0], h[2]);
        h[1] = hadd2_u32(h[1], h[3]);
        h[0] = hadd2_u32(h[0], h[1]);
        lsum[r] = f16x2_sum_f32(h[0]);
      } else {
        float a[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < kPRegs / 2; ++i) a[i & 1] += f16x2_sum_f32(hadd2_u32(h[2 * i], h[2 * i + 1]));
        lsum[r] = a[0] + a[1];
      }
    }
  }
}

// kPvF16: the same whole-row sums straight from the f16 P operand (k-step kk = p[4 kk .. 4 kk + 3] is
// already the m16n8k16 A fragment: rows g, g + 8, keys 16 kk + 2 tig, + 1, + 8, + 9), no decode.
__device__ __forceinline__ void row_sums_f16(const uint32_t (&p)[kPRegs], float (&lsum)[2]) {
  float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) hmma_ones(d[kk & 1], p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]);
  lsum[0] = d[0][0] + d[1][0];
  lsum[1] = d[0][2] + d[1][2];
}

// Everything one consumer warpgroup needs to know about its block.
struct Block {
  int head, kv_head, batch, q_row0, n_blocks;
  int64_t diag;  // row i sees keys <= i + diag
  bool causal;
};

// The signed-int max (kMax) or min of the float bits of this thread's values of row R (s[4 j + 2 R + x]):
// VIMNMX3, two new values per instruction, in two chains.
template <int R, bool kMax>
__device__ __forceinline__ int row_bits_minmax(const float (&s)[kSAcc]) {
  constexpr int kN = 2 * kSTiles;  // values of row R: element e at s[4 (e >> 1) + 2 R + (e & 1)]
  auto at = [&](int e) { return __float_as_int(s[4 * (e >> 1) + 2 * R + (e & 1)]); };
  auto op = [](int a, int b) { return kMax ? max(a, b) : min(a, b); };
  int c[2] = {at(0), at(1)};
#pragma unroll
  for (int e = 2; e + 1 < kN; e += 2) {
    int& ch = c[(e >> 1) & 1];
    ch = kMax ? __vimax3_s32(ch, at(e), at(e + 1)) : __vimin3_s32(ch, at(e), at(e + 1));
  }
  if constexpr (kN % 2 != 0) c[0] = op(c[0], at(kN - 1));
  return op(c[0], c[1]);
}

// ZYFA_WS_MAX3: max of this thread's values of row R from the int max of their bits; exact (see the macro)
// where it matters: when every value is negative the result may be a lower bound instead, if m_run (the
// row's running max, log2 units, same sign as S: qk_scale > 0) is >= 0 (ZYFA_WS_MAX3_LB).
template <int R>
__device__ __forceinline__ float row_max3(const float (&s)[kSAcc], float m_run) {
  const int m = row_bits_minmax<R, true>(s);
  float res = __int_as_float(m);
  if constexpr (ZYFA_WS_MAX3_LB != 0) {
    // m < 0: every value is negative, -0 or -inf, and res their most negative one. The exact max is needed
    // only if it could raise m_run; then it is the int min (the value nearest zero).
    if (m < 0 && !(m_run >= 0.0f)) res = __int_as_float(row_bits_minmax<R, false>(s));
  } else if (m < 0) {  // every value of this thread's row is negative, -0 or -inf: the float max the long way
    float f = -INFINITY;
#pragma unroll
    for (int e = 0; e < 2 * kSTiles; ++e) f = fmaxf(f, s[4 * (e >> 1) + 2 * R + (e & 1)]);
    res = f;
  }
  return res;
}

// One block of the online softmax for this thread's two rows (r = 0: row g, r = 1: row g + 8 of the
// warp's 16), first half: masks S, updates m, (bf16) rescales l and adds the block's p, returns
// alpha (the O rescale) and leaves in s what pack_p turns into the P operand: bf16: p = exp2(t - m);
// Lean P's e4m3 code in the low byte of a float: max(S A + B, 0) + 1.5 * 2^23, rounded to an integer
// by the add (ZYFA_WS_LEAN_SAT: the same value from a saturating FMA and one more FMA; valid for
// S A + B <= 128, which the fast softmax guarantees).
__device__ __forceinline__ float lean_code(float v, float a, float b) {
  if constexpr (ZYFA_WS_LEAN_SAT != 0) {
    float u;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;\n" : "=f"(u) : "f"(v), "f"(a * 0.0078125f), "f"(b * 0.0078125f));
    return fmaf(u, 128.0f, kLeanCodeBase);
  } else {
    return fmaxf(fmaf(v, a, b), 0.0f) + kLeanCodeBase;
  }
}

// kLeanF16: the f16x2 word {relu(x0), relu(x1)} of two keys' x = (S A + B) 2^-24 (see the macro): each half's bits
// are the rounded, clamped code.
__device__ __forceinline__ float lean_f16_word(float x0, float x1) {
  uint32_t w;
  asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(x1), "f"(x0));  // x0 in the low half
  return __uint_as_float(w);
}

// kLeanF16 after a softmax path that made code floats (1.5 * 2^23 + code): the same words, in s[4 j + 2 r]
// (s[4 j + 2 r + 1] is then dead). Exact: one FFMA gives code 2^-24.
template <int N>
__device__ __forceinline__ void lean_codes_to_f16(float (&s)[N]) {
  const auto x = [](float code_float) { return fmaf(code_float, kLeanF16Scale, -kLeanCodeBase * kLeanF16Scale); };
#pragma unroll
  for (int j = 0; j < N / 4; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) s[4 * j + 2 * r] = lean_f16_word(x(s[4 * j + 2 * r]), x(s[4 * j + 2 * r + 1]));
}

// FP8 exact: exp2(t - m + 8); FP8 lean: max(S A + B, 0) + 1.5 * 2^23 (the code sits in the low byte).
// It only touches s, m, l: it runs while the previous block's P.V wgmma still reads P.
// key0: first key of the block; row_lim[r]: the last key row r sees (-1: none).
// Fast path (qk_scale > 0, every real use): the row max is taken on the raw S (fl(max S * C) ==
// max fl(S C) since rounding is monotonic) and t - m is fused into one FFMA (FA3's form; it differs
// from the contract's two roundings by at most an ulp of the exponent argument). Lean P: the upper
// clamp at 126 never binds (S A + B = 8 (S C - m) + 120 <= 120 up to rounding) and masked keys
// (S = -inf) land on code 0 through the lower clamp. Other scales take the literal contract path.
template <bool kFast>
__device__ __forceinline__ void softmax_rows(float (&s)[kSAcc], float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                             float qk_scale, float lean_a) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    constexpr int kChains = ZYFA_WS_MAXTREE ? 4 : 1;  // independent FMNMX chains (latency)
    float mxc[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) mxc[c] = -INFINITY;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const float v = s[4 * j + 2 * r + x];
        float& mc = mxc[(2 * j + x) % kChains];
        mc = fmaxf(mc, (kFast || !kLeanP) ? v : (v == -INFINITY ? -INFINITY : v * qk_scale));
      }
    }
    float mx = mxc[0];
#pragma unroll
    for (int c = 1; c < kChains; ++c) mx = fmaxf(mx, mxc[c]);
    if constexpr (ZYFA_WS_MAX3 != 0 && kFast) {  // mxc then dead
      mx = r == 0 ? row_max3<0>(s, m_run[0]) : row_max3<1>(s, m_run[1]);
    }
    mx = quad_max(mx);
    float m_new = fmaxf(m_run[r], kFast ? mx * qk_scale : mx);
    if constexpr (kStaleTau > 0.0f) m_new = m_new > m_run[r] + kStaleTau ? m_new : m_run[r];
    alpha[r] = 1.0f;  // m_new == -inf: nothing visible yet, the block changes nothing
    if (m_new != -INFINITY) {
      alpha[r] = m_run[r] == -INFINITY ? 0.0f : ex2(m_run[r] - m_new);
      m_run[r] = m_new;
    }
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // keeps exp2(t - m) = 0 for masked t, not NaN
    const float lean_b = 120.0f - 8.0f * m_use;
    const float neg_m = kPShift - m_use;
    float lsum = 0.0f;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        float& v = s[4 * j + 2 * r + x];
        if constexpr (kFast) {
          if constexpr (kLeanP) {
            v = lean_code(v, lean_a, lean_b);
          } else {
            v = ex2(fmaf(v, qk_scale, neg_m));
            lsum += v;
          }
        } else {
          if constexpr (kLeanP) {
            const float code = fminf(fmaxf(fmaf(v, lean_a, lean_b), 0.0f), 126.0f) + kLeanCodeBase;
            v = v == -INFINITY ? kLeanCodeBase : code;  // masked: code 0
          } else {
            v = ex2((v - m_use) + kPShift);  // v is t = S C here (softmax_block scaled it)
            lsum += v;
          }
        }
      }
    }
    if constexpr (!kFp8) l_run[r] = l_run[r] * alpha[r] + lsum;
  }
}

// ZYFA_WS_SMX2: softmax_rows<true> with the two rows as one interleaved, branch-free chain (same
// per-element arithmetic and per-row summation order, so bitwise the same output).
__device__ __forceinline__ void softmax_rows_x2(float (&s)[kSAcc], float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                                float qk_scale, float lean_a) {
  constexpr int kChains = ZYFA_WS_MAXTREE ? 4 : 2;  // per row; the two rows add two more chains
  float mxc[2][kChains];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < kChains; ++c) mxc[r][c] = -INFINITY;
#pragma unroll
  for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        float& mc = mxc[r][(2 * j + x) % kChains];
        mc = fmaxf(mc, s[4 * j + 2 * r + x]);
      }
    }
  }
  float mx[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = mxc[r][0];
#pragma unroll
    for (int c = 1; c < kChains; ++c) mx[r] = fmaxf(mx[r], mxc[r][c]);
  }
  if constexpr (ZYFA_WS_MAX3 != 0) {  // the FMNMX chains above are then dead code
    mx[0] = row_max3<0>(s, m_run[0]);
    mx[1] = row_max3<1>(s, m_run[1]);
  }
#pragma unroll
  for (int k = 1; k <= 2; k <<= 1) {  // quad max, the two rows' shuffles in flight together
    const float o0 = __shfl_xor_sync(0xffffffffu, mx[0], k);
    const float o1 = __shfl_xor_sync(0xffffffffu, mx[1], k);
    mx[0] = fmaxf(mx[0], o0);
    mx[1] = fmaxf(mx[1], o1);
  }
  float neg_m[2], lean_b[2], lsum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m_new = fmaxf(m_run[r], mx[r] * qk_scale);
    if constexpr (kStaleTau > 0.0f) m_new = m_new > m_run[r] + kStaleTau ? m_new : m_run[r];
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // m_new == -inf implies m_run == -inf
    // m_new == -inf: nothing visible yet, alpha 1; m_run == -inf < m_new: ex2(-inf) = 0.
    alpha[r] = m_new == -INFINITY ? 1.0f : ex2(m_run[r] - m_use);
    m_run[r] = m_new;
    lean_b[r] = 120.0f - 8.0f * m_use;
    if constexpr (kLeanF16) lean_b[r] *= kLeanF16Scale;  // exact: see ZYFA_WS_LEAN_F16
    neg_m[r] = kPShift - m_use;
  }
#pragma unroll
  for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (kLeanF16) {
        const float a = lean_a * kLeanF16Scale;
        s[4 * j + 2 * r] = lean_f16_word(fmaf(s[4 * j + 2 * r], a, lean_b[r]), fmaf(s[4 * j + 2 * r + 1], a, lean_b[r]));
      } else {
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          float& v = s[4 * j + 2 * r + x];
          if constexpr (kLeanP) {
            v = lean_code(v, lean_a, lean_b[r]);
          } else {
            v = ex2(fmaf(v, qk_scale, neg_m[r]));
            lsum[r] += v;
          }
        }
      }
    }
  }
  if constexpr (!kFp8) {
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + lsum[r];
  }
}

__device__ __forceinline__ void softmax_block(float (&s)[kSAcc], float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                              int key0, bool need_mask, const int (&row_lim)[2], float qk_scale,
                                              float lean_a, int tig) {
  // Uniform branch: each path is its own straight-line code (no per-element selects between them).
  const bool fast = ZYFA_WS_FAST_SOFTMAX != 0 && qk_scale > 0.0f;
  if (!fast && !kLeanP) {
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) s[i] *= qk_scale;  // t = S C first; masked t are set below
  }
  if (need_mask) {
    // Element (j, e) holds key key0 + 8j + 2 tig + (e & 1); visible iff key <= row_lim[e >> 1].
    const int thr0 = row_lim[0] - key0 - 2 * tig;
    const int thr1 = row_lim[1] - key0 - 2 * tig;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (8 * j + (e & 1) > ((e >> 1) ? thr1 : thr0)) s[4 * j + e] = -INFINITY;
      }
    }
  }
  if (fast) {
    if constexpr (ZYFA_WS_SMX2 != 0) {
      softmax_rows_x2(s, m_run, l_run, alpha, qk_scale, lean_a);
    } else {
      softmax_rows<true>(s, m_run, l_run, alpha, qk_scale, lean_a);
      if constexpr (kLeanF16) lean_codes_to_f16(s);
    }
  } else {
    softmax_rows<false>(s, m_run, l_run, alpha, qk_scale, lean_a);
    if constexpr (kLeanF16) lean_codes_to_f16(s);
  }
}

// Second half, after the previous P.V has finished: s -> packed P operand (see the RS A fragment
// above). FP8's row sums are taken from the packed bytes (row_sums_e4m3).
// e4m3 (RNE, satfinite) of four floats into one word, bytes {a0, a1, b0, b1}: two cvt into 16-bit
// halves joined by a mov (no masking: __nv_cvt_float2_to_fp8x2 + __byte_perm cost a LOP3 per pair).
__device__ __forceinline__ uint32_t e4m3x4(float a0, float a1, float b0, float b1) {
  uint32_t w;
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\ncvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(w)
      : "f"(a0), "f"(a1), "f"(b0), "f"(b1));
  return w;
}

__device__ __forceinline__ void pack_p(const float (&s)[kSAcc], uint32_t (&p)[kPRegs]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int j = 0; j < kSTiles; j += 2) {
      // Tiles j, j + 1 of row r: values s[4 j + 2 r + {0, 1}] and s[4 (j + 1) + 2 r + {0, 1}].
      const float a0 = s[4 * j + 2 * r], a1 = s[4 * j + 2 * r + 1];
      const float b0 = s[4 * (j + 1) + 2 * r], b1 = s[4 * (j + 1) + 2 * r + 1];
      if constexpr (kPv16) {
        // k-step kk = j / 2 of P.V: a = {P[j][r0], P[j][r1], P[j+1][r0], P[j+1][r1]}
        p[2 * j + r] = p16_pair(a0, a1);
        p[2 * (j + 1) + r] = p16_pair(b0, b1);
      } else {
        // k-step kc = j / 4: a0/a1 (rows g, g+8) = tiles 4kc, 4kc+1; a2/a3 = tiles 4kc+2, 4kc+3.
        uint32_t w;
        if constexpr (kLeanF16) {  // f16 words {a0, a1} and {b0, b1}: the codes are their bytes 0 and 2
          w = __byte_perm(__float_as_uint(a0), __float_as_uint(b0), 0x6420);
        } else if constexpr (kLeanP) {  // the code sits in the low byte of each float
          w = __byte_perm(__byte_perm(__float_as_uint(a0), __float_as_uint(a1), 0x0040),
                          __byte_perm(__float_as_uint(b0), __float_as_uint(b1), 0x0040), 0x5410);
        } else {
          w = e4m3x4(a0, a1, b0, b1);
        }
        p[4 * (j >> 2) + 2 * ((j >> 1) & 1) + r] = w;
      }
    }
  }
}


// The staged epilogue (kOStageCols != 0): one consumer warp's 16 rows of out (rows row0 .. row0 + 15 of the
// block; this thread holds rows g, g + 8 at columns 8 j + 2 tig, + 1) through its region ost of 16 rows x
// kOStageCols bf16, in kDV / kOStageCols passes: stmatrix.x4 puts the accumulator fragments of columns
// 8 j .. 8 j + 15 of both row halves into the region (16-byte chunk c of local row lr at chunk
// c ^ (lr & 7): conflict-free for the stmatrix rows and the 16-byte reads), then each group of
// kOStageCols / 8 lanes stores one row's pass-columns per step with 16-byte global stores.

template <int kCols>  // kOStageCols (a template: the kernels without staging never instantiate it)
__device__ __forceinline__ void store_o_staged(const float (&o)[kOAcc], const float (&row_scale)[2],
                                               const zyfa_fwd_args& args, const Block& blk, uint32_t ost,
                                               int64_t row0, int seqlen_q, int lane) {
  static_assert(kCols == 64 || kCols == 128, "a staged pass is 8 or 16 chunks of 16 bytes");
  constexpr int kRowBytes = kCols * 2;
  constexpr int kChunks = kCols / 8;     // 16-byte chunks per staged row = lanes per row in the stores
  constexpr int kRowsPerStep = 32 / kChunks;   // rows one warp-wide 16-byte store covers
  // Matrix m of an x4: rows (m & 1) * 8 .. + 7, columns 8 (j + (m >> 1)) .. + 7; lane L gives the address
  // of row L & 7 of matrix L >> 3.
  const int m = lane >> 3;
  const int lr = (lane & 7) + 8 * (m & 1);
  const int c = lane % kChunks;
#pragma unroll
  for (int pass = 0; pass < kDV / kCols; ++pass) {
    __syncwarp();  // the previous pass's (or item's) reads of this region are done
#pragma unroll
    for (int jl = 0; jl < kChunks; jl += 2) {
      const int j = pass * kChunks + jl;
      const int cs = jl + (m >> 1);
      stmatrix_x4(ost + lr * kRowBytes + ((cs ^ (lr & 7)) << 4),
                  bf16_pair(o[4 * j] * row_scale[0], o[4 * j + 1] * row_scale[0]),
                  bf16_pair(o[4 * j + 2] * row_scale[1], o[4 * j + 3] * row_scale[1]),
                  bf16_pair(o[4 * (j + 1)] * row_scale[0], o[4 * (j + 1) + 1] * row_scale[0]),
                  bf16_pair(o[4 * (j + 1) + 2] * row_scale[1], o[4 * (j + 1) + 3] * row_scale[1]));
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 16 / kRowsPerStep; ++it) {
      const int r = kRowsPerStep * it + lane / kChunks;
      const int64_t row = row0 + r;
      const uint4 v = ld_shared_v4(ost + r * kRowBytes + ((c ^ (r & 7)) << 4));
      if (row < seqlen_q) {
        __nv_bfloat16* const dst = static_cast<__nv_bfloat16*>(args.out) +
                                   static_cast<int64_t>(blk.batch) * args.out_stride_batch +
                                   row * args.out_stride_seq + static_cast<int64_t>(blk.head) * args.out_stride_head +
                                   pass * kCols + 8 * c;
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");  // one 16-byte store (a uint4 assignment became four 4-byte stores)
      }
    }
  }
}

}  // namespace zyfa_sm90_ws

// ---------------------------------------------------------------------------------------------
// The kernel.

#if ZYFA_WS_TMA
extern "C" __global__ void __launch_bounds__(ZYFA_THREADS, 1)
    ZYFA_KERNEL_NAME(const zyfa_fwd_args args, const __grid_constant__ zyfa_tma_maps maps) {
  const bool tma_on = maps.valid != 0;
#else
extern "C" __global__ void __launch_bounds__(ZYFA_THREADS, 1) ZYFA_KERNEL_NAME(const zyfa_fwd_args args) {
  constexpr bool tma_on = false;
#endif
  using namespace zyfa_sm90_ws;
  // Arrivals that complete a full barrier's phase: the 128 producer threads, or the one TMA thread
  // (e4m3 V: always the 128 threads of the transpose).
  const uint32_t full_arrivals = tma_on ? 1u : 128u;
  const uint32_t v_full_arrivals = (tma_on && !kFp8) ? 1u : 128u;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = ZYFA_WS_NOALIGN != 0 ? smem_u32(smem_raw) : (smem_u32(smem_raw) + 1023u) & ~1023u;
  if constexpr (ZYFA_WS_NOALIGN != 0) {
    if ((base & 1023u) != 0u) __trap();  // the layout's 1024-byte alignment (swizzle atoms) would not hold
  }
  const uint32_t q_s = base;
  const uint32_t k_s = q_s + kQBytes;
  const uint32_t v_s = k_s + kStages * kKStageBytes;
  // The mbarriers follow the e4m3 V staging buffers (kStagingBytes; 0 for bf16), as kSmemBytes counts them.
  // Until the sixth session they started AT the staging buffers: V row 0 of every even block was
  // cp.async-written over the mbarrier objects (undefined behaviour by the PTX ISA; nvdisasm showed
  // SYNCS.EXCH.64 [UR4+0x20000] and LDGSTS [R3+0x20000] on the same bytes), which no test caught.
  const uint32_t bars = v_s + kStages * kVStageBytes + kOnesBytes + kStagingBytes;
  const uint32_t bar_q = bars;
  auto bar_full_k = [&](int s) { return bars + 8u * (1 + s); };
  auto bar_full_v = [&](int s) { return bars + 8u * (1 + kStages + s); };
  auto bar_empty_k = [&](int s) { return bars + 8u * (1 + 2 * kStages + s); };
  auto bar_empty_v = [&](int s) { return bars + 8u * (1 + 3 * kStages + s); };

  const int seqlen_q = args.seqlen_q;
  const int seqlen_k = args.seqlen_k;
#if ZYFA_WS_PERSISTENT
  // Work items from the ABI args only (the grid is (SMs, 1, 1)): item i -> rank i / n_pairs (0: the
  // longest causal rows, the last q tile), pair i % n_pairs (hb = batch * heads_q + head).
  const uint32_t n_qtiles = seqlen_q > 0 ? static_cast<uint32_t>((seqlen_q + kTileM - 1) / kTileM) : 0u;
  const uint32_t n_pairs = static_cast<uint32_t>(args.heads_q) * static_cast<uint32_t>(args.batch);
  const uint32_t n_items = n_qtiles * n_pairs;
  const bool causal_all = (args.flags & ZYFA_FLAG_CAUSAL) != 0u;
  const int64_t diag_all = static_cast<int64_t>(seqlen_k) - seqlen_q;
  const int group_ratio = args.heads_q / args.heads_kv;
  // ZYFA_WS_PSCHED 2: with many (head, batch) pairs the items go pair-major (each pair's q tiles
  // longest first, pairs one after another: ORDER 3's L2 reuse of one head's K / V at a time).
  const bool pair_major = ZYFA_WS_PSCHED >= 2 && n_pairs > ZYFA_WS_LPT_PAIRS;
  auto item_block = [&](uint32_t item) {
    Block b;
    const uint32_t rank = pair_major ? item % n_qtiles : item / n_pairs;
    const uint32_t hb = pair_major ? item / n_qtiles : item - rank * n_pairs;
    b.head = static_cast<int>(hb % static_cast<uint32_t>(args.heads_q));
    b.batch = static_cast<int>(hb / static_cast<uint32_t>(args.heads_q));
    b.q_row0 = static_cast<int>(n_qtiles - 1u - rank) * kTileM;
    b.kv_head = b.head / group_ratio;
    b.causal = causal_all;
    b.diag = diag_all;
    const int rows = min(kTileM, seqlen_q - b.q_row0);
    int64_t kend = seqlen_k;
    if (b.causal) kend = min(kend, static_cast<int64_t>(b.q_row0) + rows - 1 + b.diag + 1);
    b.n_blocks = kend > 0 ? static_cast<int>((kend + kTileN - 1) / kTileN) : 0;
    return b;
  };
  const uint32_t bar_q_empty = bars + 8u * (1 + 4 * kStages);  // 8 arrivals: one per consumer warp
  // The k-th item of this CTA (>= n_items: none left). ZYFA_WS_PSCHED 0: items x, x + G, x + 2 G, ...
  // (G = gridDim.x); >= 1: boustrophedon rounds (odd rounds reversed), so that in the rank-major list,
  // whose costs fall along each round, the CTA that takes a round's longest item takes the next
  // round's shortest: per-CTA work balances to within one round's spread instead of growing with it.
  auto cta_item = [&](uint32_t k) {
    const uint32_t lane_in_round = (ZYFA_WS_PSCHED != 0 && (k & 1u)) ? gridDim.x - 1u - blockIdx.x : blockIdx.x;
    return k * gridDim.x + lane_in_round;
  };
#else
  Block blk;
  if constexpr (ZYFA_WS_ORDER == 0) {
    blk.head = static_cast<int>(blockIdx.y);
    blk.batch = static_cast<int>(blockIdx.z);
  } else {
    // See ZYFA_WS_ORDER. Pairs hb = batch * heads + head (GQA groups adjacent); lin = x + nx (y + ny z).
    const uint32_t nx = gridDim.x, ny = gridDim.y, nhb = gridDim.y * gridDim.z;
    const uint32_t lin = blockIdx.x + nx * (blockIdx.y + ny * blockIdx.z);
    uint32_t gsz = nhb;  // pairs per group (ORDER 1: one group)
    if constexpr (ZYFA_WS_ORDER == 2) {
      // (K + V) bytes of one kv head over the whole key range; whole GQA groups of q heads per group.
      const uint64_t kv_bytes = static_cast<uint64_t>(seqlen_k > 0 ? seqlen_k : 1) * (kDQk + kDV) * kESize;
      const uint32_t ratio = static_cast<uint32_t>(args.heads_q / args.heads_kv);
      const uint64_t kv_fit = (32ull << 20) / kv_bytes;
      gsz = static_cast<uint32_t>(min(static_cast<uint64_t>(nhb), max(kv_fit, static_cast<uint64_t>(1)) * ratio));
    }
    const uint32_t group = lin / (gsz * nx);
    const uint32_t g0 = group * gsz;                 // first pair of this group
    const uint32_t gcur = min(gsz, nhb - g0);        // pairs in this group (the last may be short)
    const uint32_t local = lin - g0 * nx;            // < gcur * nx
    const uint32_t rank = local / gcur;              // 0: the longest tiles
    const uint32_t hb = g0 + (local - rank * gcur);
    blk.head = static_cast<int>(hb % ny);
    blk.batch = static_cast<int>(hb / ny);
    blk.q_row0 = static_cast<int>(nx - 1u - rank) * kTileM;
    if (ZYFA_WS_ORDER == 3 && nhb > ZYFA_WS_LPT_PAIRS) {  // many pairs: the default order (L2 reuse)
      blk.head = static_cast<int>(blockIdx.y);
      blk.batch = static_cast<int>(blockIdx.z);
      blk.q_row0 = static_cast<int>(nx - 1u - blockIdx.x) * kTileM;
    }
  }
  blk.kv_head = blk.head / (args.heads_q / args.heads_kv);
  blk.causal = (args.flags & ZYFA_FLAG_CAUSAL) != 0u;
  if constexpr (ZYFA_WS_ORDER == 0) {
    // Reverse order: the last q tiles (longest causal rows) of a head are launched first.
    blk.q_row0 = static_cast<int>(gridDim.x - 1u - blockIdx.x) * kTileM;
  }
  blk.diag = static_cast<int64_t>(seqlen_k) - seqlen_q;
  const int q_rows = min(kTileM, seqlen_q - blk.q_row0);
  int64_t kv_end = seqlen_k;  // keys [0, kv_end) are visible to at least one row of the tile
  if (blk.causal) kv_end = min(kv_end, static_cast<int64_t>(blk.q_row0) + q_rows - 1 + blk.diag + 1);
  blk.n_blocks = kv_end > 0 ? static_cast<int>((kv_end + kTileN - 1) / kTileN) : 0;
#endif

  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    mbar_init(bar_q, full_arrivals);
#if ZYFA_WS_PERSISTENT
    mbar_init(bar_q_empty, 8);
#endif
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_full_k(s), full_arrivals);  // one arrival per producer thread (TMA: its one thread)
      mbar_init(bar_full_v(s), v_full_arrivals);
      mbar_init(bar_empty_k(s), 8);   // one arrival per consumer warp
      mbar_init(bar_empty_v(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    fence_proxy_async();
  }
  if constexpr (kLSumOnes) {
    write_ones_rows(v_s, kStages, tid, kThreads);
    fence_proxy_async();  // generic-proxy writes -> the wgmma (async proxy) reads after the barrier
  }
  __syncthreads();

  // Broadcast from lane 0 so the compiler knows the warpgroup index is warp-uniform (descriptors
  // derived from it then stay in uniform registers, next to the wgmma that reads them).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (wg == 0) {
    // ================================ producer warpgroup ================================
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    // TMA (bf16): one thread issues every load; the others would only poll. e4m3 keeps all 128 for V.
    if (tma_on && !kFp8 && tid != 0) return;
#if ZYFA_WS_PERSISTENT
    int kv_base = 0;       // K / V blocks loaded by this CTA before this item (ring position)
    uint32_t q_loads = 0;  // Q tiles loaded before this item (Q full / empty phases)
#pragma unroll 1
    for (uint32_t k_item = 0;; ++k_item) {
    const uint32_t item = cta_item(k_item);
    if (item >= n_items) break;
    const Block blk = item_block(item);
    // The thread index re-read per item (volatile: not hoisted), so the per-thread shared-memory
    // addresses derived from it are recomputed per item instead of held live across the item loop
    // (the e4m3 producer spilled 20 B at 72 registers otherwise).
    int t;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
#else
    const int t = tid;
    constexpr int kv_base = 0;
#endif
    const uint8_t* const q_base = static_cast<const uint8_t*>(args.q) +
        (static_cast<int64_t>(blk.batch) * args.q_stride_batch + static_cast<int64_t>(blk.head) * args.q_stride_head) * kESize;
    const uint8_t* const k_base = static_cast<const uint8_t*>(args.k) +
        (static_cast<int64_t>(blk.batch) * args.k_stride_batch + static_cast<int64_t>(blk.kv_head) * args.k_stride_head) * kESize;
    const uint8_t* const v_base = kVPre
        ? static_cast<const uint8_t*>(args.v) +
              (static_cast<int64_t>(blk.batch) * args.heads_kv + blk.kv_head) * kDV * vt_row_bytes(seqlen_k)
        : static_cast<const uint8_t*>(args.v) +
              (static_cast<int64_t>(blk.batch) * args.v_stride_batch + static_cast<int64_t>(blk.kv_head) * args.v_stride_head) * kESize;
    // 16-byte copies are legal only if every row start is 16-byte aligned (uniform per launch).
    const bool vec_ok =
        ((reinterpret_cast<uintptr_t>(args.q) | reinterpret_cast<uintptr_t>(args.k) |
          reinterpret_cast<uintptr_t>(args.v)) & 15u) == 0u &&
        (((args.q_stride_batch | args.q_stride_seq | args.q_stride_head | args.k_stride_batch | args.k_stride_seq |
           args.k_stride_head | args.v_stride_batch | args.v_stride_seq | args.v_stride_head) * kESize) & 15) == 0;
    auto signal = [&](uint32_t bar) {
      if (vec_ok) {
        cp_async_arrive_noinc(bar);
      } else {
        fence_proxy_async();
        mbar_arrive(bar);
      }
    };
    if (blk.n_blocks > 0) {
#if ZYFA_WS_PERSISTENT
      // Q of the previous item is free once every consumer warp's last S wgmma has completed.
      mbar_wait(bar_q_empty, (q_loads & 1u) ^ 1u);
      ++q_loads;
#endif
#if ZYFA_WS_TMA
      if (tma_on) {
        if (!kFp8 || t == 0) {  // bf16: thread 0 is the only producer thread left
          mbar_arrive_expect_tx(bar_q, kQBytes);
#pragma unroll
          for (int r = 0; r < kQkRegions; ++r)
            tma_load_4d(q_s + r * kTileM * 128, &maps.q, kBoxElems * r, blk.q_row0, blk.head, blk.batch, bar_q);
        }
      } else
#endif
      {
        load_tile<kTileM, kQkChunks>(q_s, q_base, args.q_stride_seq * kESize, blk.q_row0, seqlen_q, vec_ok, t);
        signal(bar_q);
      }
    }
    const uint32_t stg = v_s + kStages * kVStageBytes + kOnesBytes;  // kVStaged: two staging buffers (the mbarriers after them)
    if constexpr (kVStaged) {
      if (blk.n_blocks > 0) load_v_staging(stg, v_base, args.v_stride_seq, 0, seqlen_k, vec_ok, t);
      cp_async_commit();
    }
#pragma unroll 1
    for (int j = 0; j < blk.n_blocks; ++j) {
      const int s = (j + kv_base) % kStages;
      const uint32_t parity = (((j + kv_base) / kStages) & 1) ^ 1;
      if (!kFp8 || !tma_on) mbar_wait(bar_empty_k(s), parity);  // e4m3 TMA: only the issuing thread waits
#if ZYFA_WS_TMA
      if (tma_on) {
        if (!kFp8 || t == 0) {
          if constexpr (kFp8) mbar_wait(bar_empty_k(s), parity);
          mbar_arrive_expect_tx(bar_full_k(s), kKStageBytes);
#pragma unroll
          for (int r = 0; r < kQkRegions; ++r)
            tma_load_4d(k_s + s * kKStageBytes + r * kTileN * 128, &maps.k, kBoxElems * r, j * kTileN, blk.kv_head,
                        blk.batch, bar_full_k(s));
        }
        if constexpr (!kFp8) {
          mbar_wait(bar_empty_v(s), parity);
          mbar_arrive_expect_tx(bar_full_v(s), kVStageBytes);
#pragma unroll
          for (int r = 0; r < kVChunks / 8; ++r)
            tma_load_4d(v_s + s * kVStageBytes + r * kTileN * 128, &maps.v, kBoxElems * r, j * kTileN, blk.kv_head,
                        blk.batch, bar_full_v(s));
          continue;
        }
      } else
#endif
      {
        load_tile<kTileN, kQkChunks>(k_s + s * kKStageBytes, k_base, args.k_stride_seq * kESize, j * kTileN, seqlen_k,
                                     vec_ok, t);
        signal(bar_full_k(s));
      }
      if constexpr (kVStaged) {
        // Groups: ..., V_j staging (issued last iteration), K_j, V_{j+1} staging.
        cp_async_commit();
        const bool ahead = j + 1 < blk.n_blocks;
        if (ahead) load_v_staging(stg + ((j + 1) & 1) * kTileN * 128, v_base, args.v_stride_seq, (j + 1) * kTileN,
                                  seqlen_k, vec_ok, t);
        cp_async_commit();
        cp_async_wait_group<2>();     // V_j staging has landed (this thread's copies)
        named_bar_sync(3, 128);       // ... and every producer thread's
        mbar_wait(bar_empty_v(s), parity);
        if constexpr (kPvF16) {
          convert_staging(v_s + s * kVStageBytes, stg + (j & 1) * kTileN * 128, t);
        } else {
          if constexpr (ZYFA_WS_VT_LDSM != 0) {
            transpose_staging_ldsm(v_s + s * kVStageBytes, stg + (j & 1) * kTileN * 128, t);
          } else {
            transpose_staging(v_s + s * kVStageBytes, stg + (j & 1) * kTileN * 128, t);
          }
        }
        fence_proxy_async();
        mbar_arrive(bar_full_v(s));
        named_bar_sync(3, 128);       // staging buffer j & 1 is free for V_{j+2}
      } else {
        mbar_wait(bar_empty_v(s), parity);
        if constexpr (kVPre) {  // Vt rows are d, a tile's chunks the 16-key groups: K's load, K's layout
          load_tile<kDV, kTileN / 16>(v_s + s * kVStageBytes, v_base + j * kTileN, vt_row_bytes(seqlen_k), 0, kDV,
                                      vec_ok, t);
          signal(bar_full_v(s));
        } else if constexpr (kFp8) {
          load_vt_e4m3(v_s + s * kVStageBytes, v_base, args.v_stride_seq, j * kTileN, seqlen_k, vec_ok, t);
          fence_proxy_async();
          mbar_arrive(bar_full_v(s));
        } else {
          load_tile<kTileN, kVChunks>(v_s + s * kVStageBytes, v_base, args.v_stride_seq * kESize, j * kTileN, seqlen_k,
                                      vec_ok, t);
          signal(bar_full_v(s));
        }
      }
    }
#if ZYFA_WS_PERSISTENT
    kv_base += blk.n_blocks;
    }  // item loop
#endif
    cp_async_wait_all();
  } else {
  // ================================ consumer warpgroups ================================
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int cw = wg - 1;              // consumer 0 / 1: rows 64 cw .. 64 cw + 63 of the tile
  const int wt = tid - 128 * wg;      // thread within the warpgroup
  const int warp = wt >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int tig = lane & 3;
#if ZYFA_WS_PERSISTENT
  int ring_s = 0;         // K / V ring stage and phase parity of this item's block 0
  uint32_t ring_ph = 0;
  uint32_t q_phase = 0;   // Q full-barrier parity of this item's Q
#pragma unroll 1
  for (uint32_t k_item = 0;; ++k_item) {
  const uint32_t item = cta_item(k_item);
  if (item >= n_items) break;
  const Block blk = item_block(item);
#else
  constexpr int ring_s = 0;
  constexpr uint32_t ring_ph = 0;
  constexpr uint32_t q_phase = 0;
#endif
  const int n = blk.n_blocks;
  const int64_t wg_row0 = static_cast<int64_t>(blk.q_row0) + 64 * cw;  // first row of this warpgroup
  const int64_t row_a = wg_row0 + 16 * warp + g;                        // this thread's rows: row_a, row_a + 8

  // Last key each of this thread's rows sees, clamped to [-1, seqlen_k - 1].
  int row_lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int64_t lim = static_cast<int64_t>(seqlen_k) - 1;
    if (blk.causal) lim = min(lim, row_a + 8 * r + blk.diag);
    row_lim[r] = static_cast<int>(max(lim, static_cast<int64_t>(-1)));
  }

  const float qk_scale = kFp8 ? args.softmax_scale * args.q_descale * args.k_descale * kLog2e
                              : args.softmax_scale * kLog2e;
  const float lean_a = 8.0f * qk_scale;
  const float v_descale = kFp8 ? args.v_descale : 1.0f;

  // Ping-pong: consumer cw waits on barrier 1 + cw before issuing, then hands the turn over.
  const uint32_t pp_mine = 1u + cw;
  const uint32_t pp_other = 2u - cw;
  auto pp_sync = [&]() {
    if constexpr (kPingPong) named_bar_sync(pp_mine, 256);
  };
  auto pp_arrive = [&](bool last) {
    if constexpr (kPingPong) {
      if (!(last && cw == 1)) named_bar_arrive(pp_other, 256);  // keeps arrivals == syncs per barrier
    }
  };
  if (kPingPong && cw == 1 && n > 0) named_bar_arrive(pp_other, 256);  // consumer 0 goes first

  const uint32_t q_tile = q_s + cw * 64 * 128;  // this warpgroup's rows of Q

  float o[kOAcc];
  float lones[4];  // kLSumOnes: the row sums of the P.V in flight
  float ob[kOAcc];  // kOPromote: this block's P.V (fresh wgmma accumulator), added to o after the block
  float sacc[kSAcc];
  uint32_t p[kPRegs];
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) ob[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kSAcc; ++i) sacc[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kPRegs; ++i) p[i] = 0u;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};  // bf16: this thread's partial row sums (quad-summed at the end); FP8: whole rows
  float lblk[2] = {0.0f, 0.0f};   // FP8: the sums of the block just packed (row_sums_e4m3)
#pragma unroll
  for (int i = 0; i < 4; ++i) lones[i] = 0.0f;
  float (&opv)[kOAcc] = *(kOPromote ? &ob : &o);  // where P.V accumulates

  const uint64_t dq = make_desc(q_tile, 16, 1024);
  const uint64_t dk0 = make_desc(k_s, 16, 1024);
  const uint64_t dv0 = v_desc(v_s);
  auto issue_s_block = [&](int st) { issue_s_desc(sacc, dq, dk0 + static_cast<uint32_t>(st * (kKStageBytes >> 4))); };
  auto issue_pv_block = [&](int st) {
    issue_pv_desc(opv, lones, p, dv0 + static_cast<uint32_t>(st * (kVStageBytes >> 4)), kOPromote, ones_desc(dv0, kStages));
  };
  // FP8, contract order: l = l * alpha_j + sum(P_j), alpha_j the rescale of block j's max. The sums
  // of P_j are taken from the P registers while P_j V_j (which reads them) and S_{j+1} run (kLSum
  // != 1) or right after P_j V_j has finished (kLSum == 1), before P_{j+1} overwrites them.
  float alpha_prev[2] = {1.0f, 1.0f};
  auto add_block_sums = [&](bool in_flight) {
    if constexpr (ZYFA_WS_BOUND >= 1) {
      if (!in_flight) {
#pragma unroll
        for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha_prev[r] + 1.0f;  // timing bound only
      }
    } else if constexpr (kFp8) {
      if (in_flight == kLSumInFlight) {
        if constexpr (kLSumOnes) {  // after the P.V wait: its block's sums
          lblk[0] = lones[0];
          lblk[1] = lones[2];
        } else if constexpr (kPvF16) {
          row_sums_f16(p, lblk);
        } else {
          row_sums_e4m3(p, lblk);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha_prev[r] + lblk[r];
      }
    }
  };
  // Block j needs the tail / causal mask iff it is not whole and fully visible to every row of this warpgroup.
  // (Testing j against the first such block, computed once per item, measured even twice: runs 31 and 55.)
  auto need_mask = [&](int j) {
    const int key0 = j * kTileN;
    return key0 + kTileN > seqlen_k || (blk.causal && key0 + kTileN - 1 > wg_row0 + blk.diag);
  };
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbar_arrive(bar);
  };
  auto run_softmax = [&](float (&alpha)[2], int j) {
    if constexpr (ZYFA_WS_BOUND >= 2) {
      alpha[0] = alpha[1] = 1.0f;  // timing bound only: S is packed unchanged
    } else {
      softmax_block(sacc, m_run, l_run, alpha, j * kTileN, need_mask(j), row_lim, qk_scale, lean_a, tig);
    }
  };
  // ZYFA_WS_RESCALE_EARLY: the O rescale still owed (alpha of the block last packed), applied before the
  // next P.V issue.
  constexpr bool kEarly = ZYFA_WS_RESCALE_EARLY != 0 && !kOPromote;
  bool pend_rescale = false;
  float alpha_pend[2] = {1.0f, 1.0f};
  auto apply_pending_rescale = [&]() {
    if constexpr (kEarly) {
      if (pend_rescale) {  // warp-uniform
#pragma unroll
        for (int i = 0; i < kOAcc; ++i) o[i] *= alpha_pend[(i >> 1) & 1];
      }
    }
  };

  if (n > 0) {
    mbar_wait(bar_q, q_phase);
    // ---- block 0: S_0 only
    mbar_wait(bar_full_k(ring_s), ring_ph);
    pp_sync();
    fence_regs(sacc);
    wgmma_fence();
    issue_s_block(ring_s);
    pp_arrive(false);
    wgmma_wait<0>();
    fence_regs(sacc);
    release(bar_empty_k(ring_s));
    float alpha[2];
    run_softmax(alpha, 0);
    pack_p(sacc, p);
    alpha_prev[0] = alpha[0];
    alpha_prev[1] = alpha[1];

    // ---- blocks 1..n-1: S_j overlapped with P_{j-1} V_{j-1}. s / ph: stage and phase parity of
    // block j (j % kStages, (j / kStages) & 1), kept incrementally.
    int s = ring_s;
    uint32_t ph = ring_ph;
#pragma unroll 1
    for (int j = 1; j < n; ++j) {
      const int sp = s;
      const uint32_t php = ph;
      if (++s == kStages) {
        s = 0;
        ph ^= 1u;
      }
      mbar_wait(bar_full_k(s), ph);
      pp_sync();
      fence_regs(sacc);
      fence_regs(opv);
      fence_regs(lones);
      fence_regs(p);
      wgmma_fence();
      issue_s_block(s);
      if constexpr (!kOverlap) wgmma_wait<0>();
      apply_pending_rescale();  // kEarly: O *= alpha_{j-1} while S_j runs
      mbar_wait(bar_full_v(sp), php);
      fence_regs(opv);
      fence_regs(lones);
      fence_regs(p);
      wgmma_fence();  // the P.V group has its own fence (FA3 order), ptxas wants one per group
      issue_pv_block(sp);
      pp_arrive(false);
      add_block_sums(true);  // P_{j-1}
      wgmma_wait<1>();
      fence_regs(sacc);
      release(bar_empty_k(s));
      run_softmax(alpha, j);
      wgmma_wait<0>();
      fence_regs(opv);
      fence_regs(lones);
      fence_regs(p);  // P_{j-1} stays live until its wgmma has finished reading it
      release(bar_empty_v(sp));
      add_block_sums(false);  // P_{j-1} (kLSum == 1)
      const bool rescale = ZYFA_WS_RESCALE_SKIP == 0 || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f);
      if constexpr (kOPromote) {
        // o (blocks < j - 1) and ob (block j - 1) are in the scale of the previous max.
        if (rescale) {
#pragma unroll
          for (int i = 0; i < kOAcc; ++i) o[i] = (o[i] + ob[i]) * alpha[(i >> 1) & 1];
        } else {
#pragma unroll
          for (int i = 0; i < kOAcc; ++i) o[i] += ob[i];
        }
      } else if constexpr (kEarly) {
        pend_rescale = rescale;  // applied before P_j V_j is issued (next iteration or the last P V)
        alpha_pend[0] = alpha[0];
        alpha_pend[1] = alpha[1];
      } else if (rescale) {  // only when some row of the warp raised its max (warp-uniform branch)
#pragma unroll
        for (int i = 0; i < kOAcc; ++i) o[i] *= alpha[(i >> 1) & 1];
      }
      pack_p(sacc, p);  // P registers are written only outside any wgmma's flight (FA3 order)
      alpha_prev[0] = alpha[0];
      alpha_prev[1] = alpha[1];
    }

#if ZYFA_WS_PERSISTENT
    // Every S of this item (the only Q reads) has completed in this warp: Q may be reloaded.
    release(bar_q_empty);
#endif
    // ---- last P V
    const int sl = s;  // block n - 1
    mbar_wait(bar_full_v(sl), ph);
    pp_sync();
    apply_pending_rescale();
    fence_regs(opv);
    fence_regs(lones);
    fence_regs(p);
    wgmma_fence();
    issue_pv_block(sl);
    pp_arrive(true);
    add_block_sums(true);  // P_{n-1}
    wgmma_wait<0>();
    fence_regs(opv);
    fence_regs(lones);
    fence_regs(p);
    release(bar_empty_v(sl));
    add_block_sums(false);
    if constexpr (kOPromote) {
#pragma unroll
      for (int i = 0; i < kOAcc; ++i) o[i] += ob[i];
    }
#if ZYFA_WS_PERSISTENT
    // The next item's block 0 takes the ring slot after block n - 1; its Q the next phase.
    ring_s = s + 1;
    ring_ph = ph;
    if (ring_s == kStages) {
      ring_s = 0;
      ring_ph ^= 1u;
    }
    q_phase ^= 1u;
#endif
  }

  // ---- epilogue: out = acc * (v_descale / l) -> bf16 (l == 0 -> 0); lse (l == 0 -> +inf)
  const bool out_vec_ok = (reinterpret_cast<uintptr_t>(args.out) & 3u) == 0u &&
                          ((args.out_stride_batch | args.out_stride_seq | args.out_stride_head) & 1) == 0;
  const bool write_lse = (args.flags & ZYFA_FLAG_LSE) != 0u && args.lse != nullptr;
  // The staged epilogue needs 16-byte aligned rows (base and every stride a multiple of 8 elements).
  const bool staged = kOStageCols != 0 && (reinterpret_cast<uintptr_t>(args.out) & 15u) == 0u &&
                      ((args.out_stride_batch | args.out_stride_seq | args.out_stride_head) & 7) == 0;
  float l_row[2], row_scale[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_row[r] = (kFp8 && kLSumWhole) ? l_run[r] : quad_sum(l_run[r]);  // FP8 HMMA sums: whole rows already
    row_scale[r] = l_row[r] == 0.0f ? 0.0f : v_descale / l_row[r];    // one division per row
  }
  if constexpr (kOStageCols != 0) {
    if (staged)
      store_o_staged<kOStageCols>(o, row_scale, args, blk,
                                  bars + kBarrierBytes + static_cast<uint32_t>(cw * 4 + warp) * 16 * kOStageCols * 2,
                                  wg_row0 + 16 * warp, seqlen_q, lane);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = l_row[r];
    const int64_t row = row_a + 8 * r;
    if (row >= seqlen_q) continue;
    __nv_bfloat16* const out_row = static_cast<__nv_bfloat16*>(args.out) +
                                   static_cast<int64_t>(blk.batch) * args.out_stride_batch + row * args.out_stride_seq +
                                   static_cast<int64_t>(blk.head) * args.out_stride_head;
#pragma unroll
    for (int j = 0; j < (staged ? 0 : 16); ++j) {  // the register path (out not 16-byte aligned, or no staging)
      const float o0 = o[4 * j + 2 * r] * row_scale[r];
      const float o1 = o[4 * j + 2 * r + 1] * row_scale[r];
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
      args.lse[(static_cast<int64_t>(blk.batch) * args.heads_q + blk.head) * seqlen_q + row] = lse;
    }
  }
#if ZYFA_WS_PERSISTENT
  }  // item loop
#endif
  }
}

#if ZYFA_WS_VPRE
// The V pre-pass entry <kernel>_vprep (manifest row "v_prep"; launch contract in kernels/abi/zyfa_abi.h, ABI 3):
// zyfa_sm90_ws::vt_prep for block (x, kv head, batch), 256 threads, 16 KiB of static shared memory.
#define ZYFA_VPREP_CAT2(a, b) a##b
#define ZYFA_VPREP_CAT(a, b) ZYFA_VPREP_CAT2(a, b)
#define ZYFA_VPREP_NAME ZYFA_VPREP_CAT(ZYFA_KERNEL_NAME, _vprep)
extern "C" __global__ void __launch_bounds__(ZYFA_VPREP_THREADS) ZYFA_VPREP_NAME(const zyfa_fwd_args args, uint8_t* vt) {
  zyfa_sm90_ws::vt_prep(args, vt);
}
#endif
