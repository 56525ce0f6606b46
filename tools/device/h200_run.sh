#!/usr/bin/env bash
# h200_run.sh — THE H200 run of ZYFA: install, GPU tests, throughput + accuracy + clocks, report.
#
# Usage, on a machine with an H200 (or another sm_90a GPU), from the repository root:
#     OUT=/tmp/zyfa-out bash tools/device/h200_run.sh
# with optional environment variables:
#     ZYFA_TOTAL_S=510           wall-clock budget of the whole script in seconds (stages shrink to fit)
#     ZYFA_SEQLENS=16384,2048,4096,8192,32768   sweep order (16K first: the targets' seqlen)
#     ZYFA_TOKENS=32768          tokens per call of the sweep (batch = tokens / seqlen)
#     ZYFA_SHAPES=gqa128,mla192  head shapes of the sweep
#     ZYFA_WORKLOADS=gaussian    input workloads of the sweep, one sweep each (the budget split evenly): the
#                                first writes throughput.json, the others throughput-<workload>.json; the
#                                report gives each workload its own tables and targets (kernel speed can depend
#                                on the data)
#     ZYFA_ACC_SEQLEN=4096       seqlen of the accuracy problems (batch 1)
#     ZYFA_CLOCKS_SEQLEN=16384   seqlen of the clocks runs
#     ZYFA_CLOCKS_SHAPE=gqa128   head shape of the clocks runs
#     ZYFA_CLOCKS_IMPLS=...      implementations of the clocks runs (default: ZYFA's three d128 kernels, FA3 FP8,
#                                cuDNN FP8)
#     ZYFA_CLOCKS_WORKLOAD=model-like   input workload of the clocks runs
#     ZYFA_CLOCKS_S=45           the clocks stage's time limit in seconds (each implementation runs 4 s)
#     ZYFA_IMPLS=...             implementations of the throughput sweep (default: zyfa + NVIDIA peers)
#     ZYFA_REPEATS=30 ZYFA_ROUNDS=3   timed calls per row, in interleaved rounds over the implementations
#     ZYFA_PYTEST_PATHS=...      test directories (default: zyfa-core, zyfa-torch, zyfa-bench tests)
#     ZYFA_PYTEST_ARGS=...       extra pytest args, e.g. "-m gpu" or "-k sm90"
#     ZYFA_SKIP=tests,clocks     stages to skip (names as in the stage table)
#
# Wheels the machine lacks (fa3-fwd, flash-attn-4, nvidia-cutlass-dsl, nvidia-cudnn-frontend, ziglang, ...) can
# be put in .whl/ (pip download ... -d .whl) or, as prepared site-packages archives, under .carry/
# (tools/device/make_peer_carry.sh builds FA3's and FA4's); they are installed with --no-index --no-deps into
# /tmp/zyfa-site, which goes on PYTHONPATH. docs/benchmarks/index.md says how a run's JSON becomes the
# published results.
#
# Stages (each one's failure is reported and the next stages still run; each has a timeout):
#     env         nvidia-smi, python/torch/CUDA versions, the relevant installed packages
#     wheels      carried wheels/archives -> /tmp/zyfa-site
#     install     pip install --no-build-isolation --no-deps (--no-index) zyfa-asmgen, zyfa-core (its build
#                 compiles the sm_90a cubins with nvcc here), zyfa-torch, zyfa-bench — one at a time
#     tests       pytest of the GPU-capable suites (CPU tests in them run too) -> $OUT/pytest.txt
#     throughput  zyfa-bench throughput: d=128 32q/8kv heads and 16 heads 192/128, causal, 32K tokens per
#                 call, seqlen 2K..32K, BF16 and FP8, zyfa and every available NVIDIA peer, GEMM ceilings,
#                 clocks -> $OUT/throughput.json (rewritten after every row: a cut run keeps its rows)
#     accuracy    zyfa-bench accuracy at 4K (batch 1), Gaussian and model-like inputs, rotation off/on
#                 -> $OUT/accuracy.json (FA3's kernels are prebuilt; FA4 is left out here: a new process would
#                 JIT-compile it again; every throughput row already carries a float64 check of its output, FA4's too)
#     clocks      zyfa-bench clocks (model-like data by default), 16K d=128, 4 s per implementation -> $OUT/clocks.json
#     report      $OUT/report.md, $OUT/throughput.png, $OUT/accuracy.png, then the short tables
# Files in $OUT: log.txt pytest.txt throughput.json accuracy.json clocks.json report.md throughput.png
# accuracy.png, and throughput-<workload>.json per extra workload; beyond 8 files, report.md and the
# figures are packed as report.tar (fit_out_files in stages.sh; `zyfa-bench report` makes them again
# from the JSON).
#
# Expected runtime: ~6-8 min (install ~1-2 min with the nvcc build, tests ~1 min, sweep <= ~3 min
# (capped by --time-budget), accuracy ~30 s, clocks ~20 s, report ~10 s); never more than ZYFA_TOTAL_S.

