"""The custom op zyfa::fwd: opcheck (schema, fake, autograd registration, AOT dispatch) on CPU, and the
GPU dispatch path with zyfa_core mocked (ZyfaFwdArgs fields, kernel selection, stream, no launch on
empty inputs)."""

from __future__ import annotations

import ctypes
import functools
import math
import sys
import types

import pytest
import torch
from zyfa_testutil import make_qkv, quantize3

import zyfa
from zyfa import _ops
from zyfa import reference as R


def _noncontig(b, sq, sk, hq, hkv, dtype, seed):
    """q, k, v as views transposed from [batch, heads, seqlen, d]: last dim contiguous, others not."""
    g = torch.Generator().manual_seed(seed)
    views = [
        torch.randn(b, h, s, 128, generator=g).to(dtype).transpose(1, 2)
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]
    assert not views[0].is_contiguous() and views[0].stride(-1) == 1
    return views


def _inputs(kind: str, fp8: bool):
    if kind == "contiguous":
        q, k, v = make_qkv(2, 40, 56, 4, 2, seed=1)
    elif kind == "noncontiguous":
        q, k, v = _noncontig(2, 40, 56, 4, 2, torch.bfloat16, seed=2)
    else:  # zero-size
        q, k, v = make_qkv(0, 40, 56, 4, 2, seed=3)
    if fp8:
        q, k, v = (x.float().clamp(-448, 448).to(torch.float8_e4m3fn) for x in (q, k, v))  # keeps strides
    assert q.is_contiguous() == (kind != "noncontiguous")
    return q, k, v, ((0.5, 0.25, 2.0) if fp8 else (1.0, 1.0, 1.0))


@pytest.mark.parametrize("return_lse", [True, False])
@pytest.mark.parametrize(("fp8", "p_mode"), [(False, None), (True, None), (True, "lean")])
@pytest.mark.parametrize("kind", ["contiguous", "noncontiguous", "zero-size"])
def test_opcheck(kind, fp8, p_mode, return_lse):
    q, k, v, ds = _inputs(kind, fp8)
    # test_schema watches every aten op inside the impl and compares inputs with torch.allclose, which
    # torch does not implement for float8 on CPU; the schema (no mutation, no aliasing) does not depend
    # on the dtype and is checked by the bf16 cases.
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic") if fp8 else None
    kw = {"test_utils": utils} if utils else {}
    torch.library.opcheck(torch.ops.zyfa.fwd.default, (q, k, v, 0.09, True, *ds, return_lse, p_mode), **kw)
    # The tensor-descale op: same checks; descales as 0-dim and 1-element float32 tensors.
    ts = (torch.tensor(ds[0]), torch.tensor([ds[1]]), torch.tensor(ds[2]))
    torch.library.opcheck(
        torch.ops.zyfa.fwd_tensor_descales.default, (q, k, v, 0.09, True, *ts, return_lse, p_mode), **kw
    )


def test_opcheck_seqlen_k_zero_and_grad_inputs():
    q, k, v = make_qkv(1, 16, 0, 2, 2, seed=4)
    torch.library.opcheck(torch.ops.zyfa.fwd.default, (q, k, v, 0.1, True, 1.0, 1.0, 1.0, True, None))
    q, k, v = (x.requires_grad_() for x in make_qkv(1, 16, 16, 2, 2, seed=5))
    torch.library.opcheck(
        torch.ops.zyfa.fwd.default,
        (q, k, v, 0.1, True, 1.0, 1.0, 1.0, True, None),
        test_utils=("test_schema", "test_faketensor"),
    )


def test_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 100, 8, 192, dtype=torch.float8_e4m3fn)
        k = torch.empty(2, 300, 2, 192, dtype=torch.float8_e4m3fn)
        v = torch.empty(2, 300, 2, 128, dtype=torch.float8_e4m3fn)
        out, lse = torch.ops.zyfa.fwd(q, k, v, 0.1, True, 1.0, 1.0, 1.0, True, "lean")
        assert out.shape == (2, 100, 8, 128) and out.dtype == torch.bfloat16
        assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32
        _, lse0 = torch.ops.zyfa.fwd(q, k, v, 0.1, True, 1.0, 1.0, 1.0, False, None)
        assert lse0.shape == (0,)


