"""The torch custom op ``zyfa::fwd_varlen``: packed variable-length (and paged) batches.

CPU tensors run `zyfa.reference.attention_varlen`; CUDA/ROCm tensors the zyfa_core kernel of layout "varlen"
(packed k, v) or "paged" (k, v through a page table), launched through the same launch plan as the dense op
with the packed batch's `zyfa_core.ZyfaVarlenArgs` as the kernel's second parameter (ABI 4; a grid "dynamic"
kernel also takes a workspace for its item counter, ABI 5, and a V pre-pass one for the packed Vt, ABI 6).

Nothing here reads device memory on the host: cu_seqlens, seqused_k, the page table and the descale table
go to the kernel as device pointers, and the grid comes from host values only (total_q, the batch size and
max_seqlen_q, a Python int, as max_seqlen_k is), so the op can be captured in a CUDA graph and traced by
torch.compile. On the CPU the index tensors' values are checked (zyfa_core's checks read them from host
memory).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
from torch import Tensor

from zyfa import _ops, _validate, reference

__all__ = ["fwd_varlen"]

_ops._LIB.define(
    "fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? seqused_k, "
    "Tensor? page_table, int max_seqlen_q, int max_seqlen_k, float softmax_scale, bool causal, "
    "float q_descale, float k_descale, float v_descale, Tensor? descales, bool return_lse, str? p_mode=None) "
    "-> (Tensor, Tensor)",
    tags=_ops._tags("pt2_compliant_tag"),
)

fwd_varlen = torch.ops.zyfa.fwd_varlen.default
"""ZYFA packed (varlen / paged) attention forward. Use `zyfa.flash_attn_varlen_func`, which validates options.

fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, max_seqlen_q, max_seqlen_k,
softmax_scale, causal, q_descale, k_descale, v_descale, descales, return_lse, p_mode=None) returns (out bf16
[total_q, heads_q, d_v], lse float32 [heads_q, total_q]); lse is an empty (0,) tensor when return_lse is
False. `descales`: None (the float descales apply) or float32 [3, batch, heads_kv] (q, k, v per sequence and
kv head; the floats must then be 1.0)."""


def _out_shapes(q: Tensor, v: Tensor, return_lse: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    total_q, heads_q, _ = q.shape
    return (total_q, heads_q, v.shape[-1]), ((heads_q, total_q) if return_lse else (0,))


def _fwd_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor | None,
    seqused_k: Tensor | None,
    page_table: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    q_descale: float,
    k_descale: float,
    v_descale: float,
    descales: Tensor | None,
    return_lse: bool,
    p_mode: str | None = None,
    *,
    fake: bool = False,
) -> tuple[Tensor, Tensor]:
    """zyfa::fwd_varlen on any device: the checks, then the CPU reference or the GPU kernel.

    With `fake` (its registered fake, while torch.compile traces) only the checks of shapes, dtypes,
    devices and p_mode run (on the example sizes), and the outputs are empty tensors of the right shapes.
    """
    index = (cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, descales)
    dims = _validate.check_varlen(q, k, v, index, max_seqlen_q, max_seqlen_k)
    _validate.check_p_mode(q.dtype, p_mode)
    if fake:
        return _ops._new_outputs(q, *_out_shapes(q, v, return_lse))
    floats = (q_descale, k_descale, v_descale)
    _validate.check_scalars(q.dtype, softmax_scale, floats)
    if descales is not None:
        _validate.check_descale_table(q.dtype, softmax_scale, floats, descales)
    if dims is None or 0 in (dims.batch, dims.total_q, dims.total_k, max_seqlen_q, max_seqlen_k):
        return _ops._empty_outputs(*_out_shapes(q, v, return_lse), q.device)
    run = _ops._device_path(q.device, _fwd_cpu, _fwd_core)
    packed = _Packed(index, dims, (max_seqlen_q, max_seqlen_k))
    return run(q, k, v, packed, _ops._Options(softmax_scale, causal, floats, return_lse, p_mode))


_ops._LIB.impl("fwd_varlen", _fwd_varlen, "CompositeExplicitAutograd")
torch.library.register_fake("zyfa::fwd_varlen", functools.partial(_fwd_varlen, fake=True), lib=_ops._LIB)
torch.library.register_autograd(
    "zyfa::fwd_varlen", _ops._backward, setup_context=_ops._setup_context, lib=_ops._LIB
)


class _Packed(NamedTuple):
    """A checked packed batch's layout: the index tensors (cu_seqlens_q, cu_seqlens_k, seqused_k,
    page_table, descales), their sizes, and (max_seqlen_q, max_seqlen_k), which size a GPU launch."""

    index: tuple[Tensor, Tensor | None, Tensor | None, Tensor | None, Tensor | None]
    dims: _validate.VarlenDims
    max_seqlens: tuple[int, int]


def _fwd_cpu(q: Tensor, k: Tensor, v: Tensor, packed: _Packed, opts: _ops._Options) -> tuple[Tensor, Tensor]:
    """The reference per sequence; it reads the offsets itself (dims and max_seqlens size GPU launches)."""
    cu_q, cu_k, seqused_k, page_table, table = packed.index
    descales = opts.descales if table is None else (table[0], table[1], table[2])
    kw = _ops._cpu_options(opts, descales)
    out, lse = reference.attention_varlen(
        q, k, v, cu_q, cu_k, seqused_k=seqused_k, page_table=page_table, **kw
    )
    return _ops._cpu_outputs(out, lse, opts)


def _fwd_core(q: Tensor, k: Tensor, v: Tensor, packed: _Packed, opts: _ops._Options) -> tuple[Tensor, Tensor]:
    core = _ops._core()
    layout = "paged" if packed.dims.page_size else "varlen"
    spec = _ops.select_kernel(q, k, v, opts.causal, opts.p_mode, layout=layout)
    out, lse = _ops._new_outputs(q, *_out_shapes(q, v, opts.return_lse))
    args = fill_args(core.abi, (q, k, v, out), lse if opts.return_lse else None, packed, opts)
    varlen = fill_varlen_args(core.abi, packed.index, packed.dims)
    dims = packed.dims
    workspace = _ops.launch_workspace(
        spec, dims.batch, dims.heads_kv, packed.max_seqlens[1], q.device, total_k=dims.total_k
    )
    address = workspace.data_ptr() if workspace is not None else None
    _ops._launch(core, spec, args, q.device, varlen=varlen, workspace=address)
    return out, lse


def _packed_strides(x: Tensor) -> tuple[int, int, int]:
    """(batch, seq, head) element strides of a packed [rows, heads, d] tensor (batch 0: rows come from
    cu_seqlens) or a paged [pages, page_size, heads, d] one (batch = the page stride)."""
    if x.dim() == 3:
        return (0, *_ops._kernel_strides(x[None])[1:])
    return _ops._kernel_strides(x)


def fill_args(
    abi: object,
    tensors: tuple[Tensor, Tensor, Tensor, Tensor],
    lse: Tensor | None,
    packed: _Packed,
    opts: _ops._Options,
) -> object:
    """The zyfa_fwd_args of a packed call on `tensors` (q, k, v, out) (zyfa_abi.h, ABI 4): batch =
    sequences, seqlen_q / seqlen_k = max_seqlen_q / max_seqlen_k, batch strides 0 for packed tensors (the
    page stride for a paged cache)."""
    dims = packed.dims
    args = _ops._new_args(abi, tensors, lse, opts.softmax_scale, opts.descales, _packed_strides)
    args.batch, args.heads_q, args.heads_kv = dims.batch, dims.heads_q, dims.heads_kv
    args.seqlen_q, args.seqlen_k = packed.max_seqlens
    args.d_qk, args.d_v = dims.d_qk, dims.d_v
    flags = abi.FLAG_VARLEN | (abi.FLAG_CAUSAL if opts.causal else 0)
    flags |= abi.FLAG_LSE if lse is not None else 0
    flags |= abi.FLAG_PAGED if dims.page_size else 0
    flags |= abi.FLAG_DESCALE_TABLE if packed.index[4] is not None else 0
    args.flags = flags
    return args


def fill_varlen_args(
    abi: object,
    index: tuple[Tensor, Tensor | None, Tensor | None, Tensor | None, Tensor | None],
    dims: _validate.VarlenDims,
) -> object:
    """The zyfa_varlen_args of a packed call: the index tensors' device pointers and the sizes."""
    cu_q, cu_k, seqused_k, page_table, table = index
    varlen = abi.ZyfaVarlenArgs()
    for name, x in (
        ("cu_seqlens_q", cu_q),
        ("cu_seqlens_k", cu_k),
        ("seqused_k", seqused_k),
        ("page_table", page_table),
        ("descales", table),
    ):
        setattr(varlen, name, x.data_ptr() if x is not None else 0)
    if page_table is not None:
        varlen.page_table_stride = page_table.stride(0) if page_table.shape[0] > 1 else page_table.shape[1]
        varlen.page_size, varlen.num_pages, varlen.max_pages = dims.page_size, dims.num_pages, dims.max_pages
    varlen.total_q, varlen.total_k = dims.total_q, dims.total_k
    return varlen
