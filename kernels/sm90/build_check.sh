#!/usr/bin/env bash
# Compile every variant of kernels/variants.bzl built from sm90/fa_fwd_simple.cu with nvcc (no GPU
# needed), print ptxas' register / shared-memory / spill report, fail on any spill, and, when
# cuobjdump is found, confirm the SASS uses tensor-core HMMA instructions.
# Usage: bash kernels/sm90/build_check.sh [OUTDIR]   (default: a temporary directory)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
nvcc="${NVCC:-nvcc}"

find_cuobjdump() {
  if command -v cuobjdump >/dev/null 2>&1; then command -v cuobjdump; return; fi
  if [[ -x /usr/local/cuda/bin/cuobjdump ]]; then echo /usr/local/cuda/bin/cuobjdump; return; fi
  # The nvidia-cuda-cuobjdump wheel puts it under site-packages/nvidia/cu13/bin.
  python3 - <<'EOF' 2>/dev/null || true
import glob, os, site
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for p in glob.glob(os.path.join(d, "nvidia", "cu*", "bin", "cuobjdump")):
        print(p)
        raise SystemExit
EOF
}
cuobjdump="$(find_cuobjdump)"
# cuobjdump --dump-sass runs nvdisasm, which the wheels install next to it.
[[ -n "$cuobjdump" ]] && export PATH="$PATH:$(dirname "$cuobjdump")"

# One line per variant built from fa_fwd_simple.cu (the wgmma variants have their own check,
# tools/device/sm90_wgmma_selftest.sh): its name and the -D defines of its build.
mapfile -t lines < <(python3 "$repo/kernels/tools/variant_defines.py" --src sm90/fa_fwd_simple.cu)

status=0
for line in "${lines[@]}"; do
  name="${line%% *}"
  defines="${line#* }"
  # shellcheck disable=SC2086
  log="$("$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -I"$repo/kernels" $defines \
          -Xptxas -v "$repo/kernels/sm90/fa_fwd_simple.cu" -o "$out/$name.cubin" 2>&1)" || {
    echo "FAIL $name: nvcc failed"; echo "$log"; status=1; continue; }
  regs="$(grep -o 'Used [0-9]* registers' <<<"$log" | head -1)"
  spill="$(grep -o '[0-9]* bytes spill stores, [0-9]* bytes spill loads' <<<"$log" | head -1)"
  stack="$(grep -o '[0-9]* bytes stack frame' <<<"$log" | head -1)"
  echo "$name: $regs; $stack; $spill"
  if ! grep -q '0 bytes spill stores, 0 bytes spill loads' <<<"$log"; then
    echo "FAIL $name: register spills"; status=1
  fi
  if [[ -n "$cuobjdump" ]]; then
    hmma="$("$cuobjdump" --dump-sass "$out/$name.cubin" | grep -c 'HMMA' || true)"
    echo "  SASS: $hmma HMMA instructions"
    if [[ "$hmma" -eq 0 ]]; then echo "FAIL $name: no HMMA in SASS"; status=1; fi
  fi
done
[[ -n "$cuobjdump" ]] || echo "note: cuobjdump not found; SASS not checked (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
echo "cubins in $out"
exit "$status"
