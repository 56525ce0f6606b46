"""cuDNN's fused SDPA through the nvidia-cudnn-frontend Python graph API (`import cudnn`): BF16 and FP8.

One graph per problem is built in `prepare` (validate, build_operation_graph, create_execution_plans
with heuristics A then FALLBACK, check_support, build_plans) and executed in the timed call with a
preallocated workspace; the cuDNN handle is bound to torch's current stream on every call (so the call
also works under CUDA-graph capture, which runs on a side stream).

Tensors stay in flash-attn's physical layout: the graph sees logical [batch, heads, seqlen, dim] dims
with the strides of a contiguous [batch, seqlen, heads, dim] buffer.

FP8 (e4m3fn in): on Hopper cuDNN produces FP8 output only (BF16 output from FP8 is "only supported on
Blackwell", seen on the H200, 2026-12-01), so this peer is measured with FP8 output, labelled so, and
its output is dequantised for the accuracy figures.  Scales, as cuDNN's FP8 SDPA defines them:
descale_q/k/v = the inputs' descales; P is stored as e4m3(P·scale_s) with scale_s = 448 and
descale_s = 1/448 (P ≤ 1 lands at the top of e4m3's range); scale_o = 1/v_descale, which keeps
|O·scale_o| ≤ max|v8| ≤ 448 (O is a convex combination of the rows of v), and the FP8 output is
dequantised as o8 · v_descale.

Packed batches (`varlen_call`, for `zyfa_bench.serving`; checked against nvidia-cudnn-frontend 1.16.0,
python/pygraph/sdpa.cpp and include/cudnn_frontend/node/sdpa_support_surface.h): the same SDPA node in
cuDNN's THD form.  q, o (and k, v without a page table) are packed [total, heads, dim] buffers; the graph
sees [batch, heads, max_seqlen, dim] with each sequence's first element given by a ragged-offset tensor
[batch + 1, 1, 1, 1] counted in ELEMENTS (cu_seqlens · heads · dim; int64 from cuDNN 9.6, int32 before),
and its length by seq_len_q / seq_len_kv [batch, 1, 1, 1] int32 with use_padding_mask (cuDNN takes ragged
offsets only with the padding mask).  A paged cache is the SDPA's paged_attention_k_table / v_table
([batch, 1, pages, 1] int32, one table for both) over a container of logical dims [num_pages, heads_kv,
page_size, dim] (the [num_pages, page_size, heads_kv, dim] cache through its strides, no copy), with
paged_attention_max_seq_len_kv = pages · page_size (cuDNN wants the table to hold exactly
ceil(max_seq_len_kv / page_size) pages).  Paged K/V under ragged Q needs cuDNN >= 9.7 (the frontend's
check); what cuDNN refuses is an `Unsupported` with cuDNN's message.  Causal masks align per sequence:
top-left where every sequence has as many queries as keys (no prefix), bottom-right otherwise (chunked
prefill over a cached prefix).
FP8 is the dense peer's contract (e4m3 in and out, the same scales); frontend 1.16.0 takes FP8 with a
bottom-right mask on sm100+ only, so FP8 over a prefix is `Unsupported` on Hopper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import (
    PackedBatch,
    Peer,
    Prepared,
    Unsupported,
    cuda_capability,
    import_status,
    validate_once,
)
from zyfa_bench.spec import Spec

__all__ = ["CudnnBF16", "CudnnFP8", "varlen_call"]

E4M3_MAX = 448.0


def _bhsd(t: Tensor) -> tuple[list[int], list[int]]:
    """Logical [b, h, s, d] dims and strides of a [b, s, h, d] tensor (a transpose view, no copy)."""
    view = t.transpose(1, 2)
    return list(view.shape), list(view.stride())


_HANDLES: dict[int, Any] = {}


def _handle(cudnn: Any) -> Any:
    """One cuDNN handle for every graph of this process (bound to torch's stream at each execution)."""
    if id(cudnn) not in _HANDLES:
        _HANDLES[id(cudnn)] = cudnn.create_handle()
    return _HANDLES[id(cudnn)]


def causal_kwargs(causal: bool, same_lengths: bool) -> dict[str, bool]:
    """The SDPA mask arguments: top-left causal where queries and keys have the same length (both
    alignments agree there, and cuDNN's FP8 SDPA on Hopper has only this one), else bottom-right."""
    if not causal:
        return {}
    return {"use_causal_mask": True} if same_lengths else {"use_causal_mask_bottom_right": True}


def build_plans(cudnn: Any, graph: Any, label: str) -> None:
    """validate .. build_plans (heuristics A, then FALLBACK); cuDNN's refusal becomes `Unsupported`."""
    try:
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()
    except Exception as exc:  # cudnn raises its own exception types for unsupported graphs
        raise Unsupported(
            f"{label}: cuDNN cannot build this graph: {str(exc).splitlines()[0][:300]}"
        ) from exc


def sdpa_without_stats(fn: Any, **kw: Any) -> Any:
    """Call graph.sdpa/sdpa_fp8 asking for no softmax stats (older frontends spell it is_inference)."""
    try:
        return fn(generate_stats=False, **kw)
    except TypeError:
        return fn(is_inference=True, **kw)


def fp8_scalars(q_descale: float, k_descale: float, v_descale: float) -> dict[str, float]:
    """The FP8 SDPA's six scale inputs (module docstring): P stored as e4m3(P·448), O·(1/v_descale)."""
    return {
        "descale_q": q_descale,
        "descale_k": k_descale,
        "descale_v": v_descale,
        "descale_s": 1.0 / E4M3_MAX,
        "scale_s": E4M3_MAX,
        "scale_o": 1.0 / v_descale,
    }


def _fp8_sdpa(graph: Any, cudnn: Any, scalars: dict[str, float], device: torch.device, **kw: Any) -> tuple:
    """graph.sdpa_fp8 with its scale inputs and amax outputs: (o, the extra variant-pack entries)."""
    fp32 = cudnn.data_type.FLOAT
    ts = {n: graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32) for n in scalars}
    o, _, amax_s, amax_o = sdpa_without_stats(graph.sdpa_fp8, **ts, **kw)
    pack: dict[Any, Tensor] = {}
    for t in (amax_s, amax_o):
        t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(fp32)
        pack[t] = torch.empty(1, 1, 1, 1, dtype=torch.float32, device=device)
    pack.update(
        {ts[n]: torch.full((1, 1, 1, 1), x, dtype=torch.float32, device=device) for n, x in scalars.items()}
    )
    return o, pack


