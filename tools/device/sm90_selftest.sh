#!/usr/bin/env bash
# Builds kernels/sm90/test_fa_fwd_simple.cu once per sm90a variant of kernels/variants.bzl (same -D
# macros as the kernel build) and runs each on an sm_90 GPU (H100/H200): random inputs, float64
# references, poisoned outputs; see the test's header for what is checked.
#
#   bash tools/device/sm90_selftest.sh              build with nvcc, then run every variant
#   bash tools/device/sm90_selftest.sh build DIR    only build the test executables into DIR
#   bash tools/device/sm90_selftest.sh run DIR      only run executables built earlier into DIR
#
# Env: NVCC (default nvcc); ZYFA_SANITIZE=1 also runs the first variant under compute-sanitizer
# (memcheck) when it is installed; OUT, when set, receives the full log.
# Exit status: 0 when every variant passes, 1 otherwise.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mode="${1:-all}"
dir="${2:-$(mktemp -d)}"
nvcc="${NVCC:-nvcc}"
mkdir -p "$dir"
log="${OUT:+$OUT/sm90_selftest.log}"
log="${log:-$dir/sm90_selftest.log}"
: >"$log"

# One line per variant built from fa_fwd_simple.cu: its name and the -D defines of its build.
mapfile -t lines < <(python3 "$repo/kernels/tools/variant_defines.py" --src sm90/fa_fwd_simple.cu)
[[ ${#lines[@]} -gt 0 ]] || { echo "no sm90a variants found in kernels/variants.bzl"; exit 1; }

build() {
  local pids=() names=() i=0
  for line in "${lines[@]}"; do
    local name="${line%% *}" defines="${line#* }"
    # -ffp-contract=off: the host reference must round every float operation as written.
    # shellcheck disable=SC2086
    "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I"$repo/kernels" $defines \
      -Xcompiler -ffp-contract=off "$repo/kernels/sm90/test_fa_fwd_simple.cu" -o "$dir/test_$name" \
      >"$dir/build_$name.log" 2>&1 &
    pids+=("$!")
    names+=("$name")
  done
  local failed=0
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "BUILD FAILED: ${names[$i]}" | tee -a "$log"
      cat "$dir/build_${names[$i]}.log" | tee -a "$log"
      failed=1
    fi
  done
  [[ $failed -eq 0 ]] || exit 1
  echo "built ${#names[@]} test executables in $dir"
}

run_all() {
  local passed=0 failed=0 summary=()
  for line in "${lines[@]}"; do
    local name="${line%% *}" exe="$dir/test_${line%% *}"
    if [[ ! -x "$exe" ]]; then
      summary+=("MISSING $name"); failed=$((failed + 1)); continue
    fi
    if "$exe" 2>&1 | tee -a "$log"; then
      summary+=("PASS $name"); passed=$((passed + 1))
    else
      summary+=("FAIL $name"); failed=$((failed + 1))
    fi
  done
  if [[ "${ZYFA_SANITIZE:-0}" == 1 ]] && command -v compute-sanitizer >/dev/null 2>&1; then
    local first="${lines[0]%% *}"
    if compute-sanitizer --tool memcheck --error-exitcode 3 "$dir/test_$first" >>"$log" 2>&1; then
      summary+=("PASS memcheck $first")
    else
      summary+=("FAIL memcheck $first (see $log)"); failed=$((failed + 1))
    fi
  fi
  echo "== sm90 self-test summary =="
  printf '%s\n' "${summary[@]}"
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}

case "$mode" in
  build) build ;;
  run) run_all ;;
  all) build && run_all ;;
  *) echo "usage: $0 [all|build DIR|run DIR]"; exit 2 ;;
esac
