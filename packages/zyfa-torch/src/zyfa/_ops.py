"""The torch custom op ``zyfa::fwd``: CPU tensors run `zyfa.reference`, CUDA/ROCm tensors a zyfa_core kernel.

The op is forward-only: its registered backward raises. `register_fake` gives torch.compile and
FakeTensor the output shapes without running anything.
"""

# No `from __future__ import annotations` here: torch.library.custom_op infers the op schema from the
# annotation objects, and older torch versions handle string annotations less well.
import importlib
from types import SimpleNamespace

import torch
from torch import Tensor

from zyfa import _validate, reference

__all__ = ["CPU_BLOCK_N", "fwd", "select_kernel"]

CPU_BLOCK_N = 64
"""KV block size of the CPU path (= tile_n of the sm90a kernels)."""
CPU_P_MODE = "exact"
"""FP8 P mode of the CPU path when p_mode is None (zyfa_core.manifest.select also prefers exact)."""


def _out_shapes(q: Tensor, k: Tensor, v: Tensor, return_lse: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    batch, seqlen_q, heads_q, _ = q.shape
    out_shape = (batch, seqlen_q, heads_q, v.shape[3])
    lse_shape = (batch, heads_q, seqlen_q) if return_lse else (0,)
    return out_shape, lse_shape


def _empty_outputs(q: Tensor, k: Tensor, v: Tensor, return_lse: bool) -> tuple[Tensor, Tensor]:
    """Outputs of a call with nothing to compute: every row sees no key (out 0, lse +inf)."""
    out_shape, lse_shape = _out_shapes(q, k, v, return_lse)
    out = torch.zeros(out_shape, dtype=torch.bfloat16, device=q.device)
    return out, torch.full(lse_shape, float("inf"), dtype=torch.float32, device=q.device)


@torch.library.custom_op("zyfa::fwd", mutates_args=())
def fwd(
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
    """ZYFA attention forward (flash-attn layout). Use `zyfa.flash_attn_func`, which validates options.

    Returns (out bf16 [batch, seqlen_q, heads_q, d_v], lse float32 [batch, heads_q, seqlen_q]); lse is
    an empty (0,) tensor when return_lse is False.
    """
    dims = _validate.check_tensors(q, k, v)
    _validate.check_p_mode(q.dtype, p_mode)
    if q.dtype != torch.float8_e4m3fn and (q_descale, k_descale, v_descale) != (1.0, 1.0, 1.0):
        raise ValueError("zyfa::fwd: descales apply to float8_e4m3fn inputs only; pass 1.0 for bf16")
    if 0 in (dims.batch, dims.seqlen_q, dims.seqlen_k):
        return _empty_outputs(q, k, v, return_lse)
    if q.device.type == "cpu":
        return _fwd_cpu(q, k, v, softmax_scale, causal, (q_descale, k_descale, v_descale), return_lse, p_mode)
    if q.device.type == "cuda":  # ROCm builds of torch report HIP devices as "cuda" too
        return _fwd_core(
            q, k, v, softmax_scale, causal, (q_descale, k_descale, v_descale), return_lse, p_mode
        )
    raise NotImplementedError(
        f"zyfa: tensors on {q.device.type!r} are not supported; use CPU or CUDA/ROCm tensors"
    )


@fwd.register_fake
def _fwd_fake(
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
    out_shape, lse_shape = _out_shapes(q, k, v, return_lse)
    out = q.new_empty(out_shape, dtype=torch.bfloat16)
    return out, q.new_empty(lse_shape, dtype=torch.float32)


def _backward(ctx: object, grad_out: Tensor, grad_lse: Tensor) -> None:
    raise NotImplementedError(
        "zyfa::fwd is forward-only (inference prefill): it has no backward. Use "
        "torch.nn.functional.scaled_dot_product_attention or flash-attn for training."
    )


def _setup_context(ctx: object, inputs: tuple, output: tuple) -> None:
    return None


fwd.register_autograd(_backward, setup_context=_setup_context)


def _fwd_cpu(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float,
    causal: bool,
    descales: tuple[float, float, float],
    return_lse: bool,
    p_mode: str | None,
) -> tuple[Tensor, Tensor]:
    out, lse = reference.attention(
        q,
        k,
        v,
        softmax_scale=softmax_scale,
        causal=causal,
        q_descale=descales[0],
        k_descale=descales[1],
        v_descale=descales[2],
        p_mode=p_mode or CPU_P_MODE,
        block_n=CPU_BLOCK_N,
    )
    if not return_lse:
        lse = lse.new_empty((0,))
    return out, lse


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


def select_kernel(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, p_mode: str | None = None) -> object:
    """The zyfa_core KernelSpec that serves these GPU tensors (its tile_n is the reference's block_n)."""
    core = _core()
    if not core.launcher.available_backend():
        report = getattr(core.launcher, "backend_report", lambda: {"attempts": []})()
        why = "; ".join(report.get("attempts", [])) or "no details"
        raise RuntimeError(
            f"zyfa: zyfa_core found no GPU driver (libcuda.so.1 / libamdhip64.so) to launch kernels: {why}"
        )
    arch = core.launcher.device_arch(_device_index(q.device))
    dtype = "e4m3fn" if q.dtype == torch.float8_e4m3fn else "bf16"
    return core.manifest.select(arch, dtype, q.shape[3], v.shape[3], causal, p_mode=p_mode)


def _fwd_core(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float,
    causal: bool,
    descales: tuple[float, float, float],
    return_lse: bool,
    p_mode: str | None,
) -> tuple[Tensor, Tensor]:
    core = _core()
    spec = select_kernel(q, k, v, causal, p_mode)
    out_shape, lse_shape = _out_shapes(q, k, v, return_lse)
    out = torch.empty(out_shape, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    args = _fill_args(core.abi, q, k, v, out, lse if return_lse else None, softmax_scale, causal, descales)
    index = _device_index(q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    core.launcher.launch(spec, args, stream=stream, device=index)
    return out, lse


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
    args = abi.ZyfaFwdArgs()
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        setattr(args, name, x.data_ptr())
        for which, stride in zip(("batch", "seq", "head"), _kernel_strides(x), strict=True):
            setattr(args, f"{name}_stride_{which}", stride)
    args.lse = lse.data_ptr() if lse is not None else 0
    args.batch, args.seqlen_q, args.heads_q, args.d_qk = q.shape
    args.seqlen_k, args.heads_kv, args.d_v = k.shape[1], k.shape[2], v.shape[3]
    args.flags = (abi.FLAG_CAUSAL if causal else 0) | (abi.FLAG_LSE if lse is not None else 0)
    args.softmax_scale = softmax_scale
    args.q_descale, args.k_descale, args.v_descale = descales
    args.reserved = 0
    return args
