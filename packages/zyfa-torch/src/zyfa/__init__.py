"""ZYFA: causal-prefill attention in BF16 and FP8 (e4m3fn in, BF16 out) for PyTorch.

Public API:
    flash_attn_func   flash-attn's forward signature; CUDA/ROCm tensors run ZYFA kernels through
                      zyfa_core, CPU tensors run the reference.
    fp8_quantize      per-tensor FP8 quantisation with a power-of-two descale (optionally rotated).
    rotate_qk         the same random Hadamard rotation of q and k ((qR)(kR)ᵀ = qkᵀ).
    reference         the ZYFA numerics in plain torch (`reference.attention`) and the float64 truth
                      (`reference.attention_dense_f64`).
"""

from zyfa import reference
from zyfa.interface import flash_attn_func
from zyfa.quantize import fp8_quantize
from zyfa.rotation import hadamard_matrix, rotate, rotate_qk, rotation_matrix

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "flash_attn_func",
    "fp8_quantize",
    "hadamard_matrix",
    "reference",
    "rotate",
    "rotate_qk",
    "rotation_matrix",
]
