"""One attention problem: the shape every implementation is asked to compute, and the shape presets."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["PRESETS", "Spec", "parse_shape", "shape_name", "specs_for_tokens"]


@dataclass(frozen=True)
class Spec:
    """An attention call in flash-attn layout.

    q [batch, seqlen_q, heads_q, d_qk], k [batch, seqlen_k, heads_kv, d_qk],
    v [batch, seqlen_k, heads_kv, d_v].

    Causal masks are bottom-right aligned (flash-attn): query i sees key j iff j <= i + seqlen_k - seqlen_q.
    """

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    d_qk: int
    d_v: int
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "d_qk", "d_v"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Spec.{name} must be positive, got {getattr(self, name)}")
        if self.heads_q % self.heads_kv:
            raise ValueError(f"heads_q ({self.heads_q}) must be a multiple of heads_kv ({self.heads_kv})")

    @property
    def softmax_scale(self) -> float:
        """The default scale 1/sqrt(d_qk) (flash-attn's)."""
        return 1.0 / math.sqrt(self.d_qk)

    @property
    def label(self) -> str:
        """A short stable name, e.g. 'b4 s8192 h32/8 d128' or 'b2 s16384 h16 d192/128'."""
        heads = f"h{self.heads_q}" if self.heads_q == self.heads_kv else f"h{self.heads_q}/{self.heads_kv}"
        dims = f"d{self.d_qk}" if self.d_qk == self.d_v else f"d{self.d_qk}/{self.d_v}"
        seq = f"s{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"s{self.seqlen_q}x{self.seqlen_k}"
        return f"b{self.batch} {seq} {heads} {dims}" + ("" if self.causal else " noncausal")

    def as_dict(self) -> dict[str, int | bool]:
        """The fields as a plain dict (for JSON rows)."""
        return asdict(self)


# name -> (heads_q, heads_kv, d_qk, d_v).  The two shapes of the targets: Mistral/Llama-style GQA at d=128
# and DeepSeek-style MLA prefill (d_qk 192 = 128 nope + 64 rope, d_v 128) with 16 heads.
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "gqa128": (32, 8, 128, 128),
    "mla192": (16, 16, 192, 128),
}


def parse_shape(text: str) -> tuple[str, tuple[int, int, int, int]]:
    """Parse a preset name or 'HQxHKVxDQKxDV' (e.g. '32x8x128x128') into (name, (hq, hkv, d_qk, d_v))."""
    if text in PRESETS:
        return text, PRESETS[text]
    parts = text.lower().split("x")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        hq, hkv, dqk, dv = (int(p) for p in parts)
        if min(hq, hkv, dqk, dv) < 1 or hq % hkv:
            raise ValueError(f"shape {text!r}: every size must be >= 1 and HQ a multiple of HKV")
        return text, (hq, hkv, dqk, dv)
    raise ValueError(
        f"unknown shape {text!r}: use one of {sorted(PRESETS)} or HQxHKVxDQKxDV, e.g. 32x8x128x128"
    )


def shape_name(spec: Spec) -> str:
    """The preset name of spec's head shape, else 'HQxHKVxDQKxDV'."""
    dims = (spec.heads_q, spec.heads_kv, spec.d_qk, spec.d_v)
    for name, preset in PRESETS.items():
        if preset == dims:
            return name
    return "x".join(str(x) for x in dims)


def specs_for_tokens(
    shape: tuple[int, int, int, int],
    seqlens: list[int],
    *,
    tokens: int | None,
    batch: int | None,
    causal: bool = True,
) -> list[Spec]:
    """One Spec per seqlen (seqlen_q = seqlen_k); batch = tokens // seqlen (at least 1) unless fixed."""
    if (tokens is None) == (batch is None):
        raise ValueError("give exactly one of tokens (batch = tokens // seqlen) or a fixed batch")
    hq, hkv, dqk, dv = shape
    out = []
    for s in seqlens:
        b = batch if batch is not None else max(1, tokens // s)
        out.append(Spec(b, s, s, hq, hkv, dqk, dv, causal))
    return out
