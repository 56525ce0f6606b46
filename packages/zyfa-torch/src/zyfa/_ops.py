"""The torch custom ops ``zyfa::fwd`` and ``zyfa::fwd_tensor_descales``: CPU tensors run
`zyfa.reference`, CUDA/ROCm tensors a zyfa_core kernel.

* ``zyfa::fwd`` takes the FP8 descales as floats. The kernel ABI takes them by value, so this op never
  reads device memory on the host: no synchronisation, and it can be captured in a CUDA graph
  (the descales are then fixed in the graph, like any launch argument).
* ``zyfa::fwd_tensor_descales`` takes 1-element tensors (e.g. from on-the-fly `zyfa.fp8_quantize`) and
  reads their values on the host, which waits for the device. It stays one node in a torch.compile
  graph (no graph break), but it cannot be captured: it is tagged ``cudagraph_unsafe`` (torch.compile's
  CUDA graphs leave it out) and raises a clear error inside a manual capture.

Both are forward-only: their registered backward raises. `register_fake` gives torch.compile and
FakeTensor the output shapes without running anything. The GPU path allocates out and lse with
torch.empty (the caching allocator, on the current stream) and launches on the current stream.

The schemas are defined here, once (`torch.library.define`), with Python kernels for every device
(CompositeExplicitAutograd), the fake and the autograd registrations. Where the C++ extension `zyfa._C`
is built (`pip install --no-build-isolation packages/zyfa-torch`), importing it adds C++ kernels of
``zyfa::fwd`` for the CUDA and AutogradCUDA keys: the same checks, allocation and argument packing with
no Python on the call path (host overhead). Both paths check and launch through zyfa_core's C++ (its
checks and launch plan; zyfa._C calls its C API, bound here at import); zyfa._C asks `_resolve_native`
here once per kernel for the loaded plan. `hot_path()` says which path CUDA calls take; ZYFA_NO_CPP=1
keeps the Python one.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TypeVar

import torch
from torch import Tensor

from zyfa import _validate, reference
from zyfa_core.manifest import preferred_p_modes

__all__ = [
    "CPU_BLOCK_N",
    "clear_kernel_cache",
    "fwd",
    "fwd_tensor_descales",
    "hot_path",
    "select_kernel",
    "launch_workspace",
]

CPU_BLOCK_N = 64
"""KV block size of the CPU path (= tile_n of the sm90a kernels)."""
CPU_P_MODE = preferred_p_modes("cpu")[0]
"""FP8 P mode of the CPU path when p_mode is None: the first of zyfa_core's preference for an arch
without its own entry (exact; sm90a kernels prefer lean), so the default is decided in one place."""
_R = TypeVar("_R")
_KERNEL_DIR_ENV = "ZYFA_KERNEL_DIR"  # zyfa_core.manifest.ENV_KERNEL_DIR: part of the kernel cache key


NO_CPP_ENV = "ZYFA_NO_CPP"
"""Set to 1 to keep the Python GPU path even where zyfa._C is built (read once, at import)."""

_ARGS = (
    "Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, {d} q_descale, {d} k_descale, "
    "{d} v_descale, bool return_lse, str? p_mode=None"
)


def _tags(*names: str) -> tuple:
    """The torch.Tag values of `names` that this torch has."""
    return tuple(tag for name in names if (tag := getattr(torch.Tag, name, None)) is not None)


_LIB = torch.library.Library("zyfa", "DEF")  # the namespace is this module's alone
_LIB.define(f"fwd({_ARGS.format(d='float')}) -> (Tensor, Tensor)", tags=_tags("pt2_compliant_tag"))
_LIB.define(
    f"fwd_tensor_descales({_ARGS.format(d='Tensor')}) -> (Tensor, Tensor)",
    tags=_tags("pt2_compliant_tag", "cudagraph_unsafe"),
)

fwd = torch.ops.zyfa.fwd.default
"""ZYFA attention forward (flash-attn layout). Use `zyfa.flash_attn_func`, which validates options.

