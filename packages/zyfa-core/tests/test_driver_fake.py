"""The C++ driver shim and the launcher end to end, against test doubles of the CUDA and HIP drivers.

tests/fake_drivers/*.c implement the driver entry points zyfa_core._driver dlopens; they run nothing
and log every call. Each test runs in a fresh process (the extension loads its driver once per
process) with ZYFA_LIBCUDA / ZYFA_LIBAMDHIP64 pointing at a fake. This checks, without a GPU, what
reaches the driver: the exact argument bytes, grid, block, shared memory, stream, context/device
handling, and how driver errors surface in Python.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import zyfa_core

SM90_BF16 = "fa_fwd_bf16_hd128_causal_sm90a"
SM90_BF16_192 = "fa_fwd_bf16_hd192x128_causal_sm90a"
GFX950_BF16 = "fa_fwd_bf16_hd128_causal_gfx950"

# Builds random but valid args for the kernel `spec` inside the snippet; prints nothing.
ARGS = """
import random
rng = random.Random({seed})
b, sq, sk, hq, hkv = {b}, {sq}, {sk}, {hq}, {hkv}
spec = {spec}
def ptr():
    return rng.randrange(1, 2**44) * 16
args = zyfa_core.make_fwd_args(
    q=ptr(), k=ptr(), v=ptr(), out=ptr(), lse=ptr(), flags=zyfa_core.FLAG_CAUSAL | zyfa_core.FLAG_LSE,
    q_stride_batch=sq * hq * {d_qk}, q_stride_seq=hq * {d_qk}, q_stride_head={d_qk},
    k_stride_batch=sk * hkv * {d_qk}, k_stride_seq=hkv * {d_qk}, k_stride_head={d_qk},
    v_stride_batch=sk * hkv * {d_v}, v_stride_seq=hkv * {d_v}, v_stride_head={d_v},
    out_stride_batch=sq * hq * {d_v}, out_stride_seq=hq * {d_v}, out_stride_head={d_v},
    batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk, d_qk={d_qk}, d_v={d_v},
    softmax_scale=rng.uniform(0.01, 1.0))
"""


def args_snippet(arch: str = "sm90a", d_qk: int = 128, d_v: int = 128, spec: str = "", **shape: int) -> str:
    """Code that sets `spec` (default: select(arch, bf16, d_qk, d_v)) and random valid `args` for it."""
    rng = random.Random()
    dims = {
        "b": rng.randint(1, 4),
        "sq": rng.randint(1, 700),
        "sk": rng.randint(1, 700),
        "hkv": rng.randint(1, 3),
    }
    dims["hq"] = dims["hkv"] * rng.randint(1, 4)
    dims.update(shape)
    spec = spec or f"zyfa_core.select({arch!r}, 'bf16', {d_qk}, {d_v}, True)"
    return ARGS.format(seed=rng.random(), spec=spec, d_qk=d_qk, d_v=d_v, **dims)


def parse(line: str) -> dict[str, str]:
    """'call key=value key=value' -> {"call": call, key: value}."""
    call, *pairs = line.split(" ")
    return {"call": call, **dict(pair.split("=", 1) for pair in pairs)}


def calls_named(calls: list[str], name: str) -> list[dict[str, str]]:
    return [parse(c) for c in calls if c.startswith(name + " ")]


@pytest.fixture
def cuda_dir(tmp_path: Path, manifest_tools) -> Path:
    rows = [manifest_tools.row(SM90_BF16), manifest_tools.row(SM90_BF16_192, smem_bytes=65536)]
    image = f"FAKECUBIN {SM90_BF16} {SM90_BF16_192}\n".encode()
    return manifest_tools.write(tmp_path / "kernels", rows, files={row["file"]: image for row in rows})


@pytest.fixture
def hip_dir(tmp_path: Path, manifest_tools) -> Path:
    row = manifest_tools.row(GFX950_BF16, tile_m=32, threads=64, smem_bytes=40960)
    return manifest_tools.write(
        tmp_path / "hip", [row], files={row["file"]: f"FAKEHSACO {GFX950_BF16}".encode()}
    )


LAUNCH_TWICE = """
stream = rng.randrange(1, 2**48) * 8
zyfa_core.launch(spec, args, stream=stream, device=0)
zyfa_core.launch(spec, args, stream=stream, device=0)
import ctypes
fake = ctypes.CDLL(FAKE_LIB)
fake.fake_current_context.restype = ctypes.c_void_p
print(json.dumps({"args": bytes(args).hex(), "stream": stream, "grid": zyfa_core.launch_grid(spec, args),
                  "threads": spec.threads, "smem": spec.smem_bytes, "ctx_after": fake.fake_current_context(),
                  "name": spec.name, "arch": zyfa_core.device_arch(0),
                  "backend": zyfa_core.available_backend()}))
