"""Launching ZYFA kernels: backend discovery, device architecture, argument checks, launch.

The work happens in the C++ extension `zyfa_core._driver`: its launch plan checks the arguments
(before any driver call: a bad argument is a ValueError with a precise message rather than a fault on
the device), sizes the grid, runs the V pre-pass, encodes the TMA maps and launches, through the CUDA
driver (libcuda.so.1) or the HIP runtime (libamdhip64.so), which it dlopens at run time. zyfa-torch's
C++ op calls the same plan through its C API (`native_plan`). This module finds the backend and the
device's architecture, and keeps the loaded plans.

Typical use (zyfa-torch does this with tensor data pointers and the current stream)::

    spec = zyfa_core.select(zyfa_core.device_arch(0), "bf16", 128, 128, causal=True)
    args = zyfa_core.make_fwd_args(q=q_ptr, k=k_ptr, ..., flags=zyfa_core.FLAG_CAUSAL)
    zyfa_core.launch(spec, args, stream=stream_handle, device=0)
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from zyfa_core.abi import ABI_VERSION, ZyfaFwdArgs, ZyfaVarlenArgs
from zyfa_core.errors import ManifestError, ZyfaDriverError
from zyfa_core.manifest import KernelSpec

__all__ = [
    "available_backend",
    "backend_report",
    "check_args",
    "device_arch",
    "device_count",
    "device_properties",
    "check_p_mode",
    "check_scalars",
    "check_tensors",
    "check_varlen",
    "launch",
    "launch_grid",
    "native_plan",
    "tma_maps_bytes",
]

_BACKEND_OF_KIND = {"cuda": "cuda", "hip": "hip", "asmgen": "hip"}

TensorMapEncoder = Callable[[str, int, Sequence[int], Sequence[int], Sequence[int]], bytes]
"""encode(element type "bf16" | "u8", address, dims[4], byte strides[3], box[4]) -> 128 map bytes."""

_lock = threading.Lock()
_loaded_plans: dict[tuple[int, KernelSpec], Any] = {}  # (device, spec) -> _driver.LoadedPlan


@functools.lru_cache(maxsize=1)
def _driver_import() -> tuple[ModuleType | None, str]:
    """The extension module, or None and why it could not be imported."""
    try:
        return importlib.import_module("zyfa_core._driver"), ""
    except ImportError as exc:
        return None, f"zyfa_core._driver is not importable ({exc}); reinstall zyfa-core to build it"


def _extension() -> ModuleType:
    """zyfa_core._driver for what needs no GPU (checks, plans); ZyfaDriverError if it is not importable."""
    module, why = _driver_import()
    if module is None:
        raise ZyfaDriverError(why, call="import")
    return module


def _driver() -> ModuleType:
    """zyfa_core._driver for what talks to the GPU driver."""
    return _extension()


def backend_report() -> dict[str, Any]:
    """What the driver probe found: {"backend": "cuda"|"hip"|None, "library": str, "attempts": [str]}.

    `attempts` says, for each library that was tried and not used, why (the dlerror or the failing
    init call). Never raises.
    """
    module, why = _driver_import()
    if module is None:
        return {"backend": None, "library": "", "attempts": [why]}
    return dict(module.probe())


def available_backend() -> str | None:
    """ "cuda" or "hip" if a GPU driver loaded and sees at least one device, else None. Never raises."""
    return backend_report()["backend"]


def _no_backend_error() -> ZyfaDriverError:
    tried = "; ".join(backend_report()["attempts"]) or "nothing tried"
    return ZyfaDriverError(f"no GPU driver could be used: {tried}", call="load GPU driver")


def device_count() -> int:
    """Number of GPUs the loaded backend sees. Raises ZyfaDriverError when no backend loaded."""
    if available_backend() is None:
        raise _no_backend_error()
    return int(_driver().device_count())


@functools.cache
def _cached_properties(device: int) -> dict[str, Any]:
    return dict(_driver().device_properties(device))


def device_properties(device: int = 0) -> dict[str, Any]:
    """Driver-reported properties of GPU `device` (cached).

    CUDA: name, major, minor, multiprocessors, max_shared_memory_per_block_optin, driver_version.
    HIP: name, gcn_arch_name (e.g. "gfx950:sramecc+:xnack-"), driver_version.

    Raises:
        ZyfaDriverError: no backend, or a driver call failed.
        ValueError: `device` out of range.
    """
    if available_backend() is None:
        raise _no_backend_error()
    return dict(_cached_properties(device))


def _cuda_arch(major: int, minor: int) -> str:
    # Hopper's wgmma/setmaxnreg exist only in the arch-specific target sm_90a, which is what our
    # sm90 code objects are built for; a 9.0 device runs them. Other capabilities get their plain name.
    if (major, minor) == (9, 0):
        return "sm90a"
    return f"sm{major}{minor}"


def device_arch(device_index: int = 0) -> str:
    """The manifest arch name of GPU `device_index`: "sm90a" (CC 9.0), "sm80", "sm100", ..., "gfx950".

    Raises:
        ZyfaDriverError: no backend, or the architecture could not be read.
    """
    props = device_properties(device_index)
    if available_backend() == "cuda":
        return _cuda_arch(int(props["major"]), int(props["minor"]))
    arch = str(props.get("gcn_arch_name", "")).split(":")[0]
    if not arch:
        raise ZyfaDriverError(
            f"device {device_index} ({props.get('name')}): could not read gcnArchName",
            call="hipGetDeviceProperties",
        )
    return arch


def _plan(spec: KernelSpec) -> Any:
    """The C++ launch plan of `spec` (`zyfa_core._driver.Plan`: checks, grid, workspace, TMA maps), cached."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"spec must be a zyfa_core.KernelSpec, got {type(spec).__name__}")
    if spec.abi_version != ABI_VERSION:
        raise ValueError(f"{spec.name} uses ABI version {spec.abi_version}, zyfa_core uses {ABI_VERSION}")
    return _plan_cached(spec)


