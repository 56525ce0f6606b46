"""The C++ hot path zyfa._C on the CPU: the same checks as the Python path (zyfa_core's, through its C API:
exception types and messages), the same ABI bytes as the Python `_fill_args`, the empty problem, and the
whole launch path (kernel cache, Python resolver, zyfa_core's launch plan through its C API) against
zyfa-core's fake CUDA driver: grids, the TMA kernels' zyfa_tma_maps second parameter, the V pre-pass.

Without zyfa._C these tests skip, except where ZYFA_REQUIRE_CPP=1 (the nox tests session sets it, so CI
fails when the extension was not built)."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import struct
import subprocess
import sys
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
    # Finite in float64, not in the kernels' float32: overflow, underflow, and the one folded factor.
    "scale 1e39": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"scale": 1e39}),
    "scale 1e-50": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"scale": 1e-50}),
    "scale 0": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"scale": 0.0}),
    "descale 1e39": lambda: (tuple(_e4m3(1, 8, 2, 128) for _ in range(3)), {"ds": (1e39, 1.0, 1.0)}),
    "descale 1e-50": lambda: (tuple(_e4m3(1, 8, 2, 128) for _ in range(3)), {"ds": (1.0, 1e-50, 1.0)}),
    "descales 1e20 x 1e20": lambda: (tuple(_e4m3(1, 8, 2, 128) for _ in range(3)), {"ds": (1e20, 1e20, 1.0)}),
    "scale x log2e overflow": lambda: (tuple(_bf16(1, 8, 2, 128) for _ in range(3)), {"scale": 3e38}),
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
import zyfa_core
import zyfa_core.abi as abi
from zyfa_core.errors import ZyfaDriverError
g = torch.Generator().manual_seed(0)
q = torch.randn(2, SEQLEN_Q, 4, 128, generator=g).to(DTYPE)
k = torch.randn(2, 70, 2, 128, generator=g).to(DTYPE)
v = torch.randn(2, 70, 2, 128, generator=g).to(DTYPE).transpose(1, 2).contiguous().transpose(1, 2)
p_mode = "lean" if DTYPE == torch.float8_e4m3fn else None
expect = []
for lse_on in (True, False, True):
    out, lse = _C.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, lse_on, p_mode, 0, 0x7000)
    args = _ops._fill_args(abi, q, k, v, out, lse if lse_on else None, 0.125, True, (1.0,) * 3)
    expect.append(bytes(args).hex())
info = _C.cache_info()
error = None
if MODE == "error":
    import os
    os.environ["FAKE_LAUNCH_ERROR"] = "719"
    try:
        _C.launch_for_test(q, k, v, 0.125, True, 1.0, 1.0, 1.0, True, p_mode, 0, 0)
    except ZyfaDriverError as exc:
        error = {"message": str(exc), "kernel": exc.kernel, "call": exc.call, "error_name": exc.error_name}
tma = None
if MODE == "tma":  # the Python launcher with the third call's args, and the maps for misaligned args
    import os
    spec = _ops._select_cached(0, "bf16", 128, 128, True, None, os.environ["ZYFA_KERNEL_DIR"])
    zyfa_core.launch(spec, args, stream=0x7000, device=0)
    tma = {"geometry": [[x.data_ptr(), list(x.shape), list(_ops._kernel_strides(x))] for x in (q, k, v)],
           "misaligned": []}
    for field, step in (("k_stride_seq", 4), ("v", 8)):  # 8 bytes off; 16 off + 8
        bad = abi.ZyfaFwdArgs.from_buffer_copy(bytes(args))
        setattr(bad, field, getattr(bad, field) + step)
        tma["misaligned"].append(zyfa_core.tma_maps_bytes(spec, bad).hex())
print(json.dumps({"expect": expect, "info": info, "error": error, "tma": tma}))
"""

NAME = "fa_fwd_bf16_hd128_causal_sm90a"
FP8_NAME = "fa_fwd_e4m3fn_hd128_causal_leanp_sm90a"
TMA_MAPS_SIZE = 448  # sizeof(zyfa_tma_maps)


