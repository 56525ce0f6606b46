"""The C++ hot path zyfa._C on the CPU: the same checks as zyfa/_validate.py (exception types and
messages), the same ABI bytes as the Python `_fill_args`, the empty problem, and the whole launch path
(kernel cache, Python resolver, zyfa_core's C entry point) against zyfa-core's fake CUDA driver, and
for "loads": "tma" kernels the zyfa_tma_maps second parameter (against C entry stubs and the fake driver).

Without zyfa._C these tests skip, except where ZYFA_REQUIRE_CPP=1 (the nox tests session sets it, so CI
fails when the extension was not built)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zyfa import _ops

abi = pytest.importorskip("zyfa_core.abi")

REPO = Path(__file__).resolve().parents[3]
FAKE_CUDA = REPO / "packages" / "zyfa-core" / "tests" / "fake_drivers" / "fake_cuda.c"


@pytest.fixture(scope="module")
def native():
    try:
        from zyfa import _C
    except ImportError as exc:
        if os.environ.get("ZYFA_REQUIRE_CPP", "") not in ("", "0"):
            pytest.fail(f"ZYFA_REQUIRE_CPP is set but zyfa._C is not importable: {exc}")
        pytest.skip(f"zyfa._C is not built: {exc}")
    return _C


def test_hot_path_is_named(native):
    assert _ops.hot_path() == "C++ (zyfa._C)" or _ops.hot_path().startswith("Python (")


# ----------------------------------------------------------------------------- bytes vs _fill_args


def _tensor(shape, dtype, layout, gen):
    """A [b, s, h, d] tensor: contiguous, from [b, h, s, d] storage, a slice of a longer row, or with
    size-1 dims whose strides torch leaves arbitrary."""
    b, s, h, d = shape
    if layout == "bhsd":
        x = torch.randn(b, h, s, d, generator=gen).transpose(1, 2)
    elif layout == "slice":  # every row is 64 elements longer: strides are not the dense ones
        x = torch.randn(b, s, h, d + 64, generator=gen)[..., 32 : 32 + d]
    elif layout == "odd-size1":
        x = torch.randn(b, s, h, d, generator=gen)
        strides = [st if n > 1 else 7 for st, n in zip(x.stride()[:3], shape[:3], strict=True)]
        x = x.as_strided(shape, (*strides, 1))
    else:
        x = torch.randn(b, s, h, d, generator=gen)
    return x.to(dtype) if layout != "odd-size1" else x.to(dtype).as_strided(shape, x.stride())


@st.composite
def problems(draw):
    b = draw(st.integers(1, 3))
    sq, sk = draw(st.integers(1, 70)), draw(st.integers(1, 70))
    hkv = draw(st.integers(1, 3))
    hq = hkv * draw(st.integers(1, 3))
    d_qk, d_v = draw(st.sampled_from([(128, 128), (192, 128)]))
    fp8 = draw(st.booleans())
    layouts = [draw(st.sampled_from(["dense", "bhsd", "slice", "odd-size1"])) for _ in range(3)]
    p_mode = draw(st.sampled_from([None, "exact", "lean", "f16"])) if fp8 else None
    descales = tuple(draw(st.sampled_from([0.5, 0.25, 2.0, 1 / 3])) for _ in range(3)) if fp8 else (1.0,) * 3
    scale = draw(st.floats(1e-3, 4.0))
    return {
        "shapes": ((b, sq, hq, d_qk), (b, sk, hkv, d_qk), (b, sk, hkv, d_v)),
        "dtype": torch.float8_e4m3fn if fp8 else torch.bfloat16,
        "layouts": layouts,
        "p_mode": p_mode,
        "descales": descales,
        "scale": scale,
        "causal": draw(st.booleans()),
        "return_lse": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=150, deadline=None)
@given(problems())
def test_pack_args_bytes_equal_python_fill_args(native, p):
    gen = torch.Generator().manual_seed(p["seed"])
    q, k, v = (_tensor(s, p["dtype"], lay, gen) for s, lay in zip(p["shapes"], p["layouts"], strict=True))
    packed, out, lse = native.pack_args(
        q, k, v, p["scale"], p["causal"], *p["descales"], p["return_lse"], p["p_mode"]
    )
    b, sq, hq, _ = q.shape
    assert out.shape == (b, sq, hq, v.shape[3]) and out.dtype == torch.bfloat16
    assert lse.shape == ((b, hq, sq) if p["return_lse"] else (0,)) and lse.dtype == torch.float32
    expect = _ops._fill_args(
        abi, q, k, v, out, lse if p["return_lse"] else None, p["scale"], p["causal"], p["descales"]
    )
    assert len(packed) == abi.ARGS_SIZE
    if packed != bytes(expect):
        got = abi.ZyfaFwdArgs.from_buffer_copy(packed)
        diff = {
            f: (getattr(got, f), getattr(expect, f))
            for f in abi.FIELD_NAMES
            if getattr(got, f) != getattr(expect, f)
        }
        pytest.fail(f"zyfa._C packs other bytes than _fill_args: (C++, Python) per field: {diff}")


@pytest.mark.parametrize("shape", [(0, 16, 2, 128), (1, 0, 2, 128)])
@pytest.mark.parametrize("return_lse", [True, False])
def test_pack_args_empty_problem(native, shape, return_lse):
    q = torch.randn(shape).bfloat16()
    kv = torch.randn(shape[0], 8 if shape[1] == 0 else 0, 2, 128).bfloat16()
    packed, out, lse = native.pack_args(q, kv, kv, 0.1, True, 1.0, 1.0, 1.0, return_lse, None)
    assert packed == b""
    assert out.shape == (*shape[:3], 128) and not out.any()
    assert lse.shape == ((shape[0], 2, shape[1]) if return_lse else (0,))
    assert bool((lse == float("inf")).all())


# ------------------------------------------------------------------------------ the same rejections


def _bf16(*shape):
    return torch.randn(*shape).bfloat16()


def _e4m3(*shape):
    return torch.randn(*shape).to(torch.float8_e4m3fn)


def _misaligned():
    return torch.randn(1, 8, 2, 129).bfloat16()[..., 1:]


BAD = {
    "q 3-D": lambda: ((_bf16(8, 2, 128), _bf16(1, 8, 2, 128), _bf16(1, 8, 2, 128)), {}),
    "v 5-D": lambda: ((_bf16(1, 8, 2, 128), _bf16(1, 8, 2, 128), _bf16(1, 1, 8, 2, 128)), {}),
    "float16": lambda: (tuple(torch.randn(1, 8, 2, 128).half() for _ in range(3)), {}),
    "float32": lambda: (tuple(torch.randn(1, 8, 2, 128) for _ in range(3)), {}),
    "mixed dtypes": lambda: ((_bf16(1, 8, 2, 128), _e4m3(1, 8, 2, 128), _bf16(1, 8, 2, 128)), {}),
    "batch": lambda: ((_bf16(2, 8, 2, 128), _bf16(1, 8, 2, 128), _bf16(1, 8, 2, 128)), {}),
    "seqlen k/v": lambda: ((_bf16(1, 8, 2, 128), _bf16(1, 8, 2, 128), _bf16(1, 9, 2, 128)), {}),
    "heads k/v": lambda: ((_bf16(1, 8, 2, 128), _bf16(1, 8, 2, 128), _bf16(1, 8, 1, 128)), {}),
    "gqa": lambda: ((_bf16(1, 8, 3, 128), _bf16(1, 8, 2, 128), _bf16(1, 8, 2, 128)), {}),
    "zero heads": lambda: ((_bf16(1, 8, 0, 128), _bf16(1, 8, 0, 128), _bf16(1, 8, 0, 128)), {}),
    "head_dim q/k": lambda: ((_bf16(1, 8, 2, 128), _bf16(1, 8, 2, 192), _bf16(1, 8, 2, 128)), {}),
    "head dims 64": lambda: (tuple(_bf16(1, 8, 2, 64) for _ in range(3)), {}),
    "head dims 192/192": lambda: (tuple(_bf16(1, 8, 2, 192) for _ in range(3)), {}),
    "grid": lambda: (tuple(torch.empty(1, 0, 65536, 128, dtype=torch.bfloat16) for _ in range(3)), {}),
    "last dim stride": lambda: (
        tuple(_bf16(1, 8, 128, 2).transpose(2, 3) for _ in range(3)),
        {},
    ),
    "misaligned pointer": lambda: ((_misaligned(), _bf16(1, 8, 2, 128), _bf16(1, 8, 2, 128)), {}),
    "misaligned stride": lambda: (
        (
            _bf16(1, 8, 2, 136)[..., :128].contiguous(),
            torch.randn(1, 8, 2, 132).bfloat16()[..., :128],
            _bf16(1, 8, 2, 128),
        ),
        {},
    ),
    "p_mode bf16": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"p_mode": "lean"}),
    "p_mode unknown": lambda: (
        tuple(_e4m3(1, 8, 2, 128) for _ in range(3)),
        {"p_mode": "fast", "ds": (1, 1, 1)},
    ),
    "scale nan": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"scale": float("nan")}),
    "scale inf": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"scale": float("-inf")}),
    "descales bf16": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"ds": (0.5, 1.0, 1.0)}),
    "descale zero": lambda: (tuple(_e4m3(1, 8, 2, 128) for _ in range(3)), {"ds": (1.0, 0.0, 1.0)}),
    "descale negative": lambda: (tuple(_e4m3(1, 8, 2, 128) for _ in range(3)), {"ds": (1.0, 1.0, -2.5)}),
    "descale inf": lambda: (tuple(_e4m3(1, 8, 2, 128) for _ in range(3)), {"ds": (float("inf"), 1.0, 1.0)}),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_raise_like_the_python_checks(native, case):
    (q, k, v), kw = BAD[case]()
    args = (q, k, v, kw.get("scale", 0.1), True, *kw.get("ds", (1.0, 1.0, 1.0)), True, kw.get("p_mode"))
    with pytest.raises(Exception) as python:
        _ops._forward(*args[:5], args[5:8], *args[8:])
    with pytest.raises(Exception) as cpp:
        native.pack_args(*args)
    assert python.type in (TypeError, ValueError, NotImplementedError), python.value
    assert cpp.type is python.type, (cpp.value, python.value)
    assert str(cpp.value) == str(python.value)


def test_bad_inputs_cover_every_python_check():
    """Each raise in _validate's tensor and scalar checks is hit by some case above (by message)."""
    messages = set()
    for make in BAD.values():
        (q, k, v), kw = make()
        try:
            _ops._forward(
                q, k, v, kw.get("scale", 0.1), True, kw.get("ds", (1.0,) * 3), True, kw.get("p_mode")
            )
        except (TypeError, ValueError) as exc:
            messages.add(str(exc).split(" ")[2])
    assert len(messages) >= 10