def _executor(cudnn: Any, graph: Any, pack: dict[Any, Tensor], out: Tensor) -> Any:
    """The timed call: execute the built graph on torch's current stream with a preallocated workspace."""
    handle = _handle(cudnn)
    workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device=out.device)
    # The frontend takes only each tensor's data pointer (through DLPack); uint8 views of e4m3 tensors
    # share their storage and export through DLPack on every torch version.
    pack = {t: (x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x) for t, x in pack.items()}

    def call() -> Tensor:
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        graph.execute(pack, workspace, handle=handle)
        return out

    return call


def validated(prepared: Prepared, device: torch.device, label: str) -> Prepared:
    """One call and a synchronise; a built graph that fails to execute is `Unsupported` here."""
    try:
        return validate_once(prepared, device)
    except Exception as exc:  # execution failures of a built graph: report them as unsupported here
        raise Unsupported(f"{label}: first execution failed: {str(exc).splitlines()[0][:300]}") from exc


def _new_graph(cudnn: Any, io_type: Any) -> Any:
    fp32 = cudnn.data_type.FLOAT
    return cudnn.pygraph(
        io_data_type=io_type, intermediate_data_type=fp32, compute_data_type=fp32, handle=_handle(cudnn)
    )


class _Cudnn(Peer):
    family = "cudnn"
    vendor = "nvidia"

    def available(self) -> tuple[bool, str]:
        mod, why = import_status("cudnn")
        if mod is None:
            return False, f"{why} (pip package nvidia-cudnn-frontend)"
        if not torch.cuda.is_available() or cuda_capability() is None:
            return False, "cuDNN SDPA needs an NVIDIA GPU (none visible)"
        try:
            backend = mod.backend_version()
        except Exception as exc:  # a frontend without a loadable cuDNN library
            return False, f"cudnn frontend imported but the cuDNN library did not load: {exc}"
        return True, f"cudnn frontend {getattr(mod, '__version__', '?')}, cuDNN {backend}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        return super().supports(spec, device)

    def _finish(self, cudnn: Any, graph: Any) -> None:
        build_plans(cudnn, graph, self.name)

    def _validated(self, prepared: Prepared, device: torch.device) -> Prepared:
        return validated(prepared, device, self.name)

    def _gqa_or_expand(self, inputs: Inputs, build: Any) -> Prepared:
        """Try native GQA (k/v with heads_kv heads); if cuDNN refuses, expand kv heads (not timed)."""
        try:
            return build(expand=False)
        except Unsupported:
            if inputs.spec.heads_q == inputs.spec.heads_kv:
                raise
        prepared = build(expand=True)
        prepared.notes.append("cuDNN refused GQA here: kv heads expanded before the call (not timed)")
        return prepared


