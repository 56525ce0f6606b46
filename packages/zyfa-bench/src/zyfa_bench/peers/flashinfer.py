"""FlashInfer prefill (`flashinfer-python`): BatchPrefillWithRaggedKVCacheWrapper, BF16.

The batch is handed over as a ragged batch of equal lengths: q, k, v are viewed as
[batch·seqlen, heads, dim] (NHD layout, no copy) with indptr = [0, S, 2S, ...]; `plan` runs in
`prepare`, `run(q, k, v)` is the timed call.  Checked against 0.7.4: `plan(qo_indptr, kv_indptr,
num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=, causal=, sm_scale=, q_data_type=,
kv_data_type=, o_data_type=)`, `run(q, k, v, q_scale=, k_scale=, v_scale=)`; on sm90 `auto` picks the
fa3 backend for d 64/128/256 and 192/128 (FP8 needs FP8 q and k/v, output BF16).

FlashInfer ships no kernels in its wheel: each variant is a JIT module (nvcc + ninja at first use) or
comes from flashinfer-jit-cache / flashinfer-cubin (~458 MB, too big to carry).  A fa3 prefill module is
10 nvcc translation units (paged + ragged kernels × 4 mask modes, plan/run, binding); measured here
(nvcc 13.0, sm_90a, 2 cores) ~170 s per unit per core, so the four variants of the sweep (BF16 and FP8,
d128 and 192/128) are ~57 core-minutes: not built here, and not on the H200 inside the run either
(see docs/benchmarks/index.md, "Peers").  So that a missing module fails in `prepare` instead of
starting a minutes-long build in the timed sweep, the adapter sets FLASHINFER_DISABLE_JIT=1 unless
ZYFA_FLASHINFER_JIT=1 is set; a module found precompiled (flashinfer/data/aot/<uri>/<uri>.so, or a
jit-cache package) is loaded without building.
"""

from __future__ import annotations

import os

import torch

from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import Peer, Prepared, Unsupported, cuda_capability, import_status, validate_once
from zyfa_bench.spec import Spec

__all__ = ["FlashInferBF16", "FlashInferFP8"]

WORKSPACE_BYTES = 128 * 1024 * 1024
NO_JIT_REASON = (
    "FlashInfer {what} on sm90 needs its fa3 JIT module, which is not precompiled: a build is "
    "10 nvcc units, ~170 s each per core, not done inside the run (ZYFA_FLASHINFER_JIT=1 allows it)"
)


def _no_long_jit() -> None:
    """Make a missing JIT module raise (MissingJITCacheError) instead of compiling for minutes."""
    if os.environ.get("ZYFA_FLASHINFER_JIT") != "1":
        os.environ.setdefault("FLASHINFER_DISABLE_JIT", "1")


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
        _no_long_jit()
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
        except Exception as exc:  # unsupported head dims raise from the planner, a missing module too
            if type(exc).__name__ == "MissingJITCacheError":
                what = f"BF16 prefill d{s.d_qk}/{s.d_v}"
                raise Unsupported(NO_JIT_REASON.format(what=what)) from exc
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
        return False, (
            "FlashInfer FP8 prefill on sm90 is a fa3 JIT module (10 nvcc units, ~170 s each per core) "
            "that is not precompiled for the run and too slow to build inside it: not measured"
        )

    def _prepare(self, inputs: Inputs) -> Prepared:
        raise Unsupported(self.available()[1])