# ------------------------------------------------------------ the launch path, against a fake driver

SNIPPET = """
import json, torch
from zyfa import _C, _ops
import zyfa_core.abi as abi
from zyfa_core.errors import ZyfaDriverError
g = torch.Generator().manual_seed(0)
q = torch.randn(2, SEQLEN_Q, 4, 128, generator=g).bfloat16()
k = torch.randn(2, 70, 2, 128, generator=g).bfloat16()
v = torch.randn(2, 70, 2, 128, generator=g).bfloat16().transpose(1, 2).contiguous().transpose(1, 2)
expect = []
for lse_on in (True, False, True):
    out, lse = _C.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, lse_on, None, 0, 0x7000)
    args = _ops._fill_args(abi, q, k, v, out, lse if lse_on else None, 0.125, True, (1.0,) * 3)
    expect.append(bytes(args).hex())
info = _C.cache_info()
error = None
if MODE == "error":
    import os
    os.environ["FAKE_LAUNCH_ERROR"] = "719"
    try:
        _C.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, True, None, 0, 0)
    except ZyfaDriverError as exc:
        error = {"message": str(exc), "kernel": exc.kernel, "call": exc.call, "error_name": exc.error_name}
tma = None
if MODE == "tma":  # the Python launcher with the third call's args, and both ways of making maps
    import os
    import zyfa_core.launcher as launcher
    from zyfa_core import _driver
    spec = _ops._select_cached(0, "bf16", 128, 128, True, None, os.environ["ZYFA_KERNEL_DIR"])
    launcher.launch(spec, args, stream=0x7000, device=0)
    encode = launcher.native_launch(spec, 0).encode_function
    tma = {"geometry": [[x.data_ptr(), list(x.shape), list(_ops._kernel_strides(x))] for x in (q, k, v)],
           "cpp": [], "python": []}
    for field, step in (("", 0), ("k_stride_seq", 4), ("v", 8)):  # aligned; 8 bytes off; 16 off + 8
        bad = abi.ZyfaFwdArgs.from_buffer_copy(bytes(args))
        if field:
            setattr(bad, field, getattr(bad, field) + step)
        tma["cpp"].append(_C.tma_maps_for_test(bytes(bad), False, 64, 64, encode).hex())
        tma["python"].append(abi.tma_maps_bytes(spec, bad, _driver.encode_tensor_map).hex())
print(json.dumps({"expect": expect, "info": info, "error": error, "tma": tma}))
"""

