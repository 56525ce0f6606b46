"""zyfa.flash_attn_func on CPU tensors: numerics against float64, flash-attn conventions, every
validation error. (Tolerances as in test_zyfa_reference.py, whose docstring derives them.)"""

from __future__ import annotations

import math

import pytest
import torch
from zyfa_testutil import lse_err, make_qkv, quantize3, rel_err

import zyfa
from zyfa import reference as R

BF16_TOL = 5e-3
FP8_TOL = {None: 0.04, "exact": 0.04, "lean": 0.06}


def _fp8_call(q, k, v, **kw):
    (q8, dq), (k8, dk), (v8, dv) = (zyfa.fp8_quantize(x) for x in (q, k, v))
    return (q8, k8, v8, (dq, dk, dv)), zyfa.flash_attn_func(
        q8, k8, v8, causal=True, q_descale=dq, k_descale=dk, v_descale=dv, **kw
    )


@pytest.mark.parametrize(
    ("sq", "sk", "hq", "hkv", "dqk"),
    [(128, 128, 4, 2, 128), (200, 200, 4, 1, 128), (90, 200, 2, 2, 192), (200, 90, 4, 4, 192)],
)
def test_bf16_vs_dense(sq, sk, hq, hkv, dqk):
    q, k, v = make_qkv(1, sq, sk, hq, hkv, dqk, 128, seed=sq * 7 + sk, q_scale=2.0)
    out, lse, probs = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert probs is None and out.dtype == torch.bfloat16 and out.shape == (1, sq, hq, 128)
    assert lse.dtype == torch.float32 and lse.shape == (1, hq, sq)
    ref, ref_lse = R.attention_dense_f64(q, k, v, causal=True)
    assert rel_err(out, ref) <= BF16_TOL
    assert lse_err(lse, ref_lse) <= 1e-4
    # The CPU path IS the reference with block_n 64.
    want, want_lse = R.attention(q, k, v, block_n=64)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("p_mode", [None, "exact", "lean"])
@pytest.mark.parametrize(("sq", "sk", "dqk"), [(160, 160, 128), (100, 230, 192), (230, 100, 128)])
def test_fp8_vs_dense(sq, sk, dqk, p_mode):
    q, k, v = make_qkv(1, sq, sk, 4, 2, dqk, 128, seed=sq + sk + dqk, q_scale=2.0)
    (q8, k8, v8, ds), (out, lse, _) = _fp8_call(q, k, v, p_mode=p_mode, return_attn_probs=True)
    ds = tuple(d.item() for d in ds)
    ref, _ = R.attention_dense_f64(q8, k8, v8, None, True, *ds)
    assert rel_err(out, ref) <= FP8_TOL[p_mode]
    want, want_lse = R.attention(
        q8, k8, v8, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], p_mode=p_mode or "exact"
    )
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    # Against the ORIGINAL bf16 inputs the input quantisation adds its share: still a few percent.
    truth, _ = R.attention_dense_f64(q, k, v, causal=True)
    assert rel_err(out, truth) <= 0.08


def test_descales_as_floats_tensors_and_one_element():
    q, k, v = make_qkv(1, 64, 64, 2, 2, seed=1)
    q8, k8, v8, ds = quantize3(q, k, v)
    a = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    t = [torch.tensor(d) for d in ds]
    b = zyfa.flash_attn_func(
        q8, k8, v8, causal=True, q_descale=t[0], k_descale=t[1].reshape(1), v_descale=t[2].double()
    )
    assert torch.equal(a, b)
    # v_descale scales the output (a power of two: exactly).
    c = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2] * 4)
    assert torch.equal(c.float(), a.float() * 4)


def test_softmax_scale_and_default():
    q, k, v = make_qkv(1, 50, 50, 2, 2, seed=2)
    default = zyfa.flash_attn_func(q, k, v, causal=True)
    explicit = zyfa.flash_attn_func(q, k, v, softmax_scale=1 / math.sqrt(128), causal=True)
    assert torch.equal(default, explicit)
    other = zyfa.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True)
    ref, _ = R.attention_dense_f64(q, k, v, 0.3, True)
    assert rel_err(other, ref) <= BF16_TOL


def test_bottom_right_causal_like_flash_attn():
    """seqlen_q < seqlen_k: the last query sees every key, the first sees seqlen_k - seqlen_q + 1."""
    q, k, v = make_qkv(1, 3, 8, 1, 1, seed=3)
    out = zyfa.flash_attn_func(q, k, v, causal=True)
    for i in range(3):
        visible = 8 - 3 + i + 1
        want, _ = R.attention_dense_f64(q[:, i : i + 1], k[:, :visible], v[:, :visible], causal=False)
        assert rel_err(out[:, i : i + 1], want) <= BF16_TOL