def test_op_rejects_descales_for_bf16():
    q, k, v = make_qkv(1, 8, 8, 2, 2, seed=0)
    with pytest.raises(ValueError, match="descales"):
        torch.ops.zyfa.fwd(q, k, v, 0.1, True, 2.0, 1.0, 1.0, True, None)
    one, two = torch.tensor(1.0), torch.tensor(2.0)
    with pytest.raises(ValueError, match="descales"):
        torch.ops.zyfa.fwd_tensor_descales(q, k, v, 0.1, True, one, two, one, True, None)


def test_ops_check_scalar_values_at_run_time():
    """Scale and descale values are checked inside the ops (flash_attn_func leaves them symbolic under
    torch.compile), for float and tensor descales alike."""
    q, k, v = make_qkv(1, 8, 8, 2, 2, seed=0)
    q8, k8, v8, ds = quantize3(q, k, v)
    with pytest.raises(ValueError, match="softmax_scale"):
        torch.ops.zyfa.fwd(q, k, v, float("nan"), True, 1.0, 1.0, 1.0, True, None)
    with pytest.raises(ValueError, match="k_descale must be finite and > 0"):
        torch.ops.zyfa.fwd(q8, k8, v8, 0.1, True, ds[0], -ds[1], ds[2], True, None)
    bad = (torch.tensor(ds[0]), torch.tensor(float("inf")), torch.tensor(ds[2]))
    with pytest.raises(ValueError, match="k_descale must be finite and > 0"):
        torch.ops.zyfa.fwd_tensor_descales(q8, k8, v8, 0.1, True, *bad, True, None)


@pytest.mark.parametrize("op", ["fwd", "fwd_tensor_descales"])
def test_backward_of_both_ops_is_a_clear_error(op):
    q, k, v = (x.requires_grad_() for x in make_qkv(1, 16, 16, 2, 2, seed=6))
    ones = (1.0, 1.0, 1.0) if op == "fwd" else tuple(torch.tensor(1.0) for _ in range(3))
    out, _ = getattr(torch.ops.zyfa, op)(q, k, v, 0.1, True, *ones, False, None)
    assert out.requires_grad
    with pytest.raises(NotImplementedError, match="forward-only"):
        out.float().sum().backward()


def test_tensor_descales_are_read_in_the_op():
    """flash_attn_func routes tensor (or mixed) descales to zyfa::fwd_tensor_descales: same bits as floats."""
    q, k, v = make_qkv(1, 40, 56, 4, 2, seed=13)
    (q8, dq), (k8, dk), (v8, dv) = (zyfa.fp8_quantize(x) for x in (q, k * 8, v / 4))
    floats = zyfa.flash_attn_func(
        q8, k8, v8, causal=True, q_descale=dq.item(), k_descale=dk.item(), v_descale=dv.item()
    )
    tensors = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=dq, k_descale=dk, v_descale=dv)
    mixed = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=dq, k_descale=dk.item(), v_descale=dv)
    assert torch.equal(floats, tensors) and torch.equal(floats, mixed)


# ------------------------------------------------------------------ GPU dispatch with zyfa_core mocked

_FIELDS = [
    *[(n, ctypes.c_void_p) for n in ("q", "k", "v", "out", "lse")],
    *[(f"{t}_stride_{d}", ctypes.c_int64) for t in ("q", "k", "v", "out") for d in ("batch", "seq", "head")],
    *[(n, ctypes.c_int32) for n in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "d_qk", "d_v")],
    ("flags", ctypes.c_uint32),
    *[(n, ctypes.c_float) for n in ("softmax_scale", "q_descale", "k_descale", "v_descale")],
    ("reserved", ctypes.c_uint64),
]