NAME = "fa_fwd_bf16_hd128_causal_sm90a"
TMA_MAPS_SIZE = 448  # sizeof(zyfa_tma_maps)


def _fake_run(tmp_path, mode, grid=None, seqlen_q=100, loads=None):
    """Run SNIPPET against the fake CUDA driver with one kernel (tile_m 64; its manifest row has `grid`
    and `loads` unless None); return (its JSON, the cuLaunchKernel and cuTensorMapEncodeTiled log lines)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the fake CUDA driver")
    lib = tmp_path / "libfake_cuda.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", str(FAKE_CUDA), "-o", str(lib)], check=True)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    row = {
        "name": NAME, "file": NAME + ".cubin", "arch": "sm90a", "dtype": "bf16", "d_qk": 128, "d_v": 128,
        "causal": True, "p_mode": None, "kind": "cuda", "tile_m": 64, "tile_n": 64, "threads": 128,
        "smem_bytes": 49152, "registers": 168, "spill_bytes": 0, "abi_version": abi.ABI_VERSION,
        "source_sha256": "0" * 64, "toolchain": {"nvcc": "13.0.88"},
    }  # fmt: skip
    if grid is not None:
        row["grid"] = grid
    if loads is not None:
        row["loads"] = loads
    manifest = {"abi_version": abi.ABI_VERSION, "toolchains": {}, "kernels": [row], "skipped": []}
    (kernels / "manifest.json").write_text(json.dumps(manifest))
    (kernels / row["file"]).write_bytes(f"FAKECUBIN {NAME}\n".encode())
    log = tmp_path / "calls.log"
    env = {key: val for key, val in os.environ.items() if not key.startswith(("ZYFA_", "FAKE_"))}
    env.update(
        ZYFA_BACKEND="cuda", ZYFA_LIBCUDA=str(lib), FAKE_GPU_LOG=str(log), ZYFA_KERNEL_DIR=str(kernels)
    )
    if loads == "tma":
        env["FAKE_PARAM_COUNT"] = "2"  # the kernel declares the args and the maps
    script = tmp_path / "snippet.py"
    script.write_text(f"MODE = {mode!r}\nSEQLEN_Q = {seqlen_q}\n" + textwrap.dedent(SNIPPET))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    calls = [
        line
        for line in log.read_text().splitlines()
        if line.startswith(("cuLaunchKernel ", "cuTensorMapEncodeTiled "))
    ]
    return json.loads(result.stdout.strip().splitlines()[-1]), calls


def test_launch_path_against_fake_driver(native, tmp_path):
    """Three calls: one resolver call (the cache serves the rest), each launch gets exactly the bytes
    `_fill_args` makes for its outputs, the launcher's grid, block, smem and the given stream."""
    out, calls = _fake_run(tmp_path, "ok")
    assert out["info"] == {"kernels": [NAME], "resolves": 1}
    assert len(calls) == 3
    for line, expect in zip(calls, out["expect"], strict=True):
        fields = dict(pair.split("=", 1) for pair in line.split(" ")[1:])
        assert fields["name"] == NAME and fields["args"] == expect
        assert fields["grid"] == "2,4,2" and fields["block"] == "128,1,1" and fields["smem"] == "49152"
        assert int(fields["stream"], 16) == 0x7000 and fields["ctx"] == "0x1000"