set -u
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-/tmp/zyfa-out}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"
PY="${PYTHON:-python3}"
TOTAL="${ZYFA_TOTAL_S:-510}"
SEQLENS="${ZYFA_SEQLENS:-16384,2048,4096,8192,32768}"
TOKENS="${ZYFA_TOKENS:-32768}"
ACC_SEQLEN="${ZYFA_ACC_SEQLEN:-4096}"
CLOCKS_SEQLEN="${ZYFA_CLOCKS_SEQLEN:-16384}"
SHAPES="${ZYFA_SHAPES:-gqa128,mla192}"
WORKLOADS="${ZYFA_WORKLOADS:-gaussian}"
CLOCKS_SHAPE="${ZYFA_CLOCKS_SHAPE:-gqa128}"
CLOCKS_IMPLS="${ZYFA_CLOCKS_IMPLS:-zyfa-bf16,zyfa-fp8-exact,zyfa-fp8-lean,fa3-fp8,cudnn-fp8}"
CLOCKS_WORKLOAD="${ZYFA_CLOCKS_WORKLOAD:-model-like}"
CLOCKS_S="${ZYFA_CLOCKS_S:-45}"
REPEATS="${ZYFA_REPEATS:-30}"  # timed calls per row, split over ROUNDS interleaved rounds
ROUNDS="${ZYFA_ROUNDS:-3}"     # (a power-capped H200 moves its clock by 10%; every peer sees every state)
IMPLS="${ZYFA_IMPLS:-zyfa,fa3-bf16,fa3-fp8,fa4-bf16,cudnn-bf16,cudnn-fp8,sdpa-flash,sdpa-cudnn,sdpa-efficient,flashinfer-bf16,flashinfer-fp8}"
PYTEST_PATHS="${ZYFA_PYTEST_PATHS:-packages/zyfa-core/tests packages/zyfa-torch/tests packages/zyfa-bench/tests}"
SKIP=",${ZYFA_SKIP:-},"
SITE=/tmp/zyfa-site
# log, elapsed, left, stage, stage_table; the budget counts from here.
source "$(dirname "${BASH_SOURCE[0]}")/stages.sh"

# The CLI through the interpreter that holds torch (its console script may not be on PATH).
zb() { "$PY" -m zyfa_bench.cli "$@"; }

do_env() {
    nvidia-smi || echo "nvidia-smi failed"
    "$PY" - <<'EOF'
import importlib.metadata as md, sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"sm{p.major}{p.minor}", p.multi_processor_count, "SMs", p.total_memory >> 30, "GiB")
    print("cudnn", torch.backends.cudnn.version())
for name in ("triton", "numpy", "nvidia-cudnn-frontend", "nvidia-cudnn-cu13", "fa3-fwd", "flash-attn-4", "nvidia-cutlass-dsl",
             "nvidia-cutlass", "flashinfer-python", "nvidia-ml-py", "pybind11", "scikit-build-core", "setuptools",
             "ziglang", "pytest", "pytest-timeout", "matplotlib", "rich", "safetensors", "transformers"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} -")
EOF
    command -v nvcc && nvcc --version | tail -2
}