class _MockArgs(ctypes.Structure):
    """The header's struct (kernels/abi/zyfa_abi.h), typed: assigning a float to an int field fails."""

    _pack_ = 1
    _fields_ = _FIELDS


class _MockVarlenArgs(ctypes.Structure):
    """zyfa_varlen_args (kernels/abi/zyfa_abi.h, ABI 5), typed."""

    _fields_ = [
        *[
            (n, ctypes.c_void_p)
            for n in ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table", "descales")
        ],
        ("page_table_stride", ctypes.c_int64),
        *[(n, ctypes.c_int32) for n in ("page_size", "num_pages", "max_pages", "total_q", "total_k")],
        ("reserved", ctypes.c_uint32),
        ("item_counter", ctypes.c_void_p),
    ]


class _MockCore:
    """Stand-ins of zyfa_core.{abi, manifest, launcher}: record calls, run the reference as the 'kernel'."""

    def __init__(self, tile_n: int = 32, backend: str | None = "cuda", grid: str = "tiles") -> None:
        self.selects: list[tuple] = []
        self.workspaces: list[int | None] = []
        self.grid = grid
        self.layouts: list[str] = []
        self.launches: list[tuple] = []
        self.varlens: list[_MockVarlenArgs] = []
        self.tile_n, self.backend = tile_n, backend
        self.outputs: dict[int, torch.Tensor] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        abi = types.SimpleNamespace(
            ZyfaFwdArgs=_MockArgs,
            ZyfaVarlenArgs=_MockVarlenArgs,
            FLAG_CAUSAL=0x1,
            FLAG_LSE=0x2,
            FLAG_VARLEN=0x4,
            FLAG_PAGED=0x8,
            FLAG_DESCALE_TABLE=0x10,
        )
        manifest = types.SimpleNamespace(select=self.select)
        launcher = types.SimpleNamespace(
            available_backend=lambda: self.backend,
            backend_report=lambda: {"backend": self.backend, "library": "", "attempts": ["mock: no driver"]},
            device_arch=lambda i: f"arch{i}",
            launch=self.launch,
        )
        for name, mod in (
            ("zyfa_core", types.SimpleNamespace()),
            ("zyfa_core.abi", abi),
            ("zyfa_core.manifest", manifest),
            ("zyfa_core.launcher", launcher),
        ):
            monkeypatch.setitem(sys.modules, name, mod)
        # select_kernel caches per key: start from an empty cache, and leave none of the mock's specs.
        _ops.clear_kernel_cache()
        monkeypatch.setattr(_ops, "_select_cached", _ops._select_cached.__wrapped__)
        # Route CPU tensors through the GPU branch; no CUDA exists here, so fake its device and stream.
        monkeypatch.setattr(_ops, "_fwd_cpu", _ops._fwd_core)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
        monkeypatch.setattr(
            torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0xABC)
        )
        real_empty = torch.empty

        def empty(*size, **kw):  # poison what the op allocates, and remember it by address
            t = real_empty(*size, **kw)
            t.fill_(math.nan if t.is_floating_point() else 0xA5)
            self.outputs[t.data_ptr()] = t
            return t

        monkeypatch.setattr(torch, "empty", empty)

    def select(self, arch, dtype, d_qk, d_v, causal, p_mode=None, layout="dense"):
        self.selects.append((arch, dtype, d_qk, d_v, causal, p_mode))
        self.layouts.append(layout)
        return types.SimpleNamespace(
            name="mock_kernel",
            arch=arch,
            tile_n=self.tile_n,
            p_mode=p_mode or ("exact" if dtype == "e4m3fn" else None),
            v_prep="",
            grid=self.grid,
            workspace_bytes=lambda batch, heads_kv, seqlen_k, total_k=None: (
                16 if self.grid == "dynamic" else 0
            ),
        )

    def launch(self, spec, args, *, stream, device, varlen=None, workspace=None):
        """Run the reference on the tensors behind the pointers and write the outputs, like a kernel."""
        self.launches.append((spec, args, stream, device))
        self.workspaces.append(workspace)
        if varlen is not None:
            self.varlens.append(varlen)
            self._launch_varlen(spec, args)
            return
        out = self.outputs[args.out]
        q, k, v = self.inputs
        o, lse = R.attention(
            q,
            k,
            v,
            q_descale=args.q_descale,
            k_descale=args.k_descale,
            v_descale=args.v_descale,
            p_mode=spec.p_mode or "exact",
            block_n=spec.tile_n,
            softmax_scale=args.softmax_scale,
        )
        out.copy_(o)
        if args.flags & 0x2:
            self.outputs[args.lse].copy_(lse)

    def _launch_varlen(self, spec, args):
        """A packed call: the reference per sequence on the inputs (the test checks their pointers)."""
        q, k, v, cu_q, cu_k, seqused_k, page_table = self.inputs
        o, lse = R.attention_varlen(
            q,
            k,
            v,
            cu_q,
            cu_k,
            seqused_k=seqused_k,
            page_table=page_table,
            softmax_scale=args.softmax_scale,
            causal=bool(args.flags & 0x1),
            block_n=spec.tile_n,
        )
        self.outputs[args.out].copy_(o)
        if args.flags & 0x2:
            self.outputs[args.lse].copy_(lse)


