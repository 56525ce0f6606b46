"""The ZYFA numerics in plain torch: the oracle every kernel and the gfx950 simulator are checked against.

`attention` walks the keys in blocks of `block_n` exactly as the kernels do (block b = keys
[b*block_n, (b+1)*block_n)), keeping a running row max ``m`` (base-2 units), row sum ``l`` and fp32
accumulator per query row, and implements both modes of the contract:

* BF16 mode (bf16 inputs): ``p = exp2(t - m)`` in fp32, ``l`` sums the unrounded ``p`` (as FA2/FA3),
  P is rounded to bf16 for the P·V product.
* FP8 mode (float8_e4m3fn inputs): per-block P scaling with ``SHIFT = 8`` (the row max lands at
  2^8 = 256), P stored in e4m3 -- "exact" P rounds ``exp2(t - m + 8)`` to e4m3 (RNE, saturating),
  "lean" P computes the e4m3 code with one fp32 FMA, ``code = clamp(rint(S*A + B), 0, 126)`` -- and
  the row sum ``l`` adds the ROUNDED values actually fed to P·V ("normalisation by the rounded row
  sum"). ``v_descale`` multiplies the output once, at the end.
* Either mode with ``stale_tau`` > 0 (the sm90 BF16 kernels use 8): a row keeps its running max unless
  a block raises it by more than ``stale_tau`` (log2 units), so P may exceed its usual top by up to
  2^stale_tau; exact in real arithmetic (l, acc and lse share the kept max).
* FP8 "f16" mode (sm90 only): S as in FP8 mode, but P·V runs in f16 -- ``p = exp2(t - m + 8)``
  rounded to f16 (RNE, subnormals kept) and V's e4m3 values (exact in f16) -- and ``l`` adds those
  f16 values. P's rounding error drops from e4m3's 2^-4 to f16's 2^-11.

Everything is vectorised over batch, heads and query rows; only the KV blocks are a Python loop.
Products of bf16 or e4m3 values are exact in fp32, so ``S`` differs from a kernel's only by fp32
summation order. `attention_dense_f64` is the float64 dense softmax the tests measure errors against.

`attention_varlen` and `attention_varlen_dense_f64` run these two on each sequence of a packed (or paged)
batch (the section at the end of this module).

Layouts are flash-attn's: q [batch, seqlen_q, heads_q, d_qk], k [batch, seqlen_k, heads_kv, d_qk],
v [batch, seqlen_k, heads_kv, d_v]; out [batch, seqlen_q, heads_q, d_v] (bf16); lse float32
[batch, heads_q, seqlen_q] in natural-log units of the softmax-scaled scores. Causal masking is
bottom-right aligned: row i sees key j iff j <= i + seqlen_k - seqlen_q; a row that sees no key
outputs 0 and lse = +inf.

Non-finite inputs propagate as on the GPU kernels (and as in SDPA): a row whose visible scores
include a NaN (a NaN or e4m3 NaN code in its q row or in a key it sees, or ``inf - inf`` from an
infinite score) outputs NaN in every column and lse = NaN; a NaN in V reaches every row that sees
its key, and may reach rows that share a key block with it (P = 0 times NaN; a GPU kernel's reach
also depends on its tile_m), never a row whose visible keys all lie in earlier blocks. A visible
score of -inf is an ordinary zero weight; a row whose visible scores are all -inf has row sum 0 and
reads as a row that sees no key (0 and +inf), as the kernels' epilogue does.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from zyfa_core.manifest import FP8_MAX_STALE_TAU, P_MODES

__all__ = [
    "E4M3_MAX",
    "FP8_SHIFT",
    "Sequence",
    "attention",
    "attention_dense_f64",
    "attention_varlen",
    "attention_varlen_dense_f64",
    "decode_e4m3fn",
    "e4m3fn_codes",
    "gather_kv",
    "lean_p_codes",
    "round_to_e4m3fn",
    "sequences",
]

FP8_SHIFT = 8
"""Base-2 shift of P in FP8 mode: the row max becomes 2^8 = 256 <= 448, small P stay representable."""
E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value (code 0x7e)."""
_LEAN_MAX_CODE = 126  # code 127 is NaN in e4m3fn
_NAN_CODE = 127
_LOG2E = math.log2(math.e)
_LN2 = math.log(2.0)
ROW_SUMS = ("rounded", "unrounded")


