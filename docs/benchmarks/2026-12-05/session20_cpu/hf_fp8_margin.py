"""Logits error of the FP8 transformers backend per P mode on the CPU path (host reference, block_n 64),
against the 0.1 bound of test_zyfa_gpu_transformers.py's test_fp8_prefill: the tiny llama of
zyfa_hf_testutil, ids drawn as that test draws them. Run from packages/zyfa-torch/tests with
PYTHONPATH=.:../src:../../zyfa-core/src and transformers installed (the nox tests venv has it).
A host computation, not a kernel measurement."""

import torch
from zyfa_hf_testutil import logits, rel_l2, tiny_causal_lm

from zyfa.integrations import transformers as zyfa_hf

MODES = {"zyfa_fp8_exact": {"p_mode": "exact"}, "zyfa_fp8_lean": {"p_mode": "lean"}}
for name, kw in MODES.items():
    zyfa_hf.register(name, fp8=True, **kw)
zyfa_hf.register("zyfa_fp8_lean_rot", fp8=True, p_mode="lean", rotate=True, seed=1)
for seed in (1, 2, 3):
    model, reference = tiny_causal_lm("llama", "cpu", seed=seed)
    ids = torch.randint(0, 128, (2, 300), generator=torch.Generator().manual_seed(seed))
    want = logits(reference, ids, "sdpa")
    errs = {n: round(rel_l2(logits(model, ids, n), want), 4) for n in [*MODES, "zyfa_fp8_lean_rot"]}
    print("seed", seed, errs)
