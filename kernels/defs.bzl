"""Bazel rules for ZYFA code objects: thin wrappers around kernels/tools/zyfa_kernel_build.py.

The pip build of zyfa-core runs the same tool (`build-all`), so both front ends compile with the same
commands and toolchain checks. Each rule is one `ctx.actions.run` of the tool with the client's PATH
(use_default_shell_env), so nvcc and python3 (with the pinned ziglang) come from the machine; the tool
checks their versions. Plain custom rules only: no rules_cc/rules_python, no http_archive, so this
builds offline on Bazel 4.2.3 (Debian's bazel-bootstrap) and on newer Bazel in WORKSPACE mode.

  zyfa_kernels(VARIANTS, ...)  one target per variant (cuda_cubin / hip_code_object /
                               asm_code_object) plus kernel_manifest targets :sm90, :gfx950, :all.
"""

ZyfaKernelInfo = provider(
    doc = "A built variant: its code object, its per-variant meta JSON and (gfx950) its .s.",
    fields = ["code_object", "meta", "asm"],
)

_TOOL = "//kernels:tools/zyfa_kernel_build.py"

# Manifest target name per arch; //kernels:all collects every arch.
_GROUPS = {"sm90a": "sm90", "gfx950": "gfx950"}

def _code_object_impl(ctx, suffix, keep_asm):
    name = ctx.attr.variant
    code_object = ctx.actions.declare_file(name + suffix)
    meta = ctx.actions.declare_file(name + ".meta.json")
    asm = ctx.actions.declare_file(name + ".s") if keep_asm else None
    args = ctx.actions.args()
    args.add_all(["--root", ".", "compile", name, "--out", code_object, "--meta", meta])
    if asm:
        args.add_all(["--asm", asm])
    outputs = [code_object, meta] + ([asm] if asm else [])
    ctx.actions.run(
        executable = ctx.executable._tool,
        arguments = [args],
        inputs = ctx.files.srcs + ctx.files._tool_srcs,
        outputs = outputs,
        # PATH (nvcc, python3 with ziglang) and --action_env=ZYFA_MISSING_TOOLCHAINS=skip reach the tool.
        use_default_shell_env = True,
        mnemonic = "ZyfaKernel",
        progress_message = "Building ZYFA kernel %s" % name,
    )
    return [
        DefaultInfo(files = depset([code_object] + ([asm] if asm else []))),
        ZyfaKernelInfo(code_object = code_object, meta = meta, asm = asm),
    ]

_COMMON_ATTRS = {
    "variant": attr.string(mandatory = True, doc = "the variant's name in kernels/variants.bzl"),
    "srcs": attr.label_list(allow_files = True, doc = "every file the build reads (sources, lists, ABI)"),
    "_tool": attr.label(default = _TOOL, executable = True, cfg = "exec", allow_single_file = True),
    "_tool_srcs": attr.label(default = "//kernels:tool_srcs"),
}

def _cuda_cubin_impl(ctx):
    return _code_object_impl(ctx, ".cubin", False)

def _gfx950_impl(ctx):
    return _code_object_impl(ctx, ".hsaco", True)

cuda_cubin = rule(
    implementation = _cuda_cubin_impl,
    attrs = _COMMON_ATTRS,
    doc = "nvcc -> NAME.cubin (sm_90a).",
)

hip_code_object = rule(
    implementation = _gfx950_impl,
    attrs = _COMMON_ATTRS,
    doc = "clang -x hip -> NAME.s -> NAME.hsaco (gfx950, pinned ziglang LLVM).",
)

asm_code_object = rule(
    implementation = _gfx950_impl,
    attrs = _COMMON_ATTRS,
    doc = "python -m zyfa_asmgen emit -> NAME.s -> NAME.hsaco (gfx950).",
)

def _kernel_manifest_impl(ctx):
    kernels = [k[ZyfaKernelInfo] for k in ctx.attr.kernels]
    out = ctx.actions.declare_file(ctx.attr.out)
    args = ctx.actions.args()
    args.add_all(["--root", ".", "manifest", "--out", out])
    args.add_all([k.meta for k in kernels])
    code_objects = [k.code_object for k in kernels]
    ctx.actions.run(
        executable = ctx.executable._tool,
        arguments = [args],
        inputs = [k.meta for k in kernels] + code_objects + ctx.files._tool_srcs + ctx.files._abi,
        outputs = [out],
        use_default_shell_env = True,
        mnemonic = "ZyfaManifest",
        progress_message = "Writing ZYFA %s" % ctx.attr.out,
    )
    asms = [k.asm for k in kernels if k.asm]
    return [DefaultInfo(files = depset([out] + code_objects + asms))]

kernel_manifest = rule(
    implementation = _kernel_manifest_impl,
    attrs = {
        "kernels": attr.label_list(providers = [ZyfaKernelInfo]),
        "out": attr.string(mandatory = True, doc = "manifest file name, next to the code objects"),
        "_abi": attr.label(default = "//kernels:abi/zyfa_abi.h", allow_single_file = True),
        "_tool": attr.label(default = _TOOL, executable = True, cfg = "exec", allow_single_file = True),
        "_tool_srcs": attr.label(default = "//kernels:tool_srcs"),
    },
    doc = "Merges the variants' metas into one manifest.json that lies next to their code objects.",
)

_HEADER_EXTS = [".h", ".cuh", ".hpp", ".inc"]  # as source_files() in zyfa_kernel_build.py

_RULES = {"cuda": cuda_cubin, "hip": hip_code_object, "asmgen": asm_code_object}

def zyfa_kernels(variants, build_inputs, asmgen_srcs):
    """One code-object target per variant, and the manifests :sm90, :gfx950 (per arch) and :all.

    Args:
      variants: VARIANTS from kernels/variants.bzl.
      build_inputs: label of the files every build reads (variant list, pins, ABI header).
      asmgen_srcs: label of the generator package's sources (kind "asmgen").
    """
    # Every header under kernels/ may be included (-Ikernels); the tool hashes those of the
    # source's own directory into source_sha256.
    headers = native.glob(["**/*" + ext for ext in _HEADER_EXTS], exclude = ["tools/**"], allow_empty = True)
    groups = {}
    for v in variants:
        srcs = [build_inputs]
        if v["kind"] == "asmgen":
            srcs.append(asmgen_srcs)
        else:
            srcs += [v["src"]] + headers  # a missing source fails here, by name
        _RULES[v["kind"]](name = v["name"], variant = v["name"], srcs = srcs)
        groups.setdefault(_GROUPS[v["arch"]], []).append(v["name"])
    for group, names in groups.items():
        kernel_manifest(name = group, kernels = names, out = "manifest_%s.json" % group)
    kernel_manifest(name = "all", kernels = [v["name"] for v in variants], out = "manifest.json")
