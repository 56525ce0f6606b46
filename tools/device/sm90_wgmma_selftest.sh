#!/usr/bin/env bash
# Builds and tests the warp-specialised wgmma kernels (kernels/sm90/fa_fwd_wgmma.cu, the entries of
# VARIANTS entries in kernels/variants.bzl whose src is sm90/fa_fwd_wgmma.cu) on an sm_90 GPU (H100/H200), in one go:
#   1. per variant, the kernel cubin exactly as kernels/tools/zyfa_kernel_build.py compiles it (nvcc -O3
#      -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -Ikernels -D... -Xptxas -v): ptxas'
#      registers / stack / spills and any wgmma serialization warning, and the HGMMA / QGMMA count in
#      its SASS (cuobjdump);
#   2. per variant, kernels/sm90/test_fa_fwd_wgmma.cu (layout probe, correctness cases against the
#      contract and float64 references), all run concurrently, each under a time limit (a hang is killed,
#      not waited for);
#   3. with ZYFA_BENCH=1 (default), timing of every variant against the simple kernel, one at a time, at
#      2K / 4K / 8K / 16K, in two passes, then a compact TFLOP/s table per variant and shape.
#
#   bash tools/device/sm90_wgmma_selftest.sh [WORKDIR]
# Env: NVCC (default nvcc); OUT, when set, receives the summary and a .tgz of every log; ZYFA_BENCH=0 skips timing;
# ZYFA_BUILD_ONLY=1 stops after the builds (a preflight here, without a GPU); ZYFA_ONLY=REGEX restricts to matching variant names; ZYFA_SANITIZE=1 runs the first bf16 and e4m3
# variants' tests under compute-sanitizer (ZYFA_SANITIZE_TOOLS="memcheck racecheck synccheck initcheck": those tools,
# default memcheck; ZYFA_SANITIZE_ALL=1: every variant; ZYFA_SANITIZE_TIMEOUT seconds per run, default 100); ZYFA_NCU=1 (=all: every variant) profiles one launch of each with ncu (ZYFA_NCU_ARG=--profile-2k: at 2K instead of 8K)
# (--clock-control none); ZYFA_BENCH_REPEAT=0 skips the second timing pass; ZYFA_BENCH_SHAPE="B S HQ HKV" times
# that one shape instead of the four; ZYFA_BENCH_INPUTS="gaussian sink" times each build on each input (default gaussian;
# sink: most scores negative, one sink key per row, as the test program's ZYFA_BENCH_INPUT). Exit status 0 when every
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

# One line per variant: its name and its -D defines, as the kernel build has them.
mapfile -t lines < <(python3 - "$repo/kernels/tools" "${ZYFA_ONLY:-.}" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from variant_defines import selected_variants  # the variants and their -D defines, as the kernel build has them
from zyfa_kernel_build import defines
# Dense builds only: the varlen / paged builds take zyfa_varlen_args, which test_fa_fwd_wgmma.cu does not
# pass; packages/zyfa-torch/tests/test_zyfa_gpu_varlen.py tests them through zyfa.
for v in selected_variants(src="sm90/fa_fwd_wgmma.cu", only=sys.argv[2]):
    if v.get("layout", "dense") == "dense":
        print(v["name"], " ".join(defines(v)))
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
  read -r name defines <<<"$line"
  # shellcheck disable=SC2086
  "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -I"$repo/kernels" $defines \
    -Xptxas -v "$repo/kernels/sm90/fa_fwd_wgmma.cu" -o "$dir/$name.cubin" >"$dir/cubin_$name.log" 2>&1 &
  pids+=("$!")
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
  read -r name defines <<<"$line"
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
    read -r name defines <<<"$line"
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
  read -r name defines <<<"$line"
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
  local input line name defines log
  for input in "${bench_inputs[@]}"; do
    for line in "${lines[@]}"; do
      read -r name defines <<<"$line"
      [[ -x "$dir/test_$name" ]] || continue
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
  # compute-sanitizer of the first bf16 and the first e4m3 variant (ZYFA_SANITIZE_ALL=1: every variant), each tool in ZYFA_SANITIZE_TOOLS (default memcheck: all cases and the probe; racecheck, synccheck
  # and initcheck run the probe and the cases up to 1M score elements, --small) as concurrent processes.
  san_names="$(awk '{print $1}' <<<"$(printf '%s\n' "${lines[@]}")")"
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
  ncu_names="$(awk '{print $1}' <<<"$(printf '%s\n' "${lines[@]}")")"
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
    "$(printf '%s\n' "${lines[@]}" | awk '{print $1}' | tr '\n' ' ')" | tee -a "$summary"
done
cp "$dir"/cubin_*.log "$out"/ 2>/dev/null
# tar is missing on some device images: Python's tarfile instead.
python3 -c 'import sys, tarfile; t = tarfile.open(sys.argv[1], "w:gz"); t.add(sys.argv[2], arcname="."); t.close()' \
  "$res/sm90_wgmma_logs.tgz" "$out" 2>>"$summary" || echo "could not pack the logs (the error is above)" | tee -a "$summary"
echo "total $((SECONDS - t_start)) s; status $status" | tee -a "$summary"
exit "$status"