@pytest.mark.parametrize(
    ("grid", "seqlen_q", "expect"),
    [
        ("tiles", 100, "2,4,2"),  # written explicitly: the same as a row without "grid"
        ("persistent", 100, "16,1,1"),  # 2 tiles x 4 heads x 2 batch = 16 items < 132 SMs
        ("persistent", 1100, "132,1,1"),  # 18 x 4 x 2 = 144 items: one block per SM of the fake device
    ],
)
def test_launch_path_grid_modes_against_fake_driver(native, tmp_path, grid, seqlen_q, expect):
    """The C++ cache entry carries the manifest's grid mode and the device's SM count (one resolver
    call), and the launch gets the grid zyfa_core.launch_grid computes."""
    out, calls = _fake_run(tmp_path, "ok", grid=grid, seqlen_q=seqlen_q)
    assert out["info"] == {"kernels": [NAME], "resolves": 1}
    assert len(calls) == 3
    for line, args in zip(calls, out["expect"], strict=True):
        fields = dict(pair.split("=", 1) for pair in line.split(" ")[1:])
        assert fields["grid"] == expect and fields["args"] == args and fields["block"] == "128,1,1"


def _fake_maps(addresses):
    """zyfa_tma_maps as the fake driver encodes it (map word i = address + i), valid = 1, as hex."""
    words = [address + i for address in addresses for i in range(16)]
    return (struct.pack("<48Q", *words) + struct.pack("<i", 1) + bytes(TMA_MAPS_SIZE - 388)).hex()


def test_tma_launch_path_against_fake_driver(native, tmp_path):
    """A "loads": "tma" kernel through zyfa_core's real C entries: each C++ launch encodes q, k, v
    (cuTensorMapEncodeTiled: GQA heads, the non-contiguous v's byte strides, box 64 x tile rows, 128-byte
    swizzle) and passes the maps (valid = 1) as the second kernel parameter; the Python launcher passes the
    same bytes for the same args, and its maps equal zyfa._C's (all zero, no encode, when misaligned)."""
    out, calls = _fake_run(tmp_path, "tma", loads="tma")
    assert out["info"] == {"kernels": [NAME], "resolves": 1}
    lines = [(line.split(" ")[0], dict(pair.split("=", 1) for pair in line.split(" ")[1:])) for line in calls]
    encodes = [fields for call, fields in lines if call == "cuTensorMapEncodeTiled"]
    launches = [fields for call, fields in lines if call == "cuLaunchKernel"]
    assert [call for call, _ in lines[:16]] == (["cuTensorMapEncodeTiled"] * 3 + ["cuLaunchKernel"]) * 4
    assert len(launches) == 4 and len(encodes) == 4 * 3 + 3 + 3  # + the aligned maps of zyfa._C and Python
    geometry = out["tma"]["geometry"]
    for fields, (address, (b, s, h, d), (stride_b, stride_s, stride_h)) in zip(
        encodes, geometry * 6, strict=True
    ):
        assert int(fields["address"], 16) == address and fields["dtype"] == "9" and fields["rank"] == "4"
        assert fields["dims"] == f"{d},{s},{h},{b}"
        assert fields["strides"] == f"{2 * stride_s},{2 * stride_h},{2 * stride_b}"
        assert fields["box"] == "64,64,1,1" and fields["element_strides"] == "1,1,1,1"
        assert (fields["interleave"], fields["swizzle"], fields["oob"]) == ("0", "3", "0")
    assert [g[1][2] for g in geometry] == [4, 2, 2]  # GQA: the k and v maps span heads_kv
    maps = _fake_maps([g[0] for g in geometry])
    for fields, args in zip(launches, [*out["expect"], out["expect"][2]], strict=True):
        assert fields["args"] == args and fields["second"] == maps
        assert fields["grid"] == "2,4,2" and int(fields["stream"], 16) == 0x7000
    assert out["tma"]["cpp"] == out["tma"]["python"]
    assert out["tma"]["cpp"] == [maps, "00" * TMA_MAPS_SIZE, "00" * TMA_MAPS_SIZE]