def _expand(t: Tensor, group: int) -> Tensor:
    return t.repeat_interleave(group, dim=2).contiguous() if group > 1 else t


class CudnnBF16(_Cudnn):
    """cuDNN SDPA forward, BF16 in and out."""

    name = "cudnn-bf16"
    precision = "bf16"

    def _prepare(self, inputs: Inputs) -> Prepared:
        return self._gqa_or_expand(inputs, lambda expand: self._build(inputs, expand))

    def _build(self, inputs: Inputs, expand: bool) -> Prepared:
        import cudnn

        spec, group = inputs.spec, inputs.spec.heads_q // inputs.spec.heads_kv
        q = inputs.q
        k, v = (_expand(inputs.k, group), _expand(inputs.v, group)) if expand else (inputs.k, inputs.v)
        out = torch.empty(
            spec.batch, spec.seqlen_q, spec.heads_q, spec.d_v, dtype=torch.bfloat16, device=q.device
        )
        bf16 = cudnn.data_type.BFLOAT16
        graph = _new_graph(cudnn, bf16)
        tq, tk, tv = (
            graph.tensor(name=n, dim=_bhsd(t)[0], stride=_bhsd(t)[1], data_type=bf16)
            for n, t in (("q", q), ("k", k), ("v", v))
        )
        o, _ = sdpa_without_stats(
            graph.sdpa,
            name="sdpa",
            q=tq,
            k=tk,
            v=tv,
            attn_scale=inputs.softmax_scale,
            **causal_kwargs(spec.causal, spec.seqlen_q == spec.seqlen_k),
        )
        o.set_output(True).set_dim(_bhsd(out)[0]).set_stride(_bhsd(out)[1]).set_data_type(bf16)
        self._finish(cudnn, graph)
        call = _executor(cudnn, graph, {tq: q, tk: k, tv: v, o: out}, out)
        return self._validated(Prepared(call, lambda r: r.float()), q.device)


class CudnnFP8(_Cudnn):
    """cuDNN FP8 SDPA forward: e4m3fn in, e4m3fn OUT on Hopper (its only FP8 contract there)."""

    name = "cudnn-fp8"
    precision = "fp8"
    note = "FP8 output (cuDNN offers no BF16 output from FP8 on Hopper); dequantised for accuracy"

    def _prepare(self, inputs: Inputs) -> Prepared:
        return self._gqa_or_expand(inputs, lambda expand: self._build(inputs, expand))

    def _build(self, inputs: Inputs, expand: bool) -> Prepared:
        import cudnn

        spec, group = inputs.spec, inputs.spec.heads_q // inputs.spec.heads_kv
        q = inputs.q8
        k, v = (_expand(inputs.k8, group), _expand(inputs.v8, group)) if expand else (inputs.k8, inputs.v8)
        dev = q.device
        out = torch.empty(
            spec.batch, spec.seqlen_q, spec.heads_q, spec.d_v, dtype=torch.float8_e4m3fn, device=dev
        )
        e4m3 = cudnn.data_type.FP8_E4M3
        graph = _new_graph(cudnn, e4m3)
        tq, tk, tv = (
            graph.tensor(name=n, dim=_bhsd(t)[0], stride=_bhsd(t)[1], data_type=e4m3)
            for n, t in (("q", q), ("k", k), ("v", v))
        )
        o, scales = _fp8_sdpa(
            graph,
            cudnn,
            fp8_scalars(inputs.q_descale, inputs.k_descale, inputs.v_descale),
            dev,
            q=tq,
            k=tk,
            v=tv,
            attn_scale=inputs.softmax_scale,
            name="sdpa_fp8",
            **causal_kwargs(spec.causal, spec.seqlen_q == spec.seqlen_k),
        )
        o.set_output(True).set_dim(_bhsd(out)[0]).set_stride(_bhsd(out)[1]).set_data_type(e4m3)
        self._finish(cudnn, graph)
        call = _executor(cudnn, graph, {tq: q, tk: k, tv: v, o: out, **scales}, out)
        v_descale = inputs.v_descale
        prepared = Prepared(call, lambda r: r.float() * v_descale, ["FP8 output, dequantised by v_descale"])
        return self._validated(prepared, dev)


