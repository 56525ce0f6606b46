"""Run every default kernel of this GPU's manifest once on small ragged shapes, and the packed-batch
(varlen) and paged kernels on a two-sequence chunked-prefill batch and (BF16 d128) a 36-sequence one of
several work items per persistent CTA (the program that
test_zyfa_gpu_sanitizer.py runs under compute-sanitizer). Prints one line per kernel; exit status 0
when every output is finite, 1 otherwise. Not a test module: `python zyfa_sanitizer_probe.py`."""

from __future__ import annotations

import sys

import torch

import zyfa
from zyfa import _ops

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): a ragged square and seqlen_q < seqlen_k (GQA).
SHAPES = [(1, 200, 200, 4, 2), (1, 96, 300, 4, 1)]
MODES = [None, "exact", "lean", "f16"]
# Packed batch: per-sequence (len_q, len_k), len_q <= len_k (new tokens over a cached prefix);
# 4 q / 2 kv heads.
PACKED = [(77, 300), (130, 130)]
# More work items (72 query tiles x 4 heads) than an H100 / H200 has SMs: persistent CTAs take several items
# each, reusing Q, the K / V ring and the O staging across sequences.
PACKED_MANY = [(129, 160), (200, 200), (256, 300)] * 12
PAGE_SIZE = 64
PACKED_MODES = [None, "lean"]  # the modes with packed-batch kernels


def _quantized(q, k, v, mode):
    """(q, k, v, kwargs): BF16 as given (mode None) or e4m3 with per-tensor descales and `mode`."""
    if mode is None:
        return q, k, v, {}
    (q, dq), (k, dk), (v, dv) = (zyfa.fp8_quantize(x, as_float=True) for x in (q, k, v))
    return q, k, v, {"q_descale": dq, "k_descale": dk, "v_descale": dv, "p_mode": mode}


def _packed(
    d_qk: int, mode: str | None, paged: bool, g: torch.Generator, lens: list[tuple[int, int]] = PACKED
) -> bool:
    """One packed (or paged) call on the (len_q, len_k) pairs `lens`; True when its output and LSE are
    finite."""
    lq = [a for a, _ in lens]
    lk = [b for _, b in lens]
    cu_q = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, *torch.tensor(lk).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lq), 4, d_qk, generator=g, device="cuda").bfloat16()
    k = torch.randn(sum(lk), 2, d_qk, generator=g, device="cuda").bfloat16()
    v = torch.randn(sum(lk), 2, 128, generator=g, device="cuda").bfloat16()
    extra = {}
    if paged:  # each sequence's keys in its own pages, in a cache of whole pages
        pages = [-(-n // PAGE_SIZE) for n in lk]
        cache_k = torch.zeros(sum(pages), PAGE_SIZE, 2, d_qk, device="cuda").bfloat16()
        cache_v = torch.zeros(sum(pages), PAGE_SIZE, 2, 128, device="cuda").bfloat16()
        table = torch.zeros(len(lk), max(pages), dtype=torch.int32, device="cuda")
        first = 0
        for b, n in enumerate(lk):
            rows = slice(int(cu_k[b]), int(cu_k[b + 1]))
            cache_k.view(-1, 2, d_qk)[first * PAGE_SIZE : first * PAGE_SIZE + n] = k[rows]
            cache_v.view(-1, 2, 128)[first * PAGE_SIZE : first * PAGE_SIZE + n] = v[rows]
            table[b, : pages[b]] = torch.arange(first, first + pages[b], dtype=torch.int32)
            first += pages[b]
        k, v = cache_k, cache_v
        extra = {"page_table": table, "seqused_k": torch.tensor(lk, dtype=torch.int32, device="cuda")}
    q, k, v, kw = _quantized(q, k, v, mode)
    out, lse = zyfa.flash_attn_varlen_func(
        q, k, v, cu_q, None if paged else cu_k, max(lq), max(lk), causal=True, return_attn_probs=True,
        **extra, **kw,
    )  # fmt: skip
    torch.cuda.synchronize()
    return bool(torch.isfinite(out.float()).all() and torch.isfinite(lse).all())


def main() -> int:
    from zyfa_core.errors import KernelNotFoundError

    g = torch.Generator(device="cuda").manual_seed(0)
    bad = 0
    for d_qk in (128, 192):
        for mode in MODES:
            for b, sq, sk, hq, hkv in SHAPES:
                q = torch.randn(b, sq, hq, d_qk, generator=g, device="cuda").bfloat16()
                k = torch.randn(b, sk, hkv, d_qk, generator=g, device="cuda").bfloat16()
                v = torch.randn(b, sk, hkv, 128, generator=g, device="cuda").bfloat16()
                q, k, v, kw = _quantized(q, k, v, mode)
                try:
                    spec = _ops.select_kernel(q, k, v, True, mode)
                except KernelNotFoundError:
                    print(f"no kernel: d_qk {d_qk} p_mode {mode}")
                    break
                out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, **kw)
                torch.cuda.synchronize()
                ok = bool(torch.isfinite(out.float()).all() and torch.isfinite(lse).all())
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {spec.name} {(b, sq, sk, hq, hkv)}")
        for mode in PACKED_MODES:
            for paged in (False, True):
                ok = _packed(d_qk, mode, paged, g)
                bad += not ok
                layout = "paged" if paged else "varlen"
                print(f"{'ok ' if ok else 'BAD'} packed d_qk {d_qk} p_mode {mode} {layout}")
    for paged in (False, True):
        ok = _packed(128, None, paged, g, PACKED_MANY)
        bad += not ok
        layout = "paged" if paged else "varlen"
        print(f"{'ok ' if ok else 'BAD'} packed d_qk 128 {layout}, {len(PACKED_MANY)} sequences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