"""


@pytest.mark.parametrize(("d_qk", "expect_attribute"), [(128, False), (192, True)])
def test_cuda_launch_passes_exact_bytes_grid_and_stream(
    run_with_fake, cuda_dir: Path, d_qk: int, expect_attribute
):
    out, calls = run_with_fake("cuda", args_snippet(d_qk=d_qk) + LAUNCH_TWICE, cuda_dir)
    assert out["backend"] == "cuda" and out["arch"] == "sm90a"
    launches = calls_named(calls, "cuLaunchKernel")
    assert len(launches) == 2
    for launch in launches:
        assert launch["name"] == out["name"]
        assert launch["args"] == out["args"]  # the 192 bytes the kernel receives, unchanged
        assert launch["grid"] == ",".join(map(str, out["grid"]))
        assert launch["block"] == f"{out['threads']},1,1"
        assert int(launch["smem"]) == out["smem"]
        assert int(launch["stream"], 16) == out["stream"]
        assert launch["ctx"] == "0x1000"  # device 0's primary context was current during the launch
    assert len(calls_named(calls, "cuModuleLoadData")) == 1  # loaded once, then cached
    attributes = calls_named(calls, "cuFuncSetAttribute")
    if expect_attribute:  # 64 KiB > 48 KiB: the opt-in is set, once
        assert [(a["attribute"], a["value"]) for a in attributes] == [("8", "65536")]
    else:
        assert attributes == []
    assert out["ctx_after"] is None  # the caller's (empty) context is restored


def test_cuda_grid_for_uneven_seqlen(run_with_fake, cuda_dir: Path) -> None:
    snippet = args_snippet(sq=129, b=3, hq=6, hkv=2) + LAUNCH_TWICE
    _, calls = run_with_fake("cuda", snippet, cuda_dir)
    assert calls_named(calls, "cuLaunchKernel")[0]["grid"] == "3,6,3"


def test_cuda_keeps_the_callers_current_context(run_with_fake, cuda_dir: Path) -> None:
    """When the device's primary context is already current (as under PyTorch), nothing is switched."""
    snippet = (
        "import ctypes\nfake = ctypes.CDLL(FAKE_LIB)\nfake.cuInit(0)\n"
        "fake.cuCtxSetCurrent(ctypes.c_void_p(0x1000))\n" + args_snippet() + LAUNCH_TWICE
    )
    out, calls = run_with_fake("cuda", snippet, cuda_dir)
    assert [c for c in calls if c.startswith("cuCtxSetCurrent")] == [
        "cuCtxSetCurrent ctx=0x1000"
    ]  # ours above
    assert out["ctx_after"] == 0x1000


@pytest.mark.parametrize(
    ("image", "env", "call", "error_name"),
    [
        (b"NOT A CUBIN", {}, "cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE"),
        (b"FAKECUBIN some_other_kernel\n", {}, "cuModuleGetFunction", "CUDA_ERROR_NOT_FOUND"),
        (None, {"FAKE_LAUNCH_ERROR": "719"}, "cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED"),
    ],
)
def test_cuda_errors_name_kernel_call_and_error(
    run_with_fake, cuda_dir: Path, image: bytes | None, env: dict, call: str, error_name: str
) -> None:
    if image is not None:
        (cuda_dir / f"{SM90_BF16}.cubin").write_bytes(image)
    snippet = args_snippet() + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)")
    out, _ = run_with_fake("cuda", snippet, cuda_dir, **env)
    assert out["type"] == "ZyfaDriverError"
    assert (out["kernel"], out["call"], out["error_name"]) == (SM90_BF16, call, error_name)
    assert out["message"].startswith(f"{SM90_BF16}: {call} failed")
    if error_name:
        assert error_name in out["message"]


CATCH = """
try:
    {call}
    result = {{"type": None}}
except Exception as exc:
    result = {{"type": type(exc).__name__, "message": str(exc), "kernel": getattr(exc, "kernel", None),
              "call": getattr(exc, "call", None), "error_name": getattr(exc, "error_name", None),
              "is_zyfa_error": isinstance(exc, zyfa_core.ZyfaError)}}
print(json.dumps(result))
"""


def test_cuda_abi_size_mismatch_is_caught(run_with_fake, cuda_dir: Path) -> None:
    snippet = args_snippet() + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)")
    out, calls = run_with_fake("cuda", snippet, cuda_dir, FAKE_PARAM_SIZE="184")
    assert out["type"] == "ZyfaDriverError" and "ABI mismatch" in out["message"]
    assert "184 bytes" in out["message"] and "192 bytes" in out["message"]
    assert calls_named(calls, "cuLaunchKernel") == []


def test_cuda_without_param_info_still_launches(run_with_fake, cuda_dir: Path) -> None:
    out, calls = run_with_fake("cuda", args_snippet() + LAUNCH_TWICE, cuda_dir, FAKE_NO_PARAM_INFO="1")
    assert calls_named(calls, "cuLaunchKernel")[0]["args"] == out["args"]


def test_cuda_init_failure_means_no_backend(run_with_fake, cuda_dir: Path) -> None:
    snippet = "print(json.dumps(zyfa_core.backend_report()))"
    out, _ = run_with_fake("cuda", snippet, cuda_dir, FAKE_INIT_ERROR="100")
    assert out["backend"] is None
    assert "cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected" in out["attempts"][0]


def test_cuda_other_arch_is_refused(run_with_fake, cuda_dir: Path) -> None:
    snippet = args_snippet() + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)")
    out, calls = run_with_fake("cuda", snippet, cuda_dir, FAKE_CC_MAJOR="8", FAKE_CC_MINOR="0")
    assert out["type"] == "ValueError"
    assert f"{SM90_BF16} is built for sm90a; device 0 (Fake GPU 0) is sm80" == out["message"]
    assert calls_named(calls, "cuModuleLoadData") == []


def test_cuda_device_out_of_range(run_with_fake, cuda_dir: Path) -> None:
    snippet = args_snippet() + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=3)")
    out, _ = run_with_fake("cuda", snippet, cuda_dir, FAKE_DEVICE_COUNT="2")
    assert (
        out["type"] == "ValueError" and "device index 3 out of range: 2 device(s) present" in out["message"]
    )


def test_hip_launch_uses_the_kernarg_buffer(run_with_fake, hip_dir: Path) -> None:
    snippet = args_snippet(arch="gfx950") + LAUNCH_TWICE.replace(
        "fake_current_context", "fake_current_device"
    )
    out, calls = run_with_fake("hip", snippet, hip_dir)
    assert out["backend"] == "hip" and out["arch"] == "gfx950"
    launches = calls_named(calls, "hipModuleLaunchKernel")
    assert len(launches) == 2
    for launch in launches:
        assert launch["args"] == out["args"] and launch["size"] == "192"
        assert launch["grid"] == ",".join(map(str, out["grid"])) and launch["block"] == "64,1,1"
        assert launch["smem"] == "0"  # the recorded LDS size is static; it is not passed again
        assert int(launch["stream"], 16) == out["stream"]
    assert len(calls_named(calls, "hipModuleLoadData")) == 1


