"""Where q, k, v come from: Gaussian, real-model-like synthetic, or activations captured from a real model.

All generators return BF16 tensors in flash-attn layout ([batch, seqlen, heads, head_dim]) on the
requested device, drawn from a `torch.Generator` seeded explicitly, so a row of results names the exact
inputs it was measured on.

"Real-model-like" (`ModelLike`) reproduces, on purpose and with every knob documented below, the
structure of post-RoPE attention inputs of real LLMs that makes FP8 attention hard:
- outlier channels in K: a few head-dim channels carry a large offset shared by all tokens (LLaMA- and
  Mistral-family keys show such "massive" channels; per-tensor FP8 scales are then set by them, and the
  other channels lose resolution);
- attention sinks: the first tokens have keys that every query scores highly (queries share a common
  direction and the sink keys point along it), so a large share of each row's probability mass lands
  on them, while their values are small;
- massive activations: the sink keys' large norm is concentrated in a few channels, so they also set
  K's amax;
- RoPE: q and k are rotated position-wise (HF "rotate half" convention) after the structure is added,
  as the tensors attention sees are post-RoPE.  Outlier and sink channels sit in the low-frequency half
  of each rotary pair range, where the rotation is slow, as observed in real models.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from zyfa_bench.spec import Spec

__all__ = [
    "Captured",
    "Gaussian",
    "ModelLike",
    "Workload",
    "apply_rope",
    "describe",
    "load_captured",
    "parse_workload",
]


@dataclass(frozen=True)
class Gaussian:
    """q, k, v i.i.d. N(0, std²)."""

    std: float = 1.0
    name: str = "gaussian"

    def generate(self, spec: Spec, *, device: torch.device, seed: int) -> tuple[Tensor, Tensor, Tensor]:
        """Draw q, k, v for `spec` (bf16, flash-attn layout)."""
        gen = torch.Generator(device=device).manual_seed(seed)
        q = _randn((spec.batch, spec.seqlen_q, spec.heads_q, spec.d_qk), gen, device) * self.std
        k = _randn((spec.batch, spec.seqlen_k, spec.heads_kv, spec.d_qk), gen, device) * self.std
        v = _randn((spec.batch, spec.seqlen_k, spec.heads_kv, spec.d_v), gen, device) * self.std
        return q.bfloat16(), k.bfloat16(), v.bfloat16()

    def params(self) -> dict[str, float | str]:
        """The generator's parameters (recorded in result rows)."""
        return asdict(self)