def test_non_contiguous_views_match():
    """Views transposed from [batch, heads, seqlen, d] (last dim contiguous) give the same result."""
    g = torch.Generator().manual_seed(4)
    qh, kh, vh = (torch.randn(2, h, 96, 128, generator=g).bfloat16() for h in (4, 2, 2))
    q, k, v = (x.transpose(1, 2) for x in (qh, kh, vh))
    assert not q.is_contiguous()
    a = zyfa.flash_attn_func(q, k, v, causal=True)
    b = zyfa.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(a, b) and a.is_contiguous()


@pytest.mark.parametrize(
    "shape", [(0, 16, 16), (2, 0, 16), (2, 16, 0)], ids=["batch0", "seqlen_q0", "seqlen_k0"]
)
def test_empty_inputs(shape):
    b, sq, sk = shape
    q, k, v = make_qkv(b, sq, sk, 4, 2, seed=0)
    out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.shape == (b, sq, 4, 128) and out.dtype == torch.bfloat16 and lse.shape == (b, 4, sq)
    assert torch.all(out == 0) and torch.all(lse == math.inf)  # no key is visible anywhere
    q8, k8, v8, ds = quantize3(q, k, v)
    out8 = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    assert out8.shape == out.shape and torch.all(out8 == 0)


def test_deterministic():
    q, k, v = make_qkv(1, 130, 130, 2, 1, seed=5)
    (_, out1), (_, out2) = _fp8_call(q, k, v, p_mode="lean"), _fp8_call(q, k, v, p_mode="lean")
    assert torch.equal(out1, out2)
    assert torch.equal(
        zyfa.flash_attn_func(q, k, v, causal=True),
        zyfa.flash_attn_func(q, k, v, causal=True, deterministic=True),
    )


def test_backward_is_a_clear_error():
    q, k, v = (x.requires_grad_() for x in make_qkv(1, 16, 16, 2, 2, seed=6))
    out = zyfa.flash_attn_func(q, k, v, causal=True)
    assert out.requires_grad
    with pytest.raises(NotImplementedError, match="forward-only"):
        out.float().sum().backward()


# ------------------------------------------------ validation: every error names what is supported

UNSUPPORTED = [
    ({"dropout_p": 0.1}, "dropout_p"),
    ({"dropout_p": 0.1, "return_attn_probs": True}, "return_attn_probs with dropout"),
    ({"window_size": (128, 0)}, r"window_size=\(-1, -1\)"),
    ({"window_size": [-1, 4]}, "window_size"),
    ({"window_size": (None, None)}, r"window_size=\(None, None\)"),
    ({"softcap": 30.0}, "softcap=0.0"),
    ({"alibi_slopes": torch.ones(4)}, "alibi_slopes=None"),
]


@pytest.mark.parametrize(("kwargs", "match"), UNSUPPORTED)
def test_unsupported_options(kwargs, match):
    q, k, v = make_qkv(1, 8, 8, 4, 2, seed=0)
    kw = {"causal": True, **kwargs}
    with pytest.raises(NotImplementedError, match=match):
        zyfa.flash_attn_func(q, k, v, **kw)


def _bad(**changes):
    """q, k, v with one aspect broken."""
    q, k, v = make_qkv(2, 8, 8, 4, 2, seed=0)
    return {"q": q, "k": k, "v": v, **changes}


def _qkv_with_dims(dqk, dv):
    return make_qkv(1, 8, 8, 2, 2, dqk, dv, seed=0)


