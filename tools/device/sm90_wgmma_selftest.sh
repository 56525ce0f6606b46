#!/usr/bin/env bash
# Builds and tests the warp-specialised wgmma kernels (kernels/sm90/fa_fwd_wgmma.cu, the entries of
# VARIANTS entries in kernels/variants.bzl whose src is sm90/fa_fwd_wgmma.cu) on an sm_90 GPU (H100/H200), in one go:
#   1. per variant, the kernel cubin exactly as kernels/tools/zyfa_kernel_build.py compiles it (nvcc -O3
#      -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -Ikernels -D... -Xptxas -v): ptxas'
#      registers / stack / spills and any wgmma serialization warning, and the HGMMA / QGMMA count in
#      its SASS (cuobjdump);
#   2. per variant, kernels/sm90/test_fa_fwd_wgmma.cu (layout probe, correctness cases against the
#      contract and float64 references), plus debug builds of the first bf16 and e4m3 variants with
#      the intra-warpgroup overlap and the ping-pong turned off (ZYFA_WS_OVERLAP=0, ZYFA_WS_PINGPONG=0),
#      all run concurrently, each under a time limit (a hang is killed, not waited for);
#   3. with ZYFA_BENCH=1 (default), timing of every variant (and of the experiment builds listed in
#      EXPERIMENTS below, whose cubins also go into the resources table) against the simple kernel,
#      one at a time, at 2K / 4K / 8K / 16K, in two passes, then a compact TFLOP/s table per build
#      and shape (experiments also as a ratio to their variant's default build).
#
#   bash tools/device/sm90_wgmma_selftest.sh [WORKDIR]
# Env: NVCC (default nvcc); OUT (device machine) receives the summary and a .tgz of every log; ZYFA_BENCH=0 skips timing;
# ZYFA_BUILD_ONLY=1 stops after the builds (a preflight here, without a GPU); ZYFA_ONLY=REGEX restricts to matching variant names; ZYFA_SANITIZE=1 runs the first bf16 and e4m3
# variants' tests under compute-sanitizer (ZYFA_SANITIZE_TOOLS="memcheck racecheck synccheck initcheck": those tools,
# default memcheck; ZYFA_SANITIZE_ALL=1: every build, experiments included; ZYFA_SANITIZE_TIMEOUT seconds per run, default 100); ZYFA_NCU=1 (=all: every variant) profiles one launch of each with ncu (ZYFA_NCU_ARG=--profile-2k: at 2K instead of 8K)
# (--clock-control none); ZYFA_BENCH_REPEAT=0 skips the second timing pass; ZYFA_BENCH_SHAPE="B S HQ HKV" times
# that one shape instead of the four; ZYFA_BENCH_INPUTS="gaussian sink" times each build on each input (default gaussian;
# sink: most scores negative, one sink key per row, as the test program's ZYFA_BENCH_INPUT); ZYFA_EXP=REGEX builds only the experiments whose suffix matches. Exit status 0 when every
# build and test passes.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-$(mktemp -d)}"
nvcc="${NVCC:-nvcc}"
res="${OUT:-$dir}"
out="$dir/logs"  # per-executable logs; packed into $res/sm90_wgmma_logs.tgz at the end
mkdir -p "$dir" "$out" "$res"
summary="$res/sm90_wgmma_summary.txt"
: >"$summary"
t_start=$SECONDS

