#!/usr/bin/env bash
# data_dependence.sh — one device call that asks why ZYFA's lean FP8 and BF16 d=128 kernels take more cycles
# on model-like inputs than on Gaussian ones (kernels/sm90/NOTES.md, "Sixteenth session calls 2-6").
#
#     bash tools/device/data_dependence.sh        (through the device tool; results in $OUT)
#
# Stages (a failed or timed-out stage does not stop the next):
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
# The stages share one budget (tools/device/stages.sh): each runs under min(its cap, time left - what the
# later stages keep back), and the console ends with each stage's outcome; every stage's output is in log.txt.
# Environment: DD_WORKLOADS (time stage), DD_IMPLS (ncu stage), DD_SKIP (stages to skip, comma-separated),
# DD_TOTAL_S (the budget, default 560 s: the device tool's per-command limit is 600 s).
set -u -o pipefail
OUT=${OUT:-/tmp/zyfa-dd}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"
TOTAL=${DD_TOTAL_S:-560}
SKIP=",${DD_SKIP:-},"
ML=model-like
WORKLOADS=${DD_WORKLOADS:-gaussian,$ML,$ML+rot,$ML:sink_tokens=0,$ML:k_outlier_channels=0,$ML:rope_dims=0,$ML:sink_value_scale=1,$ML:sink_tokens=0:k_outlier_channels=0:rope_dims=0}
TIME_IMPLS=${DD_TIME_IMPLS:-zyfa-bf16,zyfa-fp8-exact,zyfa-fp8-lean,fa4-bf16,cudnn-fp8}
IMPLS=${DD_IMPLS:-zyfa-fp8-lean,zyfa-bf16,fa4-bf16,cudnn-fp8}

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
  set -o pipefail  # the stage fails with the timing script, not with tee
  python3 tools/device/workload_cycles.py time --workloads "$WORKLOADS" --impls "$TIME_IMPLS" | tee "$OUT/time.txt"
}

profile() {
  local dir=/tmp/zyfa-ncu
  rm -rf "$dir" && mkdir -p "$dir"
  ncu --clock-control none --profile-from-start off --set full --import-source no -f -o "$dir/report" \
    python3 tools/device/workload_cycles.py profile --impls "$IMPLS" > "$dir/ncu_console.txt" 2>&1
  if [[ ! -s $dir/report.ncu-rep ]]; then  # no report, nothing to export: say why and fail the stage
    tail -20 "$dir/ncu_console.txt"
    return 1
  fi
  ncu -i "$dir/report.ncu-rep" --page details --csv > "$dir/details.csv" 2>&1
  ncu -i "$dir/report.ncu-rep" --page raw --csv > "$dir/raw.csv" 2>&1
  ncu -i "$dir/report.ncu-rep" --page source --print-source sass --csv > "$dir/source.csv" 2>&1
  tail -5 "$dir/ncu_console.txt"
  tar -czf "$OUT/ncu.tgz" -C "$dir" ncu_console.txt details.csv raw.csv source.csv
  ls -la "$dir" "$OUT/ncu.tgz"
}

export OUT WORKLOADS TIME_IMPLS IMPLS
export -f install probe time_workloads profile
source "$(dirname "${BASH_SOURCE[0]}")/stages.sh"
source "$(dirname "${BASH_SOURCE[0]}")/site_path.sh"
log "data_dependence.sh: budget ${TOTAL}s, repo $(git rev-parse --short HEAD 2>/dev/null || cat REVISION 2>/dev/null)"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee -a "$LOG"
# Reserves: what the later stages need at the least (probe 30 s, time 60 s, ncu 120 s).
stage install 260 210 install
tail -3 "$OUT/install.txt" 2>/dev/null
# The install stage's h200_run.sh fills the site (or a warm machine kept it): the later stages need it.
[[ -d $SITE ]] && export PYTHONPATH="$(site_pythonpath)${PYTHONPATH:+:$PYTHONPATH}"
stage probe 120 180 probe
stage time 150 120 time_workloads
stage ncu 240 0 profile
tail -n 40 "$OUT/probe.txt" "$OUT/time.txt" 2>/dev/null
stage_table
log "=== done t=$(elapsed)s"
