"""A serving engine's prefill step: many prompts of mixed lengths packed along one token dimension.

One step holds `prompts` prompts whose new-token counts come from a long-tailed (log-normal) draw summing to
`tokens`. Without a prefix, each prompt attends causally to its own tokens (packed k, v by cu_seqlens).
With a shared prefix of `prefix` tokens (a system prompt in a prefix cache), every prompt's keys are that
prefix followed by its own tokens, all read from a paged KV cache through a page table: the prefix pages
are shared by every row of the table, and each prompt's new tokens sit in pages of its own (chunked prefill:
len_q = new tokens <= len_k = prefix + new tokens, bottom-right causal).

The implementations compared on the same step, all prepared first, then timed together in interleaved rounds
(`zyfa_bench.timing.interleaved_call_times`):
- "zyfa-varlen": `zyfa.flash_attn_varlen_func` (cu_seqlens; page_table and seqused_k with a prefix);
- "fa3-varlen": FlashAttention-3 (`fa3_fwd_interface`, PyPI fa3-fwd): `flash_attn_varlen_func` without a
  prefix, `flash_attn_with_kvcache` (page_table, cache_seqlens, cu_seqlens_q) with one, as serving
  engines call it; FP8 descales of shape (batch, heads_kv);
- "fa4-varlen": FlashAttention-4 (`flash_attn.cute.flash_attn_varlen_func`, PyPI flash-attn-4): cu_seqlens,
  or page_table with seqused_k; BF16 only on sm90 (its FP8 needs sm100);
- "cudnn-varlen": cuDNN's SDPA (nvidia-cudnn-frontend) in THD form: ragged offsets and sequence lengths
  built from cu_seqlens, the page table as its paged K/V tables (`zyfa_bench.peers.cudnn.varlen_call`); FP8
  output from FP8 (its only FP8 contract on Hopper), and FP8 over a prefix needs sm100 (a skipped row);
- "zyfa-varlen-baseline" (with `baseline_kernels`): "zyfa-varlen" on another kernel build's code objects, the
  "before" of a kernel change timed in the same run;
- "zyfa-dense": `zyfa.flash_attn_func` on a dense batch of the same prompts count with every prompt at the
  mean length (and the prefix copied into each), the same token count: the dense speed the packed call is
  measured against.
TFLOP/s count each prompt's visible (query, key) pairs (`zyfa_bench.flops.packed_flops`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor

from zyfa_bench.argtypes import holds_kernel_build
from zyfa_bench.flops import attention_flops, packed_flops
from zyfa_bench.peers.base import PackedBatch, Peer, Unsupported
from zyfa_bench.results import failure_reason
from zyfa_bench.spec import Spec

__all__ = [
    "BASELINE",
    "IMPLEMENTATIONS",
    "ServingStep",
    "StepInputs",
    "build_step",
    "format_table",
    "long_tailed_lengths",
    "measure",
    "prepare",
    "step_flops",
]

IMPLEMENTATIONS = ("zyfa-varlen", "fa3-varlen", "fa4-varlen", "cudnn-varlen", "zyfa-dense")


def long_tailed_lengths(count: int, total: int, *, seed: int, minimum: int = 1) -> list[int]:
    """`count` lengths >= `minimum` summing to `total`, from a log-normal draw (sigma 1.2): a few long prompts
    and many short ones, as a serving step's prompts are. The rounding's remainder goes to the longest."""
    if count < 1 or total < minimum * count:
        raise ValueError(f"need count >= 1 and total >= minimum * count, got {count}, {total}, {minimum}")
    g = torch.Generator().manual_seed(seed)
    weights = torch.exp(torch.randn(count, generator=g, dtype=torch.float64) * 1.2)
    spare = total - minimum * count
    lens = [minimum + int(w) for w in (weights / weights.sum() * spare).floor()]
    lens[int(torch.argmax(weights))] += total - sum(lens)
    return lens


@dataclass(frozen=True)
class ServingStep:
    """One prefill step: prompt lengths (new tokens), the shared prefix, page size and head shape."""

    lens: tuple[int, ...]
    prefix: int
    page_size: int
    heads_q: int
    heads_kv: int
    d_qk: int
    d_v: int

    @property
    def lens_k(self) -> list[int]:
        """Keys of each prompt: the prefix, then its own tokens."""
        return [self.prefix + n for n in self.lens]

    @property
    def max_seqlens(self) -> tuple[int, int]:
        """(max_seqlen_q, max_seqlen_k) of the packed step: its longest prompt's new tokens and keys."""
        return max(self.lens), max(self.lens_k)

    def as_dict(self) -> dict[str, object]:
        """The step's parameters for a JSON row (lengths summarised, the full list kept)."""
        return {**asdict(self), "lens": list(self.lens), "prompts": len(self.lens), "tokens": sum(self.lens)}


