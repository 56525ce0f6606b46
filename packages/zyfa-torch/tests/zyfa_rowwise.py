"""An independent, literal transcription of the ZYFA numerics contract: one query row at a time.

Written from the contract text (not from zyfa.reference), in numpy float32 with ml_dtypes for the
bf16 / e4m3fn roundings, so it shares neither torch's conversions nor the reference's vectorisation,
masking tricks or GQA reshapes. Slow (Python loop over rows and blocks): tiny shapes only.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch
from torch import Tensor

F32 = np.float32


def _e4m3(x: np.ndarray) -> np.ndarray:
    """e4m3fn RNE with saturation (clip to +-448 first), back to float32."""
    return np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(F32)


def _decode(codes: np.ndarray) -> np.ndarray:
    return codes.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)


def _row(q_row, k_rows, v_rows, c, i, seqlen_q, causal, fp8, p_mode, block_n, v_descale):
    """(out row float32 before bf16 rounding, lse) of one query row."""
    seqlen_k = k_rows.shape[0]
    limit = i + seqlen_k - seqlen_q if causal else seqlen_k - 1  # last visible key
    m, row_l, acc = F32(-np.inf), F32(0), np.zeros(v_rows.shape[1], F32)
    shift = F32(8) if fp8 else F32(0)
    for j0 in range(0, seqlen_k, block_n):
        if j0 > limit:
            break  # the block lies wholly past the causal limit: skipped
        keys = np.arange(j0, min(j0 + block_n, seqlen_k))
        s = (k_rows[keys] @ q_row).astype(F32)
        t = np.where(keys <= limit, s * c, F32(-np.inf)).astype(F32)
        m_new = F32(max(m, t.max()))
        if m_new == -np.inf:
            continue
        alpha = F32(0) if m == -np.inf else F32(np.exp2(m - m_new))
        m = m_new
        if not fp8:
            p = np.exp2(t - m).astype(F32)
            p_used, p_sum = p.astype(ml_dtypes.bfloat16).astype(F32), p
        elif p_mode == "exact":
            p_used = _e4m3(np.exp2((t - m) + shift).astype(F32))
            p_sum = p_used
        elif p_mode == "f16":  # P.V in f16: numpy's own float16 rounding (RNE, subnormals kept)
            p_used = np.exp2((t - m) + shift).astype(F32).astype(np.float16).astype(F32)
            p_sum = p_used
        else:
            a, b = F32(8) * c, F32(F32(120) - F32(8) * m)
            fused = (s.astype(np.float64) * np.float64(a) + np.float64(b)).astype(F32)  # one FMA
            codes = np.clip(np.rint(fused), 0, 126)
            codes = np.where(keys <= limit, codes, 0)
            p_used = p_sum = _decode(codes)
        row_l = F32(row_l * alpha + p_sum.sum(dtype=F32))
        acc = (acc * alpha + p_used @ v_rows[keys]).astype(F32)
    if row_l == 0:
        return np.zeros_like(acc), math.inf
    out = (acc / row_l).astype(F32) * F32(v_descale)
    return out.astype(F32), float((m + np.log2(row_l) - shift) * F32(math.log(2)))


def rowwise_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    descales: tuple[float, float, float] = (1.0, 1.0, 1.0),
    p_mode: str = "exact",
    block_n: int = 64,
) -> tuple[Tensor, Tensor]:
    """(out bf16 [b, sq, hq, dv], lse float32 [b, hq, sq]) computed row by row from the contract."""
    fp8 = q.dtype == torch.float8_e4m3fn
    qn, kn, vn = (x.float().numpy() for x in (q, k, v))
    batch, seqlen_q, heads_q, d_qk = qn.shape
    heads_kv, d_v = kn.shape[2], vn.shape[3]
    scale = F32(1.0 / math.sqrt(d_qk))
    c = F32(F32(F32(scale * F32(descales[0])) * F32(descales[1])) * F32(math.log2(math.e)))
    out = np.zeros((batch, seqlen_q, heads_q, d_v), F32)
    lse = np.zeros((batch, heads_q, seqlen_q), F32)
    for b in range(batch):
        for h in range(heads_q):
            hk = h // (heads_q // heads_kv)
            for i in range(seqlen_q):
                row, lse[b, h, i] = _row(
                    qn[b, i, h],
                    kn[b, :, hk],
                    vn[b, :, hk],
                    c,
                    i,
                    seqlen_q,
                    causal,
                    fp8,
                    p_mode,
                    block_n,
                    descales[2],
                )
                out[b, i, h] = row
    out_bf16 = torch.from_numpy(out.astype(ml_dtypes.bfloat16).astype(F32)).to(torch.bfloat16)
    return out_bf16, torch.from_numpy(lse)
