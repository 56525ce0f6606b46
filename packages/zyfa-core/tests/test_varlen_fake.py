"""Packed (varlen) and paged launches without a GPU: the plan's checks of zyfa_varlen_args and what reaches
the (fake) CUDA driver through `zyfa_core.launch` and the C API: the same args bytes as a dense call, and
the 80 bytes of zyfa_varlen_args as the kernel's second parameter (ABI 4, 5: a grid "dynamic" kernel's item
counter)."""

from __future__ import annotations

import ctypes
import itertools
import random
from pathlib import Path
from typing import Any

import pytest

import zyfa_core

VARLEN = "fa_fwd_bf16_hd128_causal_varlen_sm90a"
PAGED = "fa_fwd_e4m3fn_hd128_causal_paged_sm90a"
DENSE = "fa_fwd_bf16_hd128_causal_sm90a"


@pytest.fixture
def kernel_dir(tmp_path: Path, manifest_tools) -> Path:
    rows = [
        manifest_tools.row(DENSE),
        manifest_tools.row(VARLEN, layout="varlen"),
        manifest_tools.row(PAGED, layout="paged"),
    ]
    image = f"FAKECUBIN {DENSE} {VARLEN} {PAGED}\n".encode()
    return manifest_tools.write(tmp_path / "kernels", rows, files={row["file"]: image for row in rows})


def packed_args(fp8: bool = False, paged: bool = False, **overrides: Any) -> zyfa_core.ZyfaFwdArgs:
    """zyfa_fwd_args of a packed call: 3 sequences (max 100 queries, 300 keys), 8 q heads over 2 kv heads."""
    hq, hkv, d = 8, 2, 128
    flags = zyfa_core.FLAG_CAUSAL | zyfa_core.FLAG_VARLEN | (zyfa_core.FLAG_PAGED if paged else 0)
    fields = dict(
        q=0x7F0000000000,
        k=0x7F0000100000,
        v=0x7F0000200000,
        out=0x7F0000300000,
        q_stride_batch=0,
        q_stride_seq=hq * d,
        q_stride_head=d,
        k_stride_batch=16 * hkv * d if paged else 0,
        k_stride_seq=hkv * d,
        k_stride_head=d,
        v_stride_batch=16 * hkv * d if paged else 0,
        v_stride_seq=hkv * d,
        v_stride_head=d,
        out_stride_batch=0,
        out_stride_seq=hq * d,
        out_stride_head=d,
        batch=3,
        heads_q=hq,
        heads_kv=hkv,
        seqlen_q=100,
        seqlen_k=300,
        d_qk=d,
        d_v=d,
        flags=flags,
        softmax_scale=d**-0.5,
    )
    if fp8:
        fields.update(q_descale=0.5, k_descale=0.25, v_descale=2.0)
    fields.update(overrides)
    return zyfa_core.make_fwd_args(**fields)


def varlen_args(paged: bool = False, **overrides: Any) -> zyfa_core.ZyfaVarlenArgs:
    fields: dict[str, Any] = dict(
        cu_seqlens_q=0x7F0000400000, cu_seqlens_k=0x7F0000400100, total_q=180, total_k=520
    )
    if paged:
        fields.update(
            page_table=0x7F0000400200,
            page_table_stride=19,
            page_size=16,
            num_pages=40,
            max_pages=19,
            total_k=640,
            seqused_k=0x7F0000400300,
        )
    fields.update(overrides)
    return zyfa_core.make_varlen_args(**fields)


def test_varlen_struct_layout() -> None:
    assert ctypes.sizeof(zyfa_core.ZyfaVarlenArgs) == zyfa_core.VARLEN_ARGS_SIZE == 80
    offsets = {
        name: getattr(zyfa_core.ZyfaVarlenArgs, name).offset for name in zyfa_core.abi.VARLEN_FIELD_NAMES
    }
    assert offsets == {
        "cu_seqlens_q": 0,
        "cu_seqlens_k": 8,
        "seqused_k": 16,
        "page_table": 24,
        "descales": 32,
        "page_table_stride": 40,
        "page_size": 48,
        "num_pages": 52,
        "max_pages": 56,
        "total_q": 60,
        "total_k": 64,
        "reserved": 68,
        "item_counter": 72,
    }
    with pytest.raises(ValueError, match=r"zyfa_varlen_args.page_size = 4294967296 does not fit"):
        zyfa_core.make_varlen_args(page_size=2**32)
    with pytest.raises(TypeError, match="unknown field"):
        zyfa_core.make_varlen_args(block_table=1)


def test_select_by_layout(kernel_dir: Path) -> None:
    manifest = zyfa_core.Manifest.load(kernel_dir)
    assert manifest.select("sm90a", "bf16", 128, 128, True).name == DENSE
    assert manifest.select("sm90a", "bf16", 128, 128, True, layout="varlen").name == VARLEN
    assert manifest.select("sm90a", "e4m3fn", 128, 128, True, layout="paged").name == PAGED
    # A non-causal call takes the causal kernel (the mask is the run-time flag).
    assert manifest.select("sm90a", "bf16", 128, 128, False, layout="varlen").name == VARLEN
    with pytest.raises(zyfa_core.KernelNotFoundError, match="layout=paged"):
        manifest.select("sm90a", "bf16", 128, 128, True, layout="paged")
    with pytest.raises(ValueError, match="layout must be one of"):
        manifest.select("sm90a", "bf16", 128, 128, True, layout="ragged")