@dataclass(frozen=True)
class ModelLike:
    """Synthetic post-RoPE q, k, v with outlier channels, attention sinks, massive activations and RoPE.

    Attributes (std units are those of the Gaussian base, N(0, 1)):
        k_outlier_channels: channels of K (per kv head) with a shared offset.  Real keys show a handful.
        k_outlier_magnitude: that offset, in stds, with a random sign per (head, channel).  At 12 the
            outlier channels dominate amax(K) and |k| of ordinary tokens.
        sink_tokens: the first `sink_tokens` positions are attention sinks.
        sink_logit: scaled score q·k_sink·softmax_scale a typical query gives a sink (natural-log units);
            8 puts roughly half of a row's mass on the sink for rows a few thousand keys long
            (exp(8) ≈ 3000).
        query_bias: norm, in stds, of the direction all queries share (the one sink keys align with).
            The sink keys' norm is sink_logit / (softmax_scale · query_bias): ~45 stds at d = 128 with
            the defaults, about 3x the outlier channels.
        massive_channels: channels the shared query direction and hence the sink keys live in; the sink
            keys' norm concentrated there is the "massive activation" that sets amax(K).
        sink_value_scale: values of sink tokens are multiplied by this (real sinks carry little).
        rope_theta: RoPE base; 1e6 as in Qwen3 and Mistral (v0.2 on).  With 1e4 (Llama-2) the slowest
            pair turns ~2 rad over 16K positions, which would rotate the sinks away from late queries.
        rope_dims: how many trailing head dims of q/k are rotated.  None: all of them, except for
            d_qk = 192, taken as DeepSeek's MLA layout (128 unrotated + 64 rotated dims).
        std: std of the Gaussian base of q, k and v.
    """

    k_outlier_channels: int = 4
    k_outlier_magnitude: float = 12.0
    sink_tokens: int = 1
    sink_logit: float = 8.0
    query_bias: float = 2.0
    massive_channels: int = 1
    sink_value_scale: float = 0.1
    rope_theta: float = 1e6
    rope_dims: int | None = None
    std: float = 1.0
    name: str = field(default="model-like")

    def generate(self, spec: Spec, *, device: torch.device, seed: int) -> tuple[Tensor, Tensor, Tensor]:
        """Draw q, k, v for `spec` (bf16, flash-attn layout), post-RoPE."""
        gen = torch.Generator(device=device).manual_seed(seed)
        q = _randn((spec.batch, spec.seqlen_q, spec.heads_q, spec.d_qk), gen, device) * self.std
        k = _randn((spec.batch, spec.seqlen_k, spec.heads_kv, spec.d_qk), gen, device) * self.std
        v = _randn((spec.batch, spec.seqlen_k, spec.heads_kv, spec.d_v), gen, device) * self.std
        rope_dims = self._rope_dims(spec.d_qk)
        slow = _slow_channels(spec.d_qk, rope_dims)
        massive = slow[: self.massive_channels]
        outl = slow[self.massive_channels : self.massive_channels + self.k_outlier_channels]
        self._add_k_outliers(k, outl, gen)
        self._add_sinks(q, k, v, massive, gen, spec)
        positions = torch.arange(spec.seqlen_k, device=device)
        q = apply_rope(q, positions[spec.seqlen_k - spec.seqlen_q :], self.rope_theta, rope_dims)
        k = apply_rope(k, positions, self.rope_theta, rope_dims)
        return q.bfloat16(), k.bfloat16(), v.bfloat16()

    def _rope_dims(self, d_qk: int) -> int:
        if self.rope_dims is not None:
            return min(self.rope_dims, d_qk)
        return 64 if d_qk == 192 else d_qk

    def _add_k_outliers(self, k: Tensor, channels: list[int], gen: torch.Generator) -> None:
        if not channels:
            return
        heads = k.shape[2]
        signs = torch.randint(0, 2, (heads, len(channels)), generator=gen, device=k.device).float() * 2 - 1
        k[..., channels] += self.k_outlier_magnitude * self.std * signs

    def _add_sinks(
        self, q: Tensor, k: Tensor, v: Tensor, channels: list[int], gen: torch.Generator, spec: Spec
    ) -> None:
        n_sink = min(self.sink_tokens, spec.seqlen_k)
        if n_sink == 0 or not channels:
            return
        # u: unit direction per kv head in `channels`; all queries of the group get query_bias·u added.
        u = torch.zeros(spec.heads_kv, spec.d_qk, device=q.device)
        u[:, channels] = torch.randn(spec.heads_kv, len(channels), generator=gen, device=q.device)
        u = u / u.norm(dim=-1, keepdim=True)
        group = spec.heads_q // spec.heads_kv
        q += self.query_bias * self.std * u.repeat_interleave(group, dim=0)
        # Sink key c·u with softmax_scale·(query_bias·std)·c = sink_logit: a typical query scores the sink
        # at sink_logit; the norm c (tens of stds) sits in `channels`: the massive activations.
        # The sink keys keep a tenth of their Gaussian part, so they are not all identical.
        c = self.sink_logit / (spec.softmax_scale * self.query_bias * self.std)
        k[:, :n_sink] = k[:, :n_sink] * 0.1 + c * u
        v[:, :n_sink] *= self.sink_value_scale

    def params(self) -> dict[str, float | int | str | None]:
        """The generator's parameters (recorded in result rows)."""
        return asdict(self)


def _randn(shape: tuple[int, ...], gen: torch.Generator, device: torch.device) -> Tensor:
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32)


