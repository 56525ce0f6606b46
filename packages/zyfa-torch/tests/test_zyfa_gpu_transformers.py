"""The Hugging Face transformers backend on a GPU: tiny random causal LMs run prefill through the ZYFA
kernels and match `sdpa` (tolerances and their reasons as in test_zyfa_transformers.py; the sm90a FP8
kernels' truncating tensor-core sums stay far inside the 0.1 FP8 logits bound).

Skipped without a GPU, zyfa_core, transformers, or a kernel for this GPU.
"""

from __future__ import annotations

import pytest
import torch
from zyfa_hf_testutil import logits, rel_l2, tiny_causal_lm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")
pytest.importorskip("transformers", reason="transformers is not installed (pip install 'zyfa-torch[hf]')")

from zyfa import _ops  # noqa: E402
from zyfa.integrations import transformers as zyfa_hf  # noqa: E402 (needs transformers)

FP8_LOGITS_TOL = 0.1


@pytest.fixture(scope="module", autouse=True)
def _registered():
    pytest.importorskip("zyfa_core")
    zyfa_hf.register("zyfa")
    zyfa_hf.register("zyfa_fp8", fp8=True)
    zyfa_hf.register("zyfa_fp8_lean_rot", fp8=True, p_mode="lean", rotate=True, seed=1)


def _need_kernel(dtype: torch.dtype, p_mode: str | None = None) -> None:
    from zyfa_core.errors import KernelNotFoundError

    x = torch.empty(1, 1, 1, 128, dtype=dtype, device="cuda")
    try:
        _ops.select_kernel(x, x, x, True, p_mode)
    except KernelNotFoundError as exc:
        pytest.skip(str(exc).splitlines()[0])


def _ids(seed: int, batch: int = 2, seqlen: int = 300) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 128, (batch, seqlen), generator=g).cuda()


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_bf16_prefill_matches_sdpa(arch):
    _need_kernel(torch.bfloat16)
    model, reference = tiny_causal_lm(arch, "cuda")
    ids = _ids(0)
    want = logits(reference, ids, "sdpa")
    sdpa, got = logits(model, ids, "sdpa"), logits(model, ids, "zyfa")
    assert not torch.isnan(got).any()
    err, base = rel_l2(got, want), rel_l2(sdpa, want)
    assert err <= 2 * base + 1e-3 and err <= 0.02, (err, base)
    assert torch.equal(logits(model, ids, "zyfa"), got)  # deterministic end to end


@pytest.mark.parametrize(("name", "p_mode"), [("zyfa_fp8", None), ("zyfa_fp8_lean_rot", "lean")])
def test_fp8_prefill(name, p_mode):
    _need_kernel(torch.float8_e4m3fn, p_mode)
    model, reference = tiny_causal_lm("llama", "cuda", seed=1)
    ids = _ids(1)
    want = logits(reference, ids, "sdpa")
    got = logits(model, ids, name)
    assert not torch.isnan(got).any() and rel_l2(got, want) <= FP8_LOGITS_TOL


def test_decode_step_and_padding_on_gpu():
    _need_kernel(torch.bfloat16)
    model, reference = tiny_causal_lm("llama", "cuda", seed=2)
    ids = _ids(2)

    @torch.no_grad()
    def decode(m, impl):
        m.set_attn_implementation(impl)
        cache = m(ids[:, :-1], use_cache=True).past_key_values
        return m(ids[:, -1:], past_key_values=cache, use_cache=True).logits

    want, sdpa, got = decode(reference, "sdpa"), decode(model, "sdpa"), decode(model, "zyfa")
    assert rel_l2(got, want) <= 2 * rel_l2(sdpa, want) + 1e-3
    padded = torch.ones_like(ids)
    padded[1, :7] = 0
    with pytest.raises(ValueError, match="padded positions"):
        logits(model, ids, "zyfa", attention_mask=padded)