def test_hip_switches_device_and_restores_it(run_with_fake, hip_dir: Path) -> None:
    snippet = (
        args_snippet(arch="gfx950")
        + """
zyfa_core.launch(spec, args, stream=0, device=1)
import ctypes
print(json.dumps({"device_after": ctypes.CDLL(FAKE_LIB).fake_current_device()}))
"""
    )
    out, calls = run_with_fake("hip", snippet, hip_dir, FAKE_DEVICE_COUNT="2")
    assert out["device_after"] == 0
    assert calls_named(calls, "hipModuleLoadData")[0]["device"] == "1"
    assert calls_named(calls, "hipModuleLaunchKernel")[0]["device"] == "1"


def test_hip_errors(run_with_fake, hip_dir: Path) -> None:
    (hip_dir / f"{GFX950_BF16}.hsaco").write_bytes(b"garbage")
    snippet = args_snippet(arch="gfx950") + CATCH.format(
        call="zyfa_core.launch(spec, args, stream=0, device=0)"
    )
    out, _ = run_with_fake("hip", snippet, hip_dir)
    assert (out["type"], out["call"], out["error_name"]) == (
        "ZyfaDriverError",
        "hipModuleLoadData",
        "hipErrorInvalidImage",
    )
    expected = "hipModuleLoadData failed with hipErrorInvalidImage (200): device kernel image is invalid"
    assert out["message"] == f"{GFX950_BF16}: {expected}"


def test_hip_refuses_a_cuda_kernel(run_with_fake, cuda_dir: Path) -> None:
    snippet = args_snippet(spec="zyfa_core.Manifest.load(KERNEL_DIR).kernels[0]")
    out, _ = run_with_fake(
        "hip", snippet + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)"), cuda_dir
    )
    assert out["type"] == "ValueError" and "is a cuda kernel; the loaded GPU backend is hip" in out["message"]


@pytest.mark.parametrize("arch", ["gfx942:sramecc+:xnack-", "gfx1100"])
def test_hip_arch_is_read_from_the_properties(run_with_fake, hip_dir: Path, arch: str) -> None:
    out, _ = run_with_fake("hip", "print(json.dumps(zyfa_core.device_arch(0)))", hip_dir, FAKE_GCN_ARCH=arch)
    assert out == arch.split(":")[0]


def test_missing_code_object(run_with_fake, cuda_dir: Path) -> None:
    (cuda_dir / f"{SM90_BF16}.cubin").unlink()
    snippet = args_snippet() + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)")
    out, _ = run_with_fake("cuda", snippet, cuda_dir)
    assert out["type"] == "ManifestError" and "missing" in out["message"] and out["is_zyfa_error"]


def test_backend_env_must_be_valid(run_with_fake, cuda_dir: Path) -> None:
    out, _ = run_with_fake(
        "cuda", "print(json.dumps(zyfa_core.backend_report()))", cuda_dir, ZYFA_BACKEND="metal"
    )
    assert out["backend"] is None and "ZYFA_BACKEND=metal" in out["attempts"][0]


# ------------------------------------------------------------- the C API for native callers

# Launches through zyfa_plan_launch (csrc/zyfa_core_api.h) exactly as zyfa-torch's C++ op does: the
# extension found by its path, the plan handle from launcher.native_plan, the argument bytes, an error
# struct. {workspace} is the workspace pointer passed.
NATIVE = """
import ctypes
from zyfa_core import _driver

class Error(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("code", ctypes.c_long), ("kernel", ctypes.c_char * 128),
                ("call", ctypes.c_char * 128), ("error_name", ctypes.c_char * 64),
                ("message", ctypes.c_char * 1024)]

lib = ctypes.CDLL(_driver.__file__)
lib.zyfa_plan_launch.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                 ctypes.c_ulonglong, ctypes.POINTER(Error)]
lib.zyfa_plan_workspace_bytes.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.c_ulonglong), ctypes.POINTER(Error)]
handle = zyfa_core.launcher.native_plan(spec, 0)
raw = bytes(args)
error = Error()
need = ctypes.c_ulonglong()
stream = 0x7000
varlen = globals().get("varlen_args")
rc_need = lib.zyfa_plan_workspace_bytes(handle, raw, bytes(varlen) if varlen is not None else None,
                                        ctypes.byref(need), ctypes.byref(error))
rc = lib.zyfa_plan_launch(handle, raw, bytes(varlen) if varlen is not None else None, stream, {workspace},
                          ctypes.byref(error))
grid = zyfa_core.launch_grid(spec, args, 132 if spec.grid == "persistent" else None, varlen=varlen)
print(json.dumps({{"rc": rc, "rc_need": rc_need, "need": need.value, "args": raw.hex(), "grid": list(grid),
                  "stream": stream, "smem": spec.launch_smem_bytes, "tile_m": spec.tile_m, "name": spec.name,
                  "api": lib.zyfa_core_api_version(), "module_api": _driver.API_VERSION,
                  "sizeof": ctypes.sizeof(Error), "kind": error.kind, "code": error.code,
                  "kernel": error.kernel.decode(), "call": error.call.decode(),
                  "error_name": error.error_name.decode(), "message": error.message.decode()}}))
"""


def native(workspace: int = 0) -> str:
    return NATIVE.format(workspace=workspace)


@pytest.mark.parametrize("d_qk", [128, 192])
def test_native_plan_launch_cuda(run_with_fake, cuda_dir: Path, d_qk: int) -> None:
    """The C API passes the same bytes, grid, block, smem and stream as `launch` does."""
    out, calls = run_with_fake("cuda", args_snippet(d_qk=d_qk) + native(), cuda_dir)
    assert out["rc"] == 0 and out["rc_need"] == 0 and out["need"] == 0, out["message"]
    assert out["api"] == out["module_api"] == 5 and out["sizeof"] == 1360
    (launch,) = calls_named(calls, "cuLaunchKernel")
    assert launch["name"] == out["name"] and launch["args"] == out["args"]
    assert launch["grid"] == ",".join(map(str, out["grid"])) and launch["block"] == "128,1,1"
    assert int(launch["smem"]) == out["smem"] == (65536 if d_qk == 192 else 49152)
    assert int(launch["stream"], 16) == out["stream"] and launch["ctx"] == "0x1000"
    if d_qk == 192:  # above 48 KiB: the opt-in was made when native_plan loaded the kernel
        assert calls_named(calls, "cuFuncSetAttribute")