@pytest.mark.parametrize(
    ("resolved", "message"),
    [
        ({"grid": "ring"}, "has grid 'ring'; this zyfa._C launches 'tiles' and 'persistent'"),
        ({"grid": "persistent", "multiprocessors": 0}, "takes a persistent grid, but the resolver gave no"),
    ],
)
def test_resolved_grid_is_checked(native, resolved, message):
    """A grid mode zyfa._C does not know, or a persistent kernel without an SM count, stops before any
    launch (the stand-in resolver's handles are never called)."""
    fields = dict(
        name="fa_fake", kernel=1, launch_function=1, launch_abi=native.LAUNCH_ABI, error_size=1352,
        tile_m=64, block=(128, 1, 1), smem_bytes=0, **resolved,
    )  # fmt: skip
    q = _bf16(1, 8, 2, 128)
    native.clear_kernel_cache()
    native.set_resolver(lambda *key: types.SimpleNamespace(**fields))
    try:
        with pytest.raises(RuntimeError, match=message):
            native.launch_for_test(q, q, q, 0.1, True, 1.0, 1.0, 1.0, False, None, 0, 0)
    finally:
        native.set_resolver(_ops._resolve_native)
        native.clear_kernel_cache()


def test_launch_errors_are_zyfa_driver_errors(native, tmp_path):
    out, _ = _fake_run(tmp_path, "error")
    error = out["error"]
    assert error is not None and (error["kernel"], error["call"]) == (NAME, "cuLaunchKernel")
    assert error["error_name"] == "CUDA_ERROR_LAUNCH_FAILED"
    assert error["message"].startswith(f"{NAME}: cuLaunchKernel failed with CUDA_ERROR_LAUNCH_FAILED")


def test_extensions_use_no_iostreams():
    """The H200 image links the extensions' libstdc++ statically, and streaming an integer there crashed
    in the locale facets (2026-12-01): zyfa._C and zyfa_core._driver format with std::to_string and read
    files with C stdio, never with iostreams."""
    sources = [
        REPO / "packages" / "zyfa-torch" / "csrc" / "zyfa_ops.cpp",
        REPO / "packages" / "zyfa-core" / "csrc" / "driver.cpp",
    ]
    for source in sources:
        code = "\n".join(line.split("//")[0] for line in source.read_text().splitlines())
        for banned in ("<sstream>", "<iostream>", "<fstream>", "ostringstream", "std::cout", "std::cerr"):
            assert banned not in code, f"{source.name} uses {banned}"


# ------------------------------------------------- TMA kernels: zyfa_tma_maps, against C entry stubs

