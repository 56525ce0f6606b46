"""Launching ZYFA kernels: backend discovery, device architecture, argument checks, launch.

The GPU work happens in the C++ extension `zyfa_core._driver`, which dlopens the CUDA driver
(libcuda.so.1) or the HIP runtime (libamdhip64.so) at run time. This module checks everything it can
in Python first, so that a bad argument is a ValueError with a precise message rather than a fault
on the device.

Typical use (zyfa-torch does this with tensor data pointers and the current stream)::

    spec = zyfa_core.select(zyfa_core.device_arch(0), "bf16", 128, 128, causal=True)
    args = zyfa_core.make_fwd_args(q=q_ptr, k=k_ptr, ..., flags=zyfa_core.FLAG_CAUSAL)
    zyfa_core.launch(spec, args, stream=stream_handle, device=0)
"""

from __future__ import annotations

import functools
import importlib
import math
import struct
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from zyfa_core.abi import ABI_VERSION, FLAG_CAUSAL, FLAG_LSE, ZyfaFwdArgs, tma_maps_bytes
from zyfa_core.errors import ManifestError, ZyfaDriverError
from zyfa_core.manifest import VPREP_THREADS, KernelSpec

__all__ = [
    "available_backend",
    "backend_report",
    "check_args",
    "device_arch",
    "device_count",
    "device_properties",
    "launch",
    "launch_grid",
    "native_launch",
    "NativeLaunch",
]

_ELEMENT_BYTES = {"bf16": 2, "e4m3fn": 1}
_OUT_ELEMENT_BYTES = 2  # out is always bf16
_VECTOR_BYTES = 16  # the kernels load and store 16-byte vectors: pointers and strides must allow that
_BACKEND_OF_KIND = {"cuda": "cuda", "hip": "hip", "asmgen": "hip"}
_GRID_YZ_MAX = 65535  # CUDA's gridDim.y/z limit (HIP's is larger): heads_q and batch on the tile grid
_MAX_WORK_ITEMS = 2**31 - 1  # the persistent kernel counts items (and item + grid) in 32 bits

_lock = threading.Lock()
_kernels: dict[tuple[int, Path, str], Any] = {}  # (device, code object, name) -> _driver.Kernel


@functools.lru_cache(maxsize=1)
def _driver_import() -> tuple[ModuleType | None, str]:
    """The extension module, or None and why it could not be imported."""
    try:
        return importlib.import_module("zyfa_core._driver"), ""
    except ImportError as exc:
        return None, f"zyfa_core._driver is not importable ({exc}); reinstall zyfa-core to build it"


def _driver() -> ModuleType:
    module, why = _driver_import()
    if module is None:
        raise ZyfaDriverError(why, call="import")
    return module


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