BAD_INPUTS = [
    (lambda: _bad(q=torch.randn(2, 8, 4, 128)), TypeError, "bfloat16 and torch.float8_e4m3fn"),
    (lambda: _bad(q=torch.randn(2, 8, 4, 128, dtype=torch.float16)), TypeError, "float16"),
    (lambda: _bad(k=torch.randn(2, 8, 2, 128).to(torch.float8_e4m3fn)), TypeError, "share one dtype"),
    (lambda: _bad(q=torch.randn(8, 4, 128).bfloat16()), ValueError, "4-D"),
    (lambda: _bad(q="q"), TypeError, "torch.Tensor"),
    (lambda: _bad(k=torch.randn(3, 8, 2, 128).bfloat16()), ValueError, "batch sizes differ"),
    (lambda: _bad(v=torch.randn(2, 9, 2, 128).bfloat16()), ValueError, "same seqlen_k"),
    (
        lambda: _bad(k=torch.randn(2, 8, 3, 128).bfloat16(), v=torch.randn(2, 8, 3, 128).bfloat16()),
        ValueError,
        "multiple of heads_kv",
    ),
    (lambda: _bad(v=torch.randn(2, 8, 4, 128).bfloat16()), ValueError, "same number of heads"),
    (lambda: _bad(k=torch.randn(2, 8, 2, 192).bfloat16()), ValueError, "same head_dim"),
    (
        lambda: dict(zip("qkv", _qkv_with_dims(64, 64), strict=True)),
        ValueError,
        r"\(128, 128\), \(192, 128\)",
    ),
    (lambda: dict(zip("qkv", _qkv_with_dims(192, 192), strict=True)), ValueError, "d_qk=192, d_v=192"),
    (lambda: dict(zip("qkv", _qkv_with_dims(128, 64), strict=True)), ValueError, "supported"),
    (lambda: _bad(q=torch.randn(2, 8, 128, 4).bfloat16().transpose(2, 3)), ValueError, r"\.contiguous\(\)"),
    (
        lambda: _bad(q=torch.randn(2 * 8 * 4 * 128 + 1).bfloat16()[1:].view(2, 8, 4, 128)),
        ValueError,
        "16-byte aligned",
    ),
    (lambda: _bad(q=torch.randn(2, 8, 4, 130).bfloat16()[..., :128]), ValueError, "16-byte aligned"),
    (
        lambda: _bad(q=torch.randn(2, 8, 4, 128, device="meta", dtype=torch.bfloat16)),
        ValueError,
        "one device",
    ),
]


@pytest.mark.parametrize(("make", "exc", "match"), BAD_INPUTS)
def test_bad_inputs(make, exc, match):
    with pytest.raises(exc, match=match):
        zyfa.flash_attn_func(**make(), causal=True)


def test_descale_rules():
    q, k, v = make_qkv(1, 8, 8, 2, 2, seed=0)
    with pytest.raises(ValueError, match="float8_e4m3fn inputs only"):
        zyfa.flash_attn_func(q, k, v, causal=True, q_descale=1.0)
    q8, k8, v8, ds = quantize3(q, k, v)
    with pytest.raises(ValueError, match="missing: v_descale"):
        zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=ds[0], k_descale=ds[1])
    bad = [
        (torch.ones(2), ValueError, "1-element"),
        (torch.ones((), dtype=torch.int32), ValueError, "floating"),
        ("1.0", TypeError, "float or a 1-element"),
        (True, TypeError, "float or a 1-element"),
        (0.0, ValueError, "finite and > 0"),
        (float("nan"), ValueError, "finite and > 0"),
        (-1.0, ValueError, "finite and > 0"),
    ]
    for value, exc, match in bad:
        with pytest.raises(exc, match=match):
            zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=value, k_descale=1.0, v_descale=1.0)


def test_p_mode_and_scale_rules():
    q, k, v = make_qkv(1, 8, 8, 2, 2, seed=0)
    with pytest.raises(ValueError, match="float8_e4m3fn inputs only"):
        zyfa.flash_attn_func(q, k, v, causal=True, p_mode="lean")
    q8, k8, v8, ds = quantize3(q, k, v)
    with pytest.raises(ValueError, match="'exact', 'lean', 'f16' or None"):
        zyfa.flash_attn_func(
            q8, k8, v8, causal=True, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], p_mode="fast"
        )
    for scale in (float("inf"), float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="softmax_scale"):
            zyfa.flash_attn_func(q, k, v, softmax_scale=scale, causal=True)


# Finite in float64 but not in the kernels' float32 (or their product, the one factor the kernels scale
# scores by, is not): each is refused on the CPU path with the message the GPU paths give.
FLOAT32_REFUSED = [
    ({"softmax_scale": 1e39}, r"softmax_scale = 1e\+39 overflows float32, the kernels' type"),
    ({"softmax_scale": 1e-50}, r"softmax_scale = 1e-50 is 0 in float32"),
    ({"softmax_scale": 0.0}, r"softmax_scale = 0.0 is 0 in float32"),
    ({"q_descale": 1e39}, r"q_descale = 1e\+39 overflows float32"),
    ({"v_descale": -1e39}, r"v_descale must be finite and > 0, got -1e\+39"),
    ({"k_descale": 1e-50}, r"k_descale = 1e-50 is 0 in float32"),
    ({"q_descale": 1e20, "k_descale": 1e20}, r"softmax_scale \* q_descale \* k_descale \* log2\(e\) = inf"),
    ({"q_descale": 1e-30, "k_descale": 1e-30}, r"softmax_scale \* q_descale \* k_descale \* log2\(e\) = 0.0"),
    ({"q_descale": torch.tensor(1e39, dtype=torch.float64)}, r"q_descale = 1e\+39 overflows float32"),
]


