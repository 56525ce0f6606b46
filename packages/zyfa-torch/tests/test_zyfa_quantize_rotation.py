"""fp8_quantize (power-of-two per-tensor scale, RNE saturating e4m3fn) and the Hadamard rotations."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from zyfa_testutil import make_qkv, quantize3, rel_err

import zyfa
from zyfa import reference as R


def _log2_int(x: float) -> int:
    m, e = math.frexp(x)
    assert m == 0.5, f"{x} is not a power of two"
    return e - 1


@settings(max_examples=80, deadline=None)
@given(amax=st.floats(1e-30, 1e30), seed=st.integers(0, 2**20))
def test_descale_is_smallest_power_of_two_that_fits(amax, seed):
    """descale = 2^ceil(log2(amax / 448)): amax / descale lands in (224, 448]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(257, generator=g) * 2 - 1
    x = x / x.abs().max() * amax
    x8, descale = zyfa.fp8_quantize(x)
    assert descale.dtype == torch.float32 and descale.shape == () and x8.dtype == torch.float8_e4m3fn
    a = x.abs().max().item()  # amax after the fp32 rounding of x
    e = _log2_int(descale.item())
    assert a <= 448 * 2.0**e and a > 448 * 2.0 ** (e - 1)


def test_descale_exact_powers_and_zero():
    for a in (448.0, 448.0 * 2**-20, 448.0 * 2**20, 1.0, 224.0, 224.0001):
        _, d = zyfa.fp8_quantize(torch.tensor([a, -a / 3]))
        want = 2.0 ** math.ceil(math.log2(a / 448))
        assert d.item() == want, a
    x8, d = zyfa.fp8_quantize(torch.zeros(3, 4))
    assert d.item() == 1.0 and torch.all(x8.float() == 0)
    x8, d = zyfa.fp8_quantize(torch.zeros(0, 4))
    assert d.item() == 1.0 and x8.shape == (0, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_values_are_rne_of_x_over_descale(dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(64, 128, generator=g) * 3.7).to(dtype)
    x8, d = zyfa.fp8_quantize(x)
    want = R.round_to_e4m3fn(x.float() / d)  # division by a power of two is exact
    assert torch.equal(x8.float(), want)
    # Relative error of each normal value <= half an e4m3 step (2^-4).
    normal = (x.float() / d).abs() >= 2.0**-6
    err = ((x8.float() * d - x.float()).abs() / x.float().abs())[normal]
    assert err.max().item() <= 2.0**-4


def test_quantize_saturates_never_nan():
    """The largest element maps to at most 448 (never NaN), with conversions clamped first."""
    x = torch.tensor([448.0 * 3.99, -448.0 * 3.999, 1.0])
    x8, d = zyfa.fp8_quantize(x)
    assert not torch.isnan(x8.float()).any() and x8.float().abs().max().item() <= 448.0
    assert d.item() == 4.0


def test_quantize_keeps_device_and_shape():
    x = torch.randn(2, 3, 4, 128)
    x8, d = zyfa.fp8_quantize(x)
    assert x8.shape == x.shape and x8.device == x.device and d.device == x.device
    with pytest.raises(TypeError, match="floating"):
        zyfa.fp8_quantize(torch.ones(3, dtype=torch.int32))


@pytest.mark.parametrize("n", [64, 128, 192, 256])
def test_rotation_is_orthogonal(n):
    h = zyfa.hadamard_matrix(n, dtype=torch.float64)
    torch.testing.assert_close(h @ h.T, torch.eye(n, dtype=torch.float64), rtol=0, atol=1e-12)
    # A Hadamard matrix: every entry +-1/sqrt(n), so each output channel mixes all n input channels.
    assert torch.allclose(h.abs(), torch.full_like(h, 1 / math.sqrt(n)))
    r = zyfa.rotation_matrix(n, seed=3, dtype=torch.float64)
    torch.testing.assert_close(r @ r.T, torch.eye(n, dtype=torch.float64), rtol=0, atol=1e-12)
    assert not torch.equal(r, zyfa.rotation_matrix(n, seed=4, dtype=torch.float64))
    assert torch.equal(r, zyfa.rotation_matrix(n, seed=3, dtype=torch.float64))


def test_unsupported_rotation_size():
    with pytest.raises(ValueError, match="12\\*2\\^a"):
        zyfa.hadamard_matrix(96 + 4)


@pytest.mark.parametrize("d", [128, 192])
def test_rotate_qk_preserves_scores(d):
    """(qR)(kR)ᵀ = q kᵀ."""
    g = torch.Generator().manual_seed(d)
    q, k = (
        torch.randn(2, 17, 3, d, generator=g, dtype=torch.float64),
        torch.randn(2, 19, 3, d, generator=g, dtype=torch.float64),
    )
    qr, kr = zyfa.rotate_qk(q, k, seed=9)
    assert qr.dtype == q.dtype and qr.shape == q.shape
    s = torch.einsum("bihd,bjhd->bhij", q, k)
    torch.testing.assert_close(torch.einsum("bihd,bjhd->bhij", qr, kr), s, rtol=1e-12, atol=1e-10)
    assert not torch.allclose(qr, q)
    with pytest.raises(ValueError, match="head_dim"):
        zyfa.rotate_qk(q, k[..., :64])


def test_rotation_spreads_outlier_channels():
    """An outlier channel inflates amax, hence every value's quantisation step; rotating q and k
    first (rotate=True) shrinks the FP8 attention error vs float64 attention on the original inputs."""
    q, k, v = make_qkv(1, 128, 128, 2, 2, seed=2)
    q, k = q.float(), k.float()
    q[..., 5] *= 30.0  # outlier channel, as in real activations
    k[..., 5] *= 30.0
    truth, _ = R.attention_dense_f64(q, k, v.float(), 0.02, True)
    errs = []
    for rotate in (False, True):
        (q8, dq), (k8, dk) = (zyfa.fp8_quantize(x, rotate=rotate, seed=5) for x in (q, k))
        v8, dv = zyfa.fp8_quantize(v)
        out, _ = R.attention(
            q8, k8, v8, softmax_scale=0.02, q_descale=dq.item(), k_descale=dk.item(), v_descale=dv.item()
        )
        errs.append(rel_err(out, truth))
    assert errs[1] < 0.5 * errs[0]  # measured 0.03 vs 0.10-0.18 over seeds


def test_quantize3_helper_roundtrip():
    q, k, v = make_qkv(1, 8, 8, 1, 1, seed=0)
    q8, _, _, (dq, _, _) = quantize3(q, k, v)
    assert rel_err(q8.float() * dq, q.float()) < 0.04


def test_as_float_and_fixed_descale():
    """as_float returns the same descale as a Python float; a fixed descale skips the amax entirely."""
    x = torch.randn(3, 40, 2, 128, generator=torch.Generator().manual_seed(11)) * 5
    x8, d = zyfa.fp8_quantize(x)
    x8f, df = zyfa.fp8_quantize(x, as_float=True)
    assert isinstance(df, float) and df == d.item() and torch.equal(x8f.float(), x8.float())
    # A fixed descale: e4m3(x / descale), saturating; returned as given.
    fixed = df / 4  # 4x too small: the largest values saturate at 448
    x8s, ds = zyfa.fp8_quantize(x, descale=fixed)
    assert ds == fixed and x8s.float().abs().max().item() == 448.0
    assert torch.equal(x8s.float(), R.round_to_e4m3fn((x.float() / fixed).clamp(-448, 448)))
    x8r, _ = zyfa.fp8_quantize(x, descale=df, rotate=True, seed=2)
    assert torch.equal(x8r.float(), R.round_to_e4m3fn((zyfa.rotate(x.float(), seed=2) / df).clamp(-448, 448)))
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="descale must be finite and > 0"):
            zyfa.fp8_quantize(x, descale=bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("fixed", [None, 0.5], ids=["amax", "fixed"])
def test_non_finite_input_is_refused(bad, fixed):
    """One NaN or Inf among fresh random values is refused (it would set, or saturate, the whole tensor);
    check_finite=False skips the check and quantises as documented."""
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(4)) * 1000
    x[17, 3] = bad
    with pytest.raises(ValueError, match=r"holds 1 NaN or Inf value"):
        zyfa.fp8_quantize(x, descale=fixed)
    with pytest.raises(ValueError, match=r"NaN or Inf"):
        zyfa.fp8_quantize(x, descale=fixed, as_float=True, rotate=True)
    # Unchecked, as documented: a NaN becomes e4m3fn's NaN code; an Inf saturates under a fixed
    # descale and makes the computed descale inf.
    x8, d = zyfa.fp8_quantize(x, descale=fixed, check_finite=False)
    if math.isnan(bad):
        assert torch.isnan(x8.float()[17, 3]) and torch.isnan(x8.float()).sum() == 1
    elif fixed is not None:
        assert x8.float()[17, 3].item() == math.copysign(448.0, bad)
    else:
        assert d.item() == math.inf
    # An input finite in float64 but beyond float32 becomes Inf in the float32 conversion: refused too.
    with pytest.raises(ValueError, match="after the float32 conversion"):
        zyfa.fp8_quantize(torch.tensor([1.0, 1e300], dtype=torch.float64))


