"""The Hugging Face transformers backend on CPU (attention through the reference path).

Tiny random Llama / Qwen3 / Mistral causal LMs (zyfa_hf_testutil) run prefill with
attn_implementation="zyfa" and "sdpa"; both are compared with a float32 run of the same weights.
BF16 follows FA3's rule: err(zyfa) <= 2 * err(sdpa in bf16) + 1e-3 (relative L2 of the logits), so the
backend may be no worse than bf16 attention itself. FP8 (q, k, v quantised per call) stays within 0.1:
attention outputs carry 2-6% FP8 error (test_zyfa_reference.py), which the residual stream dilutes
(measured 0.03-0.045 on these models). Everything ZYFA cannot serve must raise, never fall back.
The GPU twin is test_zyfa_gpu_transformers.py.
"""

from __future__ import annotations

import pytest
import torch
from zyfa_hf_testutil import ARCHS, logits, rel_l2, tiny_causal_lm

pytest.importorskip("transformers", reason="transformers is not installed (pip install 'zyfa-torch[hf]')")

import zyfa  # noqa: E402
from zyfa.integrations import transformers as zyfa_hf  # noqa: E402 (needs transformers)

FP8_LOGITS_TOL = 0.1
FP8_NAMES = {"zyfa_fp8": {}, "zyfa_fp8_rot": {"rotate": True, "seed": 1}, "zyfa_fp8_lean": {"p_mode": "lean"}}


@pytest.fixture(scope="module", autouse=True)
def _registered():
    assert zyfa_hf.register() == "zyfa"
    for name, options in FP8_NAMES.items():
        zyfa_hf.register(name, fp8=True, **options)


def _ids(batch: int = 2, seqlen: int = 80, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 128, (batch, seqlen), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def zyfa_calls(monkeypatch):
    """Shapes of the q tensors zyfa.flash_attn_func received (proves the backend really ran)."""
    calls, real = [], zyfa.flash_attn_func

    def spy(q, *args, **kwargs):
        calls.append((tuple(q.shape), q.dtype))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(zyfa, "flash_attn_func", spy)
    return calls


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_bf16_prefill_matches_sdpa(arch, zyfa_calls):
    model, reference = tiny_causal_lm(arch, "cpu")
    ids = _ids()  # 80 tokens: one full 64-key block and a ragged one
    want = logits(reference, ids, "sdpa")
    sdpa = logits(model, ids, "sdpa")
    assert zyfa_calls == []
    got = logits(model, ids, "zyfa")
    assert zyfa_calls == [((2, 80, 2, 128), torch.bfloat16)] * 2  # one call per layer
    assert got.shape == want.shape and not torch.isnan(got).any()
    err, base = rel_l2(got, want), rel_l2(sdpa, want)
    assert err <= 2 * base + 1e-3 and err <= 0.02, (err, base)
    assert rel_l2(got, sdpa) <= 0.02


@pytest.mark.parametrize("name", sorted(FP8_NAMES))
def test_fp8_prefill(name, zyfa_calls):
    model, reference = tiny_causal_lm("llama", "cpu", seed=1)
    ids = _ids(seed=1)
    want = logits(reference, ids, "sdpa")
    assert rel_l2(logits(model, ids, name), want) <= FP8_LOGITS_TOL
    assert zyfa_calls == [((2, 80, 2, 128), torch.float8_e4m3fn)] * 2
    # FP8 mode quantises any float dtype and casts the output back: the float32 model runs too.
    got32 = logits(reference, ids, name)
    assert got32.dtype == torch.float32 and rel_l2(got32, want) <= FP8_LOGITS_TOL


def test_decode_step_with_dynamic_cache(zyfa_calls):
    """Prefill 79 tokens into the cache, then one token: seqlen_q = 1 < seqlen_k = 80 (bottom-right)."""
    model, reference = tiny_causal_lm("qwen3", "cpu", seed=2)
    ids = _ids(seed=2)

    @torch.no_grad()
    def decode(m, impl):
        m.set_attn_implementation(impl)
        cache = m(ids[:, :-1], use_cache=True).past_key_values
        return m(ids[:, -1:], past_key_values=cache, use_cache=True).logits

    want, sdpa, got = decode(reference, "sdpa"), decode(model, "sdpa"), decode(model, "zyfa")
    assert got.shape == (2, 1, 128)
    assert zyfa_calls[-2:] == [((2, 1, 2, 128), torch.bfloat16)] * 2  # the decode step went through zyfa
    assert rel_l2(got, want) <= 2 * rel_l2(sdpa, want) + 1e-3


def test_all_ones_mask_is_no_mask_and_padding_raises():
    model, _ = tiny_causal_lm("llama", "cpu", seed=3)
    ids = _ids(seed=3)
    plain = logits(model, ids, "zyfa")
    assert torch.equal(logits(model, ids, "zyfa", attention_mask=torch.ones_like(ids)), plain)
    padded = torch.ones_like(ids)
    padded[0, :5] = 0  # left padding of the first sequence
    with pytest.raises(ValueError, match="padded positions"):
        logits(model, ids, "zyfa", attention_mask=padded)


def test_unsupported_patterns_raise():
    # A sliding window shorter than the sequence (Mistral's default config has one).
    model, _ = tiny_causal_lm("mistral", "cpu", seed=4, sliding_window=64)
    with pytest.raises(NotImplementedError, match="plain causal mask only"):
        logits(model, _ids(seed=4), "zyfa")
    # A fixed-size cache: the keys hold unfilled slots after the queries.
    with pytest.raises(NotImplementedError, match="last positions of the keys"):
        zyfa_hf.causal_only_mask(batch_size=1, q_length=80, kv_length=128)
    assert zyfa_hf.causal_only_mask(batch_size=1, q_length=1, kv_length=81, q_offset=80) is None
    # BF16 mode on float32 activations.
    _, reference = tiny_causal_lm("llama", "cpu", seed=5)
    with pytest.raises(TypeError, match="bfloat16"):
        logits(reference, _ids(seed=5), "zyfa")
    with pytest.raises(ValueError, match="FP8 only"):
        zyfa_hf.register("zyfa_bad", p_mode="lean")


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        ({"attention_mask": torch.zeros(1, 1, 16, 16)}, ValueError, "attention mask of shape"),
        ({"is_causal": False}, NotImplementedError, "non-causal"),
        ({"dropout": 0.1}, NotImplementedError, "dropout"),
        ({"softcap": 30.0}, NotImplementedError, "softcap"),
        ({"sliding_window": 8}, NotImplementedError, "sliding_window=8"),
        ({"cu_seq_lens_q": torch.tensor([0, 16])}, NotImplementedError, "packed"),
    ],
)
def test_attention_forward_refuses(kw, exc, match):
    q = torch.randn(1, 2, 16, 128, dtype=torch.bfloat16)
    kv = torch.randn(1, 1, 16, 128, dtype=torch.bfloat16)
    mask = kw.pop("attention_mask", None)
    with pytest.raises(exc, match=match):
        zyfa_hf.attention_forward(torch.nn.Module(), q, kv, kv, mask, **kw)
    # The same call without the unsupported option runs; a window covering every key changes nothing.
    out, weights = zyfa_hf.attention_forward(torch.nn.Module(), q, kv, kv, None, sliding_window=16)
    assert weights is None and out.shape == (1, 16, 2, 128)