# Stand-ins for zyfa_core._driver's C entries zyfa_driver_encode_tensor_map, zyfa_driver_launch2 and
# zyfa_driver_launch: each encode call is logged and writes its own parameters into the map (so a map's
# bytes say which call made it); a launch keeps its parameter bytes for the test to read.
STUBS = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
typedef struct { long code; char kernel[128], call[128], error_name[64], message[1024]; } zerr;
char log_text[65536];
size_t log_size;
int fail_encode;
unsigned char args[192], second[448];
size_t args_size, second_size;
unsigned grid[3], block[3], smem, launches, launches2, grid2[3], block2[3], smem2;
size_t stream;
#pragma pack(push, 1)
typedef struct { int32_t dtype; uint64_t address, dims[4], strides[3]; uint32_t box[4]; } encoded;
#pragma pack(pop)
int encode(void *map, int dtype, const void *address, const unsigned long long *dims,
           const unsigned long long *strides, const unsigned *box, zerr *e) {
  if (fail_encode || (uintptr_t)map % 64) {
    e->code = 1;
    e->kernel[0] = 0;
    strcpy(e->call, "cuTensorMapEncodeTiled");
    strcpy(e->error_name, "CUDA_ERROR_INVALID_VALUE");
    snprintf(e->message, sizeof e->message, "cuTensorMapEncodeTiled failed (map at %p)", map);
    return 1;
  }
  log_size += snprintf(log_text + log_size, sizeof log_text - log_size,
                       "encode %d %#zx %llu,%llu,%llu,%llu %llu,%llu,%llu %u,%u,%u,%u\n", dtype,
                       (size_t)address, dims[0], dims[1], dims[2], dims[3], strides[0], strides[1],
                       strides[2], box[0], box[1], box[2], box[3]);
  encoded x = {dtype, (uintptr_t)address, {dims[0], dims[1], dims[2], dims[3]},
               {strides[0], strides[1], strides[2]}, {box[0], box[1], box[2], box[3]}};
  memset(map, 0xee, 128);
  memcpy(map, &x, sizeof x);
  return 0;
}
static void keep(const unsigned *g, const unsigned *b, unsigned s, void *st, const void *a, size_t n) {
  memcpy(grid, g, sizeof grid), memcpy(block, b, sizeof block), smem = s, stream = (size_t)st;
  args_size = n;
  memcpy(args, a, n < sizeof args ? n : sizeof args);
}
int launch(const void *k, const unsigned *g, const unsigned *b, unsigned s, void *st, const void *a, size_t n,
           zerr *e) {
  (void)k, (void)e;
  keep(g, b, s, st, a, n);
  return ++launches, 0;
}
int launch2(const void *k, const unsigned *g, const unsigned *b, unsigned s, void *st, const void *a,
            size_t n, const void *p, size_t pn, zerr *e) {
  (void)k, (void)e;
  keep(g, b, s, st, a, n);
  memcpy(grid2, g, sizeof grid2), memcpy(block2, b, sizeof block2), smem2 = s;
  second_size = pn;
  memcpy(second, p, pn < sizeof second ? pn : sizeof second);
  return ++launches2, 0;
}
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the C entry stubs")
    folder = tmp_path_factory.mktemp("stubs")
    (folder / "stubs.c").write_text(STUBS)
    lib = folder / "libstubs.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", str(folder / "stubs.c"), "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def _address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def _stub_reset(lib):
    for name in ("log_size", "args_size", "second_size"):
        ctypes.c_size_t.in_dll(lib, name).value = 0
    for name in ("fail_encode", "launches", "launches2"):
        ctypes.c_uint.in_dll(lib, name).value = 0
    ctypes.memset(ctypes.addressof(ctypes.c_char.in_dll(lib, "log_text")), 0, 65536)


def _stub_log(lib):
    text = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "log_text"))).decode()
    return [line for line in text.splitlines() if line]


def _stub_bytes(lib, name, size):
    return ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, name)), size)