@pytest.mark.parametrize("amax", [1.4e-45, 1e-40, 5e-36])
def test_tiny_amax_gets_the_smallest_normal_descale(amax):
    """An amax below 448 * 2^-126 gives descale 2^-126 (never 0 or a subnormal); values keep their sign
    and quantise like x / 2^-126."""
    x = torch.tensor([amax, -amax / 2, 0.0])
    x8, d = zyfa.fp8_quantize(x)
    assert d.item() == 2.0**-126 and math.isfinite(d.item())
    assert torch.equal(x8.float(), R.round_to_e4m3fn(x / 2.0**-126))
    _, df = zyfa.fp8_quantize(x, as_float=True)
    assert df == 2.0**-126


def test_fixed_descales_are_checked_after_narrowing_and_as_tensors():
    """A float descale is checked as the float32 the division uses (1e-50 is 0 there, 1e39 inf); a tensor
    descale gets the same checks, plus shape, dtype and device."""
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(5))
    for bad in (1e-50, 1e39, -2.0, 0.0, math.nan):
        with pytest.raises(ValueError, match="finite and > 0 as a float32"):
            zyfa.fp8_quantize(x, descale=bad)
        with pytest.raises(ValueError, match="finite and > 0 as a float32"):
            zyfa.fp8_quantize(x, descale=torch.tensor(bad))
    for bad in (torch.ones(2), torch.tensor(1), torch.tensor(1.0, device="meta")):
        with pytest.raises(ValueError, match="1-element floating tensor on x's device .* or the CPU"):
            zyfa.fp8_quantize(x, descale=bad)
    with pytest.raises(TypeError, match="descale must be a float"):
        zyfa.fp8_quantize(x, descale="0.5")
    x8, d = zyfa.fp8_quantize(x, descale=torch.tensor(0.25, dtype=torch.float64))
    assert d.dtype == torch.float32 and d.item() == 0.25
    assert torch.equal(x8.float(), R.round_to_e4m3fn(x / 0.25))
    # The float32 bounds exactly: the largest finite float32 and the smallest subnormal pass.
    for edge in (float(torch.finfo(torch.float32).max), 2.0**-149):
        assert zyfa.fp8_quantize(x, descale=edge)[1] == edge