def step_flops(step: ServingStep) -> float:
    """FLOPs of the packed step (causal per prompt, bottom-right over its prefix)."""
    return packed_flops(list(step.lens), step.lens_k, step.heads_q, step.d_qk, step.d_v, True)


@dataclass(frozen=True)
class StepInputs(PackedBatch):
    """The tensors of one step (a `PackedBatch`: packed q, and packed k / v or a paged cache with its
    table) and, FP8, the per-tensor descales (q, k, v)."""

    descales: tuple[float, float, float] | None = None


def _offsets(lens: list[int], device: torch.device) -> Tensor:
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device)


def _paged(step: ServingStep, k: Tensor, v: Tensor, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """k, v (the prefix's rows, then each prompt's rows) into a cache of shuffled pages and its table."""
    page = step.page_size
    if step.prefix % page:
        raise ValueError(f"the prefix ({step.prefix}) must fill whole pages of {page} keys")
    prefix_pages = step.prefix // page
    own = [math.ceil(n / page) for n in step.lens]
    num_pages = prefix_pages + sum(own)
    order = torch.randperm(num_pages, generator=g).tolist()
    shape = (num_pages, page, *k.shape[1:])
    k_cache = torch.zeros(shape, dtype=k.dtype, device=k.device)
    v_cache = torch.zeros((num_pages, page, *v.shape[1:]), dtype=v.dtype, device=v.device)
    table = torch.zeros((len(step.lens), prefix_pages + max(own)), dtype=torch.int32)
    rows, used = 0, 0
    for b, count in enumerate([prefix_pages, *own]):
        n = step.prefix if b == 0 else step.lens[b - 1]
        for p in range(count):
            cache_page, take = order[used], min(page, n - p * page)
            k_cache[cache_page, :take] = k[rows + p * page : rows + p * page + take]
            v_cache[cache_page, :take] = v[rows + p * page : rows + p * page + take]
            if b == 0:
                table[:, p] = cache_page
            else:
                table[b - 1, prefix_pages + p] = cache_page
            used += 1
        rows += n
    return k_cache, v_cache, table.to(k.device)


def build_step(step: ServingStep, *, device: torch.device, precision: str, seed: int) -> StepInputs:
    """Gaussian inputs of one step (bf16, or e4m3fn with per-tensor power-of-two descales)."""
    g = torch.Generator().manual_seed(seed)
    total_q = sum(step.lens)
    rows_k = step.prefix + total_q
    q = torch.randn(total_q, step.heads_q, step.d_qk, generator=g)
    k = torch.randn(rows_k, step.heads_kv, step.d_qk, generator=g)
    v = torch.randn(rows_k, step.heads_kv, step.d_v, generator=g)
    q, k, v = (x.to(device=device, dtype=torch.bfloat16) for x in (q, k, v))
    descales = None
    if precision == "fp8":
        import zyfa

        quantised = [zyfa.fp8_quantize(x, as_float=True) for x in (q, k, v)]
        (q, dq), (k, dk), (v, dv) = quantised
        descales = (float(dq), float(dk), float(dv))
    cu_q = _offsets(list(step.lens), device)
    seqused = torch.tensor(step.lens_k, dtype=torch.int32, device=device)
    if step.prefix == 0:
        return StepInputs(
            q, k, v, cu_q, _offsets(step.lens_k, device), seqused, None, step.max_seqlens, descales
        )
    k_cache, v_cache, table = _paged(step, k, v, g)
    return StepInputs(
        q, k_cache, v_cache, cu_q, _offsets(step.lens_k, device), seqused, table, step.max_seqlens, descales
    )


def zyfa_varlen_call(step: ServingStep, x: StepInputs, **extra: object) -> Callable[[], object]:
    """`zyfa.flash_attn_varlen_func` on the step's inputs (packed, or paged through its table; FP8 with the
    inputs' descales), causal, with `extra` keyword arguments (e.g. return_attn_probs=True)."""
    import zyfa

    kw: dict[str, object] = {"causal": True, **extra}
    if x.descales is not None:
        kw.update(q_descale=x.descales[0], k_descale=x.descales[1], v_descale=x.descales[2])
    if x.page_table is not None:  # the key counts come from seqused_k, the keys through the table
        kw.update(seqused_k=x.seqused_k, page_table=x.page_table)
    cu_k = x.cu_seqlens_k if x.page_table is None else None
    max_q, max_k = step.max_seqlens
    return lambda: zyfa.flash_attn_varlen_func(x.q, x.k, x.v, x.cu_seqlens_q, cu_k, max_q, max_k, **kw)


def _fa3_varlen(step: ServingStep, x: StepInputs) -> Callable[[], object]:
    from zyfa_bench.peers.fa3 import varlen_call

    return varlen_call(x, x.descales, step.heads_kv)


def _fa4_varlen(step: ServingStep, x: StepInputs) -> Callable[[], object]:
    from zyfa_bench.peers.fa4 import varlen_call

    return varlen_call(x)


def _cudnn_varlen(step: ServingStep, x: StepInputs) -> Callable[[], object]:
    from zyfa_bench.peers.cudnn import varlen_call

    return varlen_call(x, x.descales).call


def dense_spec(step: ServingStep) -> Spec:
    """The dense batch of the same token count: every prompt at the mean length, after the prefix."""
    mean = max(1, round(sum(step.lens) / len(step.lens)))
    return Spec(len(step.lens), mean, step.prefix + mean, step.heads_q, step.heads_kv, step.d_qk, step.d_v)


def _zyfa_dense(step: ServingStep, x: StepInputs) -> Callable[[], object]:
    import zyfa

    spec = dense_spec(step)
    g = torch.Generator().manual_seed(1)
    shapes = [
        (spec.batch, spec.seqlen_q, spec.heads_q, spec.d_qk),
        (spec.batch, spec.seqlen_k, spec.heads_kv, spec.d_qk),
        (spec.batch, spec.seqlen_k, spec.heads_kv, spec.d_v),
    ]
    q, k, v = (torch.randn(s, generator=g).to(device=x.q.device, dtype=torch.bfloat16) for s in shapes)
    kw: dict[str, object] = {"causal": True}
    if x.descales is not None:
        (q, dq), (k, dk), (v, dv) = (zyfa.fp8_quantize(t, as_float=True) for t in (q, k, v))
        kw.update(q_descale=dq, k_descale=dk, v_descale=dv)
    return lambda: zyfa.flash_attn_func(q, k, v, **kw)


_BUILDERS: dict[str, Callable[[ServingStep, StepInputs], Callable[[], object]]] = {
    "zyfa-varlen": zyfa_varlen_call,
    "fa3-varlen": _fa3_varlen,
    "fa4-varlen": _fa4_varlen,
    "cudnn-varlen": _cudnn_varlen,
    "zyfa-dense": _zyfa_dense,
}


def prepare(impl: str, step: ServingStep, inputs: StepInputs) -> tuple[Callable[[], object], float]:
    """The timed call of `impl` on this step and the FLOPs it does (the dense batch's for zyfa-dense)."""
    if impl not in _BUILDERS:
        raise ValueError(f"unknown serving implementation {impl!r}; known: {', '.join(IMPLEMENTATIONS)}")
    flops = attention_flops(dense_spec(step)) if impl == "zyfa-dense" else step_flops(step)
    return _BUILDERS[impl](step, inputs), flops


def _available(impl: str, device: torch.device, precision: str) -> str:
    """An empty string when `impl` can run on `device` in `precision`, else why not: the peers' own checks
    (package, GPU), and FlashAttention-4's FP8 being sm100-only."""
    if impl not in _PEERS:
        return ""
    if impl == "fa4-varlen" and precision == "fp8":
        return "FlashAttention-4 takes FP8 inputs on sm100 only"
    if device.type != "cuda":
        return f"{impl} needs an NVIDIA GPU"
    ok, why = _PEERS[impl]().available()
    return "" if ok else why


def _fa3() -> Peer:
    from zyfa_bench.peers.fa3 import FA3BF16

    return FA3BF16()


def _fa4() -> Peer:
    from zyfa_bench.peers.fa4 import FA4BF16

    return FA4BF16()


def _cudnn() -> Peer:
    from zyfa_bench.peers.cudnn import CudnnBF16

    return CudnnBF16()


# The peer whose `available()` (package, library, GPU) decides whether each library's row can run.
_PEERS: dict[str, Callable[[], Peer]] = {"fa3-varlen": _fa3, "fa4-varlen": _fa4, "cudnn-varlen": _cudnn}

# What a row's figure means beyond the table's columns.
_NOTES = {("cudnn-varlen", "fp8"): "FP8 output: cuDNN gives BF16 output from FP8 on sm100 only"}


BASELINE = "zyfa-varlen-baseline"


def _with_baseline(impls: list[str], baseline_kernels: str | None) -> list[str]:
    """`impls`, with "zyfa-varlen-baseline" right after "zyfa-varlen" when a baseline build is given."""
    if baseline_kernels is None:
        return list(impls)
    return [name for impl in impls for name in ((impl, BASELINE) if impl == "zyfa-varlen" else (impl,))]


def measure(
    step: ServingStep,
    impls: list[str],
    *,
    device: torch.device,
    precision: str,
    seed: int = 0,
    warmup: int = 3,
    repeats: int = 20,
    rounds: int = 3,
    baseline_kernels: str | None = None,
) -> list[dict[str, object]]:
    """One row per implementation: ms (median), TFLOP/s, or the reason it was skipped or failed. Every
    implementation is prepared first, then all are timed in `rounds` interleaved rounds
    (`zyfa_bench.timing.interleaved_call_times`). With `baseline_kernels` (a kernel build's directory, its
    manifest.json checked first), "zyfa-varlen" is also timed on that build as "zyfa-varlen-baseline",
    next to it in the rounds' order."""
    from zyfa_bench.peers.zyfa import on_kernels
    from zyfa_bench.timing import interleaved_call_times, summarise_runs

    if baseline_kernels is not None:
        baseline_kernels = str(Path(baseline_kernels).resolve())
        if not holds_kernel_build(baseline_kernels):
            raise ValueError(f"--baseline-kernels {baseline_kernels} holds no manifest.json")
    inputs = build_step(step, device=device, precision=precision, seed=seed)
    rows: list[dict[str, object]] = []
    ready: list[tuple[int, Callable[[], object], float]] = []  # (row index, call, flops)
    for impl in _with_baseline(impls, baseline_kernels):
        row: dict[str, object] = {"impl": impl, "precision": precision, "step": step.as_dict()}
        why = _available(impl, device, precision)
        if why:
            rows.append({**row, "status": "skipped", "reason": why})
            continue
        try:
            if impl == BASELINE and baseline_kernels is not None:
                call, flops = prepare("zyfa-varlen", step, inputs)
                call = on_kernels(baseline_kernels, call)
                row["kernels"] = baseline_kernels
            else:
                call, flops = prepare(impl, step, inputs)
        except Exception as exc:
            rows.append({**row, **_not_measured(exc)})
            continue
        ready.append((len(rows), call, flops))
        rows.append(row)
    results = interleaved_call_times(
        [[call] for _, call, _ in ready], device=device, warmup=warmup, repeats=repeats, rounds=rounds
    )
    for (at, _, flops), result in zip(ready, results, strict=True):
        row = rows[at]
        if isinstance(result, Exception):
            rows[at] = {**row, **_not_measured(result)}
            continue
        timing = summarise_runs(result)
        tflops = flops / (timing.median_ms * 1e-3) / 1e12
        rows[at] = {**row, "status": "ok", "flops": flops, "timing": asdict(timing), "tflops": tflops}
        if (row["impl"], precision) in _NOTES:
            rows[at]["note"] = _NOTES[row["impl"], precision]
    return rows


def _not_measured(exc: Exception) -> dict[str, object]:
    """The status and reason of a row whose preparation or timing raised: a documented limit of the peer on
    this step (`Unsupported`) is a skipped row, any other exception a failed one."""
    if isinstance(exc, Unsupported):
        return {"status": "skipped", "reason": str(exc)}
    return {"status": "failed", "reason": failure_reason(exc)}


def format_table(rows: list[dict[str, object]]) -> str:
    """A plain-text table: one line per row (prompts, tokens, prefix, shape, precision, impl, ms, TFLOP/s)."""
    lines = [
        f"{'impl':20} {'prec':5} {'shape':14} {'prompts':>7} {'tokens':>7} {'prefix':>6} {'ms':>9} "
        f"{'TFLOP/s':>8}"
    ]
    for row in rows:
        step = row["step"]
        assert isinstance(step, dict)
        shape = f"{step['heads_q']}/{step['heads_kv']} d{step['d_qk']}/{step['d_v']}"
        head = (
            f"{row['impl']!s:20} {row['precision']!s:5} {shape:14} {step['prompts']:>7} {step['tokens']:>7}"
        )
        head += f" {step['prefix']:>6}"
        if row["status"] != "ok":
            lines.append(f"{head} {row['status']}: {row['reason']}")
            continue
        timing = row["timing"]
        assert isinstance(timing, dict)
        note = f"  ({row['note']})" if "note" in row else ""
        lines.append(f"{head} {timing['median_ms']:9.3f} {row['tflops']:8.1f}{note}")
    return "\n".join(lines)
