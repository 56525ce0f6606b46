"""Run every default kernel of this GPU's manifest once on small ragged shapes (the program that
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
                kw = {}
                if mode is not None:
                    (q, dq), (k, dk), (v, dv) = (zyfa.fp8_quantize(x, as_float=True) for x in (q, k, v))
                    kw = {"q_descale": dq, "k_descale": dk, "v_descale": dv, "p_mode": mode}
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
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