@pytest.fixture
def core(monkeypatch):
    mock = _MockCore()
    mock.install(monkeypatch)
    return mock


def _check_args(args, q, k, v, out, lse):
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        assert getattr(args, name) == x.data_ptr()
        assert (
            getattr(args, f"{name}_stride_batch"),
            getattr(args, f"{name}_stride_seq"),
            getattr(args, f"{name}_stride_head"),
        ) == x.stride()[:3]
    assert (args.batch, args.seqlen_q, args.heads_q, args.d_qk) == tuple(q.shape)
    assert (args.seqlen_k, args.heads_kv, args.d_v) == (k.shape[1], k.shape[2], v.shape[3])
    assert args.lse == (lse.data_ptr() if lse is not None else None)
    assert args.reserved == 0


@pytest.mark.parametrize("noncontig", [False, True])
def test_dispatch_bf16_fills_args(core, noncontig):
    q, k, v = (
        _noncontig(2, 40, 56, 4, 2, torch.bfloat16, 9) if noncontig else make_qkv(2, 40, 56, 4, 2, seed=9)
    )
    core.inputs = (q, k, v)
    out, lse, _ = zyfa.flash_attn_func(q, k, v, softmax_scale=0.125, causal=True, return_attn_probs=True)
    ((spec, args, stream, device),) = core.launches
    assert core.selects == [("arch3", "bf16", 128, 128, True, None)]
    assert stream == 0xABC and device == 3
    _check_args(args, q, k, v, out, lse)
    assert args.flags == 0x1 | 0x2
    assert (args.softmax_scale, args.q_descale, args.k_descale, args.v_descale) == (0.125, 1.0, 1.0, 1.0)
    if noncontig:  # strides in ELEMENTS of the transposed view, not bytes
        assert (args.q_stride_batch, args.q_stride_seq, args.q_stride_head) == (4 * 40 * 128, 128, 40 * 128)
    # The "kernel" (the reference at tile_n) wrote every element: no poison survives.
    want, want_lse = R.attention(q, k, v, softmax_scale=0.125, block_n=core.tile_n)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("p_mode", [None, "exact", "lean"])
