"""`zyfa.flash_attn_func` on FP8 tensors reaches the gfx950 matrix-core kernels, with only the HIP
driver faked.

What a user with ROCm PyTorch on an MI355X runs is ``zyfa.flash_attn_func(q8, k8, v8, causal=True,
q_descale=..., k_descale=..., v_descale=...)``. Below torch everything here is the product: zyfa's op
and kernel selection, zyfa_core's manifest, argument checks, launch plan and C++ driver shim. The HIP
runtime is zyfa-core's test double (packages/zyfa-core/tests/fake_drivers/fake_hip.c: it reports a
gfx950 device, loads "FAKEHSACO <name>" images and logs every call). The manifest rows are the build's
own (`zyfa_kernel_build.manifest_row`) for the mfma_fp8 variants of kernels/variants.bzl, with the
resources read from the generator's assembly; only the code objects are the fake's text images, so a
kernel launches only from its own file (the fake finds a function only in the image that names it).

Torch itself cannot be a ROCm build on a CPU-only machine, so CPU tensors stand in for the device
tensors: the snippet routes them to the device path (`_ops._fwd_cpu = _ops._fwd_core`) and gives torch
a current device and stream. Each scenario runs in a fresh process (zyfa_core loads its driver once).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FAKE_HIP = REPO / "packages" / "zyfa-core" / "tests" / "fake_drivers" / "fake_hip.c"
TOOLS = REPO / "kernels" / "tools"
ABI_HEADER = REPO / "kernels" / "abi" / "zyfa_abi.h"
STREAM = 0x5A000  # the stream the stand-in torch reports as current

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("zyfa_core", "zyfa_asmgen"))
    or not (TOOLS / "zyfa_kernel_build.py").is_file(),
    reason="needs zyfa-core, zyfa-asmgen and the repository's kernels/tools",
)

SNIPPET = """
import json, sys
from types import SimpleNamespace
import torch
import zyfa
from zyfa import _ops

# CPU tensors play the MI355X's tensors (a ROCm torch calls them "cuda"): the device path, device 0.
_ops._fwd_cpu = _ops._fwd_core
torch.cuda.current_device = lambda: 0
torch.cuda.current_stream = lambda device=None: SimpleNamespace(cuda_stream=STREAM)

g = torch.Generator().manual_seed(SEED)
b, sq, sk, hq, hkv, d_qk, d_v = DIMS
q8, qd = zyfa.fp8_quantize(torch.randn(b, sq, hq, d_qk, generator=g) * 3, as_float=True)
# k laid out [batch, heads, seq, d] and seen as [batch, seq, heads, d]: strides reach the kernel as they are
k8, kd = zyfa.fp8_quantize(torch.randn(b, hkv, sk, d_qk, generator=g).transpose(1, 2), as_float=True)
v8, vd = zyfa.fp8_quantize(torch.randn(b, sk, hkv, d_v, generator=g) / 2, as_float=True)
calls = []
for p_mode, tensors in P_MODES:
    ds = [torch.tensor(d) for d in (qd, kd, vd)] if tensors else [qd, kd, vd]
    kw = dict(q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], return_attn_probs=True)
    try:
        out, lse, _ = zyfa.flash_attn_func(q8, k8, v8, causal=True, p_mode=p_mode, **kw)
    except Exception as exc:
        calls.append({"error": type(exc).__name__, "message": str(exc)})
        continue
    calls.append({"out": out.data_ptr(), "out_shape": list(out.shape), "out_stride": list(out.stride()),
                  "lse": lse.data_ptr(), "lse_shape": list(lse.shape)})
tensors = {n: {"ptr": t.data_ptr(), "stride": list(t.stride())} for n, t in (("q", q8), ("k", k8), ("v", v8))}
print(json.dumps({"calls": calls, "tensors": tensors, "descales": [qd, kd, vd]}))
"""


def _kernel_build():
    """kernels/tools/zyfa_kernel_build (the build's own row logic), imported from the repository."""
    sys.path.insert(0, str(TOOLS))
    try:
        import zyfa_kernel_build
    finally:
        sys.path.remove(str(TOOLS))
    return zyfa_kernel_build


@pytest.fixture(scope="module")
def fake_hip(tmp_path_factory) -> Path:
    pytest.importorskip("zyfa_core._driver", reason="zyfa_core's C++ driver shim is not built")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler for the fake HIP driver")
    lib = tmp_path_factory.mktemp("fake") / "libfake_hip.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", str(FAKE_HIP), "-o", str(lib)], check=True)
    return lib