# ---------------------------------------------------------------- packed batches (zyfa_bench.serving)
VARLEN_LABEL = "cudnn-varlen"


def seq_lens(cu_seqlens: Tensor) -> Tensor:
    """cuDNN's seq_len tensor: each sequence's length, [batch, 1, 1, 1] int32, from cu_seqlens [batch + 1]."""
    return (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int32).reshape(-1, 1, 1, 1).contiguous()


def ragged_offsets(cu_seqlens: Tensor, heads: int, dim: int, backend: int) -> Tensor:
    """cuDNN's ragged offset of a packed [total, heads, dim] buffer: where each sequence starts, counted in
    elements, [batch + 1, 1, 1, 1]; int64 from cuDNN 9.6 (`backend` >= 90600), int32 before."""
    dtype = torch.int64 if backend >= 90600 else torch.int32
    return (cu_seqlens.to(torch.int64) * (heads * dim)).to(dtype).reshape(-1, 1, 1, 1).contiguous()


def thd_layout(batch: int, max_len: int, heads: int, dim: int) -> tuple[list[int], list[int]]:
    """Logical [batch, heads, max_len, dim] dims and strides of a packed [total, heads, dim] buffer (the
    batch stride is never used: the ragged offset says where each sequence starts)."""
    return [batch, heads, max_len, dim], [max_len * heads * dim, dim, heads * dim, 1]


class _GraphTensors:
    """The graph's input tensors and the variant pack that maps each to its buffer, made together."""

    def __init__(self, cudnn: Any, graph: Any) -> None:
        self.cudnn, self.graph, self.pack = cudnn, graph, {}
        self.backend = int(cudnn.backend_version())

    def add(self, name: str, x: Tensor, layout: tuple[list[int], list[int]], data_type: Any) -> Any:
        t = self.graph.tensor(name=name, dim=layout[0], stride=layout[1], data_type=data_type)
        self.pack[t] = x
        return t

    def ints(self, name: str, x: Tensor) -> Any:
        """An int32/int64 tensor (lengths, offsets, page tables) with its own shape and strides."""
        dt = self.cudnn.data_type.INT64 if x.dtype == torch.int64 else self.cudnn.data_type.INT32
        return self.add(name, x, (list(x.shape), list(x.stride())), dt)

    def offsets(self, name: str, cu_seqlens: Tensor, heads: int, dim: int) -> Any:
        return self.ints(name, ragged_offsets(cu_seqlens, heads, dim, self.backend))

    def packed(self, name: str, x: Tensor, cu_seqlens: Tensor, max_len: int, data_type: Any) -> Any:
        """A packed [total, heads, dim] input in THD form: its ragged offsets set."""
        heads, dim = x.shape[1], x.shape[2]
        t = self.add(name, x, thd_layout(cu_seqlens.numel() - 1, max_len, heads, dim), data_type)
        t.set_ragged_offset(self.offsets(f"{name}_offsets", cu_seqlens, heads, dim))
        return t


@dataclass(frozen=True)
class _Lengths:
    """A packed step's sequence boundaries (cu_seqlens), lengths ([b, 1, 1, 1] int32) and maxima."""

    cu_q: Tensor
    cu_k: Tensor
    len_q: Tensor
    len_kv: Tensor
    max_q: int
    max_k: int