def _work_items(spec: KernelSpec, args: ZyfaFwdArgs) -> int:
    """ceil(seqlen_q / tile_m) * heads_q * batch: one item per (query tile, head, batch)."""
    return -(-args.seqlen_q // spec.tile_m) * args.heads_q * args.batch


def _check_multiprocessors(spec: KernelSpec, multiprocessors: int | None) -> int:
    if isinstance(multiprocessors, bool) or not isinstance(multiprocessors, int) or multiprocessors <= 0:
        raise ValueError(
            f"{spec.name} takes a persistent grid, which needs the device's multiprocessor count "
            f"(a positive int); got {multiprocessors!r}"
        )
    return multiprocessors


def launch_grid(
    spec: KernelSpec, args: ZyfaFwdArgs, multiprocessors: int | None = None
) -> tuple[int, int, int]:
    """The launch grid of `spec` for `args`, by `spec.grid`.

    "tiles": (ceil(seqlen_q / tile_m), heads_q, batch), one block per query tile, head and batch;
    `multiprocessors` is not used. "persistent": (min(multiprocessors, items), 1, 1) with items =
    ceil(seqlen_q / tile_m) * heads_q * batch; block x takes items x, x + grid, ... (more blocks than
    items would only exit at once). `launch` passes the device's multiprocessor count.

    Raises:
        ValueError: a persistent spec and `multiprocessors` missing or not positive.
    """
    if spec.grid != "persistent":
        return (-(-args.seqlen_q // spec.tile_m), args.heads_q, args.batch)
    return (min(_check_multiprocessors(spec, multiprocessors), _work_items(spec, args)), 1, 1)


def _check_spec(spec: KernelSpec, args: ZyfaFwdArgs) -> None:
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"spec must be a zyfa_core.KernelSpec, got {type(spec).__name__}")
    if not isinstance(args, ZyfaFwdArgs):
        raise TypeError(f"args must be a zyfa_core.ZyfaFwdArgs, got {type(args).__name__}")
    if spec.abi_version != ABI_VERSION:
        raise ValueError(f"{spec.name} uses ABI version {spec.abi_version}, zyfa_core uses {ABI_VERSION}")


def _check_pointers(spec: KernelSpec, args: ZyfaFwdArgs) -> None:
    for name in ("q", "k", "v", "out"):
        address = getattr(args, name) or 0
        if address == 0:
            raise ValueError(f"{spec.name}: args.{name} is a null pointer")
        if address % _VECTOR_BYTES:
            raise ValueError(f"{spec.name}: args.{name} = {address:#x} is not {_VECTOR_BYTES}-byte aligned")
    lse = args.lse or 0
    if args.flags & FLAG_LSE and lse == 0:
        raise ValueError(f"{spec.name}: flags has FLAG_LSE but args.lse is a null pointer")
    if lse % 4:
        raise ValueError(f"{spec.name}: args.lse = {lse:#x} is not 4-byte aligned (float32)")


def _check_sizes(spec: KernelSpec, args: ZyfaFwdArgs) -> None:
    for name in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k"):
        if getattr(args, name) <= 0:
            raise ValueError(
                f"{spec.name}: args.{name} = {getattr(args, name)} must be positive "
                "(handle empty tensors before launching)"
            )
    if args.heads_q % args.heads_kv:
        raise ValueError(
            f"{spec.name}: heads_q = {args.heads_q} is not a multiple of heads_kv = {args.heads_kv} (GQA/MQA)"
        )
    if (args.d_qk, args.d_v) != (spec.d_qk, spec.d_v):
        raise ValueError(
            f"{spec.name} is built for d_qk={spec.d_qk}, d_v={spec.d_v}; args have "
            f"d_qk={args.d_qk}, d_v={args.d_v}"
        )
    if spec.grid == "tiles" and (args.heads_q > _GRID_YZ_MAX or args.batch > _GRID_YZ_MAX):
        raise ValueError(
            f"{spec.name}: heads_q = {args.heads_q} and batch = {args.batch} must each be <= "
            f"{_GRID_YZ_MAX} (grid y/z limit)"
        )
    if spec.v_prep and (args.heads_kv > _GRID_YZ_MAX or args.batch > _GRID_YZ_MAX):
        raise ValueError(
            f"{spec.name}: heads_kv = {args.heads_kv} and batch = {args.batch} must each be <= "
            f"{_GRID_YZ_MAX} (the V pre-pass's grid y/z limit)"
        )
    if spec.grid == "persistent" and _work_items(spec, args) > _MAX_WORK_ITEMS:
        raise ValueError(
            f"{spec.name}: {_work_items(spec, args)} work items (query tiles x heads_q x batch) exceed "
            f"{_MAX_WORK_ITEMS}, which the persistent kernel counts in 32 bits"
        )


def _check_strides(spec: KernelSpec, args: ZyfaFwdArgs) -> None:
    in_bytes = _ELEMENT_BYTES[spec.dtype]
    sizes = {
        "q": (args.batch, args.seqlen_q, args.heads_q),
        "k": (args.batch, args.seqlen_k, args.heads_kv),
        "v": (args.batch, args.seqlen_k, args.heads_kv),
        "out": (args.batch, args.seqlen_q, args.heads_q),
    }
    for tensor, elem in (("q", in_bytes), ("k", in_bytes), ("v", in_bytes), ("out", _OUT_ELEMENT_BYTES)):
        for dim, size in zip(("batch", "seq", "head"), sizes[tensor], strict=True):
            if size == 1:
                continue  # never stepped along, so any stride is harmless (torch leaves them arbitrary)
            name = f"{tensor}_stride_{dim}"
            stride = getattr(args, name)
            if stride < 0:
                raise ValueError(f"{spec.name}: args.{name} = {stride} is negative")
            if (stride * elem) % _VECTOR_BYTES:
                raise ValueError(
                    f"{spec.name}: args.{name} = {stride} elements ({stride * elem} bytes) is not a "
                    f"multiple of {_VECTOR_BYTES} bytes; make the tensor contiguous"
                )


def _check_scalars(spec: KernelSpec, args: ZyfaFwdArgs) -> None:
    unknown = args.flags & ~(FLAG_CAUSAL | FLAG_LSE)
    if unknown:
        raise ValueError(f"{spec.name}: args.flags has unknown bits {unknown:#x}")
    if bool(args.flags & FLAG_CAUSAL) != spec.causal:
        want = "set" if spec.causal else "clear"
        raise ValueError(f"{spec.name}: causal={spec.causal} needs FLAG_CAUSAL {want} in args.flags")
    if not math.isfinite(args.softmax_scale):
        raise ValueError(f"{spec.name}: args.softmax_scale = {args.softmax_scale} is not finite")
    for name in ("q_descale", "k_descale", "v_descale"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{spec.name}: args.{name} = {value} must be finite and positive")
    if args.reserved != 0:
        raise ValueError(f"{spec.name}: args.reserved must be 0, got {args.reserved}")


def check_args(spec: KernelSpec, args: ZyfaFwdArgs) -> None:
    """Check that `args` are launchable with `spec`; raise ValueError/TypeError naming the problem.

    Checks: non-null, 16-byte aligned q/k/v/out (lse non-null when FLAG_LSE), positive sizes,
    heads_q % heads_kv == 0, d_qk/d_v equal to the kernel's, strides non-negative and 16-byte
    multiples (except along size-1 dims, which are never stepped), flags matching the kernel's
    causality, finite scale, positive descales, reserved 0, and the grid limits (tile grid:
    heads_q and batch <= 65535; persistent grid: items < 2**31). Needs no GPU.
    """
    _check_spec(spec, args)
    _check_pointers(spec, args)
    _check_sizes(spec, args)
    _check_strides(spec, args)
    _check_scalars(spec, args)


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


def _kernel(spec: KernelSpec, device: int, entry: str = "") -> Any:
    """The loaded `_driver.Kernel` for (device, code object, entry): checked and loaded once per process.
    `entry` "" is the attention kernel itself (spec.name, its dynamic shared memory); else another entry
    of the same code object (the V pre-pass: static shared memory only)."""
    name = entry or spec.name
    key = (device, spec.path, name)
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            _check_target(spec, device)
            smem = spec.launch_smem_bytes if name == spec.name else 0
            kernel = _driver().load_kernel(device, str(spec.path), name, smem)
            _kernels[key] = kernel
    return kernel


def _check_workspace(spec: KernelSpec, args: ZyfaFwdArgs, workspace: int) -> None:
    """A kernel with a V pre-pass needs a 16-byte aligned device workspace of spec.workspace_bytes."""
    if not spec.v_prep:
        return
    need = spec.workspace_bytes(args.batch, args.heads_kv, args.seqlen_k)
    if isinstance(workspace, bool) or not isinstance(workspace, int) or not 0 < workspace < 2**64:
        raise ValueError(
            f"{spec.name} reads V pre-transposed: pass workspace=<device pointer to {need} bytes> "
            f"(spec.workspace_bytes(batch, heads_kv, seqlen_k)); got {workspace!r}"
        )
    if workspace % _VECTOR_BYTES:
        raise ValueError(f"{spec.name}: workspace = {workspace:#x} is not {_VECTOR_BYTES}-byte aligned")


def _with_v(args: ZyfaFwdArgs, v: int) -> ZyfaFwdArgs:
    """A copy of args with args.v replaced (the kernel reads the pre-transposed V from the workspace)."""
    copy = ZyfaFwdArgs.from_buffer_copy(bytes(args))
    copy.v = v
    return copy


def _multiprocessors(spec: KernelSpec, device: int) -> int | None:
    """The multiprocessor count a persistent spec's grid needs (cached per device); None for the tile
    grid, which needs none (HIP's properties do not report it)."""
    if spec.grid != "persistent":
        return None
    return device_properties(device).get("multiprocessors")


def launch(spec: KernelSpec, args: ZyfaFwdArgs, *, stream: int, device: int, workspace: int = 0) -> None:
    """Launch kernel `spec` with `args` on `stream` of GPU `device`; asynchronous, like any launch.

    grid = `launch_grid(spec, args, multiprocessors of device)`: (ceil(seqlen_q / tile_m), heads_q,
    batch), or (min(multiprocessors, items), 1, 1) for spec.grid "persistent"; block = (threads, 1, 1);
    dynamic shared memory = spec.launch_smem_bytes (raised through cuFuncSetAttribute first on CUDA
    when above 48 KiB). A spec with loads "tma" gets a second parameter, the `zyfa_tma_maps` bytes
    (`zyfa_core.abi.tma_maps_bytes`, encoded through cuTensorMapEncodeTiled at each launch; all zero,
    valid = 0, when a q/k/v pointer or stride is not 16-byte aligned, and the kernel then loads with
    cp.async). A spec with a `v_prep` entry (ABI 3) needs `workspace`, a device pointer to
    `spec.workspace_bytes(batch, heads_kv, seqlen_k)` bytes (16-byte aligned; the caller allocates it
    and keeps it alive until the launch has run on `stream`): that entry runs first on `stream`, writing
    the pre-transposed V there, then the kernel with args.v = workspace; other specs ignore `workspace`.
    The code object is loaded once per (device, file). `stream` is the raw
    CUstream / hipStream_t value as an int (torch: `torch.cuda.current_stream(device).cuda_stream`),
    0 for the default stream; it must belong to `device`. The GIL is released during the driver call.

    Raises:
        TypeError, ValueError: bad arguments (see `check_args`), a kernel for another arch, backend
            or shared-memory budget than the device's, or a persistent kernel on a device whose
            driver reports no multiprocessor count.
        ManifestError: the code object file is missing.
        ZyfaDriverError: no GPU driver, or a driver call failed (names kernel, call, error), e.g.
            cuTensorMapEncodeTiled missing from an old driver for a "tma" kernel.
    """
    check_args(spec, args)
    _check_workspace(spec, args, workspace)
    _check_handles(device, stream)
    kernel = _kernel(spec, device)
    grid = launch_grid(spec, args, _multiprocessors(spec, device))
    if spec.v_prep:
        prep = _kernel(spec, device, spec.v_prep)
        prep_grid = spec.v_prep_grid(args.batch, args.heads_kv, args.seqlen_k)
        prep.launch(prep_grid, (VPREP_THREADS, 1, 1), 0, stream, bytes(args), struct.pack("<Q", workspace))
        args = _with_v(args, workspace)
    maps = None
    if spec.loads == "tma":  # errors of the encoding name the kernel, as every launch error does
        maps = tma_maps_bytes(spec, args, functools.partial(_driver().encode_tensor_map, kernel=spec.name))
    kernel.launch(grid, (spec.threads, 1, 1), spec.launch_smem_bytes, stream, bytes(args), maps)


class NativeLaunch(NamedTuple):
    """What native code needs to launch `name` without Python (see `native_launch`)."""

    name: str
    kernel: int  # the loaded kernel's handle for launch_function (`_driver.Kernel.handle`)
    launch_function: int  # address of the C entry point zyfa_driver_launch in zyfa_core._driver
    launch_abi: int  # version of that entry point's signature and error struct
    error_size: int  # sizeof(zyfa_driver_error), checked by the caller against its own declaration
    tile_m: int  # the grid is computed from it as `launch_grid` does, by `grid`
    block: tuple[int, int, int]
    smem_bytes: int  # dynamic shared memory per launch
    grid: str = "tiles"  # KernelSpec.grid: "tiles" or "persistent"
    multiprocessors: int = 0  # the device's count for a persistent grid (0 for "tiles": not needed)
    # KernelSpec.loads: "tma" kernels launch through launch2_function with the zyfa_tma_maps bytes as
    # the second parameter, encoded with encode_function as `zyfa_core.abi.tma_maps_bytes` does.
    loads: str = "cp.async"
    encode_function: int = 0  # address of zyfa_driver_encode_tensor_map (cuTensorMapEncodeTiled)
    launch2_function: int = 0  # address of zyfa_driver_launch2 (args + a second parameter)
    tile_n: int = 0  # KernelSpec.tile_n: TMA maps' k / v box rows, and the V pre-pass's row padding
    # KernelSpec.v_prep (ABI 3): the loaded pass entry's handle, 0 when the kernel has none. The caller
    # allocates KernelSpec.workspace_bytes, launches this handle through launch2_function (args, then the
    # workspace pointer as the second parameter) on grid KernelSpec.v_prep_grid with v_prep_block, no
    # dynamic shared memory, then the kernel with args.v = the workspace.
    v_prep_kernel: int = 0
    v_prep_block: tuple[int, int, int] = (VPREP_THREADS, 1, 1)


def native_launch(spec: KernelSpec, device: int, *, runs_v_prep: bool = False) -> NativeLaunch:
    """Load kernel `spec` on GPU `device` (checked as `launch` checks it) and return what a native
    caller needs to launch it through the C entry point of `zyfa_core._driver`, geometry included.

    For zyfa-torch's C++ op, which calls this once per kernel and then launches with no Python in the
    loop. The caller must check args itself (`check_args` is Python) and compute the grid as
    `launch_grid` does: from tile_m, or for grid "persistent" (min(multiprocessors, items), 1, 1) with
    the device's multiprocessor count, read here once. The handle stays valid for the life of the
    process (kernels are never unloaded). For `loads` "tma" the caller also builds the 448 maps bytes
    (valid = 0 and all zero when a q/k/v pointer or stride in bytes is not a multiple of 16; else the
    three maps from encode_function, valid = 1) and launches with launch2_function. For a `v_prep`
    kernel it first runs the pass (v_prep_kernel, see NativeLaunch) into its own workspace, and says so
    with `runs_v_prep=True`: a caller that does not know the pass (one built before ABI 3) would launch
    the kernel on untransposed V, so such a spec is refused without it.

    Raises:
        TypeError, ValueError, ManifestError, ZyfaDriverError: as `launch` does for its target checks
            and the multiprocessor count.
    """
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"spec must be a zyfa_core.KernelSpec, got {type(spec).__name__}")
    if spec.abi_version != ABI_VERSION:
        raise ValueError(f"{spec.name} uses ABI version {spec.abi_version}, zyfa_core uses {ABI_VERSION}")
    if spec.v_prep and not runs_v_prep:
        raise ValueError(
            f"{spec.name} reads V pre-transposed by its pass {spec.v_prep} (ABI 3); this caller does not "
            "say it runs the pass (native_launch(..., runs_v_prep=True)): upgrade zyfa-torch"
        )
    _check_handles(device, 0)
    kernel = _kernel(spec, device)
    multiprocessors = _multiprocessors(spec, device)
    if multiprocessors is not None:
        _check_multiprocessors(spec, multiprocessors)
    module = _driver()
    return NativeLaunch(
        name=spec.name,
        kernel=int(kernel.handle),
        launch_function=int(module.launch_function),
        launch_abi=int(module.LAUNCH_ABI),
        error_size=int(module.LAUNCH_ERROR_SIZE),
        tile_m=spec.tile_m,
        block=(spec.threads, 1, 1),
        smem_bytes=spec.launch_smem_bytes,
        grid=spec.grid,
        multiprocessors=multiprocessors or 0,
        loads=spec.loads,
        encode_function=int(module.encode_function),
        launch2_function=int(module.launch2_function),
        tile_n=spec.tile_n,
        v_prep_kernel=int(_kernel(spec, device, spec.v_prep).handle) if spec.v_prep else 0,
    )