fwd(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, return_lse, p_mode=None) returns
(out bf16 [batch, seqlen_q, heads_q, d_v], lse float32 [batch, heads_q, seqlen_q]); lse is an empty (0,)
tensor when return_lse is False. Descales are floats (1.0 for bf16): no host sync."""

fwd_tensor_descales = torch.ops.zyfa.fwd_tensor_descales.default
"""`fwd` with 1-element tensor descales, read on the host (one device sync per call)."""


def _out_shapes(q: Tensor, k: Tensor, v: Tensor, return_lse: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    batch, seqlen_q, heads_q, _ = q.shape
    out_shape = (batch, seqlen_q, heads_q, v.shape[3])
    lse_shape = (batch, heads_q, seqlen_q) if return_lse else (0,)
    return out_shape, lse_shape


def _empty_outputs(
    out_shape: tuple[int, ...], lse_shape: tuple[int, ...], device: torch.device
) -> tuple[Tensor, Tensor]:
    """Outputs of a call with nothing to compute: every row sees no key (out 0, lse +inf)."""
    out = torch.zeros(out_shape, dtype=torch.bfloat16, device=device)
    return out, torch.full(lse_shape, float("inf"), dtype=torch.float32, device=device)


def _new_outputs(q: Tensor, out_shape: tuple[int, ...], lse_shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Uninitialised outputs on q's device (out bf16, lse float32): what the kernel writes, or a fake's."""
    out = torch.empty(out_shape, dtype=torch.bfloat16, device=q.device)
    return out, torch.empty(lse_shape, dtype=torch.float32, device=q.device)


def _device_path(device: torch.device, cpu: Callable[..., _R], gpu: Callable[..., _R]) -> Callable[..., _R]:
    """The path of an op for tensors on `device`: `cpu`, `gpu` (CUDA/ROCm), or a clear error."""
    if device.type == "cpu":
        return cpu
    if device.type == "cuda":  # ROCm builds of torch report HIP devices as "cuda" too
        return gpu
    raise NotImplementedError(
        f"zyfa: tensors on {device.type!r} are not supported; use CPU or CUDA/ROCm tensors"
    )


@dataclass(frozen=True)
class _Options:
    """A call's checked scalar arguments, as both paths of every op take them after the tensors."""

    softmax_scale: float
    causal: bool
    descales: tuple[float, float, float]
    return_lse: bool
    p_mode: str | None


def _forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float,
    causal: bool,
    descales: tuple[float, float, float],
    return_lse: bool,
    p_mode: str | None,
) -> tuple[Tensor, Tensor]:
    """The body of both ops: check the real tensors and scalars, then run the CPU or GPU path."""
    dims = _validate.check_tensors(q, k, v)
    _validate.check_p_mode(q.dtype, p_mode)
    _validate.check_scalars(q.dtype, softmax_scale, descales)
    if 0 in (dims.batch, dims.seqlen_q, dims.seqlen_k):
        return _empty_outputs(*_out_shapes(q, k, v, return_lse), q.device)
    run = _device_path(q.device, _fwd_cpu, _fwd_core)
    return run(q, k, v, _Options(softmax_scale, causal, descales, return_lse, p_mode))


def _fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float,
    causal: bool,
    q_descale: float,
    k_descale: float,
    v_descale: float,
    return_lse: bool,
    p_mode: str | None = None,
) -> tuple[Tensor, Tensor]:
    """zyfa::fwd on any device (zyfa._C's C++ kernel takes CUDA tensors where it is loaded)."""
    return _forward(q, k, v, softmax_scale, causal, (q_descale, k_descale, v_descale), return_lse, p_mode)


def _fwd_tensor_descales_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float,
    causal: bool,
    q_descale: Tensor,
    k_descale: Tensor,
    v_descale: Tensor,
    return_lse: bool,
    p_mode: str | None = None,
) -> tuple[Tensor, Tensor]:
    """zyfa::fwd_tensor_descales on any device: reads the descales, then runs `_forward`."""
    _validate.check_descale_devices(q, (q_descale, k_descale, v_descale))
    descales = _read_descales((q_descale, k_descale, v_descale))
    return _forward(q, k, v, softmax_scale, causal, descales, return_lse, p_mode)