@functools.lru_cache(maxsize=256)
def _plan_cached(spec: KernelSpec) -> Any:
    return _extension().Plan(
        name=spec.name,
        dtype=spec.dtype,
        d_qk=spec.d_qk,
        d_v=spec.d_v,
        causal=spec.causal,
        tile_m=spec.tile_m,
        tile_n=spec.tile_n,
        threads=spec.threads,
        smem=spec.launch_smem_bytes,
        grid=spec.grid,
        loads=spec.loads,
        v_prep=spec.v_prep,
        layout=spec.layout,
        max_kv_seq_stride=spec.max_kv_seq_stride,
    )


def _args_bytes(args: ZyfaFwdArgs) -> bytes:
    if not isinstance(args, ZyfaFwdArgs):
        raise TypeError(f"args must be a zyfa_core.ZyfaFwdArgs, got {type(args).__name__}")
    return bytes(args)


def _varlen_bytes(varlen: ZyfaVarlenArgs | None) -> bytes | None:
    if varlen is None:
        return None
    if not isinstance(varlen, ZyfaVarlenArgs):
        raise TypeError(f"varlen must be a zyfa_core.ZyfaVarlenArgs or None, got {type(varlen).__name__}")
    return bytes(varlen)


def _check_multiprocessors(spec: KernelSpec, multiprocessors: int | None) -> int:
    if isinstance(multiprocessors, bool) or not isinstance(multiprocessors, int) or multiprocessors <= 0:
        raise ValueError(
            f"{spec.name} takes a persistent grid, which needs the device's multiprocessor count "
            f"(a positive int); got {multiprocessors!r}"
        )
    return multiprocessors


def launch_grid(
    spec: KernelSpec,
    args: ZyfaFwdArgs,
    multiprocessors: int | None = None,
    varlen: ZyfaVarlenArgs | None = None,
) -> tuple[int, int, int]:
    """The launch grid of `spec` for `args`, by `spec.grid` and `spec.layout` (the C++ launch plan's).

    "tiles": (ceil(seqlen_q / tile_m), heads_q, batch), one block per query tile, head and batch;
    `multiprocessors` is not used. "persistent": (min(multiprocessors, items), 1, 1) with items =
    ceil(seqlen_q / tile_m) * heads_q * batch; block x takes items x, x + grid, ... (more blocks than
    items would only exit at once). `launch` passes the device's multiprocessor count. A "varlen" or
    "paged" kernel (its `varlen` struct given) counts its query tiles by min(total_q // tile_m + batch,
    batch * ceil(seqlen_q / tile_m)), a bound on those of all sequences from host values (seqlen_q is
    max_seqlen_q): "tiles" = (bound, heads_q, 1), "persistent" = (min(multiprocessors, bound * heads_q),
    1, 1); each (query tile, head) item finds its sequence and tile in cu_seqlens_q on the device, and
    items past the last tile are not computed. "batch_tiles" (packed kernels only): the "tiles" grid of the
    bounds, (ceil(max_seqlen_q / tile_m), heads_q, batch); block (x, y, z) takes query tile x of sequence z
    and exits when the sequence is shorter. "dynamic" (packed kernels only): the "persistent" grid, its
    blocks claiming items from the launch's item counter instead of taking every grid-th.

    Raises:
        ValueError: a persistent or dynamic spec and `multiprocessors` missing or not positive; a packed
            "tiles", "persistent" or "dynamic" spec without `varlen`.
    """
    plan = _plan(spec)
    walks = spec.grid in ("persistent", "dynamic")
    count = _check_multiprocessors(spec, multiprocessors) if walks else 0
    return tuple(plan.grid(_args_bytes(args), count, _varlen_bytes(varlen)))