def test_native_plan_launch_reports_driver_errors(run_with_fake, cuda_dir: Path) -> None:
    out, _ = run_with_fake("cuda", args_snippet() + native(), cuda_dir, FAKE_LAUNCH_ERROR="719")
    assert out["rc"] != 0 and out["kind"] == 3  # ZYFA_ERROR_DRIVER
    assert (out["kernel"], out["call"], out["error_name"]) == (
        SM90_BF16,
        "cuLaunchKernel",
        "CUDA_ERROR_LAUNCH_FAILED",
    )
    assert out["code"] == 719 and out["message"].startswith(f"{SM90_BF16}: cuLaunchKernel failed with")


def test_native_plan_launch_checks_the_abi_size(run_with_fake, cuda_dir: Path) -> None:
    out, calls = run_with_fake("cuda", args_snippet() + native(), cuda_dir, FAKE_PARAM_SIZE="184")
    assert out["rc"] != 0 and out["call"] == "launch" and "ABI mismatch" in out["message"]
    assert calls_named(calls, "cuLaunchKernel") == []


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        (140, "<i", "2 * 65536", "heads_q = 131072 and batch = "),  # over the tile grid's y limit
        (148, "<i", "-(2**31) + 256", "args.seqlen_q = -2147483392 must be positive"),  # a wrapped size
        (168, "<f", "float('inf')", "softmax_scale must be a finite float or None, got inf"),
        (172, "<f", "2.0", "descales apply to float8_e4m3fn inputs only"),  # bf16 descales are 1.0
        (184, "<Q", "1", "args.reserved must be 0, got 1"),
    ],
)
def test_native_plan_launch_refuses_bad_structs_before_the_driver(
    run_with_fake, cuda_dir: Path, offset: int, fmt: str, value: str, message: str
) -> None:
    """A hand-filled struct outside the kernel's limits is refused by the plan (a ValueError kind) before
    any launch: the C API checks as zyfa_core.check_args does."""
    poke = "import struct\nraw_args = bytearray(bytes(args))\n"
    poke += f"struct.pack_into({fmt!r}, raw_args, {offset}, {value})\n"
    snippet = (
        args_snippet(hq=2, hkv=1) + poke + native().replace("raw = bytes(args)", "raw = bytes(raw_args)")
    )
    out, calls = run_with_fake("cuda", snippet, cuda_dir)
    assert out["rc"] != 0 and out["kind"] in (1, 2), out
    assert message in out["message"] and out["message"].startswith(SM90_BF16)
    assert calls_named(calls, "cuLaunchKernel") == []


def test_native_plan_launch_hip(run_with_fake, hip_dir: Path) -> None:
    out, calls = run_with_fake("hip", args_snippet("gfx950") + native(), hip_dir)
    assert out["rc"] == 0 and out["tile_m"] == 32, out["message"]
    (launch,) = calls_named(calls, "hipModuleLaunchKernel")
    assert launch["args"] == out["args"] and launch["size"] == "192" and launch["block"] == "64,1,1"
    assert launch["grid"] == ",".join(map(str, out["grid"]))


# ------------------------------------------------------------------- persistent grid (manifest "grid")

FAKE_SMS = 132  # fake_cuda.c's CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT


@pytest.fixture
def persistent_dir(tmp_path: Path, manifest_tools) -> Path:
    row = manifest_tools.row(SM90_BF16, grid="persistent")  # tile_m 64
    return manifest_tools.write(
        tmp_path / "persistent", [row], files={row["file"]: f"FAKECUBIN {SM90_BF16}\n".encode()}
    )


@pytest.mark.parametrize(
    ("shape", "grid"),
    [
        (dict(b=3, sq=600, hq=6, hkv=2), f"{FAKE_SMS},1,1"),  # 10 tiles x 6 x 3 = 180 items > 132 SMs
        (dict(b=1, sq=100, hq=2, hkv=1), "4,1,1"),  # 2 tiles x 2 x 1 = 4 items: one block each
    ],
)
def test_cuda_persistent_grid_reaches_the_driver(
    run_with_fake, persistent_dir: Path, shape: dict, grid: str
) -> None:
    """`launch` sizes a persistent kernel's grid from the device's multiprocessor count; `launch_grid`
    given that count says the same."""
    snippet = args_snippet(**shape) + LAUNCH_TWICE.replace(
        "zyfa_core.launch_grid(spec, args)", f"zyfa_core.launch_grid(spec, args, {FAKE_SMS})"
    )
    out, calls = run_with_fake("cuda", snippet, persistent_dir)
    launches = calls_named(calls, "cuLaunchKernel")
    assert [launch["grid"] for launch in launches] == [grid, grid]
    assert ",".join(map(str, out["grid"])) == grid
    assert all(launch["args"] == out["args"] and launch["block"] == "128,1,1" for launch in launches)


def test_native_plan_persistent_grid_uses_the_devices_multiprocessors(
    run_with_fake, persistent_dir: Path
) -> None:
    out, calls = run_with_fake("cuda", args_snippet(b=3, sq=600, hq=6, hkv=2) + native(), persistent_dir)
    assert out["rc"] == 0, out["message"]
    (launch,) = calls_named(calls, "cuLaunchKernel")
    assert launch["grid"] == f"{FAKE_SMS},1,1" == ",".join(map(str, out["grid"]))


SM90_VARLEN = "fa_fwd_bf16_hd128_causal_varlen_sm90a"

