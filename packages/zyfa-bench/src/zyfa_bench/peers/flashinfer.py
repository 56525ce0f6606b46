"""FlashInfer prefill (`flashinfer-python`): BatchPrefillWithRaggedKVCacheWrapper, BF16.

The batch is handed over as a ragged batch of equal lengths: q, k, v are viewed as
[batch·seqlen, heads, dim] (NHD layout, no copy) with indptr = [0, S, 2S, ...]; `plan` runs in
`prepare`, `run(q, k, v)` is the timed call.  FP8 prefill is not measured: on sm90 it needs a JIT build
of FlashInfer's fa3 backend (minutes, and its prebuilt cubins are ~458 MB), which is outside what
this harness does ("where it runs without a long JIT compile", issue 4).
"""

from __future__ import annotations

import torch

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import Peer, Prepared, Unsupported, cuda_capability, import_status, validate_once
from zyfa_bench.spec import Spec

__all__ = ["FlashInferBF16", "FlashInferFP8"]

WORKSPACE_BYTES = 128 * 1024 * 1024


class FlashInferBF16(Peer):
    """flashinfer.BatchPrefillWithRaggedKVCacheWrapper on BF16 inputs."""

    name = "flashinfer-bf16"
    family = "flashinfer"
    precision = "bf16"
    vendor = "nvidia"

    def available(self) -> tuple[bool, str]:
        mod, why = import_status("flashinfer")
        if mod is None:
            return False, f"{why} (pip package flashinfer-python)"
        if cuda_capability() is None:
            return False, "FlashInfer needs an NVIDIA GPU (none visible)"
        return True, f"flashinfer {getattr(mod, '__version__', '?')}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        if spec.seqlen_q != spec.seqlen_k:
            return False, "adapter handles seqlen_q == seqlen_k only (prefill without cache)"
        return super().supports(spec, device)

    def _prepare(self, inputs: Inputs) -> Prepared:
        import flashinfer

        s = inputs.spec
        dev = inputs.device
        q = inputs.q.reshape(s.batch * s.seqlen_q, s.heads_q, s.d_qk)
        k = inputs.k.reshape(s.batch * s.seqlen_k, s.heads_kv, s.d_qk)
        v = inputs.v.reshape(s.batch * s.seqlen_k, s.heads_kv, s.d_v)
        qo_indptr = torch.arange(0, s.batch + 1, dtype=torch.int32, device=dev) * s.seqlen_q
        kv_indptr = torch.arange(0, s.batch + 1, dtype=torch.int32, device=dev) * s.seqlen_k
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD")
        try:
            wrapper.plan(
                qo_indptr,
                kv_indptr,
                s.heads_q,
                s.heads_kv,
                s.d_qk,
                head_dim_vo=s.d_v,
                causal=s.causal,
                sm_scale=inputs.softmax_scale,
                q_data_type=torch.bfloat16,
                kv_data_type=torch.bfloat16,
            )
        except Exception as exc:  # unsupported head dims raise from the planner
            raise Unsupported(f"{self.name}: plan failed: {str(exc).splitlines()[0][:300]}") from exc
        b, sq, hq, dv = s.batch, s.seqlen_q, s.heads_q, s.d_v
        prepared = Prepared(lambda: wrapper.run(q, k, v), lambda r: r.reshape(b, sq, hq, dv).float())
        return validate_once(prepared, dev)


class FlashInferFP8(Peer):
    """Placeholder that explains why FlashInfer's FP8 prefill is not measured (needs a JIT build)."""

    name = "flashinfer-fp8"
    family = "flashinfer"
    precision = "fp8"
    vendor = "nvidia"

    def available(self) -> tuple[bool, str]:
        return False, "FlashInfer FP8 prefill needs a JIT build of its fa3 backend on sm90: not measured"

    def _prepare(self, inputs: Inputs) -> Prepared:
        raise Unsupported(self.available()[1])