def test_dispatch_fp8_fills_args(core, p_mode):
    q, k, v = make_qkv(1, 64, 80, 8, 2, 192, 128, seed=10)
    q8, k8, v8, ds = quantize3(q, k * 16, v / 16)  # three different descales
    assert len(set(ds)) == 3
    core.inputs = (q8, k8, v8)
    t = [torch.tensor(d) for d in ds]  # tensor descales become floats before the op
    out = zyfa.flash_attn_func(
        q8, k8, v8, causal=True, q_descale=t[0], k_descale=t[1], v_descale=t[2], p_mode=p_mode
    )
    assert core.selects == [("arch3", "e4m3fn", 192, 128, True, p_mode)]
    ((_, args, _, _),) = core.launches
    _check_args(args, q8, k8, v8, out, None)
    assert args.flags == 0x1  # no LSE requested
    assert args.softmax_scale == pytest.approx(1 / math.sqrt(192), rel=1e-7)
    assert (args.q_descale, args.k_descale, args.v_descale) == ds  # powers of two: exact in float32
    assert not torch.isnan(out.float()).any()


def test_dispatch_empty_does_not_launch(core):
    for b, sq, sk in ((0, 8, 8), (1, 0, 8), (1, 8, 0)):
        q, k, v = make_qkv(b, sq, sk, 2, 2, seed=0)
        out, lse, _ = zyfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        assert out.shape == (b, sq, 2, 128) and torch.all(out == 0) and torch.all(lse == math.inf)
    assert core.launches == [] and core.selects == []


@pytest.mark.parametrize(
    ("descales", "match"),
    [
        ((1e39, 1.0, 1.0), r"q_descale = 1e\+39 overflows float32"),
        ((1.0, 1e-50, 1.0), r"k_descale = 1e-50 is 0 in float32"),
        ((1e20, 1e20, 1.0), r"softmax_scale \* q_descale \* k_descale \* log2\(e\) = inf in float32"),
    ],
)
def test_dispatch_refuses_scalars_the_kernel_cannot_take(core, descales, match):
    """The Python GPU path refuses, before selecting or launching anything, the scalars zyfa_core's checks
    refuse on every path (they would reach the kernel as inf or 0)."""
    q, k, v = make_qkv(1, 64, 64, 2, 2, seed=12)
    q8, k8, v8, _ = quantize3(q, k, v)
    core.inputs = (q8, k8, v8)
    qd, kd, vd = descales
    with pytest.raises(ValueError, match=match):
        zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
    assert core.launches == [] and core.selects == []


def test_dispatch_errors(monkeypatch):
    mock = _MockCore(backend=None)
    mock.install(monkeypatch)
    q, k, v = make_qkv(1, 8, 8, 2, 2, seed=0)
    with pytest.raises(RuntimeError, match="no GPU driver"):
        zyfa.flash_attn_func(q, k, v, causal=True)
    monkeypatch.setitem(sys.modules, "zyfa_core.launcher", None)  # import of zyfa_core.launcher fails
    with pytest.raises(RuntimeError, match="needs zyfa-core"):
        zyfa.flash_attn_func(q, k, v, causal=True)


def test_size_one_dims_get_dense_strides(core):
    """torch calls a tensor with an odd size-1 stride contiguous; the kernel gets the dense stride."""
    q, k, v = make_qkv(1, 40, 56, 1, 1, seed=11)
    q = q.as_strided(q.shape, (7, 128, 3, 1))  # batch and head have size 1: their strides are arbitrary
    core.inputs = (q, k, v)
    zyfa.flash_attn_func(q, k, v, causal=True)
    ((_, args, _, _),) = core.launches
    assert (args.q_stride_batch, args.q_stride_seq, args.q_stride_head) == (40 * 128, 128, 128)