do_wheels() {
    local found=0
    mkdir -p "$SITE"
    shopt -s nullglob globstar
    local wheels=(.whl/*.whl .carry/**/*.whl)
    if ((${#wheels[@]})); then
        found=1
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
    fi
    local a
    for a in .carry/**/*.tar.xz .carry/**/*.tar.zst .carry/**/*.tar.gz .carry/**/*.tar; do
        found=1
        echo "unpacking $a into $SITE"
        tar -xf "$a" -C "$SITE"
    done
    ((found)) || echo "no carried wheels or archives (.whl/, .carry/): using the image's packages only"
    ls "$SITE" | head -50
}

do_install() {
    local rc=0 p
    for p in zyfa-asmgen zyfa-core zyfa-torch zyfa-bench; do
        echo "--- pip install packages/$p"
        if ! "$PY" -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir "packages/$p"; then
            echo "!!! packages/$p failed to install"
            rc=1
        fi
    done
    "$PY" - <<'EOF' || true
import json, pathlib
try:
    import zyfa_core
    d = pathlib.Path(zyfa_core.__file__).parent / "kernels" / "manifest.json"
    m = json.loads(d.read_text())
    print("manifest:", [k["name"] for k in m.get("kernels", [])])
    print("skipped:", m.get("skipped"))
except Exception as exc:
    print("no zyfa_core manifest:", exc)
EOF
    zb peers || true
    return $rc
}

do_tests() {
    local timeout_opt=() d helpers=""
    "$PY" -c "import pytest_timeout" 2>/dev/null && timeout_opt=(--timeout=90)
    # As the noxfile does: importlib mode (test files of different packages share basenames), and the
    # test dirs on PYTHONPATH for their helper modules (zyfa_testutil, fake_zyfa, ...).
    for d in $PYTEST_PATHS; do helpers="$helpers:$PWD/$d"; done
    # shellcheck disable=SC2086  # paths and args are space-separated lists on purpose
    PYTHONPATH="${PYTHONPATH:-}$helpers" "$PY" -m pytest --import-mode=importlib -q -rfEs -p no:cacheprovider \
        "${timeout_opt[@]}" $PYTEST_PATHS ${ZYFA_PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.txt"
    return "${PIPESTATUS[0]}"
}

do_throughput() {
    # Leave ~45 s after the last row starts for its measurement and the run's teardown, per sweep.
    local words n budget w rc=0
    IFS=, read -ra words <<<"$WORKLOADS"
    n=${#words[@]}
    budget=$(($1 / n - 45))
    ((budget < 20)) && budget=20
    for w in "${words[@]}"; do
        # The GEMM ceilings once, in the first sweep: the report has one set for every workload's targets.
        local json="$OUT/throughput.json" extra=()
        [[ $w != "${words[0]}" ]] && json="$OUT/throughput-$w.json" extra=(--no-ceilings)
        zb throughput --quiet --shape "$SHAPES" --seqlens "$SEQLENS" --tokens "$TOKENS" --workload "$w" \
            --precision bf16,fp8 --impl "$IMPLS" --warmup 2 --repeats "$REPEATS" --rounds "$ROUNDS" \
            --time-budget "$budget" --json "$json" "${extra[@]}" || rc=$?
    done
    return $rc
}

do_accuracy() {
    zb accuracy --quiet --shape gqa128,mla192 --seqlens "$ACC_SEQLEN" --batch 1 \
        --impl zyfa,fa3-bf16,fa3-fp8,cudnn-bf16,cudnn-fp8,sdpa-flash --workload gaussian,model-like --rotate off,on \
        --json "$OUT/accuracy.json"
}

do_clocks() {
    zb clocks --quiet --shape "$CLOCKS_SHAPE" --seqlen "$CLOCKS_SEQLEN" --tokens "$TOKENS" --workload "$CLOCKS_WORKLOAD" \
        --impl "$CLOCKS_IMPLS" --seconds 4 --json "$OUT/clocks.json"
}

# The result files present in $OUT, one a line (the report's inputs; a workload sweep's extra files included).
result_files() {
    local f
    for f in "$OUT"/throughput.json "$OUT"/throughput-*.json "$OUT"/accuracy.json "$OUT"/clocks.json; do
        [[ -s $f ]] && echo "$f"
    done
    return 0
}

do_report() {
    local files=()
    mapfile -t files < <(result_files)
    if ((${#files[@]} == 0)); then
        echo "no result files to report"
        return 1
    fi
    zb report "${files[@]}" --out "$OUT"
}

export OUT LOG PY SITE SEQLENS SHAPES WORKLOADS TOKENS ACC_SEQLEN CLOCKS_SEQLEN CLOCKS_SHAPE CLOCKS_IMPLS CLOCKS_WORKLOAD IMPLS PYTEST_PATHS REPEATS ROUNDS
export -f zb result_files do_env do_wheels do_install do_tests do_throughput do_accuracy do_clocks do_report

# A `git archive` snapshot (run from a carried folder) names its commit in REVISION; git would name the
# device checkout's.
log "h200_run.sh: budget ${TOTAL}s, OUT=$OUT, repo $(cat REVISION 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo '?')"
# The tests need ~120 s after ~90 s of env + install and before what the later stages keep back
# (150 s with all of them): a smaller budget cuts them without a verdict (ZYFA_TOTAL_S=330 left them 88 s).
if [[ $SKIP != *",tests,"* ]] && ((TOTAL < 420)); then
    log "WARNING: ZYFA_TOTAL_S=$TOTAL leaves the GPU tests under ~120 s: they may be cut (use >= 420 or skip them)"
fi
# Reserves: what the later stages need at the least, so an overrunning stage cannot starve them.
stage env 30 120 do_env
stage wheels 60 120 do_wheels
# The carried site goes on PYTHONPATH with the folders its .pth files name (tools/device/site_path.sh).
source "$(dirname "${BASH_SOURCE[0]}")/site_path.sh"
if [[ -d $SITE ]]; then
    export PYTHONPATH="$(site_pythonpath)${PYTHONPATH:+:$PYTHONPATH}"
    log "PYTHONPATH=$PYTHONPATH"
fi
# Each stage keeps back what the later stages that will run need at least (a skipped stage needs
# nothing: a tests-only run must not lose its time to a sweep that never starts).
min_need() {
    case $1 in
        tests) echo 120 ;;
        throughput) echo 60 ;;
        accuracy) echo 50 ;;
        clocks | report) echo 20 ;;
        *) echo 0 ;;
    esac
}
reserve_for() {
    local total=0 name
    for name in "$@"; do
        [[ $SKIP == *",$name,"* ]] || total=$((total + $(min_need "$name")))
    done
    echo "$total"
}
# Install is what every later stage needs: it keeps back only the tests' and a short sweep's minimum,
# so a small ZYFA_TOTAL_S cuts the sweep, not the install.
stage install 200 "$(reserve_for tests throughput)" do_install
stage tests 300 "$(reserve_for throughput accuracy clocks report)" do_tests
# The sweep gets what is left minus what accuracy, clocks and report need.
AFTER_SWEEP=$(reserve_for accuracy clocks report)
SWEEP_CAP=$(($(left) - AFTER_SWEEP))
((SWEEP_CAP > 240)) && SWEEP_CAP=240
stage throughput "$SWEEP_CAP" "$AFTER_SWEEP" do_throughput "$SWEEP_CAP"
stage accuracy 80 "$(reserve_for clocks report)" do_accuracy
stage clocks "$CLOCKS_S" "$(reserve_for report)" do_clocks
stage report 40 0 do_report
rm -f "$OUT"/*.tmp

# The short tables last: the report's summary, then each stage's outcome.
if [[ -s "$OUT/report.md" ]]; then
    mapfile -t files < <(result_files)
    "$PY" -c "import sys; from zyfa_bench.report import summary_text; print(summary_text(sys.argv[1:]))" \
        "${files[@]}" 2>&1 | tee -a "$LOG" | cut -c1-220
fi
echo
stage_table
# Last (the summary above reads report.md): a console copy in $OUT and a second workload's JSON make nine
# files (ten with the clocks stage).
fit_out_files "$OUT" 8 report.tar report.md throughput.png accuracy.png
log "total $(elapsed)s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