def _expected_encodes(q, k, v, tile_m, tile_n):
    """The three encode calls zyfa_abi.h specifies: (dtype, address, dims, byte strides, box)."""
    calls = []
    for x, rows in ((q, tile_m), (k, tile_n), (v, tile_n)):
        elem = x.element_size()
        batch, seq, head = _ops._kernel_strides(x)
        calls.append(
            (
                0 if elem == 1 else 1,
                x.data_ptr(),
                (x.shape[3], x.shape[1], x.shape[2], x.shape[0]),
                (seq * elem, head * elem, batch * elem),
                (128 // elem, rows, 1, 1),
            )
        )
    return calls


def _log_line(call):
    dtype, address, dims, strides, box = call
    join = lambda values: ",".join(str(n) for n in values)  # noqa: E731
    return f"encode {dtype} {address:#x} {join(dims)} {join(strides)} {join(box)}"


def _expected_maps(calls):
    """zyfa_tma_maps as the stubs encode it: each map holds its call's parameters, valid = 1."""
    maps = b""
    for dtype, address, dims, strides, box in calls:
        head = struct.pack("<iQ4Q3Q4I", dtype, address, *dims, *strides, *box)
        maps += head + b"\xee" * (128 - len(head))
    return maps + struct.pack("<i", 1) + bytes(TMA_MAPS_SIZE - 388)


def _tma_inputs(fp8, d_qk):
    """GQA (4 query heads, 2 kv heads) with non-contiguous k (a slice of longer rows) and v ([b, h, s, d]
    storage)."""
    gen = torch.Generator().manual_seed(1)
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    q = _tensor((2, 100, 4, d_qk), dtype, "dense", gen)
    k = _tensor((2, 70, 2, d_qk), dtype, "slice", gen)
    v = _tensor((2, 70, 2, 128), dtype, "bhsd", gen)
    return q, k, v


def _stand_in(native, lib, drop=(), **fields):
    """A resolver giving the stubs' addresses for one kernel (tile_m 128, tile_n 64, tile grid), with
    `fields` replaced and the attributes in `drop` left out."""
    found = dict(
        name="fa_fake_tma", kernel=1, launch_function=_address(lib, "launch"), launch_abi=native.LAUNCH_ABI,
        error_size=1352, tile_m=128, tile_n=64, block=(384, 1, 1), smem_bytes=1000, loads="tma",
        encode_function=_address(lib, "encode"), launch2_function=_address(lib, "launch2"),
    )  # fmt: skip
    found.update(fields)
    found = {name: value for name, value in found.items() if name not in drop}
    native.clear_kernel_cache()
    native.set_resolver(lambda *key: types.SimpleNamespace(**found))


@pytest.fixture
def restore_resolver(native):
    yield
    native.set_resolver(_ops._resolve_native)
    native.clear_kernel_cache()


@pytest.mark.parametrize(("fp8", "d_qk"), [(False, 128), (True, 192)])
def test_tma_launch_encodes_three_maps(native, stubs, restore_resolver, fp8, d_qk):
    """A "tma" kernel: three encode calls as zyfa_abi.h specifies (GQA heads, byte strides of the
    non-contiguous k and v, box 128 bytes x tile_m / tile_n rows), then one two-parameter launch with the
    packed args and the maps (valid = 1); the one-parameter entry is not called."""
    _stub_reset(stubs)
    _stand_in(native, stubs)
    q, k, v = _tma_inputs(fp8, d_qk)
    p_mode = "exact" if fp8 else None
    out, lse = native.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, True, p_mode, 0, 0x7000)
    calls = _expected_encodes(q, k, v, 128, 64)
    assert _stub_log(stubs) == [_log_line(c) for c in calls]
    assert calls[1][2] == (d_qk, 70, 2, 2) and calls[2][2] == (128, 70, 2, 2)  # kv heads, seqlen_k, d_v
    assert ctypes.c_uint.in_dll(stubs, "launches2").value == 1
    assert ctypes.c_uint.in_dll(stubs, "launches").value == 0
    expect = _ops._fill_args(abi, q, k, v, out, lse, 0.125, True, (1.0,) * 3)
    assert _stub_bytes(stubs, "args", abi.ARGS_SIZE) == bytes(expect)
    assert ctypes.c_size_t.in_dll(stubs, "second_size").value == TMA_MAPS_SIZE == native.TMA_MAPS_SIZE
    assert _stub_bytes(stubs, "second", TMA_MAPS_SIZE) == _expected_maps(calls)
    assert tuple((ctypes.c_uint * 3).in_dll(stubs, "grid")) == (1, 4, 2)


def test_cp_async_kernel_launches_one_parameter(native, stubs, restore_resolver):
    """loads "cp.async", or no `loads` at all (a zyfa_core older than the field, which has no encode
    or launch2 entry either): no maps, the one-parameter entry."""
    q, k, v = _tma_inputs(False, 128)
    for fields, drop in (({"loads": "cp.async"}, ()), ({}, ("loads", "encode_function", "launch2_function"))):
        _stub_reset(stubs)
        _stand_in(native, stubs, drop, **fields)
        native.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, False, None, 0, 0)
        assert _stub_log(stubs) == []
        assert ctypes.c_uint.in_dll(stubs, "launches").value == 1
        assert ctypes.c_uint.in_dll(stubs, "launches2").value == 0
        assert ctypes.c_size_t.in_dll(stubs, "args_size").value == abi.ARGS_SIZE


@pytest.mark.parametrize(
    ("fields", "drop", "message"),
    [
        ({"loads": "bulk"}, (), "has loads 'bulk'; this zyfa._C launches 'cp.async' and 'tma'"),
        (
            {},
            ("encode_function", "launch2_function"),
            "gave no tensor-map encode or two-parameter launch",
        ),
        ({"launch2_function": 0}, (), "gave no tensor-map encode or two-parameter launch"),
        ({}, ("tile_n",), "loads with TMA, but the resolver gave no tile_n"),
    ],
)
def test_resolved_loads_is_checked(native, stubs, restore_resolver, fields, drop, message):
    """An unknown load mode, or a "tma" kernel without the entries or tile_n its maps need, stops before
    any encode or launch."""
    _stub_reset(stubs)
    _stand_in(native, stubs, drop, **fields)
    q = _bf16(1, 8, 2, 128)
    with pytest.raises(RuntimeError, match=message):
        native.launch_for_test(q, q, q, 0.1, True, 1.0, 1.0, 1.0, False, None, 0, 0)
    assert _stub_log(stubs) == []
    assert ctypes.c_uint.in_dll(stubs, "launches").value == 0
    assert ctypes.c_uint.in_dll(stubs, "launches2").value == 0