# A packed batch of 40 sequences (at most 100 queries each, 4000 in all) over 8 q / 2 kv heads.
PACKED = """
spec = zyfa_core.Manifest.load(KERNEL_DIR).get({name!r})
args = zyfa_core.make_fwd_args(
    q=0x7F0000000000, k=0x7F0000100000, v=0x7F0000200000, out=0x7F0000300000,
    q_stride_batch=0, k_stride_batch=0, v_stride_batch=0, out_stride_batch=0,
    q_stride_seq=1024, q_stride_head=128, k_stride_seq=256, k_stride_head=128, v_stride_seq=256,
    v_stride_head=128, out_stride_seq=1024, out_stride_head=128, batch=40, heads_q=8, heads_kv=2,
    seqlen_q=100, seqlen_k=300, d_qk=128, d_v=128, softmax_scale=0.088,
    flags=zyfa_core.FLAG_CAUSAL | zyfa_core.FLAG_VARLEN)
varlen_args = zyfa_core.make_varlen_args(
    cu_seqlens_q=0x7F0000400000, cu_seqlens_k=0x7F0000400100, total_q=4000, total_k=9000)
"""


@pytest.mark.parametrize(("grid", "expect"), [("persistent", f"{FAKE_SMS},1,1"), ("tiles", "80,8,1")])
def test_native_plan_packed_grid(
    run_with_fake, tmp_path: Path, manifest_tools, grid: str, expect: str
) -> None:
    """zyfa-torch's path (the C API) launches a packed kernel on its row's grid: min(SMs, items) blocks,
    items = min(4000 // 64 + 40, 40 * 2) = 80 query tiles x 8 heads, or the tile grid (80, 8, 1)."""
    row = manifest_tools.row(SM90_VARLEN, layout="varlen", grid=grid)  # tile_m 64
    kernels = manifest_tools.write(
        tmp_path / "packed", [row], files={row["file"]: f"FAKECUBIN {SM90_VARLEN}\n".encode()}
    )
    out, calls = run_with_fake("cuda", PACKED.format(name=SM90_VARLEN) + native(), kernels)
    assert out["rc"] == 0, out["message"]
    (launch,) = calls_named(calls, "cuLaunchKernel")
    assert launch["grid"] == expect == ",".join(map(str, out["grid"]))


def test_hip_persistent_kernel_without_multiprocessors_is_a_value_error(
    run_with_fake, tmp_path: Path, manifest_tools
) -> None:
    """HIP's device properties carry no multiprocessor count: a persistent row there cannot launch."""
    row = manifest_tools.row(GFX950_BF16, tile_m=32, threads=64, smem_bytes=40960, grid="persistent")
    hip = manifest_tools.write(
        tmp_path / "hip-p", [row], files={row["file"]: f"FAKEHSACO {GFX950_BF16}".encode()}
    )
    call = "zyfa_core.launch(spec, args, stream=0, device=0)"
    out, calls = run_with_fake("hip", args_snippet("gfx950") + CATCH.format(call=call), hip)
    assert out["type"] == "ValueError" and "multiprocessor count" in out["message"]
    assert calls_named(calls, "hipModuleLaunchKernel") == []


# ------------------------------------------------------------ TMA kernels: the zyfa_tma_maps parameter

SM90_TMA = (
    "fa_fwd_bf16_hd128_causal_tma_sm90a"  # fake_cuda.c declares 2 parameters (192 + 448) for "tma" names
)
TMA_TILE_M, TMA_TILE_N = 128, 176


def tma_rows(manifest_tools, tma_loads: str = "tma", plain_loads: str = "cp.async") -> list[dict]:
    """A TMA kernel and a one-parameter cp.async kernel, with the given manifest 'loads' fields."""
    return [
        manifest_tools.row(SM90_TMA, loads=tma_loads, tile_m=TMA_TILE_M, tile_n=TMA_TILE_N, threads=384),
        manifest_tools.row(SM90_BF16, loads=plain_loads),
    ]


def write_tma_dir(path: Path, manifest_tools, rows: list[dict]) -> Path:
    image = f"FAKECUBIN {SM90_TMA} {SM90_BF16}\n".encode()
    return manifest_tools.write(path, rows, files={row["file"]: image for row in rows})


@pytest.fixture
def tma_dir(tmp_path: Path, manifest_tools) -> Path:
    return write_tma_dir(tmp_path / "tma", manifest_tools, tma_rows(manifest_tools))


# GQA (6 query heads over 2 kv heads), q inside a packed qkv buffer, k and v with padded rows: none of
# q/k/v is contiguous. `spec` is the kernel {name}; q_stride_batch is {q_stride_batch}.
TMA_ARGS = """
spec = zyfa_core.Manifest.load(KERNEL_DIR).get({name!r})
b, sq, sk, hq, hkv, d = {b}, 300, 500, 6, 2, 128
args = zyfa_core.make_fwd_args(
    q=0x7F0000000000, k=0x7F1000000000, v=0x7F2000000000, out=0x7F3000000000, flags=zyfa_core.FLAG_CAUSAL,
    q_stride_batch={q_stride_batch}, q_stride_seq=3 * hq * d, q_stride_head=d,
    k_stride_batch=sk * hkv * 2 * d, k_stride_seq=hkv * 2 * d, k_stride_head=2 * d,
    v_stride_batch=sk * hkv * d + 64, v_stride_seq=hkv * d, v_stride_head=d,
    out_stride_batch=sq * hq * d, out_stride_seq=hq * d, out_stride_head=d,
    batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk, d_qk=d, d_v=d, softmax_scale=0.1)
"""


def tma_args(name: str = SM90_TMA, b: int = 3, q_stride_batch: str = "sq * 3 * hq * d") -> str:
    return TMA_ARGS.format(name=name, b=b, q_stride_batch=q_stride_batch)


def expected_maps(q: int, k: int, v: int) -> str:
    """The zyfa_tma_maps bytes (hex) from fake_cuda.c's maps (word i = address + i), valid = 1."""
    maps = b"".join((address + i).to_bytes(8, "little") for address in (q, k, v) for i in range(16))
    return (maps + (1).to_bytes(4, "little") + bytes(60)).hex()