@pytest.fixture(scope="module")
def fp8_rows() -> list[dict]:
    """The manifest rows the build writes for the mfma_fp8 variants (code-object fields set per directory)."""
    from zyfa_asmgen.abi import parse_abi_header
    from zyfa_asmgen.generators import generate
    from zyfa_asmgen.variant import Variant

    kb = _kernel_build()
    abi = parse_abi_header(ABI_HEADER)
    rows = []
    for v in kb.load_variants(REPO):
        if v["src"] != "mfma_fp8":
            continue
        asm = generate("mfma_fp8", Variant.from_dict(v), abi)
        rows.append({"variant": v, "resources": kb.gfx950_resources(asm, v["name"], f"{v['name']}.s")})
    names = {r["variant"]["name"] for r in rows}
    for shape in ("hd128", "hd192x128"):
        assert {f"fa_fwd_e4m3fn_{shape}_causal{p}_gfx950" for p in ("", "_leanp")} <= names, names
    return rows


def _kernel_dir(path: Path, fp8_rows: list[dict], names: set[str] | None = None) -> Path:
    """A manifest with the rows of `names` (all by default) and their fake code objects."""
    kb = _kernel_build()
    path.mkdir()
    rows = []
    for r in fp8_rows:
        v = r["variant"]
        if names is not None and v["name"] not in names:
            continue
        image = path / f"{v['name']}.hsaco"
        image.write_bytes(f"FAKEHSACO {v['name']}\n".encode())
        sha = kb.source_sha256(v, REPO)
        rows.append(kb.manifest_row(v, REPO, image, r["resources"], sha, {"clang": "fake"}))
    manifest = {"abi_version": kb.abi_version(REPO), "toolchains": {}, "kernels": rows, "skipped": []}
    (path / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return path


def _run(
    tmp_path: Path, lib: Path, kernels: Path, dims: tuple, p_modes: list, seed: int
) -> tuple[dict, list]:
    """Run SNIPPET against the fake HIP driver; return (its JSON, the log lines as dicts)."""
    log = tmp_path / "calls.log"
    env = {key: val for key, val in os.environ.items() if not key.startswith(("ZYFA_", "FAKE_"))}
    env.update(
        ZYFA_BACKEND="hip", ZYFA_LIBAMDHIP64=str(lib), FAKE_GPU_LOG=str(log), ZYFA_KERNEL_DIR=str(kernels)
    )
    env["ZYFA_NO_CPP"] = "1"  # the Python device path; zyfa._C registers its kernels for CUDA tensors only
    script = tmp_path / "snippet.py"
    head = f"STREAM = {STREAM}\nSEED = {seed}\nDIMS = {dims!r}\nP_MODES = {p_modes!r}\n"
    script.write_text(head + textwrap.dedent(SNIPPET))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines() if log.exists() else []
    calls = [
        {"call": c, **dict(kv.split("=", 1) for kv in rest)} for c, *rest in (x.split(" ") for x in lines)
    ]
    return json.loads(result.stdout.strip().splitlines()[-1]), calls


def _f32(x: float) -> float:
    import ctypes

    return ctypes.c_float(x).value


def _check_args(launch: dict, call: dict, out: dict, dims: tuple) -> None:
    """The kernarg bytes of one launch, field by field, against the tensors of the call."""
    from zyfa_core import abi

    b, sq, sk, hq, hkv, d_qk, d_v = dims
    assert launch["size"] == str(abi.ARGS_SIZE)
    args = abi.ZyfaFwdArgs.from_buffer_copy(bytes.fromhex(launch["args"]))
    for name in ("q", "k", "v"):
        t = out["tensors"][name]
        assert getattr(args, name) == t["ptr"]
        got = [getattr(args, f"{name}_stride_{w}") for w in ("batch", "seq", "head")]
        assert got == t["stride"][:3], name
    assert args.out == call["out"] and args.lse == call["lse"]
    assert [args.out_stride_batch, args.out_stride_seq, args.out_stride_head] == call["out_stride"][:3]
    assert call["out_shape"] == [b, sq, hq, d_v] and call["lse_shape"] == [b, hq, sq]
    sizes = (args.batch, args.seqlen_q, args.seqlen_k, args.heads_q, args.heads_kv, args.d_qk, args.d_v)
    assert sizes == (b, sq, sk, hq, hkv, d_qk, d_v)
    assert args.flags == abi.FLAG_CAUSAL | abi.FLAG_LSE
    assert args.softmax_scale == _f32(1.0 / math.sqrt(d_qk))
    assert [args.q_descale, args.k_descale, args.v_descale] == [_f32(d) for d in out["descales"]]
    assert args.reserved == 0


@pytest.mark.parametrize("dims", [(2, 100, 130, 4, 2, 128, 128), (2, 70, 70, 16, 16, 192, 128)])
def test_fp8_calls_launch_the_gfx950_matrix_core_kernels(fake_hip, fp8_rows, tmp_path, dims):
    """p_mode None takes lean P (gfx950's preference), "exact" the exact kernel, float and tensor
    descales alike; each launch: the kernel's own code object, the tile grid, one wave pair per
    workgroup, the static LDS (no dynamic size), the caller's stream and the exact argument bytes."""
    kernels = _kernel_dir(tmp_path / "kernels", fp8_rows)
    p_modes = [(None, False), ("exact", False), ("lean", True), (None, True)]
    out, calls = _run(tmp_path, fake_hip, kernels, dims, p_modes, seed=sum(dims))
    b, sq, _, hq, _, d_qk, d_v = dims
    shape = "hd128" if (d_qk, d_v) == (128, 128) else f"hd{d_qk}x{d_v}"
    lean, exact = f"fa_fwd_e4m3fn_{shape}_causal_leanp_gfx950", f"fa_fwd_e4m3fn_{shape}_causal_gfx950"
    launches = [c for c in calls if c["call"] == "hipModuleLaunchKernel"]
    assert [c["name"] for c in launches] == [lean, exact, lean, lean]
    assert [c["name"] for c in calls if c["call"] == "hipModuleGetFunction"] == [lean, exact]
    assert len([c for c in calls if c["call"] == "hipModuleLoadData"]) == 2  # one per kernel, then cached
    for launch, call in zip(launches, out["calls"], strict=True):
        assert "error" not in call, call
        assert launch["grid"] == f"{-(-sq // 64)},{hq},{b}" and launch["block"] == "128,1,1"
        assert launch["smem"] == "0" and int(launch["stream"], 16) == STREAM and launch["device"] == "0"
        _check_args(launch, call, out, dims)


def test_rows_are_the_builds(fp8_rows):
    """Each mfma_fp8 row runs its last query tile first and records the generator's resources."""
    kb = _kernel_build()
    for r in fp8_rows:
        v, res = r["variant"], r["resources"]
        grid = "tiles" if kb.layout(v) == "dense" else "batch_tiles"  # packed: one z per sequence
        assert kb.tile_order(v) in ("descending", "global_descending") and kb.grid_mode(v) == grid
        assert res["smem_bytes"] == 2 * 64 * (v["d_qk"] + v["d_v"])  # two K + V buffers of 64 keys
        assert res["registers"] <= 256  # two waves per SIMD
        assert res["spill_bytes"] == 0


def test_missing_lean_kernel_falls_back_or_names_what_is_built(fake_hip, fp8_rows, tmp_path):
    """With only the exact d=128 kernel built, p_mode None takes it; p_mode "lean" is refused with a
    message naming the request, before anything launches."""
    kernels = _kernel_dir(tmp_path / "kernels", fp8_rows, {"fa_fwd_e4m3fn_hd128_causal_gfx950"})
    dims = (1, 64, 64, 2, 1, 128, 128)
    out, calls = _run(tmp_path, fake_hip, kernels, dims, [(None, False), ("lean", False)], seed=3)
    launches = [c for c in calls if c["call"] == "hipModuleLaunchKernel"]
    assert [c["name"] for c in launches] == ["fa_fwd_e4m3fn_hd128_causal_gfx950"]
    err = out["calls"][1]
    assert err.get("error") == "KernelNotFoundError", err
    assert "gfx950" in err["message"] and "p_mode=lean" in err["message"]


VARLEN_SNIPPET = """
import json
from types import SimpleNamespace
import torch
import zyfa
from zyfa import _ops_varlen

_ops_varlen._fwd_cpu = _ops_varlen._fwd_core  # CPU tensors play the device's (see SNIPPET)
torch.cuda.current_device = lambda: 0
torch.cuda.current_stream = lambda device=None: SimpleNamespace(cuda_stream=STREAM)
g = torch.Generator().manual_seed(SEED)
hq, hkv, d = 4, 2, 128
lens_q = torch.randint(1, 300, (BATCH,), generator=g)
lens_k = lens_q + torch.randint(0, 40, (BATCH,), generator=g)
cu_q = torch.cat([torch.zeros(1, dtype=torch.int64), lens_q.cumsum(0)]).int()
cu_k = torch.cat([torch.zeros(1, dtype=torch.int64), lens_k.cumsum(0)]).int()
total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
q = torch.randn(total_q, hq, d, generator=g).bfloat16()
kw = dict(causal=True, return_attn_probs=True)
index = {"cu_seqlens_q": cu_q}
if PAGE_SIZE:
    max_pages = -(-int(lens_k.max()) // PAGE_SIZE)
    num_pages = BATCH * max_pages + 3
    # a cache of num_pages pages, each sequence's pages scattered over it
    table = torch.randperm(num_pages, generator=g)[: BATCH * max_pages].view(BATCH, max_pages).int()
    k = torch.randn(num_pages, PAGE_SIZE, hkv, d, generator=g).bfloat16()
    v = torch.randn(num_pages, PAGE_SIZE, hkv, d, generator=g).bfloat16()
    seqused = lens_k.int()
    kw.update(page_table=table, seqused_k=seqused)
    index.update(page_table=table, seqused_k=seqused)
    out, lse = zyfa.flash_attn_varlen_func(q, k, v, cu_q, None, int(lens_q.max()), int(lens_k.max()), **kw)
    total_k = num_pages * PAGE_SIZE
else:
    k = torch.randn(total_k, hkv, d, generator=g).bfloat16()
    v = torch.randn(total_k, hkv, d, generator=g).bfloat16()
    index.update(cu_seqlens_k=cu_k)
    out, lse = zyfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, int(lens_q.max()), int(lens_k.max()), **kw)
named = (("q", q), ("k", k), ("v", v), ("out", out))
tensors = {n: {"ptr": t.data_ptr(), "stride": list(t.stride())} for n, t in named}
print(json.dumps({"tensors": tensors, "lse": lse.data_ptr(), "lse_shape": list(lse.shape),
                  "index": {n: t.data_ptr() for n, t in index.items()}, "total_q": total_q,
                  "total_k": total_k, "max_seqlens": [int(lens_q.max()), int(lens_k.max())]}))
"""


def _packed_kernel_dir(path: Path, names: list[str]) -> Path:
    """A manifest with the build's own rows of the gfx950 BF16 packed kernels `names` and fake code objects
    (the resources from the kernel compiled by the pinned clang)."""
    from zyfa_asmgen.sim.cli import locate_kernel

    kb = _kernel_build()
    path.mkdir()
    rows = []
    for name in names:
        v = kb.find_variant(kb.load_variants(REPO), name)
        asm = locate_kernel(name, None, REPO / "kernels" / "variants.bzl").asm
        image = path / f"{name}.hsaco"
        image.write_bytes(f"FAKEHSACO {name}\n".encode())
        resources = kb.gfx950_resources(asm, name, name)
        rows.append(kb.manifest_row(v, REPO, image, resources, kb.source_sha256(v, REPO), {"clang": "fake"}))
    manifest = {"abi_version": kb.abi_version(REPO), "toolchains": {}, "kernels": rows, "skipped": []}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason="needs ziglang (the pinned clang)")