def test_tma_encode_error_is_a_driver_error(native, stubs, restore_resolver):
    """A failing encode raises ZyfaDriverError (as launch errors do) naming the kernel; nothing launches."""
    from zyfa_core.errors import ZyfaDriverError

    _stub_reset(stubs)
    _stand_in(native, stubs)
    ctypes.c_uint.in_dll(stubs, "fail_encode").value = 1
    q, k, v = _tma_inputs(False, 128)
    with pytest.raises(ZyfaDriverError) as error:
        native.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, False, None, 0, 0)
    assert (error.value.kernel, error.value.call) == ("fa_fake_tma", "cuTensorMapEncodeTiled")
    assert error.value.error_name == "CUDA_ERROR_INVALID_VALUE"
    assert ctypes.c_uint.in_dll(stubs, "launches2").value == 0


@pytest.mark.parametrize(
    ("field", "step"),
    [
        ("q", 2),
        ("k", 8),
        ("v", 2),
        ("q_stride_seq", 1),
        ("k_stride_head", 1),
        ("k_stride_seq", 4),
        ("v_stride_batch", 2**39),
    ],
)
def test_tma_maps_unusable_are_zero(native, stubs, field, step):
    """A q / k / v pointer or stride that is not a multiple of 16 bytes, or a stride of 2**40 bytes or more
    (the op's own checks stop the first; other callers may not): valid = 0, all 448 bytes zero, no encode
    call. The args as packed encode (valid = 1)."""
    q, k, v = _tma_inputs(False, 128)
    packed, _, _ = native.pack_args(q, k, v, 0.125, True, 1.0, 1.0, 1.0, False, None)
    encode = _address(stubs, "encode")
    _stub_reset(stubs)
    maps = native.tma_maps_for_test(packed, False, 128, 64, encode)
    assert maps == _expected_maps(_expected_encodes(q, k, v, 128, 64))
    args = abi.ZyfaFwdArgs.from_buffer_copy(packed)
    setattr(args, field, getattr(args, field) + step)
    _stub_reset(stubs)
    assert native.tma_maps_for_test(bytes(args), False, 128, 64, encode) == bytes(TMA_MAPS_SIZE)
    assert _stub_log(stubs) == []


# ------------------------------------------------- the V pre-pass (ABI 3), against the C entry stubs


def test_v_prep_kernel_runs_the_pass_first_into_a_workspace(native, stubs, restore_resolver):
    """A kernel with a V pre-pass: one two-parameter launch of the pass (grid (ceil(seqlen_k / 128),
    heads_kv, batch), its block, no dynamic shared memory; args and the workspace pointer), then the
    kernel's one-parameter launch with the same args but v = that workspace."""
    _stub_reset(stubs)
    _stand_in(native, stubs, loads="cp.async", v_prep_kernel=2, v_prep_block=(256, 1, 1), tile_n=128)
    q, k, v = _tma_inputs(True, 128)  # seqlen_k 70 -> one 128-key row block; 2 kv heads, batch 2
    out, lse = native.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, True, "lean", 0, 0x7000)
    assert ctypes.c_uint.in_dll(stubs, "launches2").value == 1
    assert ctypes.c_uint.in_dll(stubs, "launches").value == 1
    assert tuple((ctypes.c_uint * 3).in_dll(stubs, "grid2")) == (1, 2, 2)
    assert tuple((ctypes.c_uint * 3).in_dll(stubs, "block2")) == (256, 1, 1)
    assert ctypes.c_uint.in_dll(stubs, "smem2").value == 0
    assert ctypes.c_size_t.in_dll(stubs, "second_size").value == 8
    workspace = int.from_bytes(_stub_bytes(stubs, "second", 8), "little")
    expect = _ops._fill_args(abi, q, k, v, out, lse, 0.125, True, (1.0,) * 3)
    assert workspace not in (0, expect.v) and workspace % 16 == 0
    expect.v = workspace
    assert _stub_bytes(stubs, "args", abi.ARGS_SIZE) == bytes(expect)  # the kernel's launch (kept last)
    assert tuple((ctypes.c_uint * 3).in_dll(stubs, "grid")) == (1, 4, 2)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tile_n": 96}, "has a V pre-pass, but .* not a multiple of 64 \\(96\\)"),
        ({"launch2_function": 0}, "has a V pre-pass, but the resolver gave no two-parameter launch"),
    ],
)
def test_resolved_v_prep_is_checked(native, stubs, restore_resolver, fields, message):
    _stub_reset(stubs)
    found = {"loads": "cp.async", "v_prep_kernel": 2, "v_prep_block": (256, 1, 1), "tile_n": 128, **fields}
    _stand_in(native, stubs, **found)
    q = _bf16(1, 8, 2, 128)
    with pytest.raises(RuntimeError, match=message):
        native.launch_for_test(q, q, q, 0.1, True, 1.0, 1.0, 1.0, False, None, 0, 0)
    assert ctypes.c_uint.in_dll(stubs, "launches").value == 0
    assert ctypes.c_uint.in_dll(stubs, "launches2").value == 0