def expected_encodes(b: int) -> list[dict[str, str]]:
    """The three cuTensorMapEncodeTiled calls (as fake_cuda.c logs them) for TMA_ARGS with batch b."""
    sq, sk, hq, hkv, d, elem = 300, 500, 6, 2, 128, 2
    tensors = [
        (0x7F0000000000, sq, hq, (3 * hq * d, d, sq * 3 * hq * d), TMA_TILE_M),
        (0x7F1000000000, sk, hkv, (hkv * 2 * d, 2 * d, sk * hkv * 2 * d), TMA_TILE_N),
        (0x7F2000000000, sk, hkv, (hkv * d, d, sk * hkv * d + 64), TMA_TILE_N),
    ]
    fixed = {"dtype": "9", "rank": "4", "element_strides": "1,1,1,1", "interleave": "0", "swizzle": "3"}
    return [
        {
            "call": "cuTensorMapEncodeTiled",
            **fixed,
            "address": hex(address),
            "dims": f"{d},{seqlen},{heads},{b}",
            "strides": ",".join(str(stride * elem) for stride in strides),
            "box": f"64,{rows},1,1",
            "l2": "3",
            "oob": "0",
        }
        for address, seqlen, heads, strides, rows in tensors
    ]


TMA_LAUNCH = """
zyfa_core.launch(spec, args, stream=0x5000, device=0)
plan = zyfa_core.launcher._loaded(spec, 0)
print(json.dumps({"args": bytes(args).hex(), "q": args.q, "k": args.k, "v": args.v,
                  "params": list(plan.kernel_params)}))
"""


def test_tma_launch_encodes_q_k_v_and_passes_the_maps_second(run_with_fake, tma_dir: Path) -> None:
    out, calls = run_with_fake("cuda", tma_args() + TMA_LAUNCH, tma_dir)
    assert calls_named(calls, "cuTensorMapEncodeTiled") == expected_encodes(3)
    (launch,) = calls_named(calls, "cuLaunchKernel")
    assert launch["name"] == SM90_TMA and launch["args"] == out["args"]
    assert launch["second"] == expected_maps(out["q"], out["k"], out["v"])
    assert launch["block"] == "384,1,1" and launch["grid"] == "3,6,3"
    assert out["params"] == [192, 448]


def test_tma_launch_with_an_unaligned_stride_passes_valid_0(run_with_fake, tma_dir: Path) -> None:
    """Batch 1 lets q_stride_batch be anything (torch leaves size-1 strides arbitrary): check_args allows
    it, cuTensorMapEncodeTiled would not. No map is encoded and the kernel gets all-zero maps (valid =
    0), so it loads with cp.async."""
    out, calls = run_with_fake("cuda", tma_args(b=1, q_stride_batch="3") + TMA_LAUNCH, tma_dir)
    assert calls_named(calls, "cuTensorMapEncodeTiled") == []
    (launch,) = calls_named(calls, "cuLaunchKernel")
    assert launch["args"] == out["args"] and launch["second"] == "00" * 448


def test_plain_kernel_passes_one_parameter(run_with_fake, tma_dir: Path) -> None:
    out, calls = run_with_fake("cuda", tma_args(SM90_BF16) + TMA_LAUNCH, tma_dir)
    (launch,) = calls_named(calls, "cuLaunchKernel")
    assert launch["args"] == out["args"] and "second" not in launch
    assert calls_named(calls, "cuTensorMapEncodeTiled") == [] and out["params"] == [192]


@pytest.mark.parametrize(
    ("tma_loads", "plain_loads", "name", "env", "message"),
    [
        ("tma", "tma", SM90_BF16, {}, "one parameter of 192 bytes but the launch passes two parameters "
         "of 192 and 448 bytes"),
        ("tma", "cp.async", SM90_TMA, {"FAKE_PARAM_SIZE2": "440"}, "two parameters of 192 and 440 bytes but "
         "the launch passes two parameters of 192 and 448 bytes"),
    ],
)  # fmt: skip
def test_tma_parameter_mismatch_is_an_abi_error(
    run_with_fake, tmp_path: Path, manifest_tools, tma_loads, plain_loads, name, env, message
) -> None:
    """A manifest 'loads' that disagrees with the code object, or a maps size other than 448, is refused
    before the driver reads parameter bytes that are not there."""
    kernels = write_tma_dir(tmp_path / "k", manifest_tools, tma_rows(manifest_tools, tma_loads, plain_loads))
    snippet = tma_args(name) + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)")
    out, calls = run_with_fake("cuda", snippet, kernels, **env)
    assert (out["type"], out["kernel"], out["call"]) == ("ZyfaDriverError", name, "launch")
    assert message in out["message"] and "ABI mismatch" in out["message"]
    assert calls_named(calls, "cuLaunchKernel") == []


def test_loading_queries_only_the_parameters_the_launch_passes(run_with_fake, tma_dir: Path) -> None:
    """Every cuFuncGetParamInfo query succeeds: a probe past the last parameter is a failing driver call,
    which compute-sanitizer counts as an error on every kernel load. One query for a plain kernel, two for
    a TMA kernel."""
    plain = tma_args(SM90_BF16) + "zyfa_core.launch(spec, args, stream=0, device=0)\n"
    snippet = plain + tma_args() + TMA_LAUNCH
    _, calls = run_with_fake("cuda", snippet, tma_dir)
    queries = calls_named(calls, "cuFuncGetParamInfo")
    assert [(q["name"], q["index"]) for q in queries] == [(SM90_BF16, "0"), (SM90_TMA, "0"), (SM90_TMA, "1")]
    assert {q["result"] for q in queries} == {"0"}


def test_driver_without_cuTensorMapEncodeTiled(run_with_fake, fake_libs, tma_dir: Path) -> None:
    """A pre-12.0 driver still runs the cp.async kernels; a TMA kernel fails naming the missing call."""
    snippet = (
        tma_args(SM90_BF16)
        + "zyfa_core.launch(spec, args, stream=0, device=0)\n"
        + tma_args()
        + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)")
    )
    out, calls = run_with_fake("cuda", snippet, tma_dir, ZYFA_LIBCUDA=fake_libs["cuda_no_tma"])
    assert (out["type"], out["kernel"], out["call"]) == (
        "ZyfaDriverError",
        SM90_TMA,
        "cuTensorMapEncodeTiled",
    )
    assert "has no cuTensorMapEncodeTiled (needs a CUDA 12 driver)" in out["message"]
    assert [launch["name"] for launch in calls_named(calls, "cuLaunchKernel")] == [SM90_BF16]