@pytest.mark.parametrize(("kwargs", "match"), FLOAT32_REFUSED)
def test_scales_are_checked_as_the_kernels_take_them(kwargs, match):
    q, k, v = make_qkv(1, 64, 64, 2, 2, seed=5)
    q8, k8, v8, ds = quantize3(q, k, v)
    kw = {"q_descale": ds[0], "k_descale": ds[1], "v_descale": ds[2], **kwargs}
    with pytest.raises(ValueError, match=match):
        zyfa.flash_attn_func(q8, k8, v8, causal=True, **kw)


def test_bf16_scale_is_checked_with_log2e_folded_in():
    """bf16 kernels scale scores by softmax_scale * log2(e): 3e38 fits float32, its product does not."""
    q, k, v = make_qkv(1, 16, 16, 2, 2, seed=6)
    with pytest.raises(ValueError, match=r"softmax_scale \* log2\(e\) = inf in float32"):
        zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=3e38)
    with pytest.raises(ValueError, match=r"softmax_scale = 1e\+39 overflows float32"):
        zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=1e39)


def test_extreme_but_representable_descales_are_accepted():
    """q_descale = 2**60 and k_descale = 2**-60 fit float32 and their product is exactly 1: the answer is
    bitwise the one with both descales 1.0 (powers of two scale exactly)."""
    q, k, v = make_qkv(1, 64, 64, 2, 2, seed=7)
    q8, k8, v8, _ = quantize3(q, k, v)
    plain = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=1.0, k_descale=1.0, v_descale=1.0)
    scaled = zyfa.flash_attn_func(
        q8, k8, v8, causal=True, q_descale=2.0**60, k_descale=2.0**-60, v_descale=1.0
    )
    assert torch.isfinite(plain.float()).all() and torch.equal(plain, scaled)


@pytest.mark.parametrize("device", ["meta", "cuda:0"])
def test_tensor_descales_on_another_device_are_refused(device):
    """A descale tensor on `meta` would send the call to the op's fake implementation (uninitialised
    output); one on a GPU is not on q's device (the CPU). Both are refused, through flash_attn_func
    and through the op directly; CPU tensors stay fine."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA or ROCm GPU")
    q, k, v = make_qkv(1, 64, 64, 2, 2, seed=8)
    q8, k8, v8, ds = quantize3(q, k, v)
    elsewhere = torch.tensor(1.0, device=device)
    message = rf"q_descale is a tensor on {device}; tensor descales must be on q's device \(cpu\) or the CPU"
    with pytest.raises(ValueError, match=message):
        zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=elsewhere, k_descale=ds[1], v_descale=ds[2])
    others = (torch.tensor(ds[1]), torch.tensor(ds[2]))
    with pytest.raises(ValueError, match=message):
        torch.ops.zyfa.fwd_tensor_descales(q8, k8, v8, 0.1, True, elsewhere, *others, False, None)
    cpu = zyfa.flash_attn_func(
        q8, k8, v8, causal=True, q_descale=torch.tensor(ds[0]), k_descale=ds[1], v_descale=ds[2]
    )
    assert torch.isfinite(cpu.float()).all()


def test_window_size_none_means_no_window():
    q, k, v = make_qkv(1, 32, 32, 2, 2, seed=9)
    expect = zyfa.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(zyfa.flash_attn_func(q, k, v, causal=True, window_size=None), expect)
    assert torch.equal(zyfa.flash_attn_func(q, k, v, causal=True, window_size=[-1, -1]), expect)
    with pytest.raises(ValueError, match="window_size must be a pair of ints or None, got int 3"):
        zyfa.flash_attn_func(q, k, v, causal=True, window_size=3)


def test_torch_compile_fullgraph():
    """flash_attn_func traces into one graph (validation on FakeTensors, the op through its fake impl)."""
    q, k, v = make_qkv(1, 64, 80, 2, 1, seed=8)
    q8, k8, v8, ds = quantize3(q, k, v)

    def fn(q, k, v, q8, k8, v8):
        out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        kw = {"q_descale": ds[0], "k_descale": ds[1], "v_descale": ds[2], "p_mode": "lean"}
        return out, lse, zyfa.flash_attn_func(q8, k8, v8, causal=True, **kw)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(q, k, v, q8, k8, v8), fn(q, k, v, q8, k8, v8), strict=True):
        assert torch.equal(got, want)