def check_args(spec: KernelSpec, args: ZyfaFwdArgs, varlen: ZyfaVarlenArgs | None = None) -> None:
    """Check that `args` (and `varlen`, a packed batch's second parameter) are launchable with `spec`; raise
    ValueError/TypeError naming the problem.

    The checks are the C++ launch plan's, which every launch runs (this one and zyfa-torch's C++ op):
    non-null, 16-byte aligned q/k/v/out (lse non-null when FLAG_LSE), positive sizes, heads_q % heads_kv
    == 0, d_qk/d_v equal to the kernel's, strides non-negative and 16-byte multiples (except along size-1
    dims, which are never stepped), flags matching the kernel's causality, scale and descales as
    `check_scalars` takes them (in float32), reserved 0, and the grid limits (tile grid: heads_q and
    batch <= 65535; persistent grid: items < 2**31; V pre-pass: heads_kv and batch <= 65535). A packed call
    (flags FLAG_VARLEN, and FLAG_PAGED for a paged cache) needs a kernel of that layout and `varlen` with
    non-null, 4-byte aligned index pointers, positive totals and (paged) a consistent page geometry; a
    dense call takes no `varlen`. Needs no GPU.
    """
    _plan(spec).check(_args_bytes(args), _varlen_bytes(varlen))


TensorView = tuple[Sequence[int], Sequence[int], int, int, str, str, str, "int | None"]
"""A tensor as `check_tensors` takes it: (sizes, strides in elements, element bytes, storage offset,
kernel dtype ("bf16", "e4m3fn", or "" for any other), the caller's dtype name, the caller's device name,
the data address or None where it cannot be read yet)."""


def check_tensors(q: TensorView, k: TensorView, v: TensorView) -> tuple[int, int, int, int, int, int, int]:
    """The checks of an attention call's q, k, v (flash-attn layout), as zyfa-torch's op runs them on every
    path: rank 4; dtype bf16 or e4m3fn, shared (TypeError otherwise); matching batch, seqlen_k and kv heads;
    heads_q a positive multiple of heads_kv; d_qk equal for q and k; (d_qk, d_v) in (128, 128), (192, 128);
    heads_q and batch <= 65535; sizes in int32; one device; head_dim contiguous; data pointer and
    batch/seq/head strides 16-byte aligned (size-1 dims excepted). Returns (batch, seqlen_q, seqlen_k,
    heads_q, heads_kv, d_qk, d_v). Needs no GPU."""
    module = _extension()
    codes = {"bf16": module.DTYPE_BF16, "e4m3fn": module.DTYPE_E4M3FN}
    views = [(*t[:4], codes.get(t[4], module.DTYPE_OTHER), *t[5:]) for t in (q, k, v)]
    return tuple(module.check_tensors(*views))