@pytest.mark.parametrize("d", [128, 192])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rotation_fast_path_agrees_with_plain(d, dtype):
    """Fast path: one fp32 matmul with R cached per (d, seed, dtype, device); plain: R rebuilt, float64.
    fp32 agrees to rounding (d terms of fp32 products: <= ~d * 2^-24 relative, 1e-5 here); bf16 outputs
    differ at most where the fp32 sum lands next to a bf16 rounding boundary: by one bf16 step (at most
    2^-7 relative), in a small fraction of elements."""
    x = (torch.randn(2, 33, 3, d, generator=torch.Generator().manual_seed(d)) * 3).to(dtype)
    fast, plain = zyfa.rotate(x, seed=5), zyfa.rotate(x, seed=5, fast=False)
    assert fast.dtype == plain.dtype == dtype
    if dtype == torch.float64:
        torch.testing.assert_close(fast, plain, rtol=1e-12, atol=1e-12)
    elif dtype == torch.float32:
        assert rel_err(fast, plain) < 1e-6
        torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)
    else:
        diff = (fast.double() - plain.double()).abs()
        assert (diff <= plain.double().abs() * 2.0**-7).all()  # one bf16 step: <= 2^-7 relative
        assert (diff > 0).double().mean().item() < 0.02
    hits = zyfa.rotation._cached_rotation.cache_info().hits
    zyfa.rotate(x, seed=5)
    assert zyfa.rotation._cached_rotation.cache_info().hits == hits + 1  # R is not rebuilt per call
    qr, kr = zyfa.rotate_qk(x, x, seed=5, fast=False)
    assert torch.equal(qr, plain) and torch.equal(kr, plain)


