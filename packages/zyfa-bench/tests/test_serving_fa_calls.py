"""The FlashAttention serving peers (`varlen_call` of zyfa_bench.peers.fa3 and .fa4) on the CPU: the calls
they hand the libraries, recorded by stand-in modules, for packed steps and paged prefix steps.

The libraries' numerics are theirs (the GPU suite checks them against float64); what the adapters own is
which function gets which tensor: packed k / v with cu_seqlens_k, or the paged cache with its table and
seqused_k, causal, and FA3's descales broadcast to float32 (batch, heads_kv).
"""

from __future__ import annotations

import random
import sys
import types

import pytest
import torch

from zyfa_bench.peers import fa3, fa4
from zyfa_bench.serving import ServingStep, build_step

CPU = torch.device("cpu")


def _recorder(calls: list, name: str):
    def call(*args, **kw):
        calls.append((name, args, kw))
        return name

    return call


def _step(prefix: int) -> ServingStep:
    lens = tuple(random.randint(1, 40) for _ in range(random.randint(2, 5)))
    return ServingStep(lens, prefix, 16, 4, 2, 64, 64)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("prefix", [0, 32])
def test_fa3_varlen_call_hands_over_the_step(monkeypatch, prefix, precision):
    calls: list = []
    mod = types.ModuleType("fa3_fwd_interface")
    mod.flash_attn_varlen_func = _recorder(calls, "varlen")
    mod.flash_attn_with_kvcache = _recorder(calls, "kvcache")
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", mod)
    step = _step(prefix)
    x = build_step(step, device=CPU, precision=precision, seed=random.randrange(2**31))

    call = fa3.varlen_call(x, x.descales, step.heads_kv)
    assert calls == []  # nothing runs until the timed call
    assert call() == ("varlen" if prefix == 0 else "kvcache")
    ((name, args, kw),) = calls
    max_q, max_k = step.max_seqlens
    assert args[0] is x.q and args[1] is x.k and args[2] is x.v and kw.pop("causal") is True
    if prefix == 0:
        assert args[3] is x.cu_seqlens_q and args[4] is x.cu_seqlens_k and args[5:] == (max_q, max_k)
    else:
        assert x.page_table is not None and len(args) == 3
        assert kw.pop("page_table") is x.page_table and kw.pop("cache_seqlens") is x.seqused_k
        assert kw.pop("cu_seqlens_q") is x.cu_seqlens_q and kw.pop("max_seqlen_q") == max_q
    if precision == "fp8":
        for key, want in zip(("q_descale", "k_descale", "v_descale"), x.descales, strict=True):
            got = kw.pop(key)
            assert got.dtype == torch.float32 and got.shape == (len(step.lens), step.heads_kv)
            assert torch.all(got == want)
    assert kw == {}


@pytest.mark.parametrize("prefix", [0, 32])
def test_fa4_varlen_call_hands_over_the_step(monkeypatch, prefix):
    calls: list = []
    pkg, cute = types.ModuleType("flash_attn"), types.ModuleType("flash_attn.cute")
    cute.flash_attn_varlen_func = _recorder(calls, "varlen")
    pkg.cute = cute
    monkeypatch.setitem(sys.modules, "flash_attn", pkg)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    step = _step(prefix)
    x = build_step(step, device=CPU, precision="bf16", seed=random.randrange(2**31))
    call = fa4.varlen_call(x)
    assert call() == "varlen"
    ((_, args, kw),) = calls
    max_q, max_k = step.max_seqlens
    assert args[0] is x.q and args[1] is x.k and args[2] is x.v
    assert kw.pop("cu_seqlens_q") is x.cu_seqlens_q and kw.pop("causal") is True
    assert (kw.pop("max_seqlen_q"), kw.pop("max_seqlen_k")) == (max_q, max_k)
    if prefix == 0:
        assert kw == {"cu_seqlens_k": x.cu_seqlens_k}
    else:
        assert kw.pop("seqused_k") is x.seqused_k and kw.pop("page_table") is x.page_table and kw == {}