def _fake_run(tmp_path, mode, grid=None, seqlen_q=100, loads=None, v_prep=False):
    """Run SNIPPET against the fake CUDA driver with one kernel (tile_m 64; its manifest row has `grid`
    and `loads` unless None; with `v_prep`, an FP8 kernel with a V pre-pass); return (its JSON, the
    cuLaunchKernel and cuTensorMapEncodeTiled log lines)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the fake CUDA driver")
    lib = tmp_path / "libfake_cuda.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", str(FAKE_CUDA), "-o", str(lib)], check=True)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    name = FP8_NAME if v_prep else NAME
    row = {
        "name": name, "file": name + ".cubin", "arch": "sm90a", "dtype": "e4m3fn" if v_prep else "bf16",
        "d_qk": 128, "d_v": 128, "causal": True, "p_mode": "lean" if v_prep else None, "kind": "cuda",
        "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 49152, "registers": 168, "spill_bytes": 0,
        "abi_version": abi.ABI_VERSION, "source_sha256": "0" * 64, "toolchain": {"nvcc": "13.0.88"},
    }  # fmt: skip
    if grid is not None:
        row["grid"] = grid
    if loads is not None:
        row["loads"] = loads
    if v_prep:
        row["v_prep"] = name + "_vprep"
    manifest = {"abi_version": abi.ABI_VERSION, "toolchains": {}, "kernels": [row], "skipped": []}
    (kernels / "manifest.json").write_text(json.dumps(manifest))
    (kernels / row["file"]).write_bytes(f"FAKECUBIN {name} {name}_vprep\n".encode())
    log = tmp_path / "calls.log"
    env = {key: val for key, val in os.environ.items() if not key.startswith(("ZYFA_", "FAKE_"))}
    env.update(
        ZYFA_BACKEND="cuda", ZYFA_LIBCUDA=str(lib), FAKE_GPU_LOG=str(log), ZYFA_KERNEL_DIR=str(kernels)
    )
    if loads == "tma":
        env["FAKE_PARAM_COUNT"] = "2"  # the kernel declares the args and the maps
    script = tmp_path / "snippet.py"
    dtype = "torch.float8_e4m3fn" if v_prep else "torch.bfloat16"
    script.write_text(f"MODE = {mode!r}\nSEQLEN_Q = {seqlen_q}\nimport torch\nDTYPE = {dtype}\n" + SNIPPET)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    calls = [
        line
        for line in log.read_text().splitlines()
        if line.startswith(("cuLaunchKernel ", "cuTensorMapEncodeTiled "))
    ]
    return json.loads(result.stdout.strip().splitlines()[-1]), calls


def _fields(line):
    return dict(pair.split("=", 1) for pair in line.split(" ")[1:])


def test_launch_path_against_fake_driver(native, tmp_path):
    """Three calls: one resolver call (the cache serves the rest), each launch gets exactly the bytes
    `_fill_args` makes for its outputs, the launcher's grid, block, smem and the given stream."""
    out, calls = _fake_run(tmp_path, "ok")
    assert out["info"] == {"kernels": [NAME], "resolves": 1}
    assert len(calls) == 3
    for line, expect in zip(calls, out["expect"], strict=True):
        fields = _fields(line)
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
    """zyfa_core's plan carries the manifest's grid mode and the device's SM count (one resolver call),
    and the launch gets the grid zyfa_core.launch_grid computes."""
    out, calls = _fake_run(tmp_path, "ok", grid=grid, seqlen_q=seqlen_q)
    assert out["info"] == {"kernels": [NAME], "resolves": 1}
    assert len(calls) == 3
    for line, args in zip(calls, out["expect"], strict=True):
        fields = _fields(line)
        assert fields["grid"] == expect and fields["args"] == args and fields["block"] == "128,1,1"


def _fake_maps(addresses):
    """zyfa_tma_maps as the fake driver encodes it (map word i = address + i), valid = 1, as hex."""
    words = [address + i for address in addresses for i in range(16)]
    return (struct.pack("<48Q", *words) + struct.pack("<i", 1) + bytes(TMA_MAPS_SIZE - 388)).hex()


