# site_path.sh — sourced by the device scripts (h200_run.sh): the PYTHONPATH of the
# carried peer site in $SITE (default /tmp/zyfa-site, filled by h200_run.sh's wheels stage).
SITE=${SITE:-/tmp/zyfa-site}
# PYTHONPATH entries are no site dirs: their .pth files are not read.  Add the paths that the simple ones
# name (one a line, relative to $SITE: cutlass-dsl 4.5.3's nvidia_cutlass_dsl.pth names python_packages,
# which holds the `cutlass` package FA4 imports), and the folder that the `import` line of newer
# cutlass-dsl releases (nvidia_cutlass_dsl_packages.pth) puts on sys.path: nvidia_cutlass_dsl/dsl_packages.
# The archive itself comes from tools/device/make_peer_carry.sh.
site_pythonpath() {
    local p="$SITE" f line
    [[ -d $SITE/nvidia_cutlass_dsl/dsl_packages ]] && p="$p:$SITE/nvidia_cutlass_dsl/dsl_packages"
    shopt -s nullglob
    for f in "$SITE"/*.pth; do
        while IFS= read -r line || [[ -n $line ]]; do
            line=${line%$'\r'}
            [[ -z $line || $line == \#* || $line == import* ]] && continue
            [[ $line != /* ]] && line="$SITE/$line"
            [[ -d $line ]] && p="$p:$line"
        done <"$f"
    done
    echo "$p"
}