def _sdpa_inputs(
    g: _GraphTensors, io: Any, qkv: tuple[Tensor, Tensor, Tensor], n: _Lengths, page_table: Tensor | None
) -> dict[str, Any]:
    """The SDPA's q, k, v, lengths and (with a page table) paged-cache arguments, registered in `g`."""
    q, k, v = qkv
    kw: dict[str, Any] = {"q": g.packed("q", q, n.cu_q, n.max_q, io), "use_padding_mask": True}
    kw.update(seq_len_q=g.ints("seq_len_q", n.len_q), seq_len_kv=g.ints("seq_len_kv", n.len_kv))
    if page_table is None:
        kw.update(k=g.packed("k", k, n.cu_k, n.max_k, io), v=g.packed("v", v, n.cu_k, n.max_k, io))
        return kw
    # The cache [num_pages, page_size, heads_kv, d] seen as [num_pages, heads_kv, page_size, d]: no copy.
    kw.update(k=g.add("k_cache", k, _bhsd(k), io), v=g.add("v_cache", v, _bhsd(v), io))
    table = page_table.to(torch.int32).reshape(page_table.shape[0], 1, -1, 1).contiguous()
    kw.update(
        paged_attention_k_table=g.ints("k_table", table), paged_attention_v_table=g.ints("v_table", table)
    )
    kw["paged_attention_max_seq_len_kv"] = table.shape[2] * k.shape[1]  # cuDNN: pages == ceil(max / page)
    return kw


def varlen_call(
    batch: PackedBatch, descales: tuple[float, float, float] | None, softmax_scale: float | None = None
) -> Prepared:
    """cuDNN's causal SDPA on a packed step (`PackedBatch`), built and validated once (module docstring).

    BF16, or e4m3fn with per-tensor `descales` (q, k, v): the output is then e4m3fn.  Returns the timed
    call (its result: the packed output [total_q, heads_q, d_v]) and the float32 conversion.  Raises
    `Unsupported` for what this cuDNN cannot run, with the reason.
    """
    import cudnn

    q, k, v, page_table = batch.q, batch.k, batch.v, batch.page_table
    cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlens = (
        batch.cu_seqlens_q,
        batch.cu_seqlens_k,
        batch.seqused_k,
        batch.max_seqlens,
    )

    len_q = seq_lens(cu_seqlens_q)
    len_kv = seq_lens(cu_seqlens_k) if page_table is None else seqused_k.to(torch.int32).reshape(-1, 1, 1, 1)
    n = _Lengths(cu_seqlens_q, cu_seqlens_k, len_q, len_kv.contiguous(), *max_seqlens)
    same_lengths = bool(torch.equal(len_q, len_kv))
    cap = cuda_capability()
    if descales is not None and not same_lengths and cap is not None and cap[0] < 10:
        version = getattr(cudnn, "__version__", "?")
        raise Unsupported(
            f"{VARLEN_LABEL}: cuDNN's FP8 SDPA takes a bottom-right causal mask (queries ending with their "
            f"keys, as over a cached prefix) on sm100 and newer only (frontend {version}); this GPU is "
            f"sm{cap[0]}{cap[1]}"
        )
    fp8 = descales is not None
    io = cudnn.data_type.FP8_E4M3 if fp8 else cudnn.data_type.BFLOAT16
    heads_q, d_qk, d_v = q.shape[1], q.shape[2], v.shape[-1]
    out = torch.empty(
        q.shape[0], heads_q, d_v, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16, device=q.device
    )
    g = _GraphTensors(cudnn, _new_graph(cudnn, io))
    kw = _sdpa_inputs(g, io, (q, k, v), n, page_table)
    scale = d_qk**-0.5 if softmax_scale is None else softmax_scale
    kw.update(attn_scale=scale, name="sdpa_varlen", **causal_kwargs(True, same_lengths))
    if fp8:
        o, scales = _fp8_sdpa(g.graph, cudnn, fp8_scalars(*descales), q.device, **kw)
        g.pack.update(scales)
    else:
        o, _ = sdpa_without_stats(g.graph.sdpa, **kw)
    layout = thd_layout(len(len_q), n.max_q, heads_q, d_v)
    o.set_output(True).set_dim(layout[0]).set_stride(layout[1]).set_data_type(io)
    o.set_ragged_offset(g.offsets("o_offsets", cu_seqlens_q, heads_q, d_v))
    g.pack[o] = out
    build_plans(cudnn, g.graph, VARLEN_LABEL)
    call = _executor(cudnn, g.graph, g.pack, out)
    if not fp8:
        return validated(Prepared(call, lambda r: r.float()), q.device, VARLEN_LABEL)
    v_descale = descales[2]
    prepared = Prepared(call, lambda r: r.float() * v_descale, ["FP8 output, dequantised by v_descale"])
    return validated(prepared, q.device, VARLEN_LABEL)