def check_varlen(
    q: TensorView,
    k: TensorView,
    v: TensorView,
    cu_seqlens_q: TensorView | None,
    cu_seqlens_k: TensorView | None,
    seqused_k: TensorView | None,
    page_table: TensorView | None,
    descales: TensorView | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    values_readable: bool,
) -> tuple[int, ...]:
    """The checks of a packed (variable-length) call, one copy for every path (zyfa_check_varlen): q [total_q,
    heads_q, d_qk]; k, v [total_k, heads_kv, d] packed or [num_pages, page_size, heads_kv, d] with a page
    table; dtypes, heads and head dims as `check_tensors`; int32 index tensors (cu_seqlens [batch + 1],
    seqused_k [batch], page_table [batch, max_pages]) and the float32 descale table [3, batch, heads_kv] on
    q's device; max_seqlen in int32; batch <= 65535. With `values_readable` (CPU index tensors: their
    addresses are host memory) also their values. Returns (batch, total_q, total_k, heads_q, heads_kv, d_qk,
    d_v, page_size, num_pages, max_pages). Needs no GPU."""
    module = _extension()
    codes = {
        "bf16": module.DTYPE_BF16,
        "e4m3fn": module.DTYPE_E4M3FN,
        "int32": module.DTYPE_INT32,
        "float32": module.DTYPE_FLOAT32,
    }

    def coded(t: TensorView | None) -> tuple | None:
        return None if t is None else (*t[:4], codes.get(t[4], module.DTYPE_OTHER), *t[5:])

    tensors = [coded(t) for t in (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, descales)]
    return tuple(module.check_varlen(*tensors, max_seqlen_q, max_seqlen_k, values_readable))


def check_scalars(
    who: str, fp8: bool, softmax_scale: float, descales: tuple[float, float, float]
) -> tuple[float, float, float, float]:
    """The scale and descales as the kernels take them: refused (ValueError, prefixed by `who`) unless the
    scale is finite, the descales finite and > 0 (1.0 for bf16), each still so in float32, and the one
    float32 factor the kernels fold them into (softmax_scale * q_descale * k_descale * log2(e) for FP8,
    softmax_scale * log2(e) for bf16) finite and non-zero. Returns the four float32 values (as floats).
    Needs no GPU; every path of a call runs this one check."""
    return tuple(_extension().check_scalars(who, fp8, softmax_scale, *descales))


def check_p_mode(fp8: bool, p_mode: str | None) -> None:
    """Refuse a p_mode other than None, "exact", "lean" or "f16", or any p_mode for bf16 (ValueError)."""
    _extension().check_p_mode(fp8, p_mode)


def tma_maps_bytes(
    spec: KernelSpec,
    args: ZyfaFwdArgs,
    encode: TensorMapEncoder | None = None,
    varlen: ZyfaVarlenArgs | None = None,
) -> bytes:
    """The `zyfa_tma_maps` bytes (448) a launch of "tma" kernel `spec` passes for `args`.

    When q, k and v can be described by tensor maps (every pointer and the nine q/k/v strides in bytes
    multiples of 16, strides below 2**40 bytes): maps q, k, v over the 4-d tensors (d, seqlen, heads,
    batch) with byte strides (seq, head, batch) and box (128 bytes of elements, tile_m rows for q /
    tile_n for k and v, 1, 1), and valid = 1. A packed call (`varlen` given) is mapped as one sequence:
    seqlen total_q for q and total_k for k and v, batch 1 (its batch stride the tensor's rows x the seq
    stride). Otherwise all 448 bytes are zero (valid = 0, and nothing is encoded): the kernel falls back
    to its cp.async loads. `encode(element, address, dims, strides, box) -> 128 bytes` encodes a map;
    None uses the driver's cuTensorMapEncodeTiled.

    Raises:
        ValueError: `encode` returning other than 128 bytes.
        ZyfaDriverError: cuTensorMapEncodeTiled missing or failing.
    """
    return bytes(_plan(spec).tma_maps(_args_bytes(args), encode, _varlen_bytes(varlen)))


def _check_handles(device: int, stream: int) -> None:
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ValueError(f"device must be a non-negative int, got {device!r}")
    if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < 2**64:
        raise ValueError(f"stream must be a stream handle as an int >= 0 (0 = default), got {stream!r}")


def _check_target(spec: KernelSpec, device: int) -> None:
    """Device-side checks: backend for the kernel's kind, arch, shared memory, code object present."""
    backend = available_backend()
    if backend is None:
        raise _no_backend_error()
    if _BACKEND_OF_KIND[spec.kind] != backend:
        raise ValueError(f"{spec.name} is a {spec.kind} kernel; the loaded GPU backend is {backend}")
    arch = device_arch(device)
    if arch != spec.arch:
        name = device_properties(device).get("name", "?")
        raise ValueError(f"{spec.name} is built for {spec.arch}; device {device} ({name}) is {arch}")
    if backend == "cuda":
        limit = int(device_properties(device)["max_shared_memory_per_block_optin"])
        if spec.launch_smem_bytes > limit:
            raise ValueError(
                f"{spec.name} needs {spec.launch_smem_bytes} bytes of shared memory; "
                f"device {device} allows {limit}"
            )
    if not spec.path.is_file():
        raise ManifestError(f"{spec.name}: code object {spec.path} listed in the manifest is missing")


