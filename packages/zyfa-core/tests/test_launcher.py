"""zyfa_core.launcher without a GPU: argument checks, grid, and clear errors when no driver loads."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

import zyfa_core
from zyfa_core import launcher

NAME = "fa_fwd_bf16_hd128_causal_sm90a"


@pytest.fixture
def spec(tmp_path: Path, manifest_tools) -> zyfa_core.KernelSpec:
    rows = [manifest_tools.row(NAME), manifest_tools.row("fa_fwd_e4m3fn_hd192x128_causal_sm90a")]
    return zyfa_core.Manifest.load(manifest_tools.write(tmp_path, rows)).get(NAME)


def good_fields(**overrides: Any) -> dict[str, Any]:
    """Arguments of a contiguous bf16 problem: batch 2, seqlen 100/130, 8 q heads over 2 kv heads, d 128."""
    b, sq, sk, hq, hkv, d = 2, 100, 130, 8, 2, 128
    fields = dict(
        q=0x7F0000000000, k=0x7F0000100000, v=0x7F0000200000, out=0x7F0000300000, lse=0,
        q_stride_batch=sq * hq * d, q_stride_seq=hq * d, q_stride_head=d,
        k_stride_batch=sk * hkv * d, k_stride_seq=hkv * d, k_stride_head=d,
        v_stride_batch=sk * hkv * d, v_stride_seq=hkv * d, v_stride_head=d,
        out_stride_batch=sq * hq * d, out_stride_seq=hq * d, out_stride_head=d,
        batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk, d_qk=d, d_v=d,
        flags=zyfa_core.FLAG_CAUSAL, softmax_scale=d**-0.5,
    )  # fmt: skip
    fields.update(overrides)
    return fields


def test_good_args_pass(spec: zyfa_core.KernelSpec) -> None:
    zyfa_core.check_args(spec, zyfa_core.make_fwd_args(**good_fields()))
    lse = good_fields(lse=0x7F0000400000, flags=zyfa_core.FLAG_CAUSAL | zyfa_core.FLAG_LSE)
    zyfa_core.check_args(spec, zyfa_core.make_fwd_args(**lse))
    # Broadcast K/V heads (stride 0) are legal.
    zyfa_core.check_args(spec, zyfa_core.make_fwd_args(**good_fields(k_stride_head=0, v_stride_head=0)))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"q": 0}, "args.q is a null pointer"),
        ({"out": None}, "args.out is a null pointer"),
        ({"v": 0x7F0000200008}, "args.v = 0x7f0000200008 is not 16-byte aligned"),
        ({"flags": zyfa_core.FLAG_CAUSAL | zyfa_core.FLAG_LSE}, "FLAG_LSE but args.lse is a null pointer"),
        ({"lse": 0x7F0000400002}, "not 4-byte aligned"),
        ({"seqlen_q": 0}, "seqlen_q = 0 must be positive"),
        ({"seqlen_k": -3}, "seqlen_k = -3 must be positive"),
        ({"batch": 0}, "batch = 0 must be positive"),
        ({"heads_kv": 3}, "heads_q = 8 is not a multiple of heads_kv = 3"),
        ({"d_qk": 192}, "built for d_qk=128, d_v=128; args have d_qk=192, d_v=128"),
        ({"d_v": 64}, "args have d_qk=128, d_v=64"),
        ({"heads_q": 65536 * 2, "heads_kv": 2}, "65535"),
        ({"q_stride_seq": 1028}, "q_stride_seq = 1028 elements"),
        ({"out_stride_head": -128}, "out_stride_head = -128 is negative"),
        ({"k_stride_batch": 2**62}, f"k_stride_batch = {2**62} elements is too large"),
        ({"flags": zyfa_core.FLAG_PAGED}, "need FLAG_VARLEN"),
        ({"flags": zyfa_core.FLAG_CAUSAL | 0x40}, "unknown bits 0x40"),
        ({"k_descale": 0.5}, "descales apply to float8_e4m3fn inputs only; pass 1.0 for bf16"),
        ({"reserved": 5}, "reserved must be 0"),
    ],
)
def test_bad_args_raise_value_error(spec: zyfa_core.KernelSpec, override: dict, message: str) -> None:
    args = zyfa_core.make_fwd_args(**good_fields(**override))
    with pytest.raises(ValueError) as info:
        zyfa_core.check_args(spec, args)
    assert message in str(info.value)
    assert NAME in str(info.value)


def _with_float(args: zyfa_core.ZyfaFwdArgs, offset: int, value: float) -> zyfa_core.ZyfaFwdArgs:
    """A copy of `args` with the float32 at byte `offset` set to `value` (assignment would refuse it)."""
    raw = bytearray(bytes(args))
    struct.pack_into("<f", raw, offset, value)
    return zyfa_core.ZyfaFwdArgs.from_buffer_copy(raw)


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [
        (168, float("inf"), "softmax_scale must be a finite float or None, got inf"),
        (168, float("nan"), "softmax_scale must be a finite float or None, got nan"),
        (168, 0.0, "softmax_scale = 0.0 is 0 in float32"),
        (172, 0.0, "q_descale must be finite and > 0, got 0.0"),
        (176, -2.0, "k_descale must be finite and > 0, got -2.0"),
        (180, float("inf"), "v_descale must be finite and > 0, got inf"),
        (
            172,
            1e-30,
            "softmax_scale * q_descale * k_descale * log2(e) = 0.0 in float32",
        ),  # with k_descale 1e-30
    ],
)
def test_scalars_in_a_hand_filled_struct(tmp_path: Path, manifest_tools, offset, value, message) -> None:
    """The scale and descales a struct carries are checked as the kernel folds them (FP8 kernel here)."""
    name = "fa_fwd_e4m3fn_hd128_causal_sm90a"
    fp8 = zyfa_core.Manifest.load(manifest_tools.write(tmp_path, [manifest_tools.row(name)])).get(name)
    fields = good_fields(q_stride_batch=100 * 8 * 128, k_stride_head=128)
    args = _with_float(zyfa_core.make_fwd_args(**fields), offset, value)
    if offset == 172 and value == 1e-30:
        args = _with_float(args, 176, 1e-30)
    zyfa_core.check_args(fp8, zyfa_core.make_fwd_args(**fields))
    with pytest.raises(ValueError) as info:
        zyfa_core.check_args(fp8, args)
    assert message in str(info.value) and str(info.value).startswith(name)


def test_fp8_strides_are_checked_in_bytes(tmp_path: Path, manifest_tools) -> None:
    """e4m3fn elements are 1 byte: a stride of 200 elements is fine for q but not a 16-byte multiple."""
    fp8 = zyfa_core.Manifest.load(
        manifest_tools.write(tmp_path, [manifest_tools.row("fa_fwd_e4m3fn_hd192x128_causal_sm90a")])
    ).kernels[0]
    fields = good_fields(
        d_qk=192, q_stride_head=192, k_stride_head=192, q_stride_seq=8 * 192, k_stride_seq=2 * 192
    )
    zyfa_core.check_args(fp8, zyfa_core.make_fwd_args(**fields))
    with pytest.raises(ValueError, match="q_stride_head = 200 elements"):
        zyfa_core.check_args(fp8, zyfa_core.make_fwd_args(**{**fields, "q_stride_head": 200}))


def test_kv_seq_stride_limit_of_the_row(tmp_path: Path, manifest_tools) -> None:
    """A row's max_kv_seq_stride (the gfx950 BF16 kernel's 2^24: 32-bit buffer offsets) bounds k's and v's
    seq strides, exclusive, and nothing else; a row without it (0) takes them."""
    gfx = "fa_fwd_bf16_hd128_causal_gfx950"
    rows = [manifest_tools.row(gfx, max_kv_seq_stride=2**24), manifest_tools.row(NAME)]
    m = zyfa_core.Manifest.load(manifest_tools.write(tmp_path, rows))
    limited, free = m.get(gfx), m.get(NAME)
    near = 2**24 - 8  # the largest 16-byte multiple below the limit
    zyfa_core.check_args(
        limited, zyfa_core.make_fwd_args(**good_fields(k_stride_seq=near, v_stride_seq=near))
    )
    zyfa_core.check_args(
        limited, zyfa_core.make_fwd_args(**good_fields(q_stride_seq=2**24, out_stride_seq=2**24))
    )
    for name in ("k_stride_seq", "v_stride_seq"):
        args = zyfa_core.make_fwd_args(**good_fields(**{name: 2**24}))
        with pytest.raises(ValueError, match=rf"{name} = 16777216 elements is too large for this kernel.*"
                           r"must be below 16777216"):  # fmt: skip
            zyfa_core.check_args(limited, args)
        zyfa_core.check_args(free, args)


def test_strides_of_size_one_dims_are_not_checked(spec: zyfa_core.KernelSpec) -> None:
    """torch leaves strides of size-1 dims arbitrary; the kernel never steps along them."""
    fields = good_fields(batch=1, q_stride_batch=3, k_stride_batch=-5, v_stride_batch=1, out_stride_batch=7)
    zyfa_core.check_args(spec, zyfa_core.make_fwd_args(**fields))
    fields = good_fields(
        heads_q=1, heads_kv=1, q_stride_head=1, k_stride_head=1, v_stride_head=1, out_stride_head=1
    )
    zyfa_core.check_args(spec, zyfa_core.make_fwd_args(**fields))
    with pytest.raises(ValueError, match="k_stride_head = 1 elements"):  # heads_kv = 2 here: checked
        zyfa_core.check_args(spec, zyfa_core.make_fwd_args(**good_fields(heads_q=2, k_stride_head=1)))
    with pytest.raises(
        ValueError, match="k_stride_seq = 3 elements"
    ):  # q's seq stride is skipped, k's is not
        zyfa_core.check_args(
            spec, zyfa_core.make_fwd_args(**good_fields(seqlen_q=1, q_stride_seq=3, k_stride_seq=3))
        )


def test_type_errors(spec: zyfa_core.KernelSpec) -> None:
    with pytest.raises(TypeError, match="ZyfaFwdArgs"):
        zyfa_core.check_args(spec, good_fields())
    with pytest.raises(TypeError, match="KernelSpec"):
        zyfa_core.check_args(NAME, zyfa_core.make_fwd_args(**good_fields()))


@pytest.mark.parametrize(
    ("seqlen_q", "blocks"), [(1, 1), (63, 1), (64, 1), (65, 2), (100, 2), (128, 2), (129, 3)]
)
def test_launch_grid(spec: zyfa_core.KernelSpec, seqlen_q: int, blocks: int) -> None:
    args = zyfa_core.make_fwd_args(**good_fields(seqlen_q=seqlen_q))
    assert zyfa_core.launch_grid(spec, args) == (blocks, 8, 2)


@pytest.fixture
def persistent(tmp_path: Path, manifest_tools) -> zyfa_core.KernelSpec:
    """NAME with tile_m 64 on the persistent grid."""
    rows = [manifest_tools.row(NAME, grid="persistent")]
    return zyfa_core.Manifest.load(manifest_tools.write(tmp_path / "p", rows)).get(NAME)


@pytest.mark.parametrize(
    ("fields", "multiprocessors", "grid"),
    [
        ({}, 132, (32, 1, 1)),  # 2 tiles x 8 heads x 2 batch = 32 items < 132 SMs: one block per item
        ({"seqlen_q": 1, "heads_q": 2, "batch": 1}, 132, (2, 1, 1)),
        ({"seqlen_q": 129}, 132, (48, 1, 1)),
        ({"seqlen_q": 4096, "batch": 4}, 132, (132, 1, 1)),  # 64 x 8 x 4 = 2048 items: one block per SM
        ({"seqlen_q": 4096, "batch": 4}, 1, (1, 1, 1)),
        ({}, 32, (32, 1, 1)),
    ],
)
def test_launch_grid_persistent(
    persistent: zyfa_core.KernelSpec, fields: dict, multiprocessors: int, grid: tuple
) -> None:
    args = zyfa_core.make_fwd_args(**good_fields(**fields))
    assert zyfa_core.launch_grid(persistent, args, multiprocessors) == grid
    assert zyfa_core.launch_grid(persistent, args, multiprocessors=multiprocessors) == grid


def test_launch_grid_tiles_ignores_multiprocessors(spec: zyfa_core.KernelSpec) -> None:
    assert spec.grid == "tiles"  # the fixture's rows have no "grid": an older manifest
    args = zyfa_core.make_fwd_args(**good_fields(seqlen_q=4096))
    assert zyfa_core.launch_grid(spec, args, 132) == zyfa_core.launch_grid(spec, args) == (64, 8, 2)


@pytest.mark.parametrize("multiprocessors", [None, 0, -4, True, 132.0])
def test_launch_grid_persistent_needs_multiprocessors(
    persistent: zyfa_core.KernelSpec, multiprocessors: object
) -> None:
    args = zyfa_core.make_fwd_args(**good_fields())
    with pytest.raises(ValueError, match=f"{NAME} takes a persistent grid.*multiprocessor count"):
        zyfa_core.launch_grid(persistent, args, multiprocessors)


def test_grid_limits_follow_the_grid_mode(
    spec: zyfa_core.KernelSpec, persistent: zyfa_core.KernelSpec
) -> None:
    """heads_q and batch are grid y/z only on the tile grid; the persistent kernel counts items in 32 bits."""
    many_heads = zyfa_core.make_fwd_args(**good_fields(heads_q=65536 * 2, heads_kv=2))
    zyfa_core.check_args(persistent, many_heads)
    assert zyfa_core.launch_grid(persistent, many_heads, 132) == (132, 1, 1)
    with pytest.raises(ValueError, match="must each be <= 65535"):
        zyfa_core.check_args(spec, many_heads)
    too_many = zyfa_core.make_fwd_args(**good_fields(seqlen_q=2**20, heads_q=2**13, heads_kv=2, batch=2**4))
    with pytest.raises(ValueError, match=f"{NAME}: {2**31} work items .* exceed 2147483647"):
        zyfa_core.check_args(persistent, too_many)


def test_bad_args_fail_before_any_driver_call(
    spec: zyfa_core.KernelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_driver() -> None:
        raise AssertionError("the driver must not be touched for invalid arguments")

    monkeypatch.setattr(launcher, "_driver", no_driver)
    with pytest.raises(ValueError, match="null pointer"):
        zyfa_core.launch(spec, zyfa_core.make_fwd_args(**good_fields(q=0)), stream=0, device=0)
    with pytest.raises(ValueError, match="stream"):
        zyfa_core.launch(spec, zyfa_core.make_fwd_args(**good_fields()), stream=-1, device=0)
    with pytest.raises(ValueError, match="device"):
        zyfa_core.launch(spec, zyfa_core.make_fwd_args(**good_fields()), stream=0, device=-1)


def test_report_when_the_extension_is_missing(
    monkeypatch: pytest.MonkeyPatch, spec: zyfa_core.KernelSpec
) -> None:
    monkeypatch.setattr(launcher, "_driver_import", lambda: (None, "zyfa_core._driver is not importable (x)"))
    assert zyfa_core.available_backend() is None
    assert zyfa_core.backend_report()["attempts"] == ["zyfa_core._driver is not importable (x)"]
    with pytest.raises(zyfa_core.ZyfaDriverError, match="not importable"):
        zyfa_core.launch(spec, zyfa_core.make_fwd_args(**good_fields()), stream=0, device=0)


def test_driver_imports_and_reports_no_backend(driver_dir: str | None) -> None:
    from zyfa_core import _driver

    report = _driver.probe()
    assert set(report) == {"backend", "library", "attempts"}
    if report["backend"] is not None:
        pytest.skip(f"a GPU driver is present here ({report['library']})")
    text = "; ".join(report["attempts"])
    assert "libcuda.so.1" in text and "libamdhip64.so" in text
    assert zyfa_core.available_backend() is None


def test_launch_without_gpu_raises_a_clear_error(driver_dir: str | None, spec: zyfa_core.KernelSpec) -> None:
    if zyfa_core.available_backend() is not None:
        pytest.skip("a GPU backend is present")
    args = zyfa_core.make_fwd_args(**good_fields())
    with pytest.raises(zyfa_core.ZyfaDriverError) as info:
        zyfa_core.launch(spec, args, stream=0, device=0)
    assert "no GPU driver could be used" in str(info.value)
    assert "libcuda.so.1" in str(info.value) and "libamdhip64.so" in str(info.value)
    assert info.value.call == "load GPU driver"
    for query in (zyfa_core.device_count, lambda: zyfa_core.device_arch(0)):
        with pytest.raises(zyfa_core.ZyfaDriverError, match="no GPU driver"):
            query()
    # The extension itself raises the same Python class, with the call named.
    from zyfa_core import _driver

    with pytest.raises(zyfa_core.ZyfaDriverError) as raw:
        _driver.device_count()
    assert raw.value.call == "load GPU driver"


def test_cuda_arch_names() -> None:
    assert launcher._cuda_arch(9, 0) == "sm90a"
    assert launcher._cuda_arch(8, 0) == "sm80"
    assert launcher._cuda_arch(8, 9) == "sm89"
    assert launcher._cuda_arch(10, 0) == "sm100"
    assert launcher._cuda_arch(12, 0) == "sm120"


def test_python_m_zyfa_core(tmp_path: Path, manifest_tools, monkeypatch, capsys) -> None:
    from zyfa_core import __main__ as cli

    directory = manifest_tools.write(
        tmp_path, [manifest_tools.row(NAME)], [{"name": "x_gfx950", "reason": "no zig"}]
    )
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(directory))
    assert cli.main() == 0
    out = capsys.readouterr().out
    assert str(directory.resolve()) in out and NAME in out and "skipped x_gfx950: no zig" in out
    assert "backend:" in out
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(tmp_path / "missing"))
    assert cli.main() == 1
    assert "ZYFA_KERNEL_DIR=" in capsys.readouterr().out


@pytest.fixture
def v_prep(tmp_path: Path, manifest_tools) -> zyfa_core.KernelSpec:
    name = "fa_fwd_e4m3fn_hd128_causal_leanp_sm90a"
    row = manifest_tools.row(name, tile_m=128, tile_n=128, grid="persistent", v_prep=name + "_vprep")
    return zyfa_core.Manifest.load(manifest_tools.write(tmp_path / "vp", [row])).get(name)


@pytest.mark.parametrize(
    ("workspace", "message"),
    [
        (0, r"reads V pre-transposed: pass workspace=<device pointer to 131072 bytes>"),
        (True, r"reads V pre-transposed"),
        (-16, r"reads V pre-transposed"),
        (0x7F0000400008, "workspace = 0x7f0000400008 is not 16-byte aligned"),
    ],
)
def test_v_prep_kernel_needs_an_aligned_workspace_before_any_driver_call(
    v_prep: zyfa_core.KernelSpec, monkeypatch: pytest.MonkeyPatch, workspace: object, message: str
) -> None:
    """2 batches x 2 kv heads x 128 d rows x 130 keys padded to 256: 131072 bytes, named in the error."""

    def no_driver() -> None:
        raise AssertionError("the driver must not be touched for invalid arguments")

    monkeypatch.setattr(launcher, "_driver", no_driver)
    args = zyfa_core.make_fwd_args(**good_fields(q_descale=1.0))
    assert v_prep.workspace_bytes(2, 2, 130) == 131072
    with pytest.raises(ValueError, match=message):
        zyfa_core.launch(v_prep, args, stream=0, device=0, workspace=workspace)  # type: ignore[arg-type]


def test_v_prep_grid_limits(v_prep: zyfa_core.KernelSpec) -> None:
    """The pass's grid has heads_kv and batch as y / z: the persistent kernel alone would not limit them."""
    args = zyfa_core.make_fwd_args(**good_fields(heads_q=65536 * 2, heads_kv=65536 * 2))
    with pytest.raises(ValueError, match="heads_kv = 131072 and batch = 2 must each be <= 65535"):
        zyfa_core.check_args(v_prep, args)