def test_good_packed_args_pass(kernel_dir: Path) -> None:
    manifest = zyfa_core.Manifest.load(kernel_dir)
    zyfa_core.check_args(manifest.get(VARLEN), packed_args(), varlen_args())
    zyfa_core.check_args(manifest.get(PAGED), packed_args(fp8=True, paged=True), varlen_args(paged=True))
    table = packed_args(
        fp8=True,
        paged=True,
        flags=zyfa_core.FLAG_VARLEN | zyfa_core.FLAG_PAGED | zyfa_core.FLAG_DESCALE_TABLE,
        q_descale=1.0,
        k_descale=1.0,
        v_descale=1.0,
    )
    zyfa_core.check_args(manifest.get(PAGED), table, varlen_args(paged=True, descales=0x7F0000500000))
    # Paged with cu_seqlens_k NULL: the key counts come from seqused_k.
    zyfa_core.check_args(
        manifest.get(PAGED), packed_args(fp8=True, paged=True), varlen_args(paged=True, cu_seqlens_k=0)
    )


@pytest.mark.parametrize(
    ("kernel", "args", "varlen", "message"),
    [
        (
            DENSE,
            {"flags": zyfa_core.FLAG_VARLEN},
            "packed",
            "serves dense batches; args.flags ask for a varlen",
        ),
        (VARLEN, {"flags": zyfa_core.FLAG_CAUSAL}, None, "serves varlen batches; args.flags ask for a dense"),
        (VARLEN, {}, None, "FLAG_VARLEN needs the packed batch's zyfa_varlen_args"),
        (VARLEN, {"flags": zyfa_core.FLAG_VARLEN | zyfa_core.FLAG_PAGED}, "packed", "serves varlen batches"),
        (VARLEN, {}, {"cu_seqlens_q": 0}, "varlen.cu_seqlens_q is a null pointer"),
        (VARLEN, {}, {"cu_seqlens_k": 0}, "varlen.cu_seqlens_k is a null pointer"),
        (
            VARLEN,
            {},
            {"seqused_k": 0x7F0000400002},
            "varlen.seqused_k = 0x7f0000400002 is not 4-byte aligned",
        ),
        (VARLEN, {}, {"page_table": 0x7F0000400200}, "page_table is set without FLAG_PAGED"),
        (VARLEN, {}, {"page_size": 16}, "must be 0 without FLAG_PAGED"),
        (VARLEN, {}, {"total_q": 0}, "varlen.total_q = 0 and varlen.total_k = 520 must be positive"),
        (
            VARLEN,
            {"flags": zyfa_core.FLAG_VARLEN | zyfa_core.FLAG_DESCALE_TABLE},
            {"descales": 0x7F0000500000},
            "FLAG_DESCALE_TABLE applies to FP8 kernels only",
        ),
        (VARLEN, {}, {"reserved": 1}, "varlen.reserved must be 0"),
        (VARLEN, {}, {"item_counter": 0x7F0000400400}, "item_counter must be NULL, got 0x7f0000400400"),
        (PAGED, {}, {"page_table": 0}, "varlen.page_table is a null pointer"),
        (PAGED, {}, {"max_pages": 20}, "page_table_stride >= max_pages"),
        (PAGED, {}, {"total_k": 600}, "must be num_pages x page_size = 640"),
        (PAGED, {}, {"seqused_k": 0, "cu_seqlens_k": 0}, "varlen.cu_seqlens_k is a null pointer"),
    ],
)
def test_bad_packed_args(kernel_dir: Path, kernel: str, args: dict, varlen: Any, message: str) -> None:
    spec = zyfa_core.Manifest.load(kernel_dir).get(kernel)
    paged = kernel == PAGED
    fields = {"fp8": paged, "paged": paged, **args} if "flags" not in args else {"fp8": paged, **args}
    struct = (
        None if varlen is None else varlen_args(paged) if varlen == "packed" else varlen_args(paged, **varlen)
    )
    with pytest.raises(ValueError) as info:
        zyfa_core.check_args(spec, packed_args(**fields), struct)
    assert message in str(info.value) and str(info.value).startswith(kernel)


LAUNCH = """
import zyfa_core
spec = zyfa_core.Manifest.load(KERNEL_DIR).get({kernel!r})
args = zyfa_core.ZyfaFwdArgs.from_buffer_copy(bytes.fromhex({args!r}))
varlen = zyfa_core.ZyfaVarlenArgs.from_buffer_copy(bytes.fromhex({varlen!r}))
zyfa_core.launch(spec, args, stream=0x5000, device=0, varlen=varlen)
print(json.dumps({{"grid": zyfa_core.launch_grid(spec, args, varlen=varlen)}}))
"""


