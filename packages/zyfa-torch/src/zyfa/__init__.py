"""ZYFA: causal-prefill attention in BF16 and FP8 (e4m3fn in, BF16 out) for PyTorch.

Public API:
    flash_attn_func   flash-attn's forward signature; CUDA/ROCm tensors run ZYFA kernels through
                      zyfa_core, CPU tensors run the reference.
    flash_attn_varlen_func
                      FlashAttention-3's packed signature: a step's sequences along one token dim
                      (cu_seqlens), optionally with K/V in a paged cache (page_table).
    fp8_quantize      per-tensor FP8 quantisation: power-of-two descale (tensor or float) or a fixed
                      calibrated one; optionally rotated.
    rotate_qk         the same random Hadamard rotation of q and k ((qR)(kR)ᵀ = qkᵀ).
    reference         the ZYFA numerics in plain torch (`reference.attention`, per sequence
                      `reference.attention_varlen`) and the float64 truth (`reference.attention_dense_f64`,
                      `reference.attention_varlen_dense_f64`).

    hot_path          which path GPU calls take: "C++ (zyfa._C)", or "Python (<why>)" when the C++
                      extension is missing (it is built only where torch is importable at build
                      time: install torch first, then `pip install --no-build-isolation
                      packages/zyfa-torch`). Importing zyfa warns when a GPU is present and
                      zyfa._C is not built.

Submodules imported on demand:
    zyfa.integrations.transformers   Hugging Face backend: register() -> attn_implementation="zyfa".
    zyfa.overhead                    host µs per eager call, layer by layer (`python -m zyfa.overhead`).

torch.compile, CUDA graphs and FP8 recipes: docs/usage.md ("Using ZYFA in a model").
"""

import warnings

import torch

from zyfa import reference
from zyfa._ops import hot_path
from zyfa.interface import flash_attn_func, flash_attn_varlen_func
from zyfa.quantize import fp8_quantize
from zyfa.rotation import hadamard_matrix, rotate, rotate_qk, rotation_matrix

__version__ = "0.6.5"

__all__ = [
    "__version__",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "fp8_quantize",
    "hadamard_matrix",
    "hot_path",
    "reference",
    "rotate",
    "rotate_qk",
    "rotation_matrix",
]


def _warn_without_extension() -> None:
    """A GPU machine without zyfa._C runs every call through the slower Python path: say so once, at
    import (an explicit ZYFA_NO_CPP opt-out stays quiet)."""
    path = hot_path()
    if "is not built" in path and torch.cuda.is_available():
        warnings.warn(
            f"zyfa: GPU calls take the {path} path, with more host time per call. "
            "Install torch first, then `pip install --no-build-isolation packages/zyfa-torch`.",
            RuntimeWarning,
            stacklevel=2,
        )


_warn_without_extension()
