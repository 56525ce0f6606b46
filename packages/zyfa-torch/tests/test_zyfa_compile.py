"""torch.compile around models that call zyfa.flash_attn_func, on CPU (the op runs the reference there).

Checked: one graph and no graph break (torch._dynamo.explain, fullgraph=True), the same bits as eager
(backend aot_eager runs the same aten ops as eager, so any difference would come from tracing our code
wrongly), and compiles counted with a counting backend: only a shape or dtype change recompiles. The
GPU twin (inductor, CUDA graphs) is test_zyfa_gpu_graphs.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounter
from zyfa_testutil import make_qkv, quantize3

import zyfa


class TinyAttention(nn.Module):
    """A model layer's attention: fused qkv projection -> zyfa -> output projection, in bf16.

    fp8: None (BF16), "tensor" (q, k, v quantised per call; tensor descales, read by the op) or "float"
    (fixed descales calibrated once with `calibrate`, passed as Python floats: the no-sync path).
    """

    def __init__(self, fp8: str | None = None, hidden: int = 256, heads: int = 2, heads_kv: int = 1) -> None:
        super().__init__()
        self.fp8, self.heads, self.heads_kv, self.d = fp8, heads, heads_kv, 128
        self.qkv = nn.Linear(hidden, (heads + 2 * heads_kv) * self.d, bias=False, dtype=torch.bfloat16)
        self.o = nn.Linear(heads * self.d, hidden, bias=False, dtype=torch.bfloat16)
        self.descales: tuple[float, float, float] | None = None

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, self.heads + 2 * self.heads_kv, self.d)
        q, k, v = qkv.split([self.heads, self.heads_kv, self.heads_kv], dim=2)  # strided views, no copy
        return q, k, v

    @torch.no_grad()
    def calibrate(self, x: torch.Tensor) -> None:
        """Fixed descales from one sample, read on the host once (fp8_quantize(as_float=True))."""
        q, k, v = self._qkv(x)
        self.descales = tuple(zyfa.fp8_quantize(t, as_float=True)[1] * 2 for t in (q, k, v))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        kw = {}
        if self.fp8 == "tensor":
            (q, dq), (k, dk), (v, dv) = (zyfa.fp8_quantize(t) for t in (q, k, v))
            kw = {"q_descale": dq, "k_descale": dk, "v_descale": dv}
        elif self.fp8 == "float":
            pairs = zip((q, k, v), self.descales, strict=True)
            q, k, v = (zyfa.fp8_quantize(t, descale=d)[0] for t, d in pairs)
            kw = dict(zip(("q_descale", "k_descale", "v_descale"), self.descales, strict=True))
        out = zyfa.flash_attn_func(q, k, v, causal=True, **kw)
        return self.o(out.flatten(2))


def _model(fp8: str | None, seed: int = 0) -> tuple[TinyAttention, torch.Tensor]:
    torch.manual_seed(seed)
    model = TinyAttention(fp8).eval()
    x = torch.randn(2, 80, 256, dtype=torch.bfloat16)
    if fp8 == "float":
        model.calibrate(x)
    return model, x


@pytest.mark.parametrize("fp8", [None, "tensor", "float"])
def test_fullgraph_no_breaks_same_bits(fp8):
    model, x = _model(fp8)
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(compiled, eager)
    assert not torch.isnan(eager.float()).any()


def test_recompiles_only_on_shape_or_dtype_change():
    torch._dynamo.reset()
    counter = CompileCounter()

    def attend(q, k, v, dq=None, dk=None, dv=None):
        return zyfa.flash_attn_func(q, k, v, causal=True, q_descale=dq, k_descale=dk, v_descale=dv)

    compiled = torch.compile(attend, backend=counter, fullgraph=True, dynamic=False)
    q, k, v = make_qkv(1, 64, 64, 2, 1, seed=1)
    for _ in range(3):
        assert torch.equal(compiled(q, k, v), attend(q, k, v))
    q2, k2, v2 = make_qkv(1, 64, 64, 2, 1, seed=2)  # new values, same shapes: no recompile
    assert torch.equal(compiled(q2, k2, v2), attend(q2, k2, v2)) and counter.frame_count == 1
    q3, k3, v3 = make_qkv(1, 96, 96, 2, 1, seed=3)  # new shape: one recompile
    assert torch.equal(compiled(q3, k3, v3), attend(q3, k3, v3)) and counter.frame_count == 2
    # New dtype (FP8, tensor descales): one more; new descale VALUES in tensors recompile nothing.
    for seed in (4, 5, 6):
        q8, k8, v8, ds = quantize3(*make_qkv(1, 64, 64, 2, 1, seed=seed, q_scale=float(seed)))
        t = [torch.tensor(d) for d in ds]
        assert torch.equal(compiled(q8, k8, v8, *t), attend(q8, k8, v8, *ds))
    assert counter.frame_count == 3


def test_dynamic_shapes_serve_new_seqlens_without_recompiling():
    """After one seqlen change dynamo traces seqlen symbolically (our fake impl takes symbolic shapes);
    later seqlens reuse that graph and give the eager bits (ragged lengths vs the 64-key blocks)."""
    torch._dynamo.reset()
    counter = CompileCounter()

    def attend(q, k, v):
        out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        return out, lse

    compiled = torch.compile(attend, backend=counter, fullgraph=True)
    for seqlen in (64, 80, 100, 130):
        q, k, v = make_qkv(2, seqlen, seqlen, 2, 1, seed=seqlen)
        for got, want in zip(compiled(q, k, v), attend(q, k, v), strict=True):
            assert torch.equal(got, want)
    assert counter.frame_count == 2


def test_float_descales_are_graph_constants():
    """Python float descales are specialised into the graph (dynamo's rule for floats reaching an op):
    a new value gives a new graph, never a stale result. Per-call descales belong in tensors."""
    torch._dynamo.reset()
    q8, k8, v8, ds = quantize3(*make_qkv(1, 64, 64, 2, 1, seed=7))

    def attend(q, k, v, dq):
        return zyfa.flash_attn_func(q, k, v, causal=True, q_descale=dq, k_descale=ds[1], v_descale=ds[2])

    compiled = torch.compile(attend, backend="eager", fullgraph=True)
    for scale in (1.0, 2.0, 0.5):
        assert torch.equal(compiled(q8, k8, v8, ds[0] * scale), attend(q8, k8, v8, ds[0] * scale))


def test_invalid_values_still_raise_under_compile():
    q8, k8, v8, ds = quantize3(*make_qkv(1, 32, 32, 2, 1, seed=8))

    def attend(q, k, v, dk):
        return zyfa.flash_attn_func(q, k, v, causal=True, q_descale=ds[0], k_descale=dk, v_descale=ds[2])

    compiled = torch.compile(attend, backend="eager", fullgraph=True)
    with pytest.raises(ValueError, match="k_descale must be finite and > 0"):
        compiled(q8, k8, v8, torch.tensor(-1.0))


def test_fp8_quantize_as_float_refuses_inside_compile():
    x = torch.randn(4, 128)
    with pytest.raises(RuntimeError, match="as_float=True"):
        torch.compile(lambda t: zyfa.fp8_quantize(t, as_float=True), backend="eager", fullgraph=True)(x)