def _read_descales(tensors: tuple[Tensor, Tensor, Tensor]) -> tuple[float, float, float]:
    """The descale values as floats; refuses inside a CUDA graph capture, where a read cannot happen."""
    on_device = [t for t in tensors if t.device.type == "cuda"]
    if on_device and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "zyfa: tensor descales are read on the host (a device sync), which CUDA graph capture "
            "forbids. Inside a captured region pass the descales as Python floats: quantise with "
            "zyfa.fp8_quantize(x, as_float=True) before capture, or with a fixed calibrated descale "
            "(zyfa.fp8_quantize(x, descale=d)); see docs/usage.md."
        )
    q, k, v = (float(t.reshape(()).item()) for t in tensors)
    return q, k, v


def _fwd_fake(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float,
    causal: bool,
    q_descale: object,
    k_descale: object,
    v_descale: object,
    return_lse: bool,
    p_mode: str | None = None,
) -> tuple[Tensor, Tensor]:
    # While torch.compile traces, the checks of the tensors and p_mode run here (on the example sizes).
    _validate.check_tensors(q, k, v)
    _validate.check_p_mode(q.dtype, p_mode)
    _validate.check_descale_devices(q, (q_descale, k_descale, v_descale))
    return _new_outputs(q, *_out_shapes(q, k, v, return_lse))


def _backward(ctx: object, grad_out: Tensor, grad_lse: Tensor) -> None:
    raise NotImplementedError(
        "zyfa::fwd is forward-only (inference prefill): it has no backward. Use "
        "torch.nn.functional.scaled_dot_product_attention or flash-attn for training."
    )


def _setup_context(ctx: object, inputs: tuple, output: tuple) -> None:
    return None


for _name, _impl in (("fwd", _fwd_impl), ("fwd_tensor_descales", _fwd_tensor_descales_impl)):
    _LIB.impl(_name, _impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"zyfa::{_name}", _fwd_fake, lib=_LIB)
    torch.library.register_autograd(f"zyfa::{_name}", _backward, setup_context=_setup_context, lib=_LIB)


def _fwd_cpu(q: Tensor, k: Tensor, v: Tensor, opts: _Options) -> tuple[Tensor, Tensor]:
    out, lse = reference.attention(q, k, v, **_cpu_options(opts, opts.descales))
    return _cpu_outputs(out, lse, opts)


def _cpu_options(opts: _Options, descales: tuple[object, object, object]) -> dict[str, object]:
    """The keyword arguments that make a `zyfa.reference` call compute what the CPU path serves for
    `opts`, with `descales` (its floats, or the packed op's per-sequence tables)."""
    q_descale, k_descale, v_descale = descales
    return {
        "softmax_scale": opts.softmax_scale,
        "causal": opts.causal,
        "q_descale": q_descale,
        "k_descale": k_descale,
        "v_descale": v_descale,
        "p_mode": opts.p_mode or CPU_P_MODE,
        "block_n": CPU_BLOCK_N,
    }


def _cpu_outputs(out: Tensor, lse: Tensor, opts: _Options) -> tuple[Tensor, Tensor]:
    """The reference's (out, lse) as the op returns them: lse an empty (0,) tensor unless asked for."""
    return out, lse if opts.return_lse else lse.new_empty((0,))


def _core() -> SimpleNamespace:
    """zyfa_core's abi, manifest and launcher modules, imported on first GPU use (tests mock them)."""
    try:
        return SimpleNamespace(
            abi=importlib.import_module("zyfa_core.abi"),
            manifest=importlib.import_module("zyfa_core.manifest"),
            launcher=importlib.import_module("zyfa_core.launcher"),
        )
    except ImportError as exc:
        raise RuntimeError(
            f"zyfa: running on CUDA/ROCm tensors needs zyfa-core (pip install packages/zyfa-core): {exc}"
        ) from exc


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def select_kernel(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = True, p_mode: str | None = None, layout: str = "dense"
) -> object:
    """The zyfa_core KernelSpec that serves these GPU tensors (its tile_n is the reference's block_n).

    `layout` is "dense", "varlen" (packed k, v) or "paged" (a paged K/V cache). Cached per (device, dtype,
    d_qk, d_v, causal, p_mode, $ZYFA_KERNEL_DIR, layout): zyfa_core's driver probe, device query and
    manifest lookup run once per key, not on every call (host overhead).
    """
    dtype = "e4m3fn" if q.dtype == torch.float8_e4m3fn else "bf16"
    key = (_device_index(q.device), dtype, q.shape[-1], v.shape[-1], causal, p_mode)
    return _select_cached(*key, os.environ.get(_KERNEL_DIR_ENV), layout)