def test_tensor_map_encoding_error(run_with_fake, tma_dir: Path) -> None:
    snippet = tma_args() + CATCH.format(call="zyfa_core.launch(spec, args, stream=0, device=0)")
    out, calls = run_with_fake("cuda", snippet, tma_dir, FAKE_TMA_ERROR="1")
    assert (out["type"], out["call"], out["error_name"]) == (
        "ZyfaDriverError",
        "cuTensorMapEncodeTiled",
        "CUDA_ERROR_INVALID_VALUE",
    )
    assert out["message"] == (
        f"{SM90_TMA}: cuTensorMapEncodeTiled failed with CUDA_ERROR_INVALID_VALUE (1): invalid argument"
    )
    assert calls_named(calls, "cuLaunchKernel") == []


def test_encode_tensor_map_checks_its_arguments(run_with_fake, tma_dir: Path) -> None:
    snippet = """
drv = zyfa_core.launcher._driver()
results = []
for call in ('drv.encode_tensor_map("fp16", 0x1000, [64, 1, 1, 1], [128, 128, 128], [64, 1, 1, 1])',
             'drv.encode_tensor_map("bf16", 0x1000, [64, 1, 1], [128, 128, 128], [64, 1, 1, 1])'):
    try:
        eval(call)
        results.append(None)
    except ValueError as exc:
        results.append(str(exc))
results.append(drv.encode_tensor_map("u8", 0x1000, [128, 7, 1, 1], [128, 896, 896], [128, 7, 1, 1]).hex())
print(json.dumps(results))
"""
    out, calls = run_with_fake("cuda", snippet, tma_dir)
    assert out[0] == "encode_tensor_map: dtype must be 'bf16' or 'u8', got 'fp16'"
    assert out[1] == "encode_tensor_map: needs 4 dims, 3 strides and 4 box sizes; got 3, 3 and 4"
    assert out[2] == b"".join((0x1000 + i).to_bytes(8, "little") for i in range(16)).hex()
    (encode,) = calls_named(calls, "cuTensorMapEncodeTiled")
    assert (encode["dtype"], encode["dims"], encode["box"]) == ("0", "128,7,1,1", "128,7,1,1")


def test_native_plan_tma_launch(run_with_fake, tma_dir: Path) -> None:
    """Through the C API a TMA kernel gets the same maps as through `launch`; a one-parameter kernel none."""
    out, calls = run_with_fake("cuda", tma_args() + native(), tma_dir)
    assert out["rc"] == 0, out["message"]
    assert calls_named(calls, "cuTensorMapEncodeTiled") == expected_encodes(3)
    (launch,) = calls_named(calls, "cuLaunchKernel")
    assert launch["args"] == out["args"] and launch["grid"] == "3,6,3" and launch["block"] == "384,1,1"
    q, k, v = (0x7F0000000000, 0x7F1000000000, 0x7F2000000000)
    assert launch["second"] == expected_maps(q, k, v)
    plain, calls = run_with_fake("cuda", tma_args(SM90_BF16) + native(), tma_dir)
    assert plain["rc"] == 0 and "second" not in calls_named(calls, "cuLaunchKernel")[0]


def test_tma_maps_bytes_with_an_encoder(run_with_fake, tma_dir: Path) -> None:
    """`tma_maps_bytes` builds the maps with the plan's geometry: a given encoder gets each map's element
    type, address, dims, byte strides and box; its answer must be 128 bytes; unusable strides give zeros."""
    snippet = (
        tma_args()
        + """
seen = []
def encode(element, address, dims, strides, box):
    seen.append([element, address, list(dims), list(strides), list(box)])
    return bytes([len(seen)]) * 128
maps = zyfa_core.tma_maps_bytes(spec, args, encode)
bad = zyfa_core.ZyfaFwdArgs.from_buffer_copy(bytes(args))
bad.k_stride_seq += 4
zero = zyfa_core.tma_maps_bytes(spec, bad, encode)
try:
    zyfa_core.tma_maps_bytes(spec, args, lambda *a: bytes(64))
    short = None
except ValueError as exc:
    short = str(exc)
print(json.dumps({"seen": seen, "maps": maps.hex(), "zero": zero == bytes(448), "short": short}))
"""
    )
    out, _ = run_with_fake("cuda", snippet, tma_dir)
    expect = expected_encodes(3)
    assert [s[0] for s in out["seen"]] == ["bf16"] * 3
    assert [hex(s[1]) for s in out["seen"]] == [e["address"] for e in expect]
    assert [",".join(map(str, s[2])) for s in out["seen"]] == [e["dims"] for e in expect]
    assert [",".join(map(str, s[3])) for s in out["seen"]] == [e["strides"] for e in expect]
    assert [",".join(map(str, s[4])) for s in out["seen"]] == [e["box"] for e in expect]
    maps = bytes.fromhex(out["maps"])
    assert maps[:384] == bytes([1]) * 128 + bytes([2]) * 128 + bytes([3]) * 128
    assert maps[384:388] == (1).to_bytes(4, "little") and maps[388:] == bytes(60)
    assert out["zero"] and out["short"] == f"{SM90_TMA}: a tensor map must be 128 bytes, got 64"


