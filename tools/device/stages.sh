# stages.sh — sourced by the device scripts (h200_run.sh): their budgeted stage runner.
#
# A run on a GPU machine has one wall-clock limit, so a script's stages share a budget: each runs in a child bash
# under a timeout of min(its cap, time left - what the later stages keep back), its failure or timeout is
# logged and the next stage still runs, and `stage_table` prints every stage's outcome at the end.
# The sourcing script sets, before its first stage:
#     LOG    the file every stage's output is appended to (tee'd lines go to the console too)
#     TOTAL  the budget in seconds, counted from when this file was sourced
#     SKIP   stage names to skip, comma-separated and comma-framed: ",tests,clocks,"
# and exports (export -f) the functions its stages run: the child bash sees only exported names.
T0=$(date +%s)
STATUS=()

log() { printf '%s\n' "$*" | tee -a "$LOG"; }
elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((T0 + TOTAL - $(date +%s))); }

# stage NAME CAP_SECONDS RESERVE_SECONDS FUNCTION [ARGS...]: run the (exported) shell FUNCTION in a child
# bash under a timeout of min(CAP, time left - RESERVE), RESERVE being what the later stages need at least.
# SIGINT first (Python writes nothing half: result files are rewritten whole after every row), SIGKILL
# 15 s later.
stage() {
    local name=$1 cap=$2 reserve=$3
    shift 3
    if [[ $SKIP == *",$name,"* ]]; then
        STATUS+=("$name|skipped|0")
        return 0
    fi
    local limit=$(($(left) - reserve))
    if ((limit < 5)); then  # the budget decides whether a stage starts; its cap only shortens it
        log "=== $name: not started, only $(left) s of the budget left"
        STATUS+=("$name|not started: budget spent|0")
        return 0
    fi
    ((limit > cap)) && limit=$cap
    log "=== $name (limit ${limit}s, t=$(elapsed)s)"
    local start rc
    start=$(date +%s)
    timeout --signal=INT --kill-after=15 "$limit" bash -c '"$@"' _ "$@" >>"$LOG" 2>&1
    rc=$?
    local took=$(($(date +%s) - start)) what
    case $rc in
        0) what="ok" ;;
        124 | 137) what="TIMED OUT after ${limit}s" ;;
        *) what="FAILED (exit $rc)" ;;
    esac
    log "=== $name: $what in ${took}s"
    STATUS+=("$name|$what|$took")
    return 0
}

# stage_table: each stage's outcome and seconds, one line each (to the console and LOG).
stage_table() {
    local s n w t
    printf '%-11s %-32s %6s\n' stage outcome seconds | tee -a "$LOG"
    for s in "${STATUS[@]}"; do
        IFS='|' read -r n w t <<<"$s"
        printf '%-11s %-32s %6s\n' "$n" "$w" "$t" | tee -a "$LOG"
    done
}

# fit_out_files DIR MAX TAR FILE...: for a results folder copied off the GPU machine with a limit of MAX
# (8) files. When more than MAX files lie under DIR (a second workload's JSON and the caller's console
# copy make nine in h200_run.sh), pack the named FILEs (those present) into DIR/TAR: the report and
# figures are made from the JSON again by `zyfa-bench report`, the JSON and logs are not.
fit_out_files() {
    local dir=$1 max=$2 tarname=$3 n f present=()
    shift 3
    n=$(find "$dir" -type f | wc -l)
    ((n <= max)) && return 0
    for f in "$@"; do [[ -f $dir/$f ]] && present+=("$f"); done
    if ((${#present[@]} < 2)) || ((n - ${#present[@]} + 1 > max)); then
        log "WARNING: $n files in $dir and packing ${present[*]:-nothing} cannot bring them to $max: some stay behind"
        ((${#present[@]} < 2)) && return 0
    fi
    tar -C "$dir" -cf "$dir/$tarname" "${present[@]}" && (cd "$dir" && rm -f "${present[@]}")
    log "$n files in $dir, at most $max come back: ${present[*]} packed into $tarname"
}