def _slow_channels(d: int, rope_dims: int) -> list[int]:
    """Head-dim channels ordered from the slowest-rotating RoPE frequency down.

    With the rotate-half convention on the last `rope_dims` dims, pair (j, j + rope_dims/2) turns at
    theta^(-2j/rope_dims): larger j is slower.  Unrotated leading dims (d - rope_dims) come first: they
    never rotate.
    """
    lead = list(range(d - rope_dims))
    half = rope_dims // 2
    base = d - rope_dims
    rotated = []
    for j in reversed(range(half)):
        rotated += [base + j, base + j + half]
    return lead + rotated


def apply_rope(x: Tensor, positions: Tensor, theta: float, rope_dims: int) -> Tensor:
    """Rotary embedding on the last `rope_dims` dims of x [batch, seqlen, heads, d] ("rotate half").

    Position p and pair (j, j + rope_dims/2) turn by angle p·theta^(-2j/rope_dims).  Returns float32.
    """
    if rope_dims == 0:
        return x
    if rope_dims % 2:
        raise ValueError(f"rope_dims must be even, got {rope_dims}")
    d = x.shape[-1]
    half = rope_dims // 2
    inv_freq = theta ** (-torch.arange(half, device=x.device, dtype=torch.float64) * 2.0 / rope_dims)
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cos(ang).float()[None, :, None, :]
    sin = torch.sin(ang).float()[None, :, None, :]
    x = x.float()
    lead, a, b = x[..., : d - rope_dims], x[..., d - rope_dims : d - half], x[..., d - half :]
    return torch.cat([lead, a * cos - b * sin, b * cos + a * sin], dim=-1)


@dataclass(frozen=True)
class Captured:
    """q, k, v of one layer captured from a real model (see `zyfa_bench.capture`)."""

    path: str
    layer: int
    name: str = "captured"

    def load(self, *, device: torch.device) -> tuple[Tensor, Tensor, Tensor, dict[str, str]]:
        """Return (q, k, v, metadata) of this layer, bf16 flash-attn layout, on `device`."""
        from safetensors.torch import load_file  # lazy: only captured workloads need safetensors

        tensors = load_file(self.path)
        meta = _read_metadata(self.path)
        key = f"layers.{self.layer}"
        try:
            q, k, v = (tensors[f"{key}.{n}"] for n in ("q", "k", "v"))
        except KeyError as exc:
            have = sorted({n.rsplit(".", 1)[0] for n in tensors})
            raise KeyError(f"{self.path} has no {key}.q/k/v; it holds {have}") from exc
        return q.to(device).bfloat16(), k.to(device).bfloat16(), v.to(device).bfloat16(), meta

    def spec(self) -> Spec:
        """The Spec of the stored tensors (read from the file, without loading them)."""
        meta = _read_metadata(self.path)
        shapes = json.loads(meta["shapes"])[str(self.layer)]
        b, sq, hq, dqk = shapes["q"]
        _, sk, hkv, dv = shapes["v"]
        return Spec(b, sq, sk, hq, hkv, dqk, dv, causal=True)

    def params(self) -> dict[str, str | int]:
        """Where the tensors came from (recorded in result rows)."""
        return {"name": self.name, "path": self.path, "layer": self.layer}


def _read_metadata(path: str) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        return dict(f.metadata() or {})


def load_captured(path: str | Path) -> list[Captured]:
    """One `Captured` workload per layer stored in a capture file."""
    meta = _read_metadata(str(path))
    layers = json.loads(meta.get("layers", "[]"))
    if not layers:
        raise ValueError(f"{path}: no 'layers' metadata; was it written by `zyfa-bench capture`?")
    return [Captured(str(path), int(i), name=f"captured:{Path(path).stem}:L{i}") for i in layers]


Workload = Gaussian | ModelLike | Captured


def parse_workload(text: str) -> list[Workload]:
    """'gaussian', 'model-like' (or 'outliers') or 'captured:PATH' (every layer in the file)."""
    if text == "gaussian":
        return [Gaussian()]
    if text in ("model-like", "outliers"):
        return [ModelLike()]
    if text.startswith("captured:"):
        return list(load_captured(text.split(":", 1)[1]))
    raise ValueError(f"unknown workload {text!r}: use gaussian, model-like or captured:PATH")


def describe(w: Workload) -> dict[str, object]:
    """A JSON-able description of a workload."""
    return dict(w.params())
