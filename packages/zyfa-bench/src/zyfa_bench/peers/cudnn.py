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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import Peer, Prepared, Unsupported, cuda_capability, import_status, validate_once
from zyfa_bench.spec import Spec

__all__ = ["CudnnBF16", "CudnnFP8"]

E4M3_MAX = 448.0


def _bhsd(t: Tensor) -> tuple[list[int], list[int]]:
    """Logical [b, h, s, d] dims and strides of a [b, s, h, d] tensor (a transpose view, no copy)."""
    view = t.transpose(1, 2)
    return list(view.shape), list(view.stride())


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

    def _handle(self, cudnn: Any) -> Any:
        if not hasattr(self, "_h"):
            self._h = cudnn.create_handle()
        return self._h

    @staticmethod
    def _causal_kwargs(spec: Spec) -> dict[str, bool]:
        if not spec.causal:
            return {}
        if spec.seqlen_q == spec.seqlen_k:
            return {"use_causal_mask": True}
        return {"use_causal_mask_bottom_right": True}

    def _finish(self, cudnn: Any, graph: Any) -> None:
        try:
            graph.validate()
            graph.build_operation_graph()
            graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            graph.check_support()
            graph.build_plans()
        except Exception as exc:  # cudnn raises its own exception types for unsupported graphs
            raise Unsupported(
                f"{self.name}: cuDNN cannot build this graph: {str(exc).splitlines()[0][:300]}"
            ) from exc

    def _sdpa(self, fn: Any, **kw: Any) -> Any:
        """Call graph.sdpa/sdpa_fp8 asking for no softmax stats (older frontends spell it is_inference)."""
        try:
            return fn(generate_stats=False, **kw)
        except TypeError:
            return fn(is_inference=True, **kw)

    def _validated(self, prepared: Prepared, device: torch.device) -> Prepared:
        try:
            return validate_once(prepared, device)
        except Exception as exc:  # execution failures of a built graph: report them as unsupported here
            raise Unsupported(
                f"{self.name}: first execution failed: {str(exc).splitlines()[0][:300]}"
            ) from exc

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
        handle = self._handle(cudnn)
        graph = cudnn.pygraph(
            io_data_type=cudnn.data_type.BFLOAT16,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=handle,
        )
        tq, tk, tv = (
            graph.tensor(name=n, dim=_bhsd(t)[0], stride=_bhsd(t)[1], data_type=cudnn.data_type.BFLOAT16)
            for n, t in (("q", q), ("k", k), ("v", v))
        )
        o, _ = self._sdpa(
            graph.sdpa,
            name="sdpa",
            q=tq,
            k=tk,
            v=tv,
            attn_scale=inputs.softmax_scale,
            **self._causal_kwargs(spec),
        )
        o.set_output(True).set_dim(_bhsd(out)[0]).set_stride(_bhsd(out)[1]).set_data_type(
            cudnn.data_type.BFLOAT16
        )
        self._finish(cudnn, graph)
        workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device=q.device)
        pack = {tq: q, tk: k, tv: v, o: out}

        def call() -> Tensor:
            cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
            graph.execute(pack, workspace, handle=handle)
            return out

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
        scalars = {
            "descale_q": inputs.q_descale,
            "descale_k": inputs.k_descale,
            "descale_v": inputs.v_descale,
            "descale_s": 1.0 / E4M3_MAX,
            "scale_s": E4M3_MAX,
            "scale_o": 1.0 / inputs.v_descale,
        }
        handle = self._handle(cudnn)
        e4m3, fp32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        graph = cudnn.pygraph(
            io_data_type=e4m3, intermediate_data_type=fp32, compute_data_type=fp32, handle=handle
        )
        tq, tk, tv = (
            graph.tensor(name=n, dim=_bhsd(t)[0], stride=_bhsd(t)[1], data_type=e4m3)
            for n, t in (("q", q), ("k", k), ("v", v))
        )
        ts = {n: graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32) for n in scalars}
        o, _, amax_s, amax_o = self._sdpa(
            graph.sdpa_fp8,
            q=tq,
            k=tk,
            v=tv,
            **ts,
            attn_scale=inputs.softmax_scale,
            name="sdpa_fp8",
            **self._causal_kwargs(spec),
        )
        o.set_output(True).set_dim(_bhsd(out)[0]).set_stride(_bhsd(out)[1]).set_data_type(e4m3)
        amax = {n: torch.empty(1, 1, 1, 1, dtype=torch.float32, device=dev) for n in ("amax_s", "amax_o")}
        for t in (amax_s, amax_o):
            t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(fp32)
        self._finish(cudnn, graph)
        workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device=dev)
        values = {n: torch.full((1, 1, 1, 1), x, dtype=torch.float32, device=dev) for n, x in scalars.items()}
        # The frontend takes only each tensor's data pointer (through DLPack); uint8 views of the e4m3
        # tensors share their storage and export through DLPack on every torch version.
        as_bytes = {t: t.view(torch.uint8) for t in (q, k, v, out)}
        pack = {tq: as_bytes[q], tk: as_bytes[k], tv: as_bytes[v], o: as_bytes[out]}
        pack.update({amax_s: amax["amax_s"], amax_o: amax["amax_o"]})
        pack.update({ts[n]: values[n] for n in scalars})
        v_descale = inputs.v_descale

        def call() -> Tensor:
            cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
            graph.execute(pack, workspace, handle=handle)
            return out

        prepared = Prepared(call, lambda r: r.float() * v_descale, ["FP8 output, dequantised by v_descale"])
        return self._validated(prepared, dev)
