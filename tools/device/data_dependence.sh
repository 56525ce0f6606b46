#!/usr/bin/env bash
# data_dependence.sh — one device call that asks why ZYFA's lean FP8 and BF16 d=128 kernels take more cycles
# on model-like inputs than on Gaussian ones (kernels/sm90/NOTES.md, "Sixteenth session calls 2-6").
#
#     bash tools/device/data_dependence.sh        (through the device tool; results in $OUT)
#
# Stages, each with its own time limit (a failed stage does not stop the next):
#   install  h200_run.sh's wheels and install stages (the carried peers into /tmp/zyfa-site, the zyfa packages
#            with their cubins built by nvcc there); carry [".carry/fa4-site.tar.xz", ".whl"] for the peers
#   probe    tools/device/wgmma_data_probe.cu: the tensor pipe alone on five value patterns and on operand tiles
#            cut from the Gaussian and model-like inputs (tools/device/operand_tiles.py): is it data-blind?
#   time     workload_cycles.py time with one ModelLike knob changed at a time, every knob off (the control:
#            Gaussian-like again?) and q, k rotated (+rot: same scores, other S operands): which structure?
#   ncu      --set full on lean FP8 and BF16 d=128 and the peers they are measured against (FA4 BF16, cuDNN FP8),
#            Gaussian and model-like, one launch each (where do they wait? how many instructions and shared-memory
#            wavefronts per FLOP do the peers spend?): details, raw metrics and per-SASS-line source counters
#            as CSV, packed in ncu.tgz (read them here with tools/ncu_compare.py: details / raw / source views)
# Environment: DD_WORKLOADS (time stage), DD_IMPLS (ncu stage), DD_SKIP (stages to skip, comma-separated).
set -u -o pipefail
OUT=${OUT:-/tmp/zyfa-dd}
mkdir -p "$OUT"
T0=$SECONDS
SKIP=",${DD_SKIP:-},"
ML=model-like
WORKLOADS=${DD_WORKLOADS:-gaussian,$ML,$ML+rot,$ML:sink_tokens=0,$ML:k_outlier_channels=0,$ML:rope_dims=0,$ML:sink_value_scale=1,$ML:sink_tokens=0:k_outlier_channels=0:rope_dims=0}
TIME_IMPLS=${DD_TIME_IMPLS:-zyfa-bf16,zyfa-fp8-exact,zyfa-fp8-lean,fa4-bf16,cudnn-fp8}
IMPLS=${DD_IMPLS:-zyfa-fp8-lean,zyfa-bf16,fa4-bf16,cudnn-fp8}

stage() {  # stage NAME LIMIT_S FUNCTION: run unless skipped, log its time and exit status
  local name=$1 limit=$2
  shift 2
  if [[ $SKIP == *",$name,"* ]]; then
    echo "=== $name skipped"
    return
  fi
  echo "=== $name (limit ${limit}s, t=$((SECONDS - T0))s)"
  timeout "$limit" bash "$0" "$@"  # the script runs the stage's function in a child (timeout needs a program)
  echo "=== $name rc=$? (t=$((SECONDS - T0))s)"
}

install() {
  OUT=/tmp/zyfa-install ZYFA_SKIP=tests,throughput,accuracy,clocks,report ZYFA_TOTAL_S=220 \
    bash tools/device/h200_run.sh > "$OUT/install.txt" 2>&1
}

probe() {
  python3 tools/device/operand_tiles.py /tmp/zyfa-tiles gaussian model-like &&
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernels tools/device/wgmma_data_probe.cu -o /tmp/wgmma_probe &&
    /tmp/wgmma_probe 1.0 /tmp/zyfa-tiles gaussian model-like | tee "$OUT/probe.txt"
}

time_workloads() {
  python3 tools/device/workload_cycles.py time --workloads "$WORKLOADS" --impls "$TIME_IMPLS" | tee "$OUT/time.txt"
}

profile() {
  local dir=/tmp/zyfa-ncu
  rm -rf "$dir" && mkdir -p "$dir"
  ncu --clock-control none --profile-from-start off --set full --import-source no -f -o "$dir/report" \
    python3 tools/device/workload_cycles.py profile --impls "$IMPLS" > "$dir/ncu_console.txt" 2>&1
  ncu -i "$dir/report.ncu-rep" --page details --csv > "$dir/details.csv" 2>&1
  ncu -i "$dir/report.ncu-rep" --page raw --csv > "$dir/raw.csv" 2>&1
  ncu -i "$dir/report.ncu-rep" --page source --print-source sass --csv > "$dir/source.csv" 2>&1
  tail -5 "$dir/ncu_console.txt"
  tar -czf "$OUT/ncu.tgz" -C "$dir" ncu_console.txt details.csv raw.csv source.csv
  ls -la "$dir" "$OUT/ncu.tgz"
}

source "$(dirname "${BASH_SOURCE[0]}")/site_path.sh"
[[ -d $SITE ]] && export PYTHONPATH="$(site_pythonpath)${PYTHONPATH:+:$PYTHONPATH}"
if [[ $# -gt 0 ]]; then  # child: one stage's function
  "$1"
  exit
fi
git rev-parse --short HEAD 2>/dev/null || cat REVISION 2>/dev/null
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
stage install 260 install
tail -3 "$OUT/install.txt"
stage probe 120 probe
stage time 150 time_workloads
stage ncu 240 profile
echo "=== done t=$((SECONDS - T0))s"