def test_tma_launch_path_against_fake_driver(native, tmp_path):
    """A "loads": "tma" kernel: each launch of the C++ op encodes q, k, v (cuTensorMapEncodeTiled: GQA heads,
    the non-contiguous v's byte strides, box 64 x tile rows, 128-byte swizzle) and passes the maps (valid =
    1) as the second kernel parameter; the Python launcher passes the same bytes for the same args; maps for
    misaligned args are all zero, with no encode."""
    out, calls = _fake_run(tmp_path, "tma", loads="tma")
    assert out["info"] == {"kernels": [NAME], "resolves": 1}
    lines = [(line.split(" ")[0], _fields(line)) for line in calls]
    encodes = [fields for call, fields in lines if call == "cuTensorMapEncodeTiled"]
    launches = [fields for call, fields in lines if call == "cuLaunchKernel"]
    assert [call for call, _ in lines] == (["cuTensorMapEncodeTiled"] * 3 + ["cuLaunchKernel"]) * 4
    geometry = out["tma"]["geometry"]
    for fields, (address, (b, s, h, d), (stride_b, stride_s, stride_h)) in zip(
        encodes, geometry * 4, strict=True
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
    assert out["tma"]["misaligned"] == ["00" * TMA_MAPS_SIZE] * 2


def test_v_prep_kernel_runs_the_pass_first_into_a_workspace(native, tmp_path):
    """A kernel with a V pre-pass: the op allocates the workspace zyfa_core's plan sizes, the pass runs first
    (grid (ceil(seqlen_k / 128), heads_kv, batch) x 256 threads, no dynamic shared memory; the args and the
    workspace pointer), then the kernel with the same args but v = that workspace."""
    out, calls = _fake_run(tmp_path, "ok", v_prep=True)
    assert out["info"] == {"kernels": [FP8_NAME], "resolves": 1}
    assert len(calls) == 6
    for (prep, main), args in zip(zip(calls[::2], calls[1::2], strict=True), out["expect"], strict=True):
        prep, main = _fields(prep), _fields(main)
        assert prep["name"] == FP8_NAME + "_vprep" and main["name"] == FP8_NAME
        assert prep["grid"] == "1,2,2" and prep["block"] == "256,1,1" and prep["smem"] == "0"
        assert prep["args"] == args and main["grid"] == "2,4,2"
        workspace = bytes.fromhex(prep["second"])
        assert len(workspace) == 8 and int.from_bytes(workspace, "little") % 16 == 0
        moved = bytearray.fromhex(args)
        moved[16:24] = workspace  # args.v
        assert main["args"] == moved.hex() != args


def test_launch_errors_are_zyfa_driver_errors(native, tmp_path):
    out, _ = _fake_run(tmp_path, "error")
    error = out["error"]
    assert error is not None and (error["kernel"], error["call"]) == (NAME, "cuLaunchKernel")
    assert error["error_name"] == "CUDA_ERROR_LAUNCH_FAILED"
    assert error["message"].startswith(f"{NAME}: cuLaunchKernel failed with CUDA_ERROR_LAUNCH_FAILED")


def test_resolver_without_a_plan_stops_before_any_launch(native):
    q = _bf16(1, 8, 2, 128)
    native.clear_kernel_cache()
    native.set_resolver(lambda *key: ("fa_fake", 0))
    try:
        with pytest.raises(RuntimeError, match="the resolver returned no launch plan for fa_fake"):
            native.launch_for_test(q, q, q, 0.1, True, 1.0, 1.0, 1.0, False, None, 0, 0)
    finally:
        native.set_resolver(_ops._resolve_native)
        native.clear_kernel_cache()


def test_bind_core_names_what_is_wrong(native, tmp_path):
    """zyfa._C finds zyfa_core's C API by the extension's path; a missing file or a library without the
    API says so (and leaves the bound API in place)."""
    with pytest.raises(RuntimeError, match="cannot open zyfa_core's extension"):
        native.bind_core(str(tmp_path / "missing.so"))
    with pytest.raises(RuntimeError, match="has no zyfa_core_api_version"):
        native.bind_core(ctypes.util.find_library("m") or "libm.so.6")
    q = _bf16(1, 8, 2, 128)
    packed, _, _ = native.pack_args(q, q, q, 0.1, True, 1.0, 1.0, 1.0, False, None)
    assert len(packed) == abi.ARGS_SIZE


def test_extensions_use_no_iostreams():
    """Where the extensions link libstdc++ statically (as on an H200 host), streaming an integer has
    crashed in the locale facets: zyfa._C and zyfa_core._driver format with std::to_string and read
    files with C stdio, never with iostreams."""
    sources = [REPO / "packages" / "zyfa-torch" / "csrc" / "zyfa_ops.cpp"]
    sources += sorted((REPO / "packages" / "zyfa-core" / "csrc").glob("*.cpp"))
    assert len(sources) >= 6
    for source in sources:
        code = "\n".join(line.split("//")[0] for line in source.read_text().splitlines())
        for banned in ("<sstream>", "<iostream>", "<fstream>", "ostringstream", "std::cout", "std::cerr"):
            assert banned not in code, f"{source.name} uses {banned}"


def test_packages_pin_each_other():
    """zyfa-torch's C++ op calls zyfa_core's C API and zyfa-bench runs zyfa: each pins the exact release
    below it (no compatibility code for other versions), and the pins name the versions the packages say."""
    import re

    import zyfa
    import zyfa_core

    def requires(package):
        text = (REPO / "packages" / package / "pyproject.toml").read_text()
        return re.findall(r'^\s*"(zyfa-[a-z]+[^"]*)"', text, re.MULTILINE)

    assert f"zyfa-core=={zyfa_core.__version__}" in requires("zyfa-torch")
    assert f"zyfa-torch=={zyfa.__version__}" in requires("zyfa-bench")