def test_hip_refuses_tensor_maps_and_packs_a_second_parameter(run_with_fake, hip_dir: Path) -> None:
    """TMA maps exist only on CUDA; any other second parameter (here the V pre-pass's workspace pointer) goes
    into HIP's one kernarg segment after zyfa_fwd_args, at its alignment."""
    snippet = (
        args_snippet(arch="gfx950")
        + """
drv = zyfa_core.launcher._driver()
errors = []
shape = dict(name=spec.name, dtype="bf16", d_qk=128, d_v=128, causal=True, tile_m=32, tile_n=64, threads=64,
             smem=0, grid="tiles")
tma = drv.Plan(**shape, loads="tma", v_prep="")
prep = drv.Plan(**shape, loads="cp.async", v_prep=spec.name)
for call in (lambda: drv.encode_tensor_map("bf16", 0x1000, [64, 1, 1, 1], [128, 128, 128], [64, 1, 1, 1]),
             lambda: drv.load_plan(tma, 0, str(spec.path)).launch(bytes(args), 0, 0),
             lambda: drv.load_plan(prep, 0, str(spec.path)).launch(bytes(args), 0, 0x7F4000000000)):
    try:
        call()
        errors.append(None)
    except zyfa_core.ZyfaDriverError as exc:
        errors.append(str(exc))
print(json.dumps({"errors": errors, "args": bytes(args).hex()}))
"""
    )
    out, calls = run_with_fake("hip", snippet, hip_dir)
    errors, args = out["errors"], bytes.fromhex(out["args"])
    assert errors[0].startswith("cuTensorMapEncodeTiled failed: TMA tensor maps exist only on CUDA")
    assert errors[1].startswith(
        f"{GFX950_BF16}: cuTensorMapEncodeTiled failed: TMA tensor maps exist only on CUDA"
    )
    assert errors[2] is None
    prep_launch, launch = calls_named(calls, "hipModuleLaunchKernel")  # nothing launched for the TMA plan
    workspace = (0x7F4000000000).to_bytes(8, "little")
    assert prep_launch["size"] == "200" and bytes.fromhex(prep_launch["args"]) == args + workspace
    v_field = zyfa_core.ZyfaFwdArgs.v.offset
    patched = args[:v_field] + workspace + args[v_field + 8 :]  # the kernel reads v from the workspace
    assert launch["size"] == "192" and bytes.fromhex(launch["args"]) == patched


# ------------------------------------------------------------ the V pre-pass (ABI 3)

SM90_VPREP = "fa_fwd_e4m3fn_hd128_causal_leanp_sm90a"
WORKSPACE = 0x7F4000000000


@pytest.fixture
def vprep_dir(tmp_path: Path, manifest_tools) -> Path:
    row = manifest_tools.row(
        SM90_VPREP, tile_m=128, tile_n=128, threads=384, grid="persistent", v_prep=SM90_VPREP + "_vprep"
    )
    image = f"FAKECUBIN {SM90_VPREP} {SM90_VPREP}_vprep\n".encode()
    return manifest_tools.write(tmp_path / "vprep", [row], files={row["file"]: image})


VPREP_LAUNCH = f"""
zyfa_core.launch(spec, args, stream=0x5000, device=0, workspace={WORKSPACE})
moved = zyfa_core.ZyfaFwdArgs.from_buffer_copy(bytes(args))
moved.v = {WORKSPACE}
print(json.dumps({{"args": bytes(args).hex(), "moved": bytes(moved).hex(), "v": args.v, "moved_v": moved.v,
                  "need": spec.workspace_bytes(b, hkv, sk), "grid": zyfa_core.launch_grid(spec, args, 132)}}))
"""


def test_v_prep_runs_first_into_the_workspace_then_the_kernel_reads_it(
    run_with_fake, vprep_dir: Path
) -> None:
    """A kernel with a V pre-pass: `launch` runs <name>_vprep on (ceil(seqlen_k / 128), heads_kv, batch) x
    256 threads with the args and the workspace pointer, then the kernel on its own grid with the same
    args except v = the workspace, both on the caller's stream."""
    spec = f"zyfa_core.Manifest.load(KERNEL_DIR).get({SM90_VPREP!r})"
    snippet = args_snippet(spec=spec, b=3, sq=300, sk=500, hq=6, hkv=2) + VPREP_LAUNCH
    out, calls = run_with_fake("cuda", snippet, vprep_dir)
    prep, main = calls_named(calls, "cuLaunchKernel")
    assert prep["name"] == SM90_VPREP + "_vprep" and prep["grid"] == "4,2,3" and prep["block"] == "256,1,1"
    assert prep["smem"] == "0" and prep["args"] == out["args"]
    assert prep["second"] == WORKSPACE.to_bytes(8, "little").hex()
    assert main["name"] == SM90_VPREP and main["args"] == out["moved"] and "second" not in main
    assert main["grid"] == ",".join(map(str, out["grid"])) and main["block"] == "384,1,1"
    assert prep["stream"] == main["stream"] == "0x5000"
    assert out["moved_v"] == WORKSPACE != out["v"]  # only v differs
    assert out["need"] == 3 * 2 * 128 * 512  # 500 keys padded to 4 blocks of 128


def test_native_plan_runs_the_v_prep_pass_into_the_given_workspace(run_with_fake, vprep_dir: Path) -> None:
    """Through the C API: the workspace size matches the spec's, the pass runs first into the caller's
    workspace and the kernel reads V there; a launch without a workspace is refused before the driver."""
    spec = f"zyfa_core.Manifest.load(KERNEL_DIR).get({SM90_VPREP!r})"
    shape = dict(b=3, sq=300, sk=500, hq=6, hkv=2)
    out, calls = run_with_fake("cuda", args_snippet(spec=spec, **shape) + native(WORKSPACE), vprep_dir)
    assert out["rc"] == 0 and out["need"] == 3 * 2 * 128 * 512, out["message"]
    prep, main = calls_named(calls, "cuLaunchKernel")
    assert prep["name"] == SM90_VPREP + "_vprep" and prep["grid"] == "4,2,3" and prep["args"] == out["args"]
    assert prep["second"] == WORKSPACE.to_bytes(8, "little").hex()
    moved = bytearray.fromhex(out["args"])
    moved[16:24] = WORKSPACE.to_bytes(8, "little")  # args.v
    assert main["name"] == SM90_VPREP and main["args"] == moved.hex()
    assert main["grid"] == ",".join(map(str, out["grid"])) == "54,1,1"  # 3 tiles x 6 heads x 3 batch
    none, calls = run_with_fake("cuda", args_snippet(spec=spec, **shape) + native(0), vprep_dir)
    assert none["rc"] != 0 and none["kind"] == 1 and "reads V pre-transposed" in none["message"]
    assert calls_named(calls, "cuLaunchKernel") == []