@pytest.mark.parametrize(("page_size", "batch", "seed"), [(0, 3, 1), (0, 5, 2), (16, 3, 3), (64, 4, 4)])
def test_packed_calls_launch_the_gfx950_packed_kernels(fake_hip, tmp_path, page_size, batch, seed):
    """flash_attn_varlen_func on the gfx950 device launches the build's packed kernel ("paged" with a page
    table): its own code object, grid (ceil(max_seqlen_q / tile_m), heads_q, batch), 512 threads, and one
    kernarg segment holding the tensors' zyfa_fwd_args and, at 192, the packed batch's zyfa_varlen_args."""
    from zyfa_core import abi

    names = ["fa_fwd_bf16_hd128_causal_varlen_gfx950", "fa_fwd_bf16_hd128_causal_paged_gfx950"]
    kernels = _packed_kernel_dir(tmp_path / "kernels", names)
    head = f"STREAM = {STREAM}\nSEED = {seed}\nBATCH = {batch}\nPAGE_SIZE = {page_size}\n"
    out, launches = _run_snippet(tmp_path, fake_hip, kernels, head + textwrap.dedent(VARLEN_SNIPPET))
    (launch,) = launches
    assert launch["name"] == names[1 if page_size else 0]
    max_q, max_k = out["max_seqlens"]
    assert launch["grid"] == f"{-(-max_q // 256)},4,{batch}" and launch["block"] == "512,1,1"
    assert int(launch["stream"], 16) == STREAM and launch["device"] == "0"
    segment = bytes.fromhex(launch["args"])
    assert int(launch["size"]) == len(segment) == abi.ARGS_SIZE + abi.VARLEN_ARGS_SIZE == 272
    args = abi.ZyfaFwdArgs.from_buffer_copy(segment)
    tensors = out["tensors"]
    for name in ("q", "k", "v", "out"):
        t = tensors[name]
        strides = [getattr(args, f"{name}_stride_{w}") for w in ("batch", "seq", "head")]
        # packed [rows, heads, d]: batch stride 0; a paged cache [pages, page_size, heads, d]: the page stride
        want = t["stride"][:3] if len(t["stride"]) == 4 else [0, *t["stride"][:2]]
        assert getattr(args, name) == t["ptr"] and strides == want, name
    assert args.lse == out["lse"] and out["lse_shape"] == [4, out["total_q"]]
    sizes = (args.batch, args.heads_q, args.heads_kv, args.seqlen_q, args.seqlen_k, args.d_qk, args.d_v)
    assert sizes == (batch, 4, 2, max_q, max_k, 128, 128)
    flags = abi.FLAG_CAUSAL | abi.FLAG_LSE | abi.FLAG_VARLEN | (abi.FLAG_PAGED if page_size else 0)
    assert args.flags == flags and args.softmax_scale == _f32(128**-0.5) and args.reserved == 0
    varlen = abi.ZyfaVarlenArgs.from_buffer_copy(segment, abi.ARGS_SIZE)
    index = out["index"]
    assert varlen.cu_seqlens_q == index["cu_seqlens_q"]
    assert varlen.cu_seqlens_k == index.get("cu_seqlens_k") and varlen.seqused_k == index.get("seqused_k")
    assert varlen.page_table == index.get("page_table") and varlen.descales is None
    assert (varlen.total_q, varlen.total_k, varlen.reserved) == (out["total_q"], out["total_k"], 0)
    pages = (varlen.page_size, varlen.num_pages, varlen.max_pages, varlen.page_table_stride)
    if page_size:
        max_pages = -(-max_k // page_size)
        assert pages == (page_size, out["total_k"] // page_size, max_pages, max_pages)
    else:
        assert pages == (0, 0, 0, 0)


FP8_VARLEN_SNIPPET = """
import json
from types import SimpleNamespace
import torch
import zyfa
from zyfa import _ops_varlen

_ops_varlen._fwd_cpu = _ops_varlen._fwd_core  # CPU tensors play the device's (see SNIPPET)
torch.cuda.current_device = lambda: 0
torch.cuda.current_stream = lambda device=None: SimpleNamespace(cuda_stream=STREAM)
g = torch.Generator().manual_seed(SEED)
hq, hkv, d_qk, d_v = 4, 2, D_QK, 128
lens_q = torch.randint(1, 150, (BATCH,), generator=g)
lens_k = lens_q + torch.randint(0, 40, (BATCH,), generator=g)
cu_q = torch.cat([torch.zeros(1, dtype=torch.int64), lens_q.cumsum(0)]).int()
cu_k = torch.cat([torch.zeros(1, dtype=torch.int64), lens_k.cumsum(0)]).int()
total_q, total_k, max_q, max_k = int(cu_q[-1]), int(cu_k[-1]), int(lens_q.max()), int(lens_k.max())
q8, k8, v8 = ((torch.randn(n, h, d, generator=g) * 3).to(torch.float8_e4m3fn)
              for n, h, d in ((total_q, hq, d_qk), (total_k, hkv, d_qk), (total_k, hkv, d_v)))
calls = []
for table in (False, True):
    ds = [torch.rand(BATCH, hkv, generator=g) + 0.5 for _ in range(3)] if table else [0.5, 0.25, 2.0]
    kw = dict(causal=True, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], return_attn_probs=True)
    out, lse = zyfa.flash_attn_varlen_func(q8, k8, v8, cu_q, cu_k, max_q, max_k, p_mode=P_MODE, **kw)
    calls.append({"out": out.data_ptr(), "lse": lse.data_ptr(), "table": table})
# a paged cache of BATCH * 8 pages of 64 keys, each sequence's pages scattered over it
page_table = torch.randperm(BATCH * 8, generator=g).view(BATCH, 8).int()
k_cache, v_cache = (
    torch.randn(BATCH * 8, 64, hkv, d, generator=g).to(torch.float8_e4m3fn) for d in (d_qk, d_v)
)
used = lens_k.int()
try:
    out, lse = zyfa.flash_attn_varlen_func(
        q8, k_cache, v_cache, cu_q, None, max_q, max_k, page_table=page_table, seqused_k=used, causal=True,
        q_descale=0.5, k_descale=0.25, v_descale=2.0, p_mode=P_MODE, return_attn_probs=True)
    paged = {"out": out.data_ptr(), "lse": lse.data_ptr(), "k": k_cache.data_ptr(), "v": v_cache.data_ptr(),
             "k_stride": list(k_cache.stride()), "table": page_table.data_ptr(), "used": used.data_ptr()}
except Exception as exc:
    paged = {"error": type(exc).__name__, "message": str(exc)}
named = (("q", q8), ("k", k8), ("v", v8))
print(json.dumps({"calls": calls, "paged": paged, "max_seqlens": [max_q, max_k],
                  "total": [total_q, total_k], "ptrs": {n: t.data_ptr() for n, t in named},
                  "cu": [cu_q.data_ptr(), cu_k.data_ptr()]}))
"""


@pytest.mark.parametrize(("d_qk", "p_mode", "batch"), [(128, None, 3), (192, "exact", 5)])
def test_fp8_packed_calls_launch_the_gfx950_varlen_kernels(fake_hip, fp8_rows, tmp_path, d_qk, p_mode, batch):
    """flash_attn_varlen_func on FP8 packed tensors launches the mfma_fp8 packed build (p_mode None: lean P):
    its own code object, grid (ceil(max_seqlen_q / 64), heads_q, batch), 128 threads, a 272-byte kernarg
    segment with zyfa_varlen_args at 192; float descales by value, (batch, heads_kv) tensors as the descale
    table (ZYFA_FLAG_DESCALE_TABLE). A paged FP8 batch launches the paged build (ZYFA_FLAG_PAGED, the cache's
    page stride as the k / v batch stride, the page table's sizes)."""
    from zyfa_core import abi

    kernels = _kernel_dir(tmp_path / "kernels", fp8_rows)
    out, launches = _run_fp8_varlen(tmp_path, fake_hip, kernels, d_qk, p_mode, batch)
    shape = "hd128" if d_qk == 128 else "hd192x128"
    name = f"fa_fwd_e4m3fn_{shape}_causal{'' if p_mode == 'exact' else '_leanp'}_%s_gfx950"
    assert [launch["name"] for launch in launches] == [name % "varlen"] * 2 + [name % "paged"]
    max_q, max_k = out["max_seqlens"]
    for launch, call in zip(launches, out["calls"], strict=False):
        assert launch["grid"] == f"{-(-max_q // 64)},4,{batch}" and launch["block"] == "128,1,1"
        segment = bytes.fromhex(launch["args"])
        assert int(launch["size"]) == len(segment) == abi.ARGS_SIZE + abi.VARLEN_ARGS_SIZE == 272
        args = abi.ZyfaFwdArgs.from_buffer_copy(segment)
        assert (args.q, args.k, args.v) == tuple(out["ptrs"][n] for n in ("q", "k", "v"))
        assert (args.out, args.lse) == (call["out"], call["lse"])
        sizes = (args.batch, args.heads_q, args.heads_kv, args.seqlen_q, args.seqlen_k, args.d_qk, args.d_v)
        assert sizes == (batch, 4, 2, max_q, max_k, d_qk, 128)
        assert (args.q_stride_batch, args.k_stride_batch, args.v_stride_batch, args.out_stride_batch) == (
            0,
        ) * 4
        table = abi.FLAG_DESCALE_TABLE if call["table"] else 0
        assert args.flags == abi.FLAG_CAUSAL | abi.FLAG_LSE | abi.FLAG_VARLEN | table
        varlen = abi.ZyfaVarlenArgs.from_buffer_copy(segment, abi.ARGS_SIZE)
        assert [varlen.cu_seqlens_q, varlen.cu_seqlens_k] == out["cu"] and varlen.seqused_k is None
        assert [varlen.total_q, varlen.total_k] == out["total"] and varlen.page_table is None
        if call["table"]:
            assert varlen.descales is not None
        else:
            assert varlen.descales is None
            assert [args.q_descale, args.k_descale, args.v_descale] == [0.5, 0.25, 2.0]
    _check_paged_launch(launches[2], out, batch)


def test_fp8_paged_without_its_build_is_refused(fake_hip, fp8_rows, tmp_path):
    """With only the dense and "varlen" FP8 builds installed, a paged FP8 batch raises KernelNotFoundError
    naming the request (gfx950, layout=paged) and launches nothing; the packed calls still launch."""
    names = {r["variant"]["name"] for r in fp8_rows if "_paged_" not in r["variant"]["name"]}
    kernels = _kernel_dir(tmp_path / "kernels", fp8_rows, names)
    out, launches = _run_fp8_varlen(tmp_path, fake_hip, kernels, 128, None, 2)
    assert [launch["name"] for launch in launches] == ["fa_fwd_e4m3fn_hd128_causal_leanp_varlen_gfx950"] * 2
    paged = out["paged"]
    assert paged.get("error") == "KernelNotFoundError", paged
    assert "arch=gfx950" in paged["message"] and "layout=paged" in paged["message"]


def _run_fp8_varlen(tmp_path: Path, lib: Path, kernels: Path, d_qk: int, p_mode: str | None, batch: int):
    """Run FP8_VARLEN_SNIPPET against the fake HIP driver; return (its JSON, the launches as dicts)."""
    head = f"STREAM = {STREAM}\nSEED = {batch}\nBATCH = {batch}\nD_QK = {d_qk}\nP_MODE = {p_mode!r}\n"
    return _run_snippet(tmp_path, lib, kernels, head + textwrap.dedent(FP8_VARLEN_SNIPPET))


def _run_snippet(tmp_path: Path, lib: Path, kernels: Path, program: str):
    """Run a snippet against the fake HIP driver `lib` and the kernels in `kernels`; return (the JSON of its
    last output line, its hipModuleLaunchKernel calls as dicts)."""
    log = tmp_path / "calls.log"
    env = {key: val for key, val in os.environ.items() if not key.startswith(("ZYFA_", "FAKE_"))}
    env.update(ZYFA_BACKEND="hip", ZYFA_LIBAMDHIP64=str(lib), FAKE_GPU_LOG=str(log),
               ZYFA_KERNEL_DIR=str(kernels), ZYFA_NO_CPP="1")  # fmt: skip
    script = tmp_path / "snippet.py"
    script.write_text(program)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    calls = [line.split(" ") for line in log.read_text().splitlines()]
    launches = [dict(kv.split("=", 1) for kv in rest) for c, *rest in calls if c == "hipModuleLaunchKernel"]
    return out, launches


def _check_paged_launch(launch: dict, out: dict, batch: int) -> None:
    """The paged FP8 launch of FP8_VARLEN_SNIPPET: the cache, its page stride, the table and seqused_k."""
    from zyfa_core import abi

    paged, (max_q, max_k) = out["paged"], out["max_seqlens"]
    assert launch["grid"] == f"{-(-max_q // 64)},4,{batch}" and launch["block"] == "128,1,1"
    segment = bytes.fromhex(launch["args"])
    args = abi.ZyfaFwdArgs.from_buffer_copy(segment)
    assert (args.k, args.v, args.out, args.lse) == (paged["k"], paged["v"], paged["out"], paged["lse"])
    assert [args.k_stride_batch, args.k_stride_seq, args.k_stride_head] == paged["k_stride"][:3]
    assert args.flags == abi.FLAG_CAUSAL | abi.FLAG_LSE | abi.FLAG_VARLEN | abi.FLAG_PAGED
    assert (args.seqlen_q, args.seqlen_k) == (max_q, max_k)
    varlen = abi.ZyfaVarlenArgs.from_buffer_copy(segment, abi.ARGS_SIZE)
    assert varlen.cu_seqlens_k is None and (varlen.page_table, varlen.seqused_k) == (
        paged["table"],
        paged["used"],
    )
    sizes = (varlen.page_size, varlen.num_pages, varlen.max_pages, varlen.page_table_stride, varlen.total_k)
    assert sizes == (64, batch * 8, 8, 8, batch * 8 * 64)