@pytest.mark.parametrize("fp8", [False, True])
def test_args_pass_zyfa_core_checks(fp8):
    """The args this package fills pass zyfa_core's own launch checks (when zyfa_core is importable)."""
    abi = pytest.importorskip("zyfa_core.abi")
    launcher = pytest.importorskip("zyfa_core.launcher")
    manifest = pytest.importorskip("zyfa_core.manifest")
    q, k, v = _noncontig(2, 40, 56, 4, 2, torch.bfloat16, 12)
    if fp8:
        q, k, v = (x.float().to(torch.float8_e4m3fn) for x in (q, k, v))
    out = torch.empty(2, 40, 4, 128, dtype=torch.bfloat16)
    lse = torch.empty(2, 4, 40)
    fields = {
        "name": "fa_fwd_test",
        "file": "x.cubin",
        "arch": "sm90a",
        "d_qk": 128,
        "d_v": 128,
        "causal": True,
    }
    fields.update(kind="cuda", tile_m=64, tile_n=64, threads=128, smem_bytes=0, registers=0, spill_bytes=0)
    fields.update(dtype="e4m3fn" if fp8 else "bf16", p_mode="lean" if fp8 else None)
    spec = manifest.KernelSpec(**fields, abi_version=abi.ABI_VERSION, source_sha256="", path=None)
    descales = (0.5, 0.25, 2.0) if fp8 else (1.0, 1.0, 1.0)
    args = _ops._fill_args(abi, q, k, v, out, lse, 0.1, True, descales)
    launcher.check_args(spec, args)
    assert len(abi.args_bytes(args)) == abi.ARGS_SIZE
    assert args.flags == abi.FLAG_CAUSAL | abi.FLAG_LSE and args.lse == lse.data_ptr()
    assert (args.k_stride_batch, args.k_stride_seq, args.k_stride_head) == (2 * 56 * 128, 128, 56 * 128)


def test_kernel_selection_is_cached(monkeypatch):
    """zyfa_core's probe, device query and manifest lookup run once per (device, dtype, dims, p_mode)."""
    mock = _MockCore()
    mock.install(monkeypatch)
    monkeypatch.setattr(_ops, "_select_cached", functools.lru_cache(maxsize=8)(_ops._select_cached))
    q, k, v = make_qkv(1, 40, 40, 2, 2, seed=14)
    mock.inputs = (q, k, v)
    a = zyfa.flash_attn_func(q, k, v, causal=True)
    b = zyfa.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(a, b) and len(mock.launches) == 2 and len(mock.selects) == 1
    q8, k8, v8, ds = quantize3(q, k, v)
    mock.inputs = (q8, k8, v8)
    for p_mode in ("lean", "lean", None):
        kw = dict(zip(("q_descale", "k_descale", "v_descale"), ds, strict=True))
        zyfa.flash_attn_func(q8, k8, v8, causal=True, p_mode=p_mode, **kw)
    assert [s[1] for s in mock.selects] == ["bf16", "e4m3fn", "e4m3fn"]
    assert [s[5] for s in mock.selects] == [None, "lean", None]


@pytest.mark.parametrize("fp8", [False, True])
def test_host_overhead_measures_every_layer(core, monkeypatch, fp8):
    """zyfa.overhead times four layers of the call path (mocked launches here; real ones on a GPU)."""
    from zyfa import overhead

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    spins = []
    monkeypatch.setattr(torch.cuda, "_sleep", spins.append)
    q, k, v = make_qkv(1, 16, 16, 1, 1, seed=15)
    descales = (1.0, 1.0, 1.0)
    if fp8:
        q, k, v, descales = quantize3(q, k, v)
    core.inputs = (q, k, v)
    us = overhead._measure(q, k, v, descales, 2, q.device)
    assert list(us) == ["flash_attn_func", "torch.ops.zyfa.fwd", "_forward", "zyfa_core.launch"]
    assert all(t > 0 for t in us.values())
    assert len(core.launches) == 4 * 4  # 2 warm-up + 2 timed calls per layer, each one launch
    assert spins == [overhead._SPIN_CYCLES_PER_CALL * 2] * 4  # the device is kept busy in each timed loop
    with pytest.raises(ValueError, match="launch-queue depth"):
        overhead._per_call_us(lambda: None, overhead._MAX_CALLS + 1, q.device)
    assert all(args.q_descale == descales[0] for _, args, _, _ in core.launches)
    with pytest.raises(RuntimeError, match="needs a CUDA or ROCm GPU"):
        overhead.host_overhead(device="cpu")