@pytest.mark.parametrize("kernel", [VARLEN, PAGED])
def test_launch_passes_varlen_as_the_second_parameter(run_with_fake, kernel_dir: Path, kernel: str) -> None:
    paged = kernel == PAGED
    args, varlen = packed_args(fp8=paged, paged=paged), varlen_args(paged)
    snippet = LAUNCH.format(kernel=kernel, args=bytes(args).hex(), varlen=bytes(varlen).hex())
    out, calls = run_with_fake("cuda", snippet, kernel_dir)
    (launch,) = [c for c in calls if c.startswith("cuLaunchKernel ")]
    fields = dict(pair.split("=", 1) for pair in launch.split(" ")[1:])
    assert fields["name"] == kernel and fields["args"] == bytes(args).hex()
    assert fields["second"] == bytes(varlen).hex()
    # The tile grid of a packed call: min(total_q // tile_m + batch, batch * ceil(max_seqlen_q / tile_m))
    # = min(180 // 64 + 3, 3 * 2) blocks per head, heads_q, 1.
    assert out["grid"] == [5, 8, 1] and fields["grid"] == "5,8,1"


@pytest.mark.parametrize(
    ("total_q", "seqlen_q", "batch", "blocks"),
    [
        (180, 100, 3, 5),  # 2 whole tiles of 64 rows + at most one partial tile per sequence
        (130, 200, 3, 5),  # as many, though one sequence may be 4 tiles long
        (600, 100, 3, 6),  # every sequence at most max_seqlen_q = 2 tiles: the smaller bound
        (1, 1, 1, 1),
    ],
)
def test_packed_grid_bounds_the_tiles(
    kernel_dir: Path, total_q: int, seqlen_q: int, batch: int, blocks: int
) -> None:
    """The packed grid needs no cu_seqlens values: any split of total_q rows into `batch` sequences of at most
    seqlen_q rows has at most `blocks` query tiles (kernels/tools/tests/test_varlen_tiles.py checks the
    kernel's map against this bound on random splits)."""
    spec = zyfa_core.Manifest.load(kernel_dir).get(VARLEN)
    args, varlen = packed_args(seqlen_q=seqlen_q, batch=batch), varlen_args(total_q=total_q)
    assert zyfa_core.launch_grid(spec, args, varlen=varlen) == (blocks, 8, 1)
    # Splits rich in partial tiles (1 + 64 k rows): none has more tiles than the grid.
    best = max(
        sum(-(-n // 64) for n in split)
        for split in itertools.product([0, 1, 65, 129, 193, seqlen_q], repeat=batch)
        if sum(split) <= total_q and max(split) <= seqlen_q
    )
    assert best <= blocks


def test_packed_grid_needs_the_varlen_struct(kernel_dir: Path) -> None:
    spec = zyfa_core.Manifest.load(kernel_dir).get(VARLEN)
    with pytest.raises(ValueError, match="needs the packed batch's zyfa_varlen_args"):
        zyfa_core.launch_grid(spec, packed_args())


def test_packed_grid_refuses_32_bit_overflow(kernel_dir: Path) -> None:
    spec = zyfa_core.Manifest.load(kernel_dir).get(VARLEN)
    args = packed_args(seqlen_q=2**30, heads_q=128, q_stride_seq=128 * 128, out_stride_seq=128 * 128)
    with pytest.raises(ValueError, match="which a packed kernel numbers in 32 bits"):
        zyfa_core.check_args(spec, args, varlen_args(total_q=2**31 - 1))


def test_dense_kernel_refuses_a_packed_launch(run_with_fake, kernel_dir: Path) -> None:
    snippet = LAUNCH.format(kernel=DENSE, args=bytes(packed_args()).hex(), varlen=bytes(varlen_args()).hex())
    snippet = snippet.replace("zyfa_core.launch(", "try:\n    zyfa_core.launch(").replace(
        "\nprint(",
        "\nexcept ValueError as exc:\n    print(json.dumps(str(exc)))\n    raise SystemExit\nprint(",
    )
    out, calls = run_with_fake("cuda", snippet, kernel_dir)
    assert "serves dense batches" in out and not [c for c in calls if c.startswith("cuLaunchKernel ")]


# ------------------------------------------------------------------- persistent packed kernels

FAKE_SMS = 132  # fake_cuda.c's CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT


@pytest.fixture
def persistent_dir(tmp_path: Path, manifest_tools) -> Path:
    """VARLEN and PAGED as the sm90a manifest ships them: grid "persistent"."""
    rows = [
        manifest_tools.row(VARLEN, layout="varlen", grid="persistent"),
        manifest_tools.row(PAGED, layout="paged", grid="persistent"),
    ]
    image = f"FAKECUBIN {VARLEN} {PAGED}\n".encode()
    return manifest_tools.write(tmp_path / "persistent", rows, files={row["file"]: image for row in rows})


PERSISTENT_LAUNCH = LAUNCH.replace("(spec, args, varlen=varlen)", f"(spec, args, {FAKE_SMS}, varlen=varlen)")


@pytest.mark.parametrize("kernel", [VARLEN, PAGED])
@pytest.mark.parametrize(
    ("total_q", "seqlen_q", "batch", "grid"),
    [
        (180, 100, 3, [40, 1, 1]),  # 5 tiles bound x 8 heads = 40 items: one block each
        (1, 1, 1, [8, 1, 1]),  # 1 x 8
        (4000, 100, 40, [FAKE_SMS, 1, 1]),  # min(62 + 40, 80) = 80 x 8 = 640 items over 132 blocks
    ],
)
def test_persistent_packed_grid_reaches_the_driver(
    run_with_fake, persistent_dir: Path, kernel: str, total_q: int, seqlen_q: int, batch: int, grid: list
) -> None:
    """A persistent packed kernel launches (min(SMs, items), 1, 1), items = the tile grid's blocks (the
    query-tile bound x heads_q), with zyfa_varlen_args as its second parameter."""
    paged = kernel == PAGED
    args = packed_args(fp8=paged, paged=paged, seqlen_q=seqlen_q, batch=batch)
    varlen = varlen_args(paged, total_q=total_q)
    snippet = PERSISTENT_LAUNCH.format(kernel=kernel, args=bytes(args).hex(), varlen=bytes(varlen).hex())
    out, calls = run_with_fake("cuda", snippet, persistent_dir)
    (launch,) = [c for c in calls if c.startswith("cuLaunchKernel ")]
    fields = dict(pair.split("=", 1) for pair in launch.split(" ")[1:])
    assert fields["name"] == kernel and fields["second"] == bytes(varlen).hex()
    assert out["grid"] == grid and fields["grid"] == ",".join(map(str, grid))


def test_persistent_packed_grid_is_the_tile_grids_items(kernel_dir: Path, persistent_dir: Path) -> None:
    """Every persistent grid size: min(multiprocessors, x * y of the tile grid) blocks."""
    tiles = zyfa_core.Manifest.load(kernel_dir).get(VARLEN)
    persistent = zyfa_core.Manifest.load(persistent_dir).get(VARLEN)
    for total_q, seqlen_q, batch in [(180, 100, 3), (130, 200, 3), (600, 100, 3), (9000, 4000, 64)]:
        args, varlen = packed_args(seqlen_q=seqlen_q, batch=batch), varlen_args(total_q=total_q)
        x, y, z = zyfa_core.launch_grid(tiles, args, varlen=varlen)
        assert z == 1
        for sms in (1, 7, 132, 10**6):
            assert zyfa_core.launch_grid(persistent, args, sms, varlen=varlen) == (min(sms, x * y), 1, 1)


def test_persistent_packed_grid_needs_multiprocessors(persistent_dir: Path) -> None:
    spec = zyfa_core.Manifest.load(persistent_dir).get(VARLEN)
    with pytest.raises(ValueError, match=f"{VARLEN} takes a persistent grid.*multiprocessor count"):
        zyfa_core.launch_grid(spec, packed_args(), varlen=varlen_args())


def test_persistent_packed_kernel_refuses_32_bit_overflow(persistent_dir: Path) -> None:
    """Items are numbered in 32 bits as the tile grid's blocks are; heads_q alone is no limit any more."""
    spec = zyfa_core.Manifest.load(persistent_dir).get(VARLEN)
    args = packed_args(seqlen_q=2**30, heads_q=128, q_stride_seq=128 * 128, out_stride_seq=128 * 128)
    with pytest.raises(ValueError, match="work items .* which a packed kernel numbers in 32 bits"):
        zyfa_core.check_args(spec, args, varlen_args(total_q=2**31 - 1))


# ------------------------------------------------------------------- dynamic packed kernels

WORKSPACE = 0x7F0000900000


@pytest.fixture
def dynamic_dir(tmp_path: Path, manifest_tools) -> Path:
    """VARLEN as the sm90a manifest ships the 192/128 packed rows: grid "dynamic"."""
    rows = [manifest_tools.row(VARLEN, layout="varlen", grid="dynamic")]
    image = f"FAKECUBIN {VARLEN}\n".encode()
    return manifest_tools.write(tmp_path / "dynamic", rows, files={rows[0]["file"]: image})


DYNAMIC_LAUNCH = """
import zyfa_core
spec = zyfa_core.Manifest.load(KERNEL_DIR).get({kernel!r})
args = zyfa_core.ZyfaFwdArgs.from_buffer_copy(bytes.fromhex({args!r}))
varlen = zyfa_core.ZyfaVarlenArgs.from_buffer_copy(bytes.fromhex({varlen!r}))
try:
    zyfa_core.launch(spec, args, stream=0x5000, device=0, varlen=varlen, workspace={workspace})
except (ValueError, zyfa_core.ZyfaDriverError) as exc:
    print(json.dumps({{"error": str(exc)}}))
    raise SystemExit
grid = zyfa_core.launch_grid(spec, args, 132, varlen)
print(json.dumps({{"bytes": spec.workspace_bytes(3, 2, 300), "grid": grid}}))
"""


def calls_starting(calls: list[str], name: str) -> list[tuple[int, dict[str, str]]]:
    """(position, fields) of each logged call to `name`."""
    return [
        (i, dict(pair.split("=", 1) for pair in c.split(" ")[1:]))
        for i, c in enumerate(calls)
        if c.startswith(name + " ")
    ]


def test_dynamic_launch_clears_its_counter_then_points_the_kernel_at_it(
    run_with_fake, dynamic_dir: Path
) -> None:
    """The counter is the workspace's last 16 bytes: cleared on the launch's stream, then the kernel's
    item_counter; the grid is the persistent one."""
    args, varlen = packed_args(), varlen_args()
    snippet = DYNAMIC_LAUNCH.format(
        kernel=VARLEN, args=bytes(args).hex(), varlen=bytes(varlen).hex(), workspace=WORKSPACE
    )
    out, calls = run_with_fake("cuda", snippet, dynamic_dir)
    assert out["bytes"] == 16 and out["grid"] == [40, 1, 1]  # 5 tiles bound x 8 heads
    ((at_memset, memset),) = calls_starting(calls, "cuMemsetD32Async")
    ((at_launch, launch),) = calls_starting(calls, "cuLaunchKernel")
    assert at_memset < at_launch
    assert memset == {"dst": hex(WORKSPACE), "value": "0", "count": "1", "stream": "0x5000"}
    expected = zyfa_core.ZyfaVarlenArgs.from_buffer_copy(bytes(varlen))
    expected.item_counter = WORKSPACE
    assert launch["second"] == bytes(expected).hex() and launch["grid"] == "40,1,1"


@pytest.mark.parametrize(
    ("workspace", "env", "message"),
    [
        (0, {}, f"{VARLEN} claims its items from a counter in the workspace: pass workspace=<device pointer"),
        (WORKSPACE + 8, {}, "is not 16-byte aligned"),
        (WORKSPACE, {"FAKE_MEMSET_ERROR": "1"}, "cuMemsetD32Async"),
    ],
)
def test_dynamic_launch_without_its_counter_is_refused(
    run_with_fake, dynamic_dir: Path, workspace: int, env: dict, message: str
) -> None:
    snippet = DYNAMIC_LAUNCH.format(
        kernel=VARLEN, args=bytes(packed_args()).hex(), varlen=bytes(varlen_args()).hex(), workspace=workspace
    )
    out, calls = run_with_fake("cuda", snippet, dynamic_dir, **env)
    assert message in out["error"] and not calls_starting(calls, "cuLaunchKernel")


def test_dynamic_is_for_packed_rows_only(tmp_path: Path, manifest_tools) -> None:
    directory = manifest_tools.write(tmp_path / "dense", [manifest_tools.row(DENSE, grid="dynamic")])
    with pytest.raises(zyfa_core.ManifestError, match='grid "dynamic" is for packed layouts'):
        zyfa_core.Manifest.load(directory)
    plan = dict(name="k", dtype="bf16", d_qk=128, d_v=128, causal=True, tile_m=64, tile_n=64, threads=64)
    with pytest.raises(ValueError, match="grid dynamic is for packed"):
        zyfa_core.launcher._driver().Plan(**plan, smem=0, grid="dynamic", loads="cp.async", v_prep="")


# ------------------------------------------------------------------- gfx950 packed kernels (HIP)

GFX950_VARLEN = "fa_fwd_bf16_hd128_causal_varlen_gfx950"
GFX950_PAGED = "fa_fwd_bf16_hd128_causal_paged_gfx950"
GFX950_TILE_M = 256


@pytest.fixture
def gfx950_dir(tmp_path: Path, manifest_tools) -> Path:
    """The gfx950 packed rows as the manifest ships them: grid "batch_tiles", 256-row tiles, 512 threads."""
    shape = dict(tile_m=GFX950_TILE_M, threads=512, smem_bytes=0, grid="batch_tiles")
    rows = [
        manifest_tools.row(GFX950_VARLEN, layout="varlen", **shape),
        manifest_tools.row(GFX950_PAGED, layout="paged", **shape),
    ]
    image = f"FAKEHSACO {GFX950_VARLEN} {GFX950_PAGED}".encode()
    return manifest_tools.write(tmp_path / "gfx950", rows, files={row["file"]: image for row in rows})


@pytest.mark.parametrize("kernel", [GFX950_VARLEN, GFX950_PAGED])
@pytest.mark.parametrize(("seqlen_q", "batch"), [(100, 3), (600, 5), (GFX950_TILE_M + 1, 1)])
def test_gfx950_packed_launch_is_one_kernarg_segment(
    run_with_fake, gfx950_dir: Path, kernel: str, seqlen_q: int, batch: int
) -> None:
    """HIP takes one kernarg segment: zyfa_fwd_args at 0, zyfa_varlen_args at 192 (its 8-byte alignment), 272
    bytes; the grid is (ceil(max_seqlen_q / tile_m), heads_q, batch), whatever total_q is."""
    paged = kernel == GFX950_PAGED
    args = packed_args(paged=paged, seqlen_q=seqlen_q, batch=batch)
    varlen = varlen_args(paged, total_q=180)
    snippet = LAUNCH.format(kernel=kernel, args=bytes(args).hex(), varlen=bytes(varlen).hex())
    out, calls = run_with_fake("hip", snippet, gfx950_dir)
    (launch,) = [c for c in calls if c.startswith("hipModuleLaunchKernel ")]
    fields = dict(pair.split("=", 1) for pair in launch.split(" ")[1:])
    segment = bytes.fromhex(fields["args"])
    assert fields["name"] == kernel and int(fields["size"]) == len(segment) == 272
    assert segment[:192] == bytes(args) and segment[192:] == bytes(varlen)
    decoded = zyfa_core.ZyfaVarlenArgs.from_buffer_copy(segment, 192)
    total_k = 640 if paged else 520
    assert (decoded.cu_seqlens_q, decoded.total_q, decoded.total_k) == (0x7F0000400000, 180, total_k)
    assert decoded.page_table == (0x7F0000400200 if paged else None)
    grid = [-(-seqlen_q // GFX950_TILE_M), 8, batch]
    assert out["grid"] == grid and fields["grid"] == ",".join(map(str, grid))
    assert fields["block"] == "512,1,1" and fields["smem"] == "0" and int(fields["stream"], 16) == 0x5000


def test_batch_tiles_grid_needs_no_varlen_struct(gfx950_dir: Path, kernel_dir: Path) -> None:
    """The grid of a "batch_tiles" row comes from the bounds alone; a compact "tiles" row's from total_q."""
    spec = zyfa_core.Manifest.load(gfx950_dir).get(GFX950_VARLEN)
    compact = zyfa_core.Manifest.load(kernel_dir).get(VARLEN)
    args = packed_args(seqlen_q=1000, batch=7)
    assert zyfa_core.launch_grid(spec, args) == (4, 8, 7)
    assert zyfa_core.launch_grid(spec, args, varlen=varlen_args(total_q=1)) == (4, 8, 7)
    assert zyfa_core.launch_grid(compact, args, varlen=varlen_args(total_q=1)) == (7, 8, 1)


def test_batch_tiles_is_for_packed_rows_only(tmp_path: Path, manifest_tools) -> None:
    row = manifest_tools.row("fa_fwd_bf16_hd128_causal_gfx950", grid="batch_tiles")
    directory = manifest_tools.write(tmp_path / "dense", [row])
    with pytest.raises(zyfa_core.ManifestError, match='grid "batch_tiles" is for packed layouts'):
        zyfa_core.Manifest.load(directory)
    plan = dict(name="k", dtype="bf16", d_qk=128, d_v=128, causal=True, tile_m=64, tile_n=64, threads=64)
    plan["smem"] = 0
    driver = zyfa_core.launcher._driver()
    with pytest.raises(ValueError, match="grid batch_tiles is for packed"):
        driver.Plan(**plan, grid="batch_tiles", loads="cp.async", v_prep="")
    with pytest.raises(ValueError, match="grid must be 'tiles', 'persistent', 'batch_tiles' or 'dynamic'"):
        driver.Plan(**plan, grid="ragged", loads="cp.async", v_prep="", layout="varlen")


# ------------------------------------------------------------------- packed kernels with TMA maps

VARLEN_TMA = "fa_fwd_bf16_hd128_causal_tma_varlen_sm90a"  # fake_cuda.c: 3 parameters (192 + 80 + 448)


@pytest.fixture
def tma_varlen_dir(tmp_path: Path, manifest_tools) -> Path:
    rows = [
        manifest_tools.row(
            VARLEN_TMA, layout="varlen", grid="persistent", loads="tma", threads=384, tile_m=128, tile_n=128
        )
    ]
    image = f"FAKECUBIN {VARLEN_TMA}\n".encode()
    return manifest_tools.write(tmp_path / "tma_varlen", rows, files={row["file"]: image for row in rows})


def encodes(calls: list[str]) -> list[dict[str, str]]:
    lines = [c for c in calls if c.startswith("cuTensorMapEncodeTiled ")]
    return [dict(pair.split("=", 1) for pair in line.split(" ")[1:]) for line in lines]


def test_varlen_tma_launch_passes_args_varlen_and_maps_over_the_packed_rows(
    run_with_fake, tma_varlen_dir: Path
) -> None:
    """A "varlen" kernel with loads "tma" takes zyfa_tma_maps third (ABI 6), after zyfa_varlen_args. The maps
    describe each packed tensor as one sequence of its total rows (batch 1), so a sequence's tile is addressed
    from its first row; the batch stride is the tensor's rows x the seq stride."""
    rng = random.Random()
    total_q, total_k = rng.randint(1, 5000), rng.randint(1, 5000)
    args, varlen = packed_args(), varlen_args(total_q=total_q, total_k=total_k)
    snippet = PERSISTENT_LAUNCH.format(kernel=VARLEN_TMA, args=bytes(args).hex(), varlen=bytes(varlen).hex())
    _, calls = run_with_fake("cuda", snippet, tma_varlen_dir)
    hq, hkv, d, elem = 8, 2, 128, 2
    expected = [
        (args.q, total_q, hq, hq * d, 128),
        (args.k, total_k, hkv, hkv * d, 128),
        (args.v, total_k, hkv, hkv * d, 128),
    ]
    got = [(int(e["address"], 16), e["dims"], e["strides"], e["box"]) for e in encodes(calls)]
    assert got == [
        (address, f"{d},{rows},{heads},1", f"{seq * elem},{d * elem},{rows * seq * elem}", f"64,{box},1,1")
        for address, rows, heads, seq, box in expected
    ]
    (launch,) = [c for c in calls if c.startswith("cuLaunchKernel ")]
    fields = dict(pair.split("=", 1) for pair in launch.split(" ")[1:])
    assert fields["args"] == bytes(args).hex() and fields["second"] == bytes(varlen).hex()
    maps = b"".join((address + i).to_bytes(8, "little") for address, *_ in expected for i in range(16))
    assert fields["third"] == (maps + (1).to_bytes(4, "little") + bytes(60)).hex()


def test_tma_is_refused_on_paged_rows(tmp_path: Path, manifest_tools) -> None:
    rows = [manifest_tools.row(PAGED, layout="paged", loads="tma")]
    kernels = manifest_tools.write(tmp_path / "paged_tma", rows, files={rows[0]["file"]: b"FAKECUBIN\n"})
    with pytest.raises(zyfa_core.ManifestError, match="a paged kernel gathers K / V through the page table"):
        zyfa_core.Manifest.load(kernels)


# ------------------------------------------------------------------- packed kernels with a V pre-pass

VARLEN_PREP = "fa_fwd_e4m3fn_hd128_causal_leanp_varlen_sm90a"
PREP_WORKSPACE = 0x7F4000000000


@pytest.fixture
def prep_varlen_dir(tmp_path: Path, manifest_tools) -> Path:
    shape = {"tile_m": 128, "tile_n": 128, "threads": 384}
    row = manifest_tools.row(
        VARLEN_PREP, layout="varlen", grid="persistent", v_prep=VARLEN_PREP + "_vprep", **shape
    )
    image = f"FAKECUBIN {VARLEN_PREP} {VARLEN_PREP}_vprep\n".encode()
    return manifest_tools.write(tmp_path / "prep_varlen", [row], files={row["file"]: image})


def test_varlen_v_prep_runs_on_the_packed_layout_then_the_kernel_reads_it(
    run_with_fake, prep_varlen_dir: Path
) -> None:
    """A varlen kernel with a V pre-pass (ABI 6): <name>_vprep runs first with the args, zyfa_varlen_args and
    the workspace pointer, on (row bytes / 128, heads_kv, 1): one Vt row per (kv head, d) holds every
    sequence, VT_PACKED_GAP x batch + total_k + 128 columns rounded up to 128. Then the kernel, with v = the
    workspace."""
    rng = random.Random()
    total_k, batch = rng.randint(1, 9000), rng.randint(1, 50)
    args = packed_args(fp8=True, batch=batch, seqlen_q=max(1, 180 // batch))
    varlen = varlen_args(total_k=total_k)
    snippet = PERSISTENT_LAUNCH.format(kernel=VARLEN_PREP, args=bytes(args).hex(), varlen=bytes(varlen).hex())
    snippet = snippet.replace("varlen=varlen)\n", f"varlen=varlen, workspace={PREP_WORKSPACE})\n", 1)
    snippet += f"print(json.dumps(spec.workspace_bytes({batch}, 2, 300, {total_k})))\n"
    out, calls = run_with_fake("cuda", snippet, prep_varlen_dir)
    prep, main = [
        dict(pair.split("=", 1) for pair in c.split(" ")[1:])
        for c in calls
        if c.startswith("cuLaunchKernel ")
    ]
    row = -(-(144 * batch + total_k + 128) // 128) * 128
    assert zyfa_core.manifest.vt_packed_row_bytes(batch, total_k) == row
    assert prep["name"] == VARLEN_PREP + "_vprep" and prep["grid"] == f"{row // 128},2,1"
    assert prep["args"] == bytes(args).hex() and prep["second"] == bytes(varlen).hex()
    assert prep["third"] == PREP_WORKSPACE.to_bytes(8, "little").hex()
    moved = zyfa_core.ZyfaFwdArgs.from_buffer_copy(bytes(args))
    moved.v = PREP_WORKSPACE
    assert main["name"] == VARLEN_PREP and main["args"] == bytes(moved).hex()
    assert main["second"] == bytes(varlen).hex() and "third" not in main
    assert prep["stream"] == main["stream"] == "0x5000"
    assert out == 2 * 128 * row  # heads_kv x d_v rows


VARLEN_TMA_PREP = "fa_fwd_e4m3fn_hd128_causal_leanp_tma_varlen_sm90a"  # fake_cuda.c: 3 parameters, maps third


def test_varlen_tma_with_v_prep_maps_v_over_the_packed_vt(
    run_with_fake, tmp_path: Path, manifest_tools
) -> None:
    """An e4m3 "varlen" kernel with loads "tma" and a V pre-pass (ABI 7): the pass runs first, then the
    kernel with maps of q and k over the packed rows (boxes of 128 e4m3 elements) and of v over the pass's
    Vt in the workspace: dims {row bytes, d_v, heads_kv, 1}, strides {row, d_v row, heads_kv d_v row}, box
    {128, d_v, 1, 1}."""
    shape = {"tile_m": 128, "tile_n": 128, "threads": 384}
    row = manifest_tools.row(
        VARLEN_TMA_PREP,
        layout="varlen",
        grid="persistent",
        loads="tma",
        v_prep=VARLEN_TMA_PREP + "_vprep",
        **shape,
    )
    image = f"FAKECUBIN {VARLEN_TMA_PREP} {VARLEN_TMA_PREP}_vprep\n".encode()
    kernels = manifest_tools.write(tmp_path / "tma_prep", [row], files={row["file"]: image})
    rng = random.Random()
    total_q, total_k, batch = rng.randint(1, 5000), rng.randint(1, 9000), rng.randint(1, 50)
    args = packed_args(fp8=True, batch=batch, seqlen_q=max(1, 180 // batch))
    varlen = varlen_args(total_q=total_q, total_k=total_k)
    snippet = PERSISTENT_LAUNCH.format(
        kernel=VARLEN_TMA_PREP, args=bytes(args).hex(), varlen=bytes(varlen).hex()
    )
    snippet = snippet.replace("varlen=varlen)\n", f"varlen=varlen, workspace={PREP_WORKSPACE})\n", 1)
    _, calls = run_with_fake("cuda", snippet, kernels)
    hq, hkv, d = 8, 2, 128
    vt_row = -(-(144 * batch + total_k + 128) // 128) * 128
    got = [(int(e["address"], 16), e["dims"], e["strides"], e["box"]) for e in encodes(calls)]
    assert got == [
        (args.q, f"{d},{total_q},{hq},1", f"{hq * d},{d},{total_q * hq * d}", "128,128,1,1"),
        (args.k, f"{d},{total_k},{hkv},1", f"{hkv * d},{d},{total_k * hkv * d}", "128,128,1,1"),
        (
            PREP_WORKSPACE,
            f"{vt_row},{d},{hkv},1",
            f"{vt_row},{d * vt_row},{hkv * d * vt_row}",
            f"128,{d},1,1",
        ),
    ]
    prep, main = [c for c in calls if c.startswith("cuLaunchKernel ")]
    assert f"name={VARLEN_TMA_PREP}_vprep " in prep and f"name={VARLEN_TMA_PREP} " in main
    fields = dict(pair.split("=", 1) for pair in main.split(" ")[1:])
    maps = b"".join((address + i).to_bytes(8, "little") for address, *_ in got for i in range(16))
    assert fields["third"] == (maps + (1).to_bytes(4, "little") + bytes(60)).hex()


def test_varlen_e4m3_tma_needs_the_v_pre_pass(tmp_path: Path, manifest_tools) -> None:
    row = manifest_tools.row(
        VARLEN_TMA_PREP, layout="varlen", loads="tma", tile_m=128, tile_n=128, threads=384
    )
    kernels = manifest_tools.write(tmp_path / "tma_no_prep", [row], files={row["file"]: b"FAKECUBIN\n"})
    with pytest.raises(zyfa_core.ManifestError, match="loads V by TMA only as the V pre-pass's Vt tiles"):
        zyfa_core.Manifest.load(kernels)


def test_varlen_v_prep_needs_total_k_and_its_workspace(prep_varlen_dir: Path) -> None:
    spec = zyfa_core.Manifest.load(prep_varlen_dir).get(VARLEN_PREP)
    with pytest.raises(ValueError, match="sized by total_k"):
        spec.workspace_bytes(3, 2, 300)
    with pytest.raises(
        ValueError, match=r"reads V pre-transposed: pass workspace=<device pointer to 294912 bytes>"
    ):
        zyfa_core.launch(spec, packed_args(fp8=True), stream=0, device=0, varlen=varlen_args())


def test_v_prep_is_refused_on_paged_rows(tmp_path: Path, manifest_tools) -> None:
    rows = [manifest_tools.row(PAGED, layout="paged", v_prep=PAGED + "_vprep")]
    kernels = manifest_tools.write(tmp_path / "paged_prep", rows, files={rows[0]["file"]: b"FAKECUBIN\n"})
    with pytest.raises(zyfa_core.ManifestError, match="a paged kernel has no V pre-pass"):
        zyfa_core.Manifest.load(kernels)