def clear_kernel_cache() -> None:
    """Forget the kernels `select_kernel` (and zyfa._C) chose (after the manifest or zyfa_core changes
    in-process)."""
    _select_cached.cache_clear()
    if _NATIVE is not None:
        _NATIVE.clear_kernel_cache()


@functools.lru_cache(maxsize=256)
def _select_cached(
    device_index: int,
    dtype: str,
    d_qk: int,
    d_v: int,
    causal: bool,
    p_mode: str | None,
    kernel_dir: str | None,
    layout: str = "dense",
) -> object:
    core = _core()
    if not core.launcher.available_backend():
        why = "; ".join(core.launcher.backend_report()["attempts"]) or "no details"
        raise RuntimeError(
            f"zyfa: zyfa_core found no GPU driver (libcuda.so.1 / libamdhip64.so) to launch kernels: {why}"
        )
    arch = core.launcher.device_arch(device_index)
    return core.manifest.select(arch, dtype, d_qk, d_v, causal, p_mode=p_mode, layout=layout)


def _fwd_core(q: Tensor, k: Tensor, v: Tensor, opts: _Options) -> tuple[Tensor, Tensor]:
    core = _core()
    spec = select_kernel(q, k, v, opts.causal, opts.p_mode)
    out, lse = _new_outputs(q, *_out_shapes(q, k, v, opts.return_lse))
    lse_arg = lse if opts.return_lse else None
    args = _fill_args(core.abi, q, k, v, out, lse_arg, opts.softmax_scale, opts.causal, opts.descales)
    workspace = launch_workspace(spec, q.shape[0], k.shape[2], k.shape[1], q.device)
    _launch(core, spec, args, q.device, workspace=workspace.data_ptr() if workspace is not None else None)
    return out, lse


def _launch(core: SimpleNamespace, spec: object, args: object, device: torch.device, **extra: object) -> None:
    """Launch `spec` with `args` on the current stream of `device`; `extra` arguments that are None are
    left out (the launcher's defaults apply)."""
    stream = torch.cuda.current_stream(device).cuda_stream
    given = {name: value for name, value in extra.items() if value is not None}
    core.launcher.launch(spec, args, stream=stream, device=_device_index(device), **given)


def launch_workspace(
    spec: object, batch: int, heads_kv: int, seqlen_k: int, device: torch.device, total_k: int | None = None
) -> Tensor | None:
    """The device workspace one launch of `spec` needs (zyfa_core's `KernelSpec.workspace_bytes`: a V
    pre-pass's pre-transposed V, a grid "dynamic" kernel's item counter; total_k: a packed call's keys), from
    torch's caching allocator, which keeps it for this stream's work after the tensor goes out of scope; None
    when it needs none."""
    nbytes = spec.workspace_bytes(batch, heads_kv, seqlen_k, total_k)  # type: ignore[attr-defined]
    return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None


def _kernel_strides(x: Tensor) -> tuple[int, int, int]:
    """Element strides of the batch, seq and head dims as the kernel gets them.

    A size-1 dim is never stepped along, so torch lets its stride be anything (and calls such a tensor
    contiguous); the kernel and zyfa_core's checks want 16-byte multiples, so a size-1 dim gets the
    stride it would have in a dense layout: the next dim's stride times its size.
    """
    strides = list(x.stride())
    for dim in (2, 1, 0):
        if x.shape[dim] == 1:
            strides[dim] = strides[dim + 1] * x.shape[dim + 1]
    return strides[0], strides[1], strides[2]


