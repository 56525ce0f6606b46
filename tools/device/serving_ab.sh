#!/usr/bin/env bash
# serving_ab.sh — a packed-kernel candidate against a baseline build on the serving step, in one device call.
#
# Prepare here (no GPU needed; nvcc builds sm_90a code objects on any machine):
#     python3 kernels/tools/zyfa_kernel_build.py build-all --arch sm90a --out .carry/k-new     # the candidate
#     (git worktree of the baseline) ... build-all --arch sm90a --out .carry/k-base             # the baseline
#     bash tools/device/make_peer_carry.sh   # FlashAttention-3 varlen, the peer (FA4 and cuDNN: the table)
# then, on the GPU machine, from the repository root with .carry/ beside it:
#     OUT=/tmp/out bash tools/device/serving_ab.sh
# Environment:
#     ZYFA_AB_NEW=.carry/k-new     the candidates, space-separated, best first: whole sm_90a kernel
#                                  directories (manifest.json + code objects); zyfa-core is installed without
#                                  compiling kernels, and the first candidate to pass its smoke tests is timed
#     ZYFA_AB_BASES=.carry/k-base  baseline kernel directories, one A/B per entry (space-separated); each
#                                  needs only the varlen rows and a manifest of the installed ABI version
#     ZYFA_AB_TABLE=0              1: after the A/B, the whole serving table on the timed candidate (every
#                                  implementation installed, with and without the shared prefix)
#     ZYFA_AB_DENSE=""             precisions (bf16, fp8; space-separated): the dense kernels of each (fp8: lean)
#                                  against the first baseline too, beside FlashAttention-3 (the baseline then
#                                  needs those dense rows), and test_zyfa_gpu.py on the candidate
#     ZYFA_AB_S=560                wall-clock budget in seconds; the later stages shrink or are skipped to fit
# Stages, in order (each reports its elapsed time; a stage's failure does not stop the next):
#     install    tools/device/h200_run.sh's env, wheels and install stages, ZYFA_SKIP_KERNELS=1
#     smoke      test_zyfa_gpu_varlen.py's reference and many-items tests on each candidate in turn until
#                one passes (a hang or a failure rules a candidate out: its timing would be of a broken kernel)
#     ab         per baseline: `zyfa-bench serving --prefix 0 --impl zyfa-varlen,fa3-varlen --repeats 20
#                --baseline-kernels BASE --json $OUT/ab-<i>-<base>.json` with ZYFA_KERNEL_DIR = the candidate
#     bits       tools/device/bits_compare.py: the candidate's and the first baseline's outputs on fixed dense,
#                packed and paged inputs, compared bit for bit ($OUT/bits.txt; the baseline then needs the dense
#                and paged rows too, else the stage reports the missing kernel)
#     dense      per P in ZYFA_AB_DENSE: `zyfa-bench throughput --precision P --impl zyfa-P,zyfa-varlen-P,fa3-P --shape
#                gqa128,mla192 --seqlens 2048,4096,16384 --repeats 20 --rounds 2 --no-ceilings --no-check --no-graph
#                --baseline-kernels BASE --json $OUT/dense-ab-P.json` (fp8: zyfa-fp8-lean); zyfa-varlen-P is the
#                same batch through flash_attn_varlen_func (varlen against dense at the same work)
#     table      with ZYFA_AB_TABLE=1: `zyfa-bench serving --repeats 20 --json $OUT/serving.json`
#     tests      the rest of test_zyfa_gpu_varlen.py, then its bit-equality tests (which rebuild rows with
#                this checkout's kernels/tools on the GPU machine), then the sanitizer test, as time allows
# The logs (install, pytest) end up in one $OUT/logs.tgz beside the JSON results: a device call returns only a
# few files.
set -u
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/zyfa-out}"
mkdir -p "$OUT"
R="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$R"
CANDIDATES="${ZYFA_AB_NEW:-.carry/k-new}"
BASES="${ZYFA_AB_BASES:-.carry/k-base}"
BUDGET="${ZYFA_AB_S:-560}"
PY="${PYTHON:-python3}"
T0=$(date +%s)
left() { echo $((BUDGET - $(date +%s) + T0)); }
pack_logs() { (cd "$OUT" && tar -czf logs.tgz --remove-files ./*.txt install 2>/dev/null); }
stage() { echo "[$(($(date +%s) - T0)) s, $(left) s left] $*"; }
HELPERS="$R/packages/zyfa-core/tests:$R/packages/zyfa-torch/tests:$R/packages/zyfa-bench/tests"
VARLEN_TESTS=packages/zyfa-torch/tests/test_zyfa_gpu_varlen.py
# pytest under a wall-clock limit: its first argument is the limit in seconds, the rest pytest's arguments.
pt() {
    local limit=$1
    shift
    PYTHONPATH="$PYTHONPATH:$HELPERS" timeout "$limit" "$PY" -m pytest --import-mode=importlib -q -rfEs \
        -p no:cacheprovider "$@" 2>&1 | tail -15
}

stage install
export ZYFA_KERNEL_DIR="$(realpath "${CANDIDATES%% *}")"  # the install's checks see a kernel directory
ZYFA_SKIP_KERNELS=1 ZYFA_SKIP=tests,throughput,accuracy,clocks,report ZYFA_TOTAL_S=240 OUT="$OUT/install" \
    bash tools/device/h200_run.sh >"$OUT/install.txt" 2>&1
grep -E "^device|^torch|!!!" "$OUT/install.txt" | head -5
source tools/device/site_path.sh
export PYTHONPATH
PYTHONPATH="$(site_pythonpath)"

NEW=""
for candidate in $CANDIDATES; do
    export ZYFA_KERNEL_DIR="$(realpath "$candidate")"
    stage "smoke $(basename "$candidate")"
    log="$OUT/pytest-smoke-$(basename "$candidate").txt"
    pt 120 --timeout=40 -x "$VARLEN_TESTS" -k "matches_the_reference or many_items" | tee "$log"
    if grep -q " passed" "$log" && ! grep -qE "failed|error|Timeout" "$log"; then
        NEW="$ZYFA_KERNEL_DIR"
        break
    fi
    echo "!!! $(basename "$candidate") failed its smoke tests"
done
if [ -n "$NEW" ]; then
    export ZYFA_KERNEL_DIR="$NEW"
    i=0
    for base in $BASES; do
        i=$((i + 1))
        stage "ab $(basename "$NEW") against $(basename "$base")"
        timeout 120 "$PY" -m zyfa_bench.cli serving --prefix 0 --impl zyfa-varlen,fa3-varlen --repeats 20 \
            --baseline-kernels "$(realpath "$base")" --json "$OUT/ab-$i-$(basename "$base").json" 2>&1 | tail -12
    done
    base="${BASES%% *}"
    stage "bits: $(basename "$NEW") against $(basename "$base")"
    ZYFA_KERNEL_DIR="$NEW" timeout 90 "$PY" tools/device/bits_compare.py save "$OUT/bits-new.pt" | tail -1
    ZYFA_KERNEL_DIR="$(realpath "$base")" timeout 90 "$PY" tools/device/bits_compare.py save "$OUT/bits-base.pt" |
        tail -1
    "$PY" tools/device/bits_compare.py compare "$OUT/bits-new.pt" "$OUT/bits-base.pt" 2>&1 | tee "$OUT/bits.txt" |
        tail -20
    rm -f "$OUT/bits-new.pt" "$OUT/bits-base.pt"
    DENSE="${ZYFA_AB_DENSE:-}"
    for prec in $DENSE; do
        stage "dense $prec: $(basename "$NEW") against $(basename "$base")"
        impl="zyfa-$prec,zyfa-varlen-$prec,fa3-$prec"
        [ "$prec" = fp8 ] && impl="zyfa-fp8-lean,zyfa-varlen-fp8,fa3-fp8"
        timeout 180 "$PY" -m zyfa_bench.cli throughput --precision "$prec" --impl "$impl" \
            --shape gqa128,mla192 --seqlens 2048,4096,16384 --repeats 20 --rounds 2 --no-ceilings --no-check \
            --no-graph --baseline-kernels "$(realpath "$base")" --json "$OUT/dense-ab-$prec.json" 2>&1 | tail -20
    done
    if [ "${ZYFA_AB_TABLE:-0}" = 1 ]; then
        stage "table ($(basename "$NEW"))"
        timeout 240 "$PY" -m zyfa_bench.cli serving --repeats 20 --json "$OUT/serving.json" 2>&1 | tail -45
    fi
else
    echo "!!! no candidate passed its smoke tests: no A/B, no further tests"
    stage done
    pack_logs
    exit 1
fi

stage tests
(($(left) > 60)) && pt $(($(left) - 10)) --timeout=60 "$VARLEN_TESTS" -k "not bits" | tee "$OUT/pytest-varlen.txt"
(($(left) > 60)) && pt $(($(left) - 5)) --timeout=140 "$VARLEN_TESTS" -k bits | tee "$OUT/pytest-bits.txt"
(($(left) > 90)) && pt $(($(left) - 5)) packages/zyfa-torch/tests/test_zyfa_gpu_sanitizer.py | tee "$OUT/pytest-san.txt"
[ -n "$DENSE" ] && (($(left) > 60)) && pt $(($(left) - 5)) --timeout=120 packages/zyfa-torch/tests/test_zyfa_gpu.py |
    tee "$OUT/pytest-dense.txt"
stage done
pack_logs
