"""ZYFA itself, through `zyfa.flash_attn_func`: BF16, and FP8 with exact P or lean P; and the same problems
packed into one token dimension through `zyfa.flash_attn_varlen_func` (the serving path at the dense call's
work, so the two compare in one run).

On CUDA/ROCm tensors the op runs the zyfa_core kernel selected for (arch, dtype, d_qk, d_v, causal,
p_mode); on CPU tensors it runs `zyfa.reference` (the blockwise numerics), which is how the harness is
tested without a GPU.  Descales are passed as Python floats: a descale *tensor* is read on the host
inside the op (a device sync), which would also keep the call out of CUDA graphs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from zyfa_bench.argtypes import holds_kernel_build
from zyfa_bench.inputs import Inputs
from zyfa_bench.peers.base import Peer, Prepared, bshd_float, import_status, validate_once
from zyfa_bench.results import KERNEL_DIR_ENV
from zyfa_bench.spec import Spec

__all__ = ["ZyfaBF16", "ZyfaBaseline", "ZyfaFP8", "ZyfaVarlen"]


class _Zyfa(Peer):
    family = "zyfa"
    vendor = "any"

    def available(self) -> tuple[bool, str]:
        mod, why = import_status("zyfa")
        if mod is None:
            return False, why
        if not hasattr(mod, "flash_attn_func"):
            return False, "zyfa is importable but has no flash_attn_func"
        version = getattr(mod, "__version__", "?")
        where = "GPU kernels" if torch.cuda.is_available() else "CPU reference (no GPU)"
        return True, f"zyfa {version}: {where}"

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        # The op validates shapes itself with precise messages; CPU runs the reference.
        return True, ""


def _fp8_options(inputs: Inputs, p_mode: str) -> dict[str, object]:
    """The keyword arguments of an FP8 call: scale, mask, the per-tensor descales (Python floats), P mode."""
    return {
        "softmax_scale": inputs.softmax_scale,
        "causal": inputs.spec.causal,
        "q_descale": inputs.q_descale,
        "k_descale": inputs.k_descale,
        "v_descale": inputs.v_descale,
        "p_mode": p_mode,
    }


class ZyfaBF16(_Zyfa):
    """zyfa.flash_attn_func on BF16 inputs."""

    name = "zyfa-bf16"
    precision = "bf16"

    def _prepare(self, inputs: Inputs) -> Prepared:
        import zyfa

        q, k, v, scale, causal = inputs.q, inputs.k, inputs.v, inputs.softmax_scale, inputs.spec.causal
        prepared = Prepared(
            lambda: zyfa.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal), bshd_float
        )
        return validate_once(prepared, q.device)


class ZyfaFP8(_Zyfa):
    """zyfa.flash_attn_func on e4m3fn inputs with per-tensor descales, BF16 output; exact, lean or f16 P."""

    precision = "fp8"
    NOTES = {
        "exact": "exact P: e4m3(exp2)",
        "lean": "lean P: e4m3 code of P from one FMA (the default on sm90)",
        "f16": "f16 P: P.V in f16 (P = f16(exp2), V e4m3 -> f16 in the kernel; sm90 only)",
    }

    def __init__(self, p_mode: str) -> None:
        if p_mode not in self.NOTES:
            raise ValueError(f"p_mode must be one of {tuple(self.NOTES)}, got {p_mode!r}")
        self.p_mode = p_mode
        self.name = f"zyfa-fp8-{p_mode}"
        self.note = self.NOTES[p_mode]

    def _prepare(self, inputs: Inputs) -> Prepared:
        import zyfa

        q8, k8, v8 = inputs.q8, inputs.k8, inputs.v8
        kw = _fp8_options(inputs, self.p_mode)
        return validate_once(Prepared(lambda: zyfa.flash_attn_func(q8, k8, v8, **kw), bshd_float), q8.device)


class ZyfaVarlen(_Zyfa):
    """zyfa.flash_attn_varlen_func on the spec's batch packed into one token dimension: every sequence at
    the spec's lengths (uniform `cu_seqlens`), so its work is the dense call's; BF16, or FP8 with lean P."""

    family = "zyfa-varlen"

    def __init__(self, precision: str) -> None:
        if precision not in ("bf16", "fp8"):
            raise ValueError(f"precision must be 'bf16' or 'fp8', got {precision!r}")
        self.precision = precision
        self.name = f"zyfa-varlen-{precision}"
        self.note = "flash_attn_varlen_func, the batch packed at uniform lengths" + (
            ", lean P" if precision == "fp8" else ""
        )

    def _prepare(self, inputs: Inputs) -> Prepared:
        import zyfa

        spec = inputs.spec
        fp8 = self.precision == "fp8"
        q, k, v = (inputs.q8, inputs.k8, inputs.v8) if fp8 else (inputs.q, inputs.k, inputs.v)
        rows = torch.arange(spec.batch + 1, device=q.device, dtype=torch.int32)
        cu_q, cu_k = rows * spec.seqlen_q, rows * spec.seqlen_k
        packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]  # [batch * seqlen, heads, dim]
        kw = (
            _fp8_options(inputs, "lean")
            if fp8
            else {"softmax_scale": inputs.softmax_scale, "causal": spec.causal}
        )

        def call() -> object:
            return zyfa.flash_attn_varlen_func(*packed, cu_q, cu_k, spec.seqlen_q, spec.seqlen_k, **kw)

        def result(out: object) -> torch.Tensor:  # back to [batch, seqlen_q, heads_q, d_v]
            return bshd_float(out).reshape(spec.batch, spec.seqlen_q, spec.heads_q, spec.d_v)

        return validate_once(Prepared(call, result), q.device)


@contextlib.contextmanager
def kernel_dir(path: str) -> Iterator[None]:
    """$ZYFA_KERNEL_DIR = path inside the block (zyfa keys its kernel caches by it), restored after."""
    saved = os.environ.get(KERNEL_DIR_ENV)
    os.environ[KERNEL_DIR_ENV] = path
    try:
        yield
    finally:
        if saved is None:
            del os.environ[KERNEL_DIR_ENV]
        else:
            os.environ[KERNEL_DIR_ENV] = saved


def on_kernels(directory: str, call: Callable[[], object]) -> Callable[[], object]:
    """`call`, run with $ZYFA_KERNEL_DIR = `directory` (another kernel build), restored after each call."""

    def on_build() -> object:
        with kernel_dir(directory):
            return call()

    return on_build


class ZyfaBaseline(Peer):
    """A ZYFA implementation on another kernel build: `inner`'s call with $ZYFA_KERNEL_DIR = `kernel_dir`.

    The "before" side of a before/after comparison timed in the same process and rounds as the
    installed kernels (`zyfa-bench throughput --baseline-kernels DIR`); named `<inner>-baseline`.
    """

    family = "zyfa-baseline"
    vendor = "any"

    def __init__(self, inner: _Zyfa, kernel_dir: str) -> None:
        self.inner = inner
        self.kernel_dir = str(Path(kernel_dir).resolve())
        self.name = f"{inner.name}-baseline"
        self.precision = inner.precision
        self.note = f"{inner.name} on the kernels in {self.kernel_dir}"

    def available(self) -> tuple[bool, str]:
        if not holds_kernel_build(self.kernel_dir):
            return False, f"{self.kernel_dir} holds no manifest.json"
        return self.inner.available()

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        return self.inner.supports(spec, device)

    def _prepare(self, inputs: Inputs) -> Prepared:
        with kernel_dir(self.kernel_dir):
            prepared = self.inner._prepare(inputs)
        return Prepared(on_kernels(self.kernel_dir, prepared.call), prepared.result, prepared.notes)