def _loaded(spec: KernelSpec, device: int) -> Any:
    """The loaded `_driver.LoadedPlan` of `spec` on `device` (its kernel and V pre-pass): target-checked
    and loaded once per process, and kept for its life (native callers hold its handle)."""
    key = (device, spec)
    loaded = _loaded_plans.get(key)
    if loaded is not None:
        return loaded
    plan = _plan(spec)
    with _lock:
        loaded = _loaded_plans.get(key)
        if loaded is None:
            _check_target(spec, device)
            loaded = _driver().load_plan(plan, device, str(spec.path))
            _loaded_plans[key] = loaded
    return loaded


def launch(
    spec: KernelSpec,
    args: ZyfaFwdArgs,
    *,
    stream: int,
    device: int,
    workspace: int = 0,
    varlen: ZyfaVarlenArgs | None = None,
) -> None:
    """Launch kernel `spec` with `args` on `stream` of GPU `device`; asynchronous, like any launch.

    The C++ launch plan does the rest, as it does for zyfa-torch's C++ op: grid = `launch_grid(spec,
    args, multiprocessors of device, varlen)`; block = (threads, 1, 1); dynamic shared memory =
    spec.launch_smem_bytes (raised through cuFuncSetAttribute at load on CUDA when above 48 KiB). A spec
    with loads "tma" gets the `zyfa_tma_maps` bytes (`tma_maps_bytes`, encoded through
    cuTensorMapEncodeTiled at each launch) as its last parameter: the second of a dense kernel, the third
    of a varlen one. A spec with a `v_prep` entry (ABI 3) needs
    `workspace`, a device pointer to `spec.workspace_bytes(batch, heads_kv, seqlen_k, total_k)` bytes (16-byte
    aligned; the caller allocates it and keeps it alive until the launch has run on `stream`): that entry
    runs first on `stream`, writing the pre-transposed V there, then the kernel with args.v = workspace;
    other specs ignore `workspace`. A packed call (args.flags has FLAG_VARLEN) passes its `varlen` struct, the
    second parameter of a "varlen" / "paged" kernel, with item_counter NULL: a grid "dynamic" spec's
    `workspace_bytes` end with its item counter, which the launch points item_counter at and clears on
    `stream` (cuMemsetD32Async) right before the kernel. The code object is loaded once per (device, file).
    `stream` is the raw CUstream / hipStream_t value as an int (torch:
    `torch.cuda.current_stream(device).cuda_stream`), 0 for the default stream; it must belong to
    `device`. The GIL is released during the driver calls.

    Raises:
        TypeError, ValueError: bad arguments (see `check_args`), a kernel for another arch, backend
            or shared-memory budget than the device's, or a persistent kernel on a device whose
            driver reports no multiprocessor count.
        ManifestError: the code object file is missing.
        ZyfaDriverError: no GPU driver, or a driver call failed (names kernel, call, error), e.g.
            cuTensorMapEncodeTiled missing from an old driver for a "tma" kernel.
    """
    data = _args_bytes(args)
    packed = _varlen_bytes(varlen)
    plan = _plan(spec)
    plan.check(data, packed)
    if isinstance(workspace, bool) or not isinstance(workspace, int) or not 0 <= workspace < 2**64:
        workspace = 0  # refused by the plan where the spec needs one (its workspace_bytes), with the bytes
    plan.check_workspace(data, workspace, packed)
    _check_handles(device, stream)
    _loaded(spec, device).launch(data, stream, workspace, packed)


def native_plan(spec: KernelSpec, device: int) -> int:
    """Load kernel `spec` on GPU `device` (checked as `launch` checks it) and return its launch plan's
    handle for the C API of zyfa_core._driver (`zyfa_plan_launch` in csrc/zyfa_core_api.h), through which
    zyfa-torch's C++ op launches without Python. Valid for the life of the process.

    Raises:
        TypeError, ValueError, ManifestError, ZyfaDriverError: as `launch` does for its target checks
            and the multiprocessor count.
    """
    _check_handles(device, 0)
    return int(_loaded(spec, device).handle)
