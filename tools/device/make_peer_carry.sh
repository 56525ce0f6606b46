#!/usr/bin/env bash
# Builds site-packages archives of the NVIDIA peers for a GPU machine without network access (run it on a
# machine with PyPI):
#   .whl/nvidia_cudnn_frontend-1.16.0-*.whl   cuDNN BF16/FP8 SDPA through the cuDNN frontend (1.9 MB)
#   .carry/fa4-site.tar.xz                    FlashAttention-4 with its CuTe DSL (46 MB, 206 MB unpacked)
#   .carry/fa3-site.tar.xz                    FlashAttention-3's forward, fa3-fwd 0.0.3 (8.8 MB, 105 MB unpacked)
# tools/device/h200_run.sh installs the wheels and unpacks the archive into /tmp/zyfa-site; copy .whl/ and
# .carry/ to the GPU machine beside the repository.
#
# Pins and why:
#   flash-attn-4 4.0.0b19 + nvidia-cutlass-dsl 4.5.3 (libs-cu13) + quack-kernels 0.5.0: the newest FA4
#   betas need nvidia-cutlass-dsl >= 4.6.2, whose libs wheels (4.6.x-4.8.x) as served here hold only the
#   MLIR bindings, not the `cutlass` Python package (`import cutlass.cute` fails: seen on the H200,
#   2026-12-01, with 4.0.0b36 + 4.8.1). nvidia-cutlass-dsl-libs-cu13 4.5.3 is self-contained (183 .py
#   files + the cu13 libraries). quack-kernels 0.5.0 is the last release that accepts cutlass-dsl 4.5.x.
#   FA4 has no FP8 path on sm90, so it is the BF16 peer only.
#   fa3-fwd 0.0.3: FA3's hopper/ forward kernels, BF16 and FP8, as one abi3 extension on torch's stable C ABI
#   (built against torch 2.10 and the CUDA 13 runtime; it imports only torch at run time, so its declared
#   einops/packaging/ninja are not carried). Its wheel is 27.6 MB (zip); xz packs it to 8.8 MB, so that it,
#   FA4's archive and the cuDNN frontend come to 57 MB together, under 64 MiB.
# xz with the x86 branch filter: 46 MB against 68 MB for plain xz -9e (the archive stays under 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip_dl() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --pre -d "$1" "${@:2}"
}
mkdir -p .whl .carry
pip_dl .whl nvidia-cudnn-frontend==1.16.0
pip_dl "$tmp/w" flash-attn-4==4.0.0b19 quack-kernels==0.5.0 nvidia-cutlass-dsl==4.5.3 \
    nvidia-cutlass-dsl-libs-cu13==4.5.3 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5
mkdir -p "$tmp/site"
for w in "$tmp"/w/*.whl; do python3 -m zipfile -e "$w" "$tmp/site"; done
tar -cf - -C "$tmp/site" . | xz --x86 --lzma2=preset=9e,dict=256MiB -T1 >.carry/fa4-site.tar.xz
pip_dl "$tmp/w3" fa3-fwd==0.0.3
mkdir -p "$tmp/site3"
python3 -m zipfile -e "$tmp"/w3/fa3_fwd-0.0.3-*.whl "$tmp/site3"
tar -cf - -C "$tmp/site3" . | xz --x86 --lzma2=preset=9e,dict=128MiB -T1 >.carry/fa3-site.tar.xz
ls -la .whl .carry
