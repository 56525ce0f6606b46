"""Pinned toolchains: the one place their versions live.

Read by kernels/tools/zyfa_kernel_build.py (ast.literal_eval), which checks each tool's version
before it builds and records the versions in manifest.json; .ci/run and the noxfile install the
pip pins from here too.
"""

TOOLCHAINS = {
    # LLVM 22 with the AMDGPU target: assembles gfx950 asm, compiles HIP with -nogpulib -nogpuinc, links with ld.lld.
    "ziglang": {"pip": "ziglang==0.17.0", "clang_version": "22.1.8"},
    # nvcc for sm_90a; wgmma/setmaxnreg need the compute_90a/sm_90a gencode form.
    "nvcc": {"min_version": "12.8", "gencode": "-gencode=arch=compute_90a,code=sm_90a"},
    # CuTe/CUTLASS C++ headers ship in this wheel under cutlass_library/source/include.
    "cutlass": {"pip": "nvidia-cutlass==4.2.0.0"},
}