# One line per variant: name and its -D defines (+ debug builds, named NAME_serial).
mapfile -t lines < <(python3 - "$repo/kernels/tools" "${ZYFA_ONLY:-.}" "${ZYFA_EXP:-.}" <<'EOF'
import re
import sys
sys.path.insert(0, sys.argv[1])
from variant_defines import selected_variants  # the variants and their -D defines, as the kernel build has them
from zyfa_kernel_build import defines
# Experiments: extra builds of a variant (name suffix, smem_bytes, extra defines), tested and timed
# like the variant itself; what wins moves into the kernel's defaults and the list above.
# Measured 2026-12-01 (H200): FP8 V staging (now the default) +7..15%; the fused-FFMA softmax
# (default) +4..18% over the literal form; ping-pong off, 3 BF16 stages, no O-rescale skip: within 1%.
# 2026-12-01 (second session), H200, b2 s16K hq32/8, TFLOP/s. FP8 row sums moved off the FP8 tensor
# core (decode + f16 HMMA with ones, exact). Row-sum method (ZYFA_WS_LSUM, exact P): HMMA in flight
# 645, HMMA after the P.V wait 689 (default), f16 tree 675, f16 pairs 650; old ones-QGMMA 687-691.
# O promotion: -2.5..3%, no accuracy gain (off). 4 FP8 stages +0.8%, ping-pong off -2%. Third run
# (+ e4m3 pack without masks, per-stage descriptors): exact P with registers 72/216 694 (default) vs
# 40/232 677 vs old kernel 680; lean 676 vs old 762 (lean's ALU-bound softmax pays for the sums);
# BF16 550 (4-chain max 555, default) vs old 532.
# Fourth run (H200, after the shared test harness): lean P b2 s16K hq32/8: default 719, 40/232
# registers 687, f16-tree row sums (ZYFA_WS_LSUM=2) 729 but its f16 rounding fails the exact-S grid
# cases (lse 1.0e-3 vs the 1e-4 bound), so it is dropped; BF16 4-chain max 560 vs 560 (maxtree0).
# Fifth run (H200): block order ZYFA_WS_ORDER 1 / 2, CUDA-core row sums ZYFA_WS_LSUM=4 (FP8 exact and
# lean) and the interleaved two-row softmax ZYFA_WS_SMX2=1 (BF16 and FP8 exact), ratio to default at
# 2K / 4K / 8K / 16K: order1 BF16 0.957/0.952/1.076/0.976, FP8 0.986/1.001/1.090/0.976; order2 about
# the same; lsum4 0.93..0.97 (exact and lean); smx2 BF16 0.99 (noise), FP8 exact 1.000/1.015/1.027/1.025
# -> ZYFA_WS_SMX2 is now the e4m3 default (exact and lean; lean+smx2 first built in run 6, "smx2off"
# keeps the old lean build), the others dropped (macros kept; kernels/sm90/NOTES.md).
# Sixth run (kernels/sm90/NOTES.md "Predictions, run 6"): larger KV tiles (ZYFA_TILE_N, S as one
# m64nN wgmma): FP8 192 keys (2 stages: 3 do not fit in 227 KiB) and 160 keys (3 stages), BF16 176 /
# 160 keys (2 stages). Each build passes its own ZYFA_TILE_N / ZYFA_WS_STAGES / ZYFA_SMEM_BYTES.
# ZYFA_WS_ORDER=3: longest-first order only when heads * batch <= 32 (FP8 exact).
# Run 6 outcomes: FP8 exact d128 tile_n 192 (now in variants.bzl), ORDER 3 default, SMX2 exact only; the
# BF16 tiles and FP8 n160 dropped. Seventh run (kernels/sm90/NOTES.md "Predictions, run 7"), not yet
# measured: row max by 3-input integer max on the float bits (ZYFA_WS_MAX3, exact), FA3's O rescale
# between the S issue and the P.V issue (ZYFA_WS_RESCALE_EARLY), producer copies without per-row
# bounds selects on full tiles (ZYFA_WS_LOADFAST). Each build keeps its variant's tile and smem.
# Also (issue 5, NOTES.md "Predictions, run 7 (persistent)"): persistent CTAs (ZYFA_WS_PERSISTENT=1; the
# test program then launches (SMs, 1, 1) and repeats every case on 3 CTAs, bitwise). 10 experiments:
# about 4 min on the H200; ZYFA_ONLY=REGEX runs a subset of variants (with their experiments).
# Run 7 outcomes (H200, third session): LOADFAST the default everywhere, MAX3 for BF16 and lean P,
# RESCALE_EARLY for BF16; persistent CTAs won at 2K (+4 / +13%) and lost at b1 8K (-8 / -5%, the static
# round-robin's imbalance) and 16K (-1 / -2%, L2). Eighth run (NOTES.md "Predictions, run 8"): the
# persistent schedule ZYFA_WS_PSCHED 2 (boustrophedon rounds + pair-major items when heads * batch > 32,
# the default) and 1 (boustrophedon, rank-major always); "old" = the run-7 defaults (192/128 variants,
# whose new defaults were not measured in run 7).
# Run 9 outcomes: neither tile change adopted. Tenth run (NOTES.md "Predictions, run 10"): BF16 Q / K / V
# loads by TMA from one producer thread (ZYFA_WS_TMA=1; the test program encodes the tensor maps and
# prints "bench note: tma maps valid" per timed shape), also with persistent CTAs for d128.
# Run 10 outcomes: BF16 d128 persistent + TMA and BF16 192/128 TMA are the defaults (variants.bzl 'loads').
# Eleventh run (NOTES.md "Predictions, run 11"): e4m3 Q and K by TMA from producer thread 0 (V keeps the
# 128 threads' staging + transpose), on each FP8 variant's persistent default; BF16 192/128 TMA +
# persistent CTAs (the d128 combination, unmeasured at 192/128).
# Runs 11 and 12 outcomes: FP8 exact 192/128 TMA is the default; the others keep cp.async. Its
# experiment is now the cp.async build it replaced (ZYFA_WS_TMA=0), so the next run re-checks the call.
# Fourteenth run (NOTES.md "Predictions, run 14"): exact P's exponentials of a quarter / half of the S
# tiles by zyfa_exp2::exp2_poly on the FMA pipe instead of MUFU (ZYFA_WS_EXP2_POLY=1 / 2), on the exact
# defaults (BF16 d128, FP8 exact d128 and 192/128); runs 11-13's TMA experiments are done.
# Run 14's first call never ran (the test program did not build: exp2_poly.h lacked <cstring> in nvcc's host
# pass; ZYFA_BUILD_ONLY=1 is the preflight that would have caught it). Run 15 (NOTES.md "Outcomes, run 15"):
# the FMA-pipe exp2 lost everywhere (dropped); one division per row in the epilogue (ZYFA_WS_EPI_RCP) won
# 2-10% at 2K-8K on every variant and is the default. Its experiment is now the old division build
# ("epidiv", BF16 d128, whose 16K ratio was 0.977), so the next run re-checks the call there.
# Run 17: FRESH_O +0.5..3% at 2K-8K, but items without blocks stored stale O (fixed). Run 18 (the fix in, all
# six variants): it lost 1-9% at 16K and at 2K-8K for 192/128, so it is off again.
# Run 19 (NOTES.md "Outcomes, run 19"): the mbarrier layout fix passed every case; the epilogue through
# shared memory (ZYFA_WS_OSTAGE, +32 KiB) won 1..6% at 2K-8K on the d128 variants and is their default
# (kOStageCols from smem_bytes); the two-loop register stores (EPI_BRANCH) were even and are gone.
# Run 20 (NOTES.md "Outcomes, run 20"): the staged epilogue re-checked on d128 ("regout" 0.94..0.98 at 2K-8K)
# and adopted for 192/128 in two 64-column passes (+1..7% at 2K-8K).
# Run 21 (NOTES.md "Outcomes, run 21"): ZYFA_WS_LPT_PAIRS 16 is the default (192/128 at b2 s16K h16: BF16
# +12.5%, lean +7.8%, exact even); FP8 exact d128 at tile_n 128 was +6.4% at 2K and -3.9% at 16K (a
# per-seqlen tile choice, not built).
# Run 22 (NOTES.md "Outcomes, run 22"): the old LPT threshold 32 at the product's d128 32K row (b1 h32,
# 32 pairs) 0.995..1.006 of 16: 16 stays. Run 23 ("Outcomes, run 23"): lean P's code from a saturating
# FMA (ZYFA_WS_LEAN_SAT) +3.9..7.7% on both lean variants, now the default; the window-sorted persistent
# schedule (PSCHED 3) 0.97..1.035 and the naturally aligned parameter struct 0.965..1.087 (noise-level
# either way) were removed; the 3-input integer row max on exact P (MAX3) 0.978..1.021 stays off.
# Run 24 (NOTES.md "Outcomes, run 24"): FP8 with P.V in f16 (ZYFA_WS_PV_F16) measured 10x less error than
# exact P at 0.85..1.00 of its speed; it is p_mode "f16" (the _pf16 variants: d128 tile_n 128 with 3 stages,
# 192/128 with 2; tile_n 192 spills). Run 25 (NOTES.md "Predictions, run 25"), on the d128 f16 variant:
# tile_n 160 with 2 stages ("n160"), Q / K by TMA ("tma") and the 3-input integer row max ("max3").
# Run 26 (NOTES.md "Predictions, run 26"): the row max in two halves (ZYFA_WS_SPLITMAX 1 / 2), the staged
# epilogue's rows by cp.async.bulk (ZYFA_WS_OBULK) and rank-major items at every pair count (lptall).
# Runs 25 and 26 (ninth session call 1, NOTES.md "Outcomes, runs 25 and 26"): nothing won; split max lost
# 2..14% everywhere, obulk and lptall 0.95..1.02 (noise-level or worse), the f16-P tile / TMA / max3
# experiments 0.93..1.00. SPLITMAX and OBULK were removed from the kernel.
# Run 27 (tenth session call 1, NOTES.md "Outcomes, run 27"): the e4m3 V transpose by ldmatrix.trans /
# stmatrix (ZYFA_WS_VT_LDSM) won 4..10% on FP8 exact / lean d128 and exact 192/128 (lean 192/128 0.99..1.04)
# and is the default; Q / K by TMA with it ("vtldsm_tma") was not better.
# Run 28 (NOTES.md "Predictions, run 28"): FP8 exact d128 at tile_n 128 with 3 stages (lean's layout,
# "n128") again, now that the transpose is cheap (lean at tile_n 192 spills: not built).
# Run 29 (NOTES.md "Predictions, run 29"): the producer's setmaxnreg budget, now that its transpose holds
# fewer registers: 56 / 224 ("r56") instead of 72 / 216, on both d128 FP8 variants (40 / 232 spills).
# Runs 28 and 29 (tenth session call 2, NOTES.md "Outcomes, runs 28 and 29"): exact d128 at tile_n 128
# ("n128") 1.033 / 0.984 / 0.968 / 0.929 and 56 / 224 registers ("r56") 0.98..1.01: neither taken; lean
# d128 with SMX2 ("smx2") 1.028..1.041: its default now.
# Runs 30-32 (eleventh session call 1, NOTES.md "Outcomes, runs 30-32"): SMX2 on lean 192/128 1.029..1.099,
# now the default for every e4m3 variant; the per-block mask test as one compare (maskfrom) 0.975..1.011
# (removed); lean d128 at tile_n 160 with 2 stages 0.930 / 0.967 / 0.990 / 1.056 (not taken).
# Run 33 (eleventh session call 3, NOTES.md "Outcomes, run 33"): timing bounds (ZYFA_WS_BOUND, wrong output by
# design): without the row sums lean d128 1.08..1.09, exact 1.02..1.03; without the softmax FP8 exact 1.44..1.58
# (1226 TFLOP/s at 16K), lean 1.24..1.32, BF16 1.20..1.28. Lean with FA3's rescale place 0.95..0.98 and with
# CUDA-core row sums from its code floats (LSUM=5) 0.87..0.94: both dropped.
# Run 34 (eleventh session call 4, NOTES.md "Outcomes, run 34"): lean P's pack by integer multiply-adds
# (ZYFA_WS_PACK_IMAD) 0.956..1.000 on lean d128 and 0.938..0.961 on lean 192/128: removed.
# Run 35 (twelfth session call 1, NOTES.md "Outcomes, run 35"): BF16 row sums by HMMA with ones from the
# packed P (ZYFA_WS_BF16_HSUM) 0.885..0.969 and its rounded sums moved short rows' lse by up to 1.7e-3
# (cases failed); lean P's pack by one LOP3 + PRMT (ZYFA_WS_LEAN_PACK2) was wrong by construction (a
# rounding constant 2^(23 + 8 k) still leaves the code in the low mantissa bits: NaN codes, every case
# failed). Both removed.
# Run 36 (twelfth session call 2, NOTES.md "Outcomes, run 36"): the stale row max ("stale") won on BF16
# (d128 1.027..1.028 at 2K-8K, 16K 1.03..1.09; 192/128 1.013..1.017, 16K 1.06): variants.bzl "stale_tau" 8.0
# on both BF16 kernels since. On FP8 (tau 0.75) 0.99..1.05 / 0.94..0.99 with codes off the contract: not
# taken. FP8 row sums in flight ("lsum0") 0.95..0.99: no.
# Run 37 (twelfth session call 4, NOTES.md "Outcomes, run 37"): BF16 d128 with SMX2 1.005..1.013 (its
# default since); 192/128 SMX2 0.987..1.000, 4 FADD chains (ZYFA_WS_SUM_CHAINS) 0.98..1.06 (16K noisy), nothing at 2K-8K, d128 at
# tile_n 160 0.943 / 0.976 / 0.989 / 1.12 (16K noisy): not taken.
# Run 38 (twelfth session call 5, NOTES.md "Outcomes, run 38"): BF16 exponentials partly on the FMA pipe
# (ZYFA_WS_EXP_EMU) 0.92..0.94 (every 4th) and 0.86..0.88 (every 2nd, whose polynomial error also broke
# the lse bound on sharp rows): removed, with ZYFA_WS_SUM_CHAINS.
# Not built as run 39 (twelfth session, preflight only): more registers for the BF16 consumers. 24 / 240
# spills on both BF16 kernels (96 / 48 B stack), 32 / 232 and 40 / 232 spill on d128 (its persistent
# TMA producer needs more than 40), so d128 cannot give its consumers more than 224; 192/128 (tile grid)
# builds clean at 32 / 232 and 40 / 232, but already meets its targets.
# Runs 40-41 (thirteenth session calls 1 and 3, NOTES.md "Outcomes, run 40" / "Outcomes, run 41"): e4m3 V
# pre-transposed in global memory by a separate pass (ZYFA_WS_VPRE): lean d128 1.027 / 1.052 / 1.029 / 1.054 with
# the faster pass (22 us) inside every timed launch, now its default (variants.bzl "v_prep"); exact d128 (also
# with a third stage) 0.96..0.99, 192/128 0.91..0.99 with the first pass and 0.94..0.99 (lean) with the second:
# not taken. The extra stage on lean d128 (vpre4) added nothing.
# Run 42 (thirteenth session call 6, NOTES.md "Outcomes, run 42"): lean d128 after the pre-pass with 40 / 232
# registers (r40) 0.943..1.006, Q / K by TMA at 56 / 224 (tma56) 0.954..1.006 and at 40 / 232 (tma40)
# 0.973..1.015 (24 / 240 spills): none taken.
# Run 43 (thirteenth session call 7, NOTES.md "Outcomes, run 43"): lean d128 at tile_n 192 with 2 stages after the
# pre-pass (no spills at 224 / 232 consumer registers): 0.93..0.96 at 2K-8K, 1.00 / 1.03 at 16K (noisy): not taken.
# Run 44 (thirteenth session call 8, NOTES.md "Outcomes, run 44"): exact d128 with the pre-pass at tile_n 128 and 3
# stages: 1.029 / 0.984 / 0.959 / 0.966 (one pass): not taken.
# Runs 45-47 (fourteenth session calls 1, 3 and 6, NOTES.md "Outcomes, run 45" .. "Outcomes, run 47"): FP8 row
# sums on the tensor pipe inside the P.V group (ZYFA_WS_LSUM=6, "lsumtc") 1.01..1.04 on lean d128 (2-6e-4 low),
# lean codes as f16 pairs (ZYFA_WS_LEAN_F16, "f16") 0.90..0.95 alone but +1% with lsumtc: the pair 1.036..1.053
# is lean d128's default since; exact d128 lsumtc 0.99..1.02; the row sums' decode by integer ops instead of
# F2FP (ZYFA_WS_LSUM_IDEC, "idec") 0.94..0.98 on all four FP8 kernels: removed.
# Run 48 (fourteenth session call 9, NOTES.md "Outcomes, run 48"): lean d128's FP8 stale running max (tau 0.75)
# after runs 45-47: 0.997 / 1.010 / 1.008 / 0.919, every case passed; not taken.
# Run 49 (fifteenth session call 1, NOTES.md "Outcomes, run 49"): lean codes as f16 subnormals with the clamp in
# the conversion (ZYFA_WS_LEAN_F16 form 2, "relu") 1.046..1.052 on lean d128, now its only LEAN_F16 form; lean
# 192/128 (LSUM 1) 0.972..0.988, not taken.
# Run 50 (fifteenth session call 2, NOTES.md "Outcomes, run 50"): lean d128's codes before the max, the fp32 max
# only when a code exceeds 126 (ZYFA_WS_LEAN_SPEC, "spec"): 0.878..0.917; removed.
# Run 51 (fifteenth session call 4, NOTES.md "Outcomes, run 51"): a fixed descriptor for the ones QGMMAs
# (ZYFA_WS_ONES_FIXED, "ones1") 0.995..1.010, no run-time alignment of the shared-memory base (ZYFA_WS_NOALIGN,
# "noalign") 1.014..1.017 at 2K-8K (16K 0.961, noisy), both 1.007..1.044: both are lean d128's defaults.
# Run 52 (fifteenth session call 7, NOTES.md "Outcomes, run 52"): one shared region of ones rows
# (ZYFA_WS_ONES_REGION) on lean d128 ("onesreg") 0.981..0.999, not taken; lean 192/128 with it, the tensor-pipe
# row sums and the subnormal codes ("lsumtc") 1.043..1.090, every case passed and sanitizer-clean: its default
# since the sixteenth session.
# Run 53 (sixteenth session call 1, NOTES.md "Outcomes, run 53"): run 51's unaligned shared-memory base on the
# six variants without LSUM 6 ("noalign") 0.95..1.01 (16K noise aside), not taken; the exact FP8 kernels with the
# tensor-pipe row sums through one ones region ("lsumtc") d128 1.006..1.020, 192/128 1.008..1.039, but +3..6% error
# vs float64 on model-like inputs in the product run (call 2): not taken (exact P is the accuracy-first mode).
# Run 54 (eighteenth session, NOTES.md "Predictions, run 54"): MAX3's negative-value fallback by the running
# max's sign and the int min (ZYFA_WS_MAX3_LB, "max3lb") on the four MAX3 kernels; time it with
# ZYFA_BENCH_INPUTS="gaussian sink" (the sink input makes most of a row's scores negative, as model-like data).
# Outcome (twenty-second session call 2): sink inputs +5..17%, Gaussian 1.00..1.03, every case passed: the
# default since; "max3lb0" builds the old FMNMX fallback.
# Run 55 (nineteenth session, NOTES.md "Predictions, run 55"): the per-block mask test as one compare against the
# first masked block ("maskj", run 31's "maskfrom" again); twenty-third session call 2: lean d128 0.99..1.01, BF16
# d128 0.99..1.00 at 2K-8K: removed for good.
MAX3_LB = [("max3lb0", None, ["-DZYFA_WS_MAX3_LB=0"])]
EXPERIMENTS: dict[str, list[tuple[str, object, list[str]]]] = {
    "fa_fwd_bf16_hd128_causal_sm90a": MAX3_LB,
    "fa_fwd_bf16_hd192x128_causal_sm90a": MAX3_LB,
    "fa_fwd_e4m3fn_hd128_causal_leanp_sm90a": MAX3_LB,
    "fa_fwd_e4m3fn_hd192x128_causal_leanp_sm90a": MAX3_LB,
}
debug_done = set()
for v in selected_variants(src="sm90/fa_fwd_wgmma.cu", only=sys.argv[2]):
    d = defines(v)
    print("main", v["name"], " ".join(d))
    for suffix, smem, extra in EXPERIMENTS.get(v["name"], []):
        if not re.search(sys.argv[3], suffix):
            continue  # ZYFA_EXP: only the experiments whose suffix matches
        # The experiment's defines replace the variant's (smem None: the variant's own; "+N": N bytes more).
        if isinstance(smem, str):
            smem = v["smem_bytes"] + int(smem)
        keys = {x.split("=")[0] for x in extra} | ({"-DZYFA_SMEM_BYTES"} if smem else set())
        dx = [x for x in d if x.split("=")[0] not in keys] + ([f"-DZYFA_SMEM_BYTES={smem}"] if smem else []) + extra
        print("exp", v["name"] + "_" + suffix, " ".join(dx))
    if v["dtype"] not in debug_done and v["p_mode"] != "lean":
        debug_done.add(v["dtype"])
        print("debug", v["name"] + "_serial", " ".join(d + ["-DZYFA_WS_OVERLAP=0", "-DZYFA_WS_PINGPONG=0"]))
EOF
)
[[ ${#lines[@]} -gt 0 ]] || { echo "no wgmma variant in kernels/variants.bzl matches"; exit 1; }

find_cuobjdump() {
  command -v cuobjdump 2>/dev/null && return
  [[ -x /usr/local/cuda/bin/cuobjdump ]] && echo /usr/local/cuda/bin/cuobjdump
}
cuobjdump="$(find_cuobjdump)"

# ---- 1 + 2: builds, all in parallel
pids=()
for line in "${lines[@]}"; do
  read -r kind name defines <<<"$line"
  # shellcheck disable=SC2086
  if [[ $kind == main || $kind == exp ]]; then
    "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -I"$repo/kernels" $defines \
      -Xptxas -v "$repo/kernels/sm90/fa_fwd_wgmma.cu" -o "$dir/$name.cubin" >"$dir/cubin_$name.log" 2>&1 &
    pids+=("$!")
  fi
  # -ffp-contract=off: the host reference must round every float operation as written; -ldl: sm90/sm_clock.h's
  # dlopen on a C library older than glibc 2.34.
  "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I"$repo/kernels" $defines \
    -Xcompiler -ffp-contract=off "$repo/kernels/sm90/test_fa_fwd_wgmma.cu" -o "$dir/test_$name" -ldl \
    >"$dir/build_$name.log" 2>&1 &
  pids+=("$!")
done
for p in "${pids[@]}"; do wait "$p"; done
echo "builds done after $((SECONDS - t_start)) s"

status=0
echo "== resources (ptxas -v of the kernel cubin, SASS matrix instructions) ==" | tee -a "$summary"
for line in "${lines[@]}"; do
  read -r kind name defines <<<"$line"
  [[ $kind == main || $kind == exp ]] || continue
  log="$dir/cubin_$name.log"
  if [[ ! -s "$dir/$name.cubin" ]]; then
    echo "CUBIN BUILD FAILED $name" | tee -a "$summary"; cat "$log" | tee -a "$summary"; status=1; continue
  fi
  # The attention kernel's own lines (the cubin of a ZYFA_WS_VPRE build also holds the V pre-pass entry,
  # <kernel>_vprep, with its own ptxas lines).
  klog="$dir/cubin_${name}_entry.log"
  awk '/Compiling entry function/ {on = ($0 !~ /_vprep./)} on' "$log" >"$klog"
  regs="$(grep -o 'Used [0-9]* registers' "$klog" | head -1)"
  spill="$(grep -o '[0-9]* bytes spill stores, [0-9]* bytes spill loads' "$klog" | head -1)"
  stack="$(grep -o '[0-9]* bytes stack frame' "$klog" | head -1)"
  warn="$(grep -o 'C75[0-9]*[^(]*' "$log" | sort -u | tr '\n' ' ')"
  mma="-"
  if [[ -n "$cuobjdump" ]]; then
    mma="$("$cuobjdump" --dump-sass "$dir/$name.cubin" | grep -oE '[HQ]GMMA\.[0-9x]+\.[A-Z0-9.]+' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  fi
  echo "$name: $regs; $stack; $spill; SASS:$mma ${warn:+ptxas: $warn}" | tee -a "$summary"
  [[ -n "$cuobjdump" ]] && "$cuobjdump" --dump-sass "$dir/$name.cubin" >"$out/sass_$name.txt" 2>&1
  grep -q '0 bytes spill stores, 0 bytes spill loads' "$klog" || status=1
  if grep -o '[0-9]* bytes spill stores' "$log" | grep -qv '^0 '; then status=1; fi  # no function of the cubin spills
done

if [[ "${ZYFA_BUILD_ONLY:-0}" == 1 ]]; then  # preflight without a GPU: every cubin and test program must build
  for line in "${lines[@]}"; do
    read -r kind name defines <<<"$line"
    [[ -x "$dir/test_$name" ]] && continue
    echo "TEST BUILD FAILED $name" | tee -a "$summary"; tail -30 "$dir/build_$name.log" | tee -a "$summary"; status=1
  done
  echo "build-only: status $status after $((SECONDS - t_start)) s" | tee -a "$summary"
  exit "$status"
fi

echo "== correctness (probe + cases), concurrently ==" | tee -a "$summary"
run_pids=()
run_names=()
for line in "${lines[@]}"; do
  read -r kind name defines <<<"$line"
  exe="$dir/test_$name"
  if [[ ! -x "$exe" ]]; then
    echo "TEST BUILD FAILED $name" | tee -a "$summary"; tail -30 "$dir/build_$name.log" | tee -a "$summary"; status=1
    continue
  fi
  timeout 90 "$exe" >"$out/test_$name.log" 2>&1 &
  run_pids+=("$!")
  run_names+=("$name")
done
for i in "${!run_pids[@]}"; do
  name="${run_names[$i]}"
  if wait "${run_pids[$i]}"; then
    verdict=PASS
  else
    rc=$?; verdict="FAIL (exit $rc$([[ $rc == 124 ]] && echo ': timed out, hang?'))"; status=1
  fi
  echo "-- $name: $verdict" | tee -a "$summary"
  grep -E 'probe|FAIL|diffuse|error map|rows by|columns by|row % 8|first row|S_ref|S\[0\]|O\[0\]|passed|CUDA error|not written|overwritten|differs' \
    "$out/test_$name.log" | head -40 | tee -a "$summary"
done
echo "correctness done after $((SECONDS - t_start)) s"

bench_args=(--bench-only)
# shellcheck disable=SC2206  # the shape is four words on purpose
[[ -n "${ZYFA_BENCH_SHAPE:-}" ]] && bench_args=(--bench-shape $ZYFA_BENCH_SHAPE)
# ZYFA_BENCH_INPUTS: the timing inputs, each timed in every pass (gaussian: the random inputs; sink: the test
# program's ZYFA_BENCH_INPUT=sink). Logs bench[2]_NAME.log for gaussian, bench[2]_INPUT_NAME.log for the others.
read -r -a bench_inputs <<<"${ZYFA_BENCH_INPUTS:-gaussian}"
bench_log() {  # bench_log PASS INPUT NAME: the log path of one timing run
  local tag=""
  [[ $2 == gaussian ]] || tag="$2_"
  echo "$out/bench$1_$tag$3.log"
}
bench_pass() {  # bench_pass PASS ("" or 2): every input, every build
  local input line kind name defines log
  for input in "${bench_inputs[@]}"; do
    for line in "${lines[@]}"; do
      read -r kind name defines <<<"$line"
      [[ $kind != debug && -x "$dir/test_$name" ]] || continue
      log="$(bench_log "$1" "$input" "$name")"
      ZYFA_BENCH_INPUT=$input timeout 60 "$dir/test_$name" "${bench_args[@]}" >"$log" 2>&1 || status=1
      grep -E '^bench|CUDA error' "$log" | sed "s/^/$name [$input]: /" | cut -c1-170 | tee -a "$summary"
    done
  done
}
if [[ "${ZYFA_BENCH:-1}" == 1 ]]; then
  echo "== timing (ws vs simple, causal, median of 20; inputs: ${bench_inputs[*]}) ==" | tee -a "$summary"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader \
    2>/dev/null | tee -a "$summary"
  bench_pass ""
fi
if [[ "${ZYFA_SANITIZE:-0}" == 1 ]] && command -v compute-sanitizer >/dev/null 2>&1; then
  # compute-sanitizer of the first bf16 and the first e4m3 variant (ZYFA_SANITIZE_ALL=1: every build, the
  # experiments too), each tool in ZYFA_SANITIZE_TOOLS (default memcheck: all cases and the probe; racecheck, synccheck
  # and initcheck run the probe and the cases up to 1M score elements, --small) as concurrent processes.
  san_names="$(awk '$1 == "main" || $1 == "exp" {print $2}' <<<"$(printf '%s\n' "${lines[@]}")")"
  [[ "${ZYFA_SANITIZE_ALL:-0}" == 1 ]] || san_names="$(awk -F_ '!seen[$3]++' <<<"$san_names")"
  san_pids=()
  san_runs=()
  for name in $san_names; do
    for tool in ${ZYFA_SANITIZE_TOOLS:-memcheck}; do
      args=()
      [[ $tool == memcheck ]] || args=(--small)
      timeout "${ZYFA_SANITIZE_TIMEOUT:-100}" compute-sanitizer --tool "$tool" --error-exitcode 3 "$dir/test_$name" \
        "${args[@]}" >"$out/${tool}_$name.log" 2>&1 &
      san_pids+=("$!")
      san_runs+=("$tool $name")
    done
  done
  for i in "${!san_pids[@]}"; do
    read -r tool name <<<"${san_runs[$i]}"
    if wait "${san_pids[$i]}"; then
      echo "PASS $tool $name ($(grep -oE '(ERROR|RACECHECK) SUMMARY.*' "$out/${tool}_$name.log"); $(grep -E '^[0-9]+ passed' "$out/${tool}_$name.log"))" | tee -a "$summary"
    else
      rc=$?; echo "FAIL $tool $name (exit $rc$([[ $rc == 124 ]] && echo ': timed out'))" | tee -a "$summary"
      tail -20 "$out/${tool}_$name.log" | tee -a "$summary"; status=1
    fi
  done
fi
if [[ "${ZYFA_NCU:-0}" == 1 || "${ZYFA_NCU:-0}" == all ]] && command -v ncu >/dev/null 2>&1; then
  # One launch at seqlen 8K per dtype (first bf16 and first e4m3 variant; ZYFA_NCU=all: every variant's
  # main build), clocks left alone.
  ncu_names="$(awk '$1 == "main" {print $2}' <<<"$(printf '%s\n' "${lines[@]}")")"
  [[ "${ZYFA_NCU}" == all ]] || ncu_names="$(awk -F_ '!seen[$3]++' <<<"$ncu_names")"
  for name in $ncu_names; do
    sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats
              --section MemoryWorkloadAnalysis)
    timeout 90 ncu --clock-control none -k "regex:^$name\$" -c 1 "${sections[@]}" --print-details all \
      "$dir/test_$name" "${ZYFA_NCU_ARG:---profile}" >"$out/ncu_$name.log" 2>&1 ||
      timeout 90 ncu --clock-control none -k "regex:^$name\$" -c 1 "${sections[@]}" \
        "$dir/test_$name" "${ZYFA_NCU_ARG:---profile}" >"$out/ncu_$name.log" 2>&1 || echo "ncu failed for $name (see log)" | tee -a "$summary"
    if [[ "${ZYFA_NCU_SOURCE:-1}" == 1 ]]; then
      # Per-SASS-instruction warp-stall samples (where the warps wait), as CSV.
      timeout 90 ncu --clock-control none -k "regex:^$name\$" -c 1 --section WarpStateStats --section SourceCounters \
        -f -o "$dir/ncu_src_$name" "$dir/test_$name" "${ZYFA_NCU_ARG:---profile}" >"$out/ncu_src_run_$name.log" 2>&1 &&
        ncu -i "$dir/ncu_src_$name.ncu-rep" --page source --csv --print-source sass >"$out/ncu_src_$name.csv" 2>&1
    fi
    echo "-- ncu $name" | tee -a "$summary"
    grep -E 'Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|One or More Eligible|L2 Hit|Issued Warp|Tensor|Pipe|pipeline' \
      "$out/ncu_$name.log" | tr -s ' ' | head -60 | tee -a "$summary"
  done
fi

if [[ "${ZYFA_BENCH:-1}" == 1 && "${ZYFA_BENCH_REPEAT:-1}" == 1 ]]; then
  echo "== timing again (run-to-run spread) ==" | tee -a "$summary"
  bench_pass 2
fi
for input in "${bench_inputs[@]}"; do
  [[ "${ZYFA_BENCH:-1}" == 1 ]] || break
  # Compact tables (tools/device/selftest_table.py): ws TFLOP/s, then TFLOP/s per GHz, per build and shape.
  python3 "$repo/tools/device/selftest_table.py" "$input" "$(bench_log "" "$input" NAME)" "$(bench_log 2 "$input" NAME)" \
    "$(printf '%s\n' "${lines[@]}" | awk '$1 != "debug" {print $1 ":" $2}' | tr '\n' ' ')" | tee -a "$summary"
done
cp "$dir"/cubin_*.log "$out"/ 2>/dev/null
# tar is missing on some device images: Python's tarfile instead.
python3 -c 'import sys, tarfile; t = tarfile.open(sys.argv[1], "w:gz"); t.add(sys.argv[2], arcname="."); t.close()' \
  "$res/sm90_wgmma_logs.tgz" "$out" 2>>"$summary" || echo "could not pack the logs (the error is above)" | tee -a "$summary"
echo "total $((SECONDS - t_start)) s; status $status" | tee -a "$summary"
exit "$status"