def _fill_args(
    abi: object,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor | None,
    softmax_scale: float,
    causal: bool,
    descales: tuple[float, float, float],
) -> object:
    """A zyfa_core.abi.ZyfaFwdArgs for this call: device pointers, strides in elements, sizes, flags."""
    args = _new_args(abi, (q, k, v, out), lse, softmax_scale, descales, _kernel_strides)
    args.batch, args.seqlen_q, args.heads_q, args.d_qk = q.shape
    args.seqlen_k, args.heads_kv, args.d_v = k.shape[1], k.shape[2], v.shape[3]
    args.flags = (abi.FLAG_CAUSAL if causal else 0) | (abi.FLAG_LSE if lse is not None else 0)
    return args


def _new_args(
    abi: object,
    tensors: tuple[Tensor, Tensor, Tensor, Tensor],
    lse: Tensor | None,
    softmax_scale: float,
    descales: tuple[float, float, float],
    strides: Callable[[Tensor], tuple[int, int, int]],
) -> object:
    """A ZyfaFwdArgs with what every layout fills alike: the pointers of (q, k, v, out) and lse (0 when
    None), their (batch, seq, head) element `strides`, the scale and descales. Sizes and flags are the
    caller's."""
    args = abi.ZyfaFwdArgs()  # type: ignore[attr-defined]
    for name, x in zip(("q", "k", "v", "out"), tensors, strict=True):
        setattr(args, name, x.data_ptr())
        for which, stride in zip(("batch", "seq", "head"), strides(x), strict=True):
            setattr(args, f"{name}_stride_{which}", stride)
    args.lse = lse.data_ptr() if lse is not None else 0
    args.softmax_scale = softmax_scale
    args.q_descale, args.k_descale, args.v_descale = descales
    args.reserved = 0
    return args


# ------------------------------------------------------------------------------- the C++ hot path


def _resolve_native(
    device_index: int, dtype: str, d_qk: int, d_v: int, causal: bool, p_mode: str | None
) -> tuple[str, int]:
    """zyfa._C's kernel-cache miss: select (cached, as `select_kernel`) and load the kernel through
    zyfa_core; returns its name and its launch plan's handle (`zyfa_core.launcher.native_plan`), which
    zyfa._C launches through zyfa_core's C API."""
    spec = _select_cached(device_index, dtype, d_qk, d_v, causal, p_mode, os.environ.get(_KERNEL_DIR_ENV))
    return spec.name, int(_core().launcher.native_plan(spec, device_index))


def _load_native() -> tuple[object | None, str]:
    """Import zyfa._C (which registers its C++ kernels of zyfa::fwd) and hand it the resolver; or
    (None, why not)."""
    if os.environ.get(NO_CPP_ENV, "") not in ("", "0"):
        return None, f"{NO_CPP_ENV} is set"
    try:
        native = importlib.import_module("zyfa._C")
    except ImportError as exc:
        install = "pip install --no-build-isolation packages/zyfa-torch"
        return None, f"zyfa._C is not built ({exc}); install with `{install}`"
    try:
        core_library = importlib.import_module("zyfa_core._driver").__file__
    except ImportError as exc:
        return None, f"zyfa_core._driver is not importable ({exc}); reinstall zyfa-core"
    native.bind_core(core_library)
    native.set_resolver(_resolve_native)
    return native, ""


_NATIVE, _NATIVE_WHY = _load_native()


def hot_path() -> str:
    """Which path CUDA/ROCm calls of zyfa::fwd take: "C++ (zyfa._C)" or "Python (<why>)"."""
    return "C++ (zyfa._C)" if _NATIVE is not None else f"Python ({_NATIVE_WHY})"


def checked_natively(q: object, k: object, v: object) -> bool:
    """True when zyfa::fwd's C++ kernel will check these tensors itself (CUDA tensors, zyfa._C loaded,
    not tracing), so `flash_attn_func` need not run the same checks before the op."""
    return (
        _NATIVE is not None
        and isinstance(q, Tensor)
        and isinstance(k, Tensor)
        and isinstance(v, Tensor)
        and q.is_cuda
        and q.dim() == 4
        and not torch.compiler.is_compiling()
    )