def round_to_e4m3fn(x: Tensor) -> Tensor:
    """Round to float8_e4m3fn (round to nearest even, saturating at +-448); return the float32 values.

    Clamping first makes saturation explicit rather than relying on the conversion's overflow rule
    (OCP allows either NaN or saturation); NaN stays NaN.
    """
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()


def e4m3fn_codes(x: Tensor) -> Tensor:
    """The float8_e4m3fn bit patterns (uint8) of ``round_to_e4m3fn(x)``."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def decode_e4m3fn(codes: Tensor) -> Tensor:
    """Decode float8_e4m3fn codes (any integer dtype, values 0..255) to float32.

    Code ``8e + f`` is ``2^(e-7) (1 + f/8)`` for e >= 1 and the subnormal ``f * 2^-9`` for e == 0.
    """
    return codes.to(torch.uint8).view(torch.float8_e4m3fn).float()


def lean_p_codes(s: Tensor, a: float | Tensor, b: Tensor) -> Tensor:
    """Lean-P e4m3 codes ``clamp(rint(fma(s, a, b)), 0, 126)`` as int32 (rint = round half to even).

    ``s``: fp32 scores q.k; ``a``: the fp32 constant ``8*C``; ``b``: fp32 per-row offsets
    ``8*(SHIFT + 7) - 8*m`` broadcast against ``s``. The kernels use ONE fp32 FMA (a single
    rounding); here the product s*a is exact in float64 (24+24 bits), the float64 add rounds once to
    53 bits, and the final rounding to fp32 reproduces the FMA except when the float64 sum lies
    exactly on an fp32 rounding tie (double rounding; vanishingly rare). The value is rounded to
    fp32 BEFORE rint, as the kernels do. A NaN sum (a NaN score, or ``inf - inf``) gives code 0x7f,
    e4m3fn's NaN, so the row reads NaN as in every other mode.
    """
    a64 = torch.as_tensor(a, dtype=torch.float32, device=s.device).double()
    fused = (s.double() * a64 + b.double()).float()
    codes = torch.round(fused).clamp(0, _LEAN_MAX_CODE)
    return torch.where(torch.isnan(fused), _NAN_CODE, codes).to(torch.int32)


@contextlib.contextmanager
def _full_fp32_matmul(device: torch.device) -> Iterator[None]:
    """Keep CUDA matmuls in full fp32 (no TF32) while the reference runs on a GPU tensor."""
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Shape/dtype sanity for direct callers (flash_attn_func validates more thoroughly)."""
    if not (q.dim() == k.dim() == v.dim() == 4):
        raise ValueError("q, k, v must be 4-D [batch, seqlen, heads, head_dim]")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.bfloat16, torch.float8_e4m3fn):
        raise TypeError(
            "q, k, v must all be torch.bfloat16 or all torch.float8_e4m3fn; "
            f"got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    b, _, hq, dqk = q.shape
    if k.shape[0] != b or v.shape[0] != b or k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"inconsistent shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[3] != dqk or k.shape[2] == 0 or hq % k.shape[2] != 0:
        raise ValueError(
            "need k head_dim == q head_dim and heads_q % heads_kv == 0; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )


def _visible(rows: int, j0: int, j1: int, seqlen_k: int, causal: bool, device: torch.device) -> Tensor | None:
    """[rows, j1 - j0] bool mask of keys j0..j1-1 each query row may see (None: all visible)."""
    if not causal:
        return None
    i = torch.arange(rows, device=device)[:, None]
    j = torch.arange(j0, j1, device=device)[None, :]
    return j <= i + (seqlen_k - rows)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    softmax_scale: float | None = None,
    causal: bool = True,
    q_descale: float = 1.0,
    k_descale: float = 1.0,
    v_descale: float = 1.0,
    p_mode: str = "exact",
    block_n: int = 64,
    row_sum: str = "rounded",
    shift: int = FP8_SHIFT,
    stale_tau: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Blockwise ZYFA attention with the kernels' exact numerics.

    Args:
        q: [batch, seqlen_q, heads_q, d_qk], bf16 (BF16 mode) or float8_e4m3fn (FP8 mode).
        k: [batch, seqlen_k, heads_kv, d_qk], same dtype; heads_q % heads_kv == 0 (GQA/MQA).
        v: [batch, seqlen_k, heads_kv, d_v], same dtype.
        softmax_scale: natural-log scale of q.k; default 1/sqrt(d_qk).
        causal: bottom-right aligned causal mask (flash-attn).
        q_descale, k_descale, v_descale: FP8 dequantisation factors (x ~= x8 * descale); must be 1 in
            BF16 mode.
        p_mode: FP8 only: "exact" (e4m3 rounding of exp2), "lean" (one FMA to the e4m3 code) or "f16"
            (f16 rounding of exp2: P.V in f16).
        block_n: keys per block = the kernel's tile_n (the P-scaling block of the FP8 numerics).
        row_sum: FP8 only, for experiments: "rounded" (the contract: l sums the e4m3 P fed to P·V) or
            "unrounded" (l sums the exp2 values before rounding).
        shift: FP8 only, for experiments: base-2 shift of P (the contract and every kernel use 8).
        stale_tau: running-max staleness bound in log2 units (docs/numerics.md "Stale running max"): a
            row keeps its max unless a block raises it by more than this (0: the exact running max).
            A kernel's manifest row says which it uses (`KernelSpec.stale_tau`). FP8 needs < 0.8.

    Returns:
        (out, lse): out bf16 [batch, seqlen_q, heads_q, d_v]; lse float32 [batch, heads_q, seqlen_q]
        (+inf, with out = 0, for rows that see no key).
    """
    _check_inputs(q, k, v)
    fp8 = q.dtype == torch.float8_e4m3fn
    if p_mode not in P_MODES or row_sum not in ROW_SUMS:
        raise ValueError(f"p_mode must be one of {P_MODES} and row_sum one of {ROW_SUMS}")
    if not fp8 and (q_descale, k_descale, v_descale) != (1.0, 1.0, 1.0):
        raise ValueError("descales apply to float8_e4m3fn inputs only; BF16 mode uses 1.0")
    if block_n < 1:
        raise ValueError(f"block_n must be >= 1, got {block_n}")
    if not math.isfinite(stale_tau) or stale_tau < 0 or (fp8 and stale_tau >= FP8_MAX_STALE_TAU):
        limit = f"< {FP8_MAX_STALE_TAU} in FP8 mode" if fp8 else "finite"
        raise ValueError(f"stale_tau must be >= 0 and {limit}, got {stale_tau}")
    batch, seqlen_q, heads_q, d_qk = q.shape
    _, seqlen_k, heads_kv, d_v = v.shape
    scale = 1.0 / math.sqrt(d_qk) if softmax_scale is None else softmax_scale
    dev = q.device
    # C folds the softmax scale, both descales and log2(e) into one fp32 constant, as the kernels do.
    c = (
        torch.tensor(scale, dtype=torch.float32)
        * q_descale
        * k_descale
        * torch.tensor(_LOG2E, dtype=torch.float32)
    )
    c = c.to(dev)
    group = heads_q // heads_kv
    # Rows of one KV head: [batch, heads_kv, group, seqlen_q, d]; q head h uses kv head h // group.
    qf = q.float().permute(0, 2, 1, 3).reshape(batch, heads_kv, group, seqlen_q, d_qk)
    kf = k.float().permute(0, 2, 1, 3)[:, :, None]
    vf = v.float().permute(0, 2, 1, 3)[:, :, None]
    row_shape = (batch, heads_kv, group, seqlen_q)
    m = torch.full(row_shape, -math.inf, dtype=torch.float32, device=dev)
    row_l = torch.zeros(row_shape, dtype=torch.float32, device=dev)
    acc = torch.zeros((*row_shape, d_v), dtype=torch.float32, device=dev)
    shift_f = float(shift) if fp8 else 0.0
    with _full_fp32_matmul(dev):
        for j0 in range(0, seqlen_k, block_n):
            j1 = min(j0 + block_n, seqlen_k)
            mask = _visible(seqlen_q, j0, j1, seqlen_k, causal, dev)
            s = qf @ kf[..., j0:j1, :].transpose(-1, -2)
            t = s * c
            if mask is not None:
                t = t.masked_fill(~mask, -math.inf)
            m_new = torch.maximum(m, t.amax(dim=-1))
            if stale_tau > 0:  # keep m unless the block raises it by more than stale_tau (m = -inf: never)
                m_new = torch.where(m_new > m + stale_tau, m_new, m)
            # A row with nothing visible so far keeps m = -inf; alpha = 0 then (acc and l are 0 anyway).
            alpha = torch.where(m == -math.inf, 0.0, torch.exp2(m - m_new))
            m = m_new
            m_ref = torch.where(m == -math.inf, 0.0, m)[..., None]  # keeps exp2 finite on empty rows
            if not fp8:
                p = torch.exp2(t - m_ref)
                p_used, p_sum = p.bfloat16().float(), p
            else:
                p_used, p_sum = _fp8_p(s, t, c, m_ref, mask, p_mode, shift_f)
                if row_sum == "rounded":
                    p_sum = p_used
            row_l = row_l * alpha + p_sum.sum(dim=-1)
            pv = p_used @ vf[..., j0:j1, :]
            if mask is not None:  # a block a row cannot see leaves it alone (0 * NaN in V would not)
                pv = torch.where(mask.any(dim=-1)[:, None], pv, 0.0)
            acc = acc * alpha[..., None] + pv
    return _finish(acc, row_l, m, v_descale, shift_f, heads_q)


def _fp8_p(
    s: Tensor, t: Tensor, c: Tensor, m_ref: Tensor, mask: Tensor | None, p_mode: str, shift: float
) -> tuple[Tensor, Tensor]:
    """(P fed to P·V as float32 values, the unrounded exp2 values) of one block in FP8 mode."""
    unrounded = torch.exp2(t - m_ref + shift)
    if p_mode == "exact":
        return round_to_e4m3fn(unrounded), unrounded
    if p_mode == "f16":
        return unrounded.half().float(), unrounded
    # Lean P: code ~= 8*(x + 7) with x = t - m + shift = S*C - m + shift, i.e. S*A + B with A = 8C,
    # B = 8*(shift + 7) - 8m = 120 - 8m for shift 8 (all fp32).
    a = 8.0 * c
    b = 8.0 * (shift + 7.0) - 8.0 * m_ref
    codes = lean_p_codes(s, a, b)
    if mask is not None:
        codes = codes.masked_fill(~mask, 0)  # masked keys give code 0, which decodes to exactly 0
    return decode_e4m3fn(codes), unrounded


def _finish(
    acc: Tensor, row_l: Tensor, m: Tensor, v_descale: float, shift: float, heads_q: int
) -> tuple[Tensor, Tensor]:
    """out = (acc / l) * v_descale -> bf16 and lse in natural-log units, both in flash-attn layout.

    Only a row sum of exactly 0 means "no visible key" (0 and +inf); a NaN row sum is a row that saw a
    NaN and stays NaN in out and lse, as the kernels' epilogue (``l == 0`` alone is special) gives.
    """
    batch, heads_kv, group, seqlen_q, d_v = acc.shape
    seen = row_l != 0
    l_safe = torch.where(seen, row_l, 1.0)
    out = torch.where(seen[..., None], (acc / l_safe[..., None]) * v_descale, 0.0)
    lse = torch.where(seen, (m + torch.log2(l_safe) - shift) * _LN2, math.inf)
    out = out.reshape(batch, heads_q, seqlen_q, d_v).permute(0, 2, 1, 3).to(torch.bfloat16).contiguous()
    return out, lse.reshape(batch, heads_q, seqlen_q).contiguous()


def attention_dense_f64(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float | None = None,
    causal: bool = True,
    q_descale: float = 1.0,
    k_descale: float = 1.0,
    v_descale: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Dense float64 softmax attention on the dequantised inputs: the truth errors are measured against.

    Inputs in flash-attn layout, any floating dtype (FP8 inputs are dequantised as x8 * descale).
    Returns (out float64 [batch, seqlen_q, heads_q, d_v], lse float64 [batch, heads_q, seqlen_q]);
    rows that see no key (or only scores of -inf) give out = 0 and lse = +inf; a row whose visible
    scores include a NaN gives NaN in out and lse.
    """
    batch, seqlen_q, heads_q, d_qk = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d_qk) if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    qd = q.double() * q_descale
    kd = (k.double() * k_descale).repeat_interleave(group, dim=2)
    vd = (v.double() * v_descale).repeat_interleave(group, dim=2)
    scores = torch.einsum("bihd,bjhd->bhij", qd, kd) * scale
    if causal:
        i = torch.arange(seqlen_q, device=q.device)[:, None]
        j = torch.arange(seqlen_k, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + (seqlen_k - seqlen_q), -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    seen = lse != -math.inf  # NaN counts as seen: it stays NaN
    probs = torch.exp(scores - torch.where(seen, lse, 0.0)[..., None])
    out = torch.einsum("bhij,bjhd->bihd", probs, vd)
    return out, torch.where(seen, lse, math.inf)


# ------------------------------------------------------------------ packed variable-length batches
# Packed variable-length and paged attention in plain torch: the dense reference, run per sequence.
#
# A packed batch holds the sequences of one step along one token dimension, flash-attn's varlen layout:
# sequence ``b`` owns query rows ``cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1`` of ``q [total_q, heads_q,
# d_qk]`` and ``out [total_q, heads_q, d_v]``, and its keys are either rows ``cu_seqlens_k[b] ..`` of
# ``k, v [total_k, heads_kv, d]`` (packed) or, with a ``page_table [batch, max_pages]``, key ``j`` lies in
# page ``page_table[b, j // page_size]`` at slot ``j % page_size`` of ``k, v [num_pages, page_size,
# heads_kv, d]`` (a paged KV cache). ``seqused_k[b]``, when given, is the number of keys sequence ``b``
# uses (else ``cu_seqlens_k[b+1] - cu_seqlens_k[b]``). Causal masking is bottom-right aligned per sequence.
# FP8 descales are floats (per tensor) or float32 tensors of shape ``(batch, heads_kv)`` (per sequence
# and kv head; query head ``h`` takes its kv head's ``q_descale``).
#
# No attention math lives here: each sequence (and, with per-head descales, each kv head) is gathered
# into the dense layout and handed to `zyfa.reference.attention` or `attention_dense_f64`; the results
# are scattered back. ``lse`` is ``[heads_q, total_q]`` (flash-attn's varlen layout). Query rows outside
# every sequence get ``out = 0`` and ``lse = +inf``.

Descale = float | Tensor


@dataclass(frozen=True)
class Sequence:
    """One sequence of a packed batch: its query rows ``q_start .. q_start + len_q`` and its key count."""

    index: int
    q_start: int
    len_q: int
    len_k: int


def sequences(cu_seqlens_q: Tensor, cu_seqlens_k: Tensor | None, seqused_k: Tensor | None) -> list[Sequence]:
    """The sequences of a packed batch, read from the (host) index tensors."""
    cu_q = cu_seqlens_q.tolist()
    cu_k = cu_seqlens_k.tolist() if cu_seqlens_k is not None else None
    used = seqused_k.tolist() if seqused_k is not None else None
    out = []
    for b in range(len(cu_q) - 1):
        len_k = used[b] if used is not None else cu_k[b + 1] - cu_k[b]  # type: ignore[index]
        out.append(Sequence(b, cu_q[b], cu_q[b + 1] - cu_q[b], len_k))
    return out


def gather_kv(x: Tensor, seq: Sequence, cu_seqlens_k: Tensor | None, page_table: Tensor | None) -> Tensor:
    """The ``len_k`` key rows of sequence ``seq`` as a dense [1, len_k, heads_kv, d] tensor.

    Packed: rows ``cu_seqlens_k[b] ..`` of x [total_k, heads_kv, d]. Paged: key j from page
    ``page_table[b, j // page_size]``, slot ``j % page_size`` of x [num_pages, page_size, heads_kv, d].
    """
    if page_table is None:
        start = int(cu_seqlens_k[seq.index])  # type: ignore[index]
        return x[start : start + seq.len_k][None]
    page_size = x.shape[1]
    pages = page_table[seq.index, : math.ceil(seq.len_k / page_size)].long()
    return x[pages].reshape(-1, *x.shape[2:])[: seq.len_k][None]


def _descale_of(d: Descale, b: int, h: int | None) -> Descale:
    """The descale of sequence b (and kv head h), as a float where the table has one."""
    if isinstance(d, Tensor) and d.dim() == 2:
        return float(d[b, h]) if h is not None else d
    return d


def _per_head(descales: tuple[Descale, Descale, Descale]) -> bool:
    return any(isinstance(d, Tensor) and d.dim() == 2 for d in descales)


def _run(
    fn: Callable[..., tuple[Tensor, Tensor]],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    index: tuple[Tensor, Tensor | None, Tensor | None, Tensor | None],
    descales: tuple[Descale, Descale, Descale],
    out_dtype: torch.dtype,
    **kwargs: object,
) -> tuple[Tensor, Tensor]:
    """Gather each sequence (and kv head, with per-head descales), call ``fn`` densely, scatter back.

    `index` is (cu_seqlens_q, cu_seqlens_k, seqused_k, page_table) as `attention_varlen` takes them.
    """
    cu_seqlens_q, cu_seqlens_k, seqused_k, page_table = index
    total_q, heads_q, _ = q.shape
    heads_kv, d_v = k.shape[-2], v.shape[-1]
    group = heads_q // heads_kv
    out = torch.zeros((total_q, heads_q, d_v), dtype=out_dtype, device=q.device)
    lse_dtype = torch.float64 if out_dtype == torch.float64 else torch.float32
    lse = torch.full((heads_q, total_q), math.inf, dtype=lse_dtype, device=q.device)
    per_head = _per_head(descales)
    for seq in sequences(cu_seqlens_q, cu_seqlens_k, seqused_k):
        if seq.len_q == 0:
            continue
        rows = slice(seq.q_start, seq.q_start + seq.len_q)
        qb = q[rows][None]
        kb, vb = (gather_kv(x, seq, cu_seqlens_k, page_table) for x in (k, v))
        if seq.len_k == 0:
            continue  # every row sees no key: out 0, lse +inf, as initialised
        head_groups = range(heads_kv) if per_head else [None]
        for h in head_groups:
            qh = slice(None) if h is None else slice(h * group, (h + 1) * group)
            kh = slice(None) if h is None else slice(h, h + 1)
            qd, kd, vd = (_descale_of(d, seq.index, h) for d in descales)
            o, s = fn(
                qb[:, :, qh], kb[:, :, kh], vb[:, :, kh], q_descale=qd, k_descale=kd, v_descale=vd, **kwargs
            )
            out[rows, qh] = o[0].to(out_dtype)
            lse[qh, rows] = s[0].to(lse_dtype)
    return out, lse


def attention_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor | None,
    *,
    seqused_k: Tensor | None = None,
    page_table: Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = True,
    q_descale: Descale = 1.0,
    k_descale: Descale = 1.0,
    v_descale: Descale = 1.0,
    p_mode: str = "exact",
    block_n: int = 64,
    stale_tau: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """`zyfa.reference.attention` on each sequence of a packed (optionally paged) batch.

    Args:
        q: [total_q, heads_q, d_qk] bf16 or float8_e4m3fn (CPU; the index tensors are read on the host).
        k, v: [total_k, heads_kv, d] packed, or [num_pages, page_size, heads_kv, d] with `page_table`.
        cu_seqlens_q: int32 [batch + 1], non-decreasing query row offsets.
        cu_seqlens_k: int32 [batch + 1] key row offsets (packed); with a page table it may be None when
            `seqused_k` is given (only its differences, the key counts, are used then).
        seqused_k: int32 [batch] key counts, or None.
        page_table: int32 [batch, max_pages] page indices, or None.
        q_descale, k_descale, v_descale: floats, or float32 tensors (batch, heads_kv).
        Other arguments as `zyfa.reference.attention` (block_n: the kernel's tile_n).

    Returns:
        (out bf16 [total_q, heads_q, d_v], lse float32 [heads_q, total_q]); rows outside every sequence
        and rows that see no key give 0 and +inf.
    """
    index = (cu_seqlens_q, cu_seqlens_k, seqused_k, page_table)
    descales = (q_descale, k_descale, v_descale)
    options = {"softmax_scale": softmax_scale, "causal": causal, "p_mode": p_mode, "block_n": block_n}
    return _run(attention, q, k, v, index, descales, torch.bfloat16, stale_tau=stale_tau, **options)


def attention_varlen_dense_f64(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor | None,
    *,
    seqused_k: Tensor | None = None,
    page_table: Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = True,
    q_descale: Descale = 1.0,
    k_descale: Descale = 1.0,
    v_descale: Descale = 1.0,
) -> tuple[Tensor, Tensor]:
    """`zyfa.reference.attention_dense_f64` on each sequence: the float64 truth of a packed batch.

    Arguments as `attention_varlen`. Returns (out float64 [total_q, heads_q, d_v], lse float64 [heads_q,
    total_q]).
    """
    index = (cu_seqlens_q, cu_seqlens_k, seqused_k, page_table)
    descales = (q_descale, k_descale, v_descale)
    options = {"softmax_scale": softmax_scale, "causal": causal}
    return _run(attention_dense_f64, q, k, v, index, descales, torch.float64, **options)
