"""Accuracy: ‖out − ref‖/‖ref‖ and max |out − ref| against a float64 reference, two of them.

- vs the DEQUANTISED inputs (x8 · descale, rotated when rotation was on): the implementation's own
  error, what its numerics add on top of the FP8 inputs it was given;
- vs the ORIGINAL BF16 inputs: the error a user sees, input quantisation included.
For BF16 implementations both references are the same.  A pseudo-implementation
"exact-attention-on-fp8-inputs" (float64 attention on the dequantised inputs, compared with the BF16
truth) shows the floor set by input quantisation alone, with and without the Q/K rotation.

The float64 reference here is chunked over query rows and kv heads so that 32K-token problems fit in
GPU memory; it computes the same function as `zyfa.reference.attention_dense_f64` (tests check that).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from zyfa_bench.inputs import Inputs, make_inputs, quantize_inputs
from zyfa_bench.peers.base import Peer
from zyfa_bench.results import failure_reason
from zyfa_bench.spec import Spec, shape_name
from zyfa_bench.workloads import Captured, Workload, describe

__all__ = ["INPUT_FLOOR", "attention_f64", "errors", "run_accuracy"]

INPUT_FLOOR = "exact-attention-on-fp8-inputs"


def attention_f64(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    softmax_scale: float,
    causal: bool = True,
    q_row0: int = 0,
    seqlen_q_total: int | None = None,
    block_rows: int = 512,
) -> Tensor:
    """Float64 softmax attention, flash-attn layout in and out ([batch, rows, heads_q, d_v]).

    q may hold a slice of query rows: rows q_row0 .. q_row0 + q.shape[1] of a problem with
    `seqlen_q_total` rows (default: q.shape[1]); the causal mask is bottom-right aligned for the whole
    problem (row i sees key j iff j <= i + seqlen_k - seqlen_q_total).  Rows seeing no key give 0.
    """
    batch, rows, heads_q, d_qk = q.shape
    seqlen_k, heads_kv, d_v = k.shape[1], k.shape[2], v.shape[3]
    total = rows if seqlen_q_total is None else seqlen_q_total
    group = heads_q // heads_kv
    out = torch.zeros(batch, rows, heads_q, d_v, dtype=torch.float64, device=q.device)
    keys = torch.arange(seqlen_k, device=q.device)
    for b in range(batch):
        for h in range(heads_kv):
            kh = k[b, :, h].double()  # [Sk, d]
            vh = v[b, :, h].double()
            for r0 in range(0, rows, block_rows):
                r1 = min(rows, r0 + block_rows)
                qh = q[b, r0:r1, h * group : (h + 1) * group].double().transpose(0, 1)  # [g, r, d]
                s = torch.matmul(qh, kh.T) * softmax_scale  # [g, r, Sk]
                if causal:
                    limit = torch.arange(q_row0 + r0, q_row0 + r1, device=q.device) + (seqlen_k - total)
                    s = s.masked_fill(keys[None, None, :] > limit[None, :, None], -math.inf)
                m = s.amax(dim=-1, keepdim=True)
                seen = torch.isfinite(m)
                p = torch.exp(s - torch.where(seen, m, 0.0))
                denom = p.sum(dim=-1, keepdim=True)
                o = torch.matmul(p, vh) / torch.where(seen, denom, 1.0)
                out[b, r0:r1, h * group : (h + 1) * group] = torch.where(seen, o, 0.0).transpose(0, 1)
    return out


def errors(out: Tensor, ref: Tensor) -> dict[str, float]:
    """rel_l2 = ‖out − ref‖₂/‖ref‖₂ and max_abs = max |out − ref|, in float64 (NaN if out has NaN)."""
    diff = out.double() - ref.double()
    ref_norm = float(torch.linalg.vector_norm(ref.double()))
    rel = float(torch.linalg.vector_norm(diff)) / ref_norm if ref_norm > 0 else float("nan")
    return {"rel_l2": rel, "max_abs": float(diff.abs().max()) if diff.numel() else 0.0}


@dataclass
class _Refs:
    """References of one problem: the BF16 truth, and per rotation mode the dequantised one."""

    truth: Tensor
    dequant: dict[bool, Tensor]


def run_accuracy(
    peers: list[Peer],
    workloads: list[Workload],
    specs: list[Spec],
    *,
    device: torch.device,
    seeds: Iterable[int],
    rotations: tuple[bool, ...] = (False, True),
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, object]]:
    """Error rows for every (workload, spec, seed, peer[, rotation]).

    Captured workloads use their own shape (`specs` is ignored for them).  BF16 peers are measured once
    per problem (rotation does not apply to them); FP8 peers once per rotation mode.
    """
    rows: list[dict[str, object]] = []
    want_fp8 = any(p.precision == "fp8" for p in peers)
    for workload in workloads:
        problem_specs = [workload.spec()] if isinstance(workload, Captured) else specs
        for spec in problem_specs:
            for seed in seeds:
                rows += _one_problem(
                    peers, workload, spec, seed, device, rotations if want_fp8 else (), progress
                )
    return rows


def _one_problem(
    peers: list[Peer],
    workload: Workload,
    spec: Spec,
    seed: int,
    device: torch.device,
    rotations: tuple[bool, ...],
    progress: Callable[[str], None] | None,
) -> list[dict[str, object]]:
    base = make_inputs(spec, workload, device=device, seed=seed)
    truth = attention_f64(base.q, base.k, base.v, softmax_scale=base.softmax_scale, causal=spec.causal)
    common = {
        "shape": shape_name(spec),
        "workload": workload.name,
        "workload_params": describe(workload),
        "seed": seed,
        **spec.as_dict(),
    }
    rows = []
    for peer in (p for p in peers if p.precision == "bf16"):
        if progress:
            progress(f"{workload.name} {spec.label} {peer.name}")
        rows.append({**common, **_measure(peer, base, truth, truth, spec, device), "rotate": None})
    for rotate in rotations:
        try:
            inputs = quantize_inputs(
                Inputs(spec, base.q, base.k, base.v, base.softmax_scale, meta=base.meta),
                rotate=rotate,
                seed=seed,
            )
        except Exception as exc:  # no zyfa.fp8_quantize: every FP8 row says why
            why = f"FP8 inputs could not be made: {type(exc).__name__}: {exc}"
            for peer in (p for p in peers if p.precision == "fp8"):
                rows.append(
                    {
                        **common,
                        "impl": peer.name,
                        "precision": "fp8",
                        "rotate": rotate,
                        "status": "skipped",
                        "reason": why,
                        "notes": [],
                    }
                )
            continue
        qd, kd, vd = inputs.dequantized()
        ref_dq = attention_f64(qd, kd, vd, softmax_scale=inputs.softmax_scale, causal=spec.causal)
        floor = errors(ref_dq, truth)
        rows.append({**common, **_floor_row(floor), "rotate": rotate})
        for peer in (p for p in peers if p.precision == "fp8"):
            if progress:
                progress(f"{workload.name} {spec.label} {peer.name} rotate={rotate}")
            rows.append({**common, **_measure(peer, inputs, ref_dq, truth, spec, device), "rotate": rotate})
    return rows


def _floor_row(floor: dict[str, float]) -> dict[str, object]:
    return {
        "impl": INPUT_FLOOR,
        "precision": "fp8",
        "status": "ok",
        "reason": "",
        "notes": ["float64 attention on the dequantised inputs: the input-quantisation floor"],
        "rel_l2_vs_dequant": 0.0,
        "max_abs_vs_dequant": 0.0,
        "rel_l2_vs_bf16": floor["rel_l2"],
        "max_abs_vs_bf16": floor["max_abs"],
    }


def _measure(
    peer: Peer, inputs: Inputs, ref_dq: Tensor, truth: Tensor, spec: Spec, device: torch.device
) -> dict[str, object]:
    row: dict[str, object] = {
        "impl": peer.name,
        "precision": peer.precision,
        "notes": [peer.note] if peer.note else [],
    }
    ok, why = peer.available()
    if ok:
        ok, why = peer.supports(spec, device)
    if not ok:
        return {**row, "status": "skipped", "reason": why}
    try:
        prepared = peer.prepare(inputs)
        out = prepared.output()
    except Exception as exc:  # every failure is a row, never the end of the run
        return {**row, "status": "error", "reason": failure_reason(exc)}
    row["notes"] = list(row["notes"]) + prepared.notes
    e_dq, e_true = errors(out, ref_dq), errors(out, truth)
    return {
        **row,
        "status": "ok",
        "reason": "",
        "rel_l2_vs_dequant": e_dq["rel_l2"],
        "max_abs_vs_dequant": e_dq["max_abs"],
        "rel_l2_vs_bf16": e_true["rel_l2"],
        "max_abs_vs_bf16": e_true["max_abs"],
    }