def test_rotation_fast_path_traces_as_a_constant():
    """Under torch.compile R is a graph constant: rotate + quantise trace into one graph, same bits."""
    x = torch.randn(2, 16, 2, 192, generator=torch.Generator().manual_seed(3))

    def quant(t):
        return zyfa.fp8_quantize(t, rotate=True, seed=7)

    explained = torch._dynamo.explain(quant)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    (got8, got_d), (want8, want_d) = torch.compile(quant, backend="aot_eager", fullgraph=True)(x), quant(x)
    assert torch.equal(got8.float(), want8.float()) and torch.equal(got_d, want_d)


@pytest.mark.parametrize("d", [128, 192])
def test_rotated_bf16_attention_is_unchanged_up_to_rounding(d):
    """(qR)(kR)ᵀ = qkᵀ: with bf16 q, k rotated (fast path, rounded to bf16 again) the attention output
    stays within BF16 rounding of the unrotated one, and as close to float64 truth (FA3's 2x rule)."""
    q, k, v = make_qkv(2, 150, 150, 4, 2, d, 128, seed=d, q_scale=2.0)
    qr, kr = zyfa.rotate_qk(q, k, seed=3)
    truth, _ = R.attention_dense_f64(q, k, v, causal=True)
    plain = zyfa.flash_attn_func(q, k, v, causal=True)
    rotated = zyfa.flash_attn_func(qr, kr, v, causal=True)
    assert rel_err(rotated, truth) <= 5e-3
    assert rel_err(rotated, truth) <= 2 * rel_err(plain, truth) + 1e-3
    assert rel_err(rotated, plain) <= 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")
def test_quantize_checks_on_the_gpu():
    """The same refusals and bounds for GPU tensors (the finiteness flag is read on the host)."""
    x = torch.randn(64, 128, device="cuda")
    x[3, 4] = float("nan")
    with pytest.raises(ValueError, match="holds 1 NaN or Inf value"):
        zyfa.fp8_quantize(x)
    _, d = zyfa.fp8_quantize(torch.full((8,), 1.4e-45, device="cuda"))
    assert d.item() == 2.0**-126
    for bad in (torch.tensor(0.0, device="cuda"), torch.tensor(float("inf"), device="cuda")):
        with pytest.raises(ValueError, match="finite and > 0 as a float32"):
            zyfa.fp8_quantize(x.nan_to_num(), descale=bad)
