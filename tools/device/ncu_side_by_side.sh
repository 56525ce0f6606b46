#!/usr/bin/env bash
# ncu_side_by_side.sh — Nsight Compute profiles of ZYFA's sm_90a kernels beside FlashAttention-3's on the
# same problems, exported as CSV for tools/device/ncu_compare.py (a side-by-side table) and
# tools/device/ncu_hotspots.py (stall samples per SASS instruction).
#
#   OUT=/tmp/out bash tools/device/ncu_side_by_side.sh [CASE ...]
#
# A case is NAME:REGEX:ARGS, ARGS being tools/device/profile_call.py's arguments with commas for spaces;
# without arguments the cases below run. Each profiles one launch (the second call; the first is the
# warm-up) of the kernel whose demangled name matches REGEX with `--set full` at ncu's default locked clock,
# so two kernels compare in cycles, unaffected by the power cap. Per case, $OUT/ncu/NAME.raw.csv (every
# metric), NAME.details.csv (the sections), NAME.source.csv.gz (per-instruction samples) and
# NAME.hotspots.txt (ncu_hotspots.py of it) are written; the report files stay on the machine. Needs the
# packages installed and the peers importable (h200_run.sh's install and wheels stages, and site_path.sh).
# Env: NCU (default: ncu on PATH, else /usr/local/cuda/bin/ncu), NCU_TIMEOUT seconds per case (default 120).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/zyfa-out}"
dir="$OUT/ncu"
mkdir -p "$dir"
ncu="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
zyfa='^fa_fwd_[a-z0-9_]*sm90a$'
fa3='FlashAttnFwdSm90'

default_cases=(
    "bf16-d128-16k-zyfa:$zyfa:dense,--impl,zyfa-bf16,--shape,gqa128,--seqlen,16384"
    "bf16-d128-16k-fa3:$fa3:dense,--impl,fa3-bf16,--shape,gqa128,--seqlen,16384"
    "bf16-mla-2k-zyfa:$zyfa:dense,--impl,zyfa-bf16,--shape,mla192,--seqlen,2048"
    "bf16-mla-2k-fa3:$fa3:dense,--impl,fa3-bf16,--shape,mla192,--seqlen,2048"
    "fp8-mla-16k-lean:$zyfa:dense,--impl,zyfa-fp8-lean,--shape,mla192,--seqlen,16384"
    "fp8-mla-16k-fa3:$fa3:dense,--impl,fa3-fp8,--shape,mla192,--seqlen,16384"
    "fp8-d128-16k-exact:$zyfa:dense,--impl,zyfa-fp8-exact,--shape,gqa128,--seqlen,16384"
    "fp8-d128-16k-fa3:$fa3:dense,--impl,fa3-fp8,--shape,gqa128,--seqlen,16384"
    "paged-bf16-d128:paged:serving,--impl,zyfa-varlen,--precision,bf16,--prefix,4096"
    "varlen-bf16-d128:varlen:serving,--impl,zyfa-varlen,--precision,bf16,--prefix,0"
)
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && cases=("${default_cases[@]}")

i=0
for c in "${cases[@]}"; do
    i=$((i + 1))
    name="${c%%:*}"; rest="${c#*:}"; regex="${rest%%:*}"; args="${rest#*:}"
    echo "=== [$i/${#cases[@]}] $name ($(date +%T))"
    IFS=',' read -r -a argv <<<"$args"
    timeout "${NCU_TIMEOUT:-120}" "$ncu" --set full --import-source no --kernel-name-base demangled \
        -k "regex:$regex" --launch-skip 1 --launch-count 1 -f -o "$dir/$name" \
        python3 "$repo/tools/device/profile_call.py" "${argv[@]}" --calls 2 >"$dir/$name.log" 2>&1 \
        || { echo "!!! $name: ncu failed"; tail -5 "$dir/$name.log"; continue; }
    "$ncu" -i "$dir/$name.ncu-rep" --page raw --csv --print-units base >"$dir/$name.raw.csv" 2>/dev/null
    "$ncu" -i "$dir/$name.ncu-rep" --page details --csv >"$dir/$name.details.csv" 2>/dev/null
    "$ncu" -i "$dir/$name.ncu-rep" --page source --csv --print-source sass >"$dir/$name.source.csv" 2>/dev/null
    rm -f "$dir/$name.ncu-rep"
    python3 "$repo/tools/device/ncu_hotspots.py" "$dir/$name.source.csv" 40 >"$dir/$name.hotspots.txt" 2>&1
    gzip -f "$dir/$name.source.csv"
    python3 "$repo/tools/device/ncu_compare.py" --brief "$dir/$name.raw.csv" || true
done
python3 "$repo/tools/device/ncu_compare.py" "$dir"/*.raw.csv >"$dir/side_by_side.md" 2>&1 || true