@pytest.mark.parametrize("paged", [False, True])
def test_dispatch_varlen_fills_both_structs(core, monkeypatch, paged):
    """A packed call on the GPU path: zyfa_fwd_args with batch = sequences, max_seqlen bounds and batch
    strides 0 (the page stride for a cache), and zyfa_varlen_args with the index tensors' pointers and
    sizes."""
    from zyfa_varlen_testutil import call_packed, make_packed, page_cache

    from zyfa import _ops_varlen

    monkeypatch.setattr(_ops_varlen, "_fwd_cpu", _ops_varlen._fwd_core)
    p = make_packed([5, 1, 40], [9, 3, 70], 4, 2, seed=12)
    k, v, table, seqused = p.k, p.v, None, None
    if paged:
        k, v, table = page_cache(p.k, p.v, p.lens_k, 16, seed=12)
        seqused = torch.tensor(p.lens_k, dtype=torch.int32)
    core.inputs = (p.q, k, v, p.cu_seqlens_q, p.cu_seqlens_k, seqused, table)
    out, lse = call_packed(p, k, v, seqused_k=seqused, causal=True, page_table=table, return_attn_probs=True)
    assert core.layouts == ["paged" if paged else "varlen"]
    ((_, args, _, _),) = core.launches
    (varlen,) = core.varlens
    assert (args.batch, args.seqlen_q, args.seqlen_k, args.heads_q, args.heads_kv) == (3, 40, 70, 4, 2)
    assert args.flags == 0x1 | 0x2 | 0x4 | (0x8 if paged else 0)
    assert (args.q_stride_batch, args.q_stride_seq, args.out_stride_batch) == (0, 4 * 128, 0)
    assert args.k_stride_batch == (16 * 2 * 128 if paged else 0) and args.lse == lse.data_ptr()
    assert (varlen.cu_seqlens_q, varlen.cu_seqlens_k) == (
        p.cu_seqlens_q.data_ptr(),
        p.cu_seqlens_k.data_ptr(),
    )
    assert (varlen.total_q, varlen.total_k) == (46, k.shape[0] * 16 if paged else 82)
    if paged:
        assert (varlen.page_table, varlen.seqused_k) == (table.data_ptr(), seqused.data_ptr())
        assert (varlen.page_size, varlen.num_pages, varlen.max_pages) == (16, k.shape[0], table.shape[1])
        assert varlen.page_table_stride == table.shape[1]
    want, want_lse = R.attention_varlen(p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k, block_n=core.tile_n)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    assert core.workspaces == [None]  # a persistent or tile grid needs none


@pytest.mark.parametrize("grid", ["dynamic", "persistent"])
def test_dispatch_varlen_gives_a_dynamic_kernel_its_counter_workspace(monkeypatch, grid):
    """A grid "dynamic" kernel gets workspace_bytes of device memory from the op (zyfa_core clears it and
    points the kernel's item counter at it); other grids get none."""
    from zyfa_varlen_testutil import call_packed, make_packed

    from zyfa import _ops_varlen

    mock = _MockCore(grid=grid)
    mock.install(monkeypatch)
    monkeypatch.setattr(_ops_varlen, "_fwd_cpu", _ops_varlen._fwd_core)
    p = make_packed([7, 30], [7, 50], 4, 2, seed=5)
    mock.inputs = (p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k, None, None)
    out = call_packed(p, p.k, p.v, causal=True)
    (workspace,) = mock.workspaces
    if grid == "dynamic":
        buffer = mock.outputs[workspace]
        assert buffer.dtype == torch.uint8 and buffer.numel() == 16 and buffer.device == p.q.device
    else:
        assert workspace is None
    want, _ = R.attention_varlen(p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k, block_n=mock.tile_n)
    assert torch.equal(out, want)
