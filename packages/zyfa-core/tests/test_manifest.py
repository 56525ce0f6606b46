"""zyfa_core.manifest on fixture manifests: loading, validation, selection, error messages, discovery."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import zyfa_core
from zyfa_core import manifest as mf
from zyfa_core.errors import KernelDirNotFoundError, KernelNotFoundError, ManifestError

SM90 = [
    "fa_fwd_bf16_hd128_causal_sm90a",
    "fa_fwd_bf16_hd192x128_causal_sm90a",
    "fa_fwd_e4m3fn_hd128_causal_sm90a",
    "fa_fwd_e4m3fn_hd128_causal_leanp_sm90a",
    "fa_fwd_e4m3fn_hd192x128_causal_leanp_sm90a",
    "fa_fwd_e4m3fn_hd128_causal_pf16_sm90a",
]
GFX950 = ["fa_fwd_bf16_hd128_causal_gfx950"]
SKIPPED = [
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_sm90a", "reason": "nvcc 12.4 < 12.8"},
    {"name": "fa_fwd_e4m3fn_hd128_causal_gfx950", "reason": "ziglang missing"},
]


@pytest.fixture
def kernel_dir(tmp_path: Path, manifest_tools) -> Path:
    rows = [manifest_tools.row(name) for name in SM90 + GFX950]
    return manifest_tools.write(tmp_path / "kernels", rows, SKIPPED)


def test_load_reads_every_row(kernel_dir: Path) -> None:
    m = zyfa_core.Manifest.load(kernel_dir)
    assert [s.name for s in m.kernels] == SM90 + GFX950
    assert m.arches() == ["gfx950", "sm90a"]
    assert m.path == kernel_dir.resolve() / "manifest.json"
    spec = m.get("fa_fwd_bf16_hd192x128_causal_sm90a")
    assert (spec.d_qk, spec.d_v, spec.dtype, spec.p_mode, spec.kind) == (192, 128, "bf16", None, "cuda")
    assert spec.path == kernel_dir.resolve() / "fa_fwd_bf16_hd192x128_causal_sm90a.cubin"
    assert spec.toolchain["nvcc"] == "13.0.88"
    assert spec.launch_smem_bytes == spec.smem_bytes == 49152
    hip = m.get("fa_fwd_bf16_hd128_causal_gfx950")
    assert hip.sgprs == 64 and hip.launch_smem_bytes == 0  # static LDS: never passed again as dynamic
    assert [s.name for s in m.skipped] == [s["name"] for s in SKIPPED]
    assert m.toolchains["nvcc"] == "13.0.88"
    hash(spec)  # frozen and hashable despite the toolchain mapping


def test_abi_version_mismatch_names_both_versions(tmp_path: Path, manifest_tools) -> None:
    manifest_tools.write(tmp_path, [manifest_tools.row(SM90[0])], abi_version=zyfa_core.ABI_VERSION + 1)
    with pytest.raises(
        ManifestError, match=rf"ABI version {zyfa_core.ABI_VERSION + 1}.*ABI version {zyfa_core.ABI_VERSION}"
    ):
        zyfa_core.Manifest.load(tmp_path)


def test_row_abi_version_mismatch(tmp_path: Path, manifest_tools) -> None:
    manifest_tools.write(tmp_path, [manifest_tools.row(SM90[0], abi_version=1)])
    with pytest.raises(ManifestError, match=rf"{SM90[0]}.*ABI version 1.*uses {zyfa_core.ABI_VERSION}"):
        zyfa_core.Manifest.load(tmp_path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"causal": "yes"}, "causal"),
        ({"d_qk": "128"}, "d_qk"),
        ({"d_qk": True}, "d_qk"),
        ({"tile_m": 0}, "tile_m"),
        ({"smem_bytes": -1}, "smem_bytes"),
        ({"kind": "opencl"}, "kind"),
        ({"file": "../escape.cubin"}, "bare file name"),
        ({"dtype": "fp16"}, "fp16"),
        ({"p_mode": "fast"}, "p_mode"),
    ],
)
def test_bad_rows_are_rejected(tmp_path: Path, manifest_tools, override: dict, message: str) -> None:
    manifest_tools.write(tmp_path, [manifest_tools.row(SM90[0], **override)])
    with pytest.raises(ManifestError, match=message):
        zyfa_core.Manifest.load(tmp_path)


@pytest.mark.parametrize(
    ("name", "override", "message"),
    [
        (
            SM90[0],
            {"threads": 100000},
            r"threads = 100000: a cuda block takes at most 1024 threads, a multiple of 32",
        ),
        (SM90[0], {"threads": 100}, r"threads = 100: .*multiple of 32"),
        (GFX950[0], {"threads": 96}, r"threads = 96: a hip block .*multiple of 64"),
        (SM90[0], {"smem_bytes": 232449}, r"smem_bytes = 232449 exceeds 232448"),
        (GFX950[0], {"smem_bytes": 163841}, r"smem_bytes = 163841 exceeds 163840"),
        (SM90[0], {"tile_m": 4096}, r"tile_m = 4096 is beyond 512"),
        (SM90[0], {"tile_n": 100000}, r"tile_n = 100000 is beyond 512"),
        (SM90[0], {"d_v": 1 << 20}, r"d_v = 1048576 is beyond 512"),
        (SM90[0], {"registers": 256}, r"registers = 256 is outside 0..255"),
        (SM90[0], {"spill_bytes": -8}, r"spill_bytes = -8 must not be negative"),
        (SM90[0], {"sha256": "xyz"}, r"sha256 'xyz' must be 64 lowercase hex digits"),
        (SM90[0], {"sha256": 5}, r"sha256 5 must be 64"),
    ],
)
def test_rows_beyond_the_kinds_limits_are_refused(
    tmp_path: Path, manifest_tools, name: str, override: dict, message: str
) -> None:
    """A row a driver would launch wrongly (block size, shared memory, tiles) is refused at load, by name."""
    manifest_tools.write(tmp_path, [manifest_tools.row(name, **override)])
    with pytest.raises(ManifestError, match=rf"kernel '{name}': {message}"):
        zyfa_core.Manifest.load(tmp_path)


def test_rows_at_the_limits_load(tmp_path: Path, manifest_tools) -> None:
    rows = [
        manifest_tools.row(SM90[0], threads=1024, smem_bytes=232448, tile_m=512, registers=255),
        manifest_tools.row(GFX950[0], threads=64, smem_bytes=163840, tile_n=1, registers=512),
    ]
    manifest_tools.write(tmp_path, rows)
    assert len(zyfa_core.Manifest.load(tmp_path).kernels) == 2


def test_code_object_sha256_is_checked_at_load(tmp_path: Path, manifest_tools) -> None:
    """The row's sha256 must match the file's bytes: a changed byte is refused, naming the file."""
    image = bytes(range(256)) * 3
    digest = hashlib.sha256(image).hexdigest()
    files = {SM90[0] + ".cubin": image}
    manifest_tools.write(tmp_path / "good", [manifest_tools.row(SM90[0], sha256=digest)], files=files)
    spec = zyfa_core.Manifest.load(tmp_path / "good").get(SM90[0])
    assert spec.sha256 == digest == mf.file_sha256(spec.path)
    bad = tmp_path / "bad"
    manifest_tools.write(
        bad, [manifest_tools.row(SM90[0], sha256=digest)], files={SM90[0] + ".cubin": image[:-1] + b"x"}
    )
    path = (bad / (SM90[0] + ".cubin")).resolve()
    with pytest.raises(
        ManifestError,
        match=rf"code object {path} of kernel '{SM90[0]}' has SHA-256 [0-9a-f]{{64}}, "
        rf"but the manifest records {digest}",
    ):
        zyfa_core.Manifest.load(bad)
    # Swapped after load: check_code_object (what the launcher can call before a driver load) sees it too.
    spec.path.write_bytes(b"swapped")
    with pytest.raises(ManifestError, match="changed or corrupted after the build"):
        mf.check_code_object(spec)
    spec.path.unlink()  # a missing file is the launch's to report (it names the missing path)
    mf.check_code_object(spec)


def test_missing_key_and_duplicates(tmp_path: Path, manifest_tools) -> None:
    row = manifest_tools.row(SM90[0])
    del row["threads"]
    manifest_tools.write(tmp_path / "a", [row])
    with pytest.raises(ManifestError, match=r"missing key.*threads"):
        zyfa_core.Manifest.load(tmp_path / "a")
    manifest_tools.write(tmp_path / "b", [manifest_tools.row(SM90[0]), manifest_tools.row(SM90[0])])
    with pytest.raises(ManifestError, match="duplicate"):
        zyfa_core.Manifest.load(tmp_path / "b")


def test_unreadable_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="cannot read"):
        zyfa_core.Manifest.load(tmp_path)
    with pytest.raises(ManifestError, match="cannot read"):
        zyfa_core.Manifest.load(tmp_path / "nowhere")


def test_unknown_keys_are_ignored(tmp_path: Path, manifest_tools) -> None:
    """Newer builders may add columns; an older zyfa_core keeps working."""
    manifest_tools.write(tmp_path, [manifest_tools.row(SM90[0], occupancy=2)])
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["generator"] = "future"
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    assert zyfa_core.Manifest.load(tmp_path).kernels[0].name == SM90[0]


def test_grid_is_read_and_defaults_to_tiles(tmp_path: Path, manifest_tools) -> None:
    """A row without "grid" (a manifest older than the field) takes the tile grid."""
    rows = [
        manifest_tools.row(SM90[0], grid="persistent"),
        manifest_tools.row(SM90[1], grid="tiles"),
        manifest_tools.row(SM90[2]),
    ]
    assert "grid" not in rows[2]
    m = zyfa_core.Manifest.load(manifest_tools.write(tmp_path, rows))
    assert [s.grid for s in m.kernels] == ["persistent", "tiles", "tiles"]
    assert mf.GRID_MODES == ("tiles", "persistent", "batch_tiles", "dynamic")


@pytest.mark.parametrize("grid", ["ring", "", None, 1, "Persistent"])
def test_unknown_grid_is_rejected_naming_kernel_and_modes(
    tmp_path: Path, manifest_tools, grid: object
) -> None:
    manifest_tools.write(tmp_path, [manifest_tools.row(SM90[0], grid=grid)])
    with pytest.raises(ManifestError) as info:
        zyfa_core.Manifest.load(tmp_path)
    modes = "('tiles', 'persistent', 'batch_tiles', 'dynamic')"
    assert f"kernel {SM90[0]!r}: grid {grid!r} is not one of {modes}" in str(info.value)


def test_loads_is_read_and_defaults_to_cp_async(tmp_path: Path, manifest_tools) -> None:
    """A row without "loads" (a manifest older than the field) is a one-parameter cp.async kernel."""
    rows = [
        manifest_tools.row(SM90[0], loads="tma", grid="persistent"),
        manifest_tools.row(SM90[1], loads="cp.async"),
        manifest_tools.row(SM90[2]),
    ]
    assert "loads" not in rows[2]
    m = zyfa_core.Manifest.load(manifest_tools.write(tmp_path, rows))
    assert [s.loads for s in m.kernels] == ["tma", "cp.async", "cp.async"]
    assert mf.LOAD_MODES == ("cp.async", "tma")
    assert m.kernels[0].describe() == f"{SM90[0]} (bf16 d128x128, causal, grid=persistent, loads=tma, sm90a)"
    assert "loads" not in m.kernels[1].describe()


@pytest.mark.parametrize("loads", ["ldg", "", None, 1, "TMA"])
def test_unknown_loads_is_rejected_naming_kernel_and_modes(
    tmp_path: Path, manifest_tools, loads: object
) -> None:
    manifest_tools.write(tmp_path, [manifest_tools.row(SM90[0], loads=loads)])
    with pytest.raises(ManifestError) as info:
        zyfa_core.Manifest.load(tmp_path)
    assert f"kernel {SM90[0]!r}: loads {loads!r} is not one of ('cp.async', 'tma')" in str(info.value)


def test_stale_tau_is_read_and_defaults_to_zero(tmp_path: Path, manifest_tools) -> None:
    """A row without "stale_tau" (a manifest older than the field) keeps the exact running max."""
    rows = [manifest_tools.row(SM90[0], stale_tau=8.0), manifest_tools.row(SM90[2], stale_tau=0.5),
            manifest_tools.row(SM90[1])]  # fmt: skip
    assert "stale_tau" not in rows[2]
    m = zyfa_core.Manifest.load(manifest_tools.write(tmp_path, rows))
    assert [s.stale_tau for s in m.kernels] == [8.0, 0.5, 0.0]
    assert m.kernels[0].describe() == f"{SM90[0]} (bf16 d128x128, causal, stale_tau=8, sm90a)"
    assert "stale_tau" not in m.kernels[2].describe()


@pytest.mark.parametrize(
    ("name", "tau", "problem"),
    [
        (SM90[0], -1.0, "must be a finite number >= 0"),
        (SM90[0], float("inf"), "must be a finite number >= 0"),
        (SM90[0], "8", "must be a finite number >= 0"),
        (SM90[0], True, "must be a finite number >= 0"),
        (SM90[2], 0.8, "of an FP8 kernel must be < 0.8"),  # P would pass e4m3's 448
    ],
)
def test_bad_stale_tau_is_rejected_naming_kernel(
    tmp_path: Path, manifest_tools, name: str, tau: object, problem: str
) -> None:
    manifest_tools.write(tmp_path, [manifest_tools.row(name, stale_tau=tau)])
    with pytest.raises(ManifestError) as info:
        zyfa_core.Manifest.load(tmp_path)
    assert f"kernel {name!r}: stale_tau" in str(info.value) and problem in str(info.value)


def test_max_kv_seq_stride_is_read_and_checked(tmp_path: Path, manifest_tools) -> None:
    """A row's max_kv_seq_stride (0 when absent, as in manifests older than the field) reaches the spec;
    a negative or non-int value is refused naming the kernel."""
    gfx = "fa_fwd_bf16_hd128_causal_gfx950"
    rows = [manifest_tools.row(gfx, max_kv_seq_stride=2**24), manifest_tools.row(SM90[0])]
    m = zyfa_core.Manifest.load(manifest_tools.write(tmp_path / "good", rows))
    assert [s.max_kv_seq_stride for s in m.kernels] == [2**24, 0]
    for bad in (-1, 1.5, True):
        manifest_tools.write(tmp_path / str(bad), [manifest_tools.row(gfx, max_kv_seq_stride=bad)])
        with pytest.raises(ManifestError, match=f"kernel {gfx!r}: max_kv_seq_stride .* must be an int >= 0"):
            zyfa_core.Manifest.load(tmp_path / str(bad))


def test_describe_names_a_persistent_grid(tmp_path: Path, manifest_tools) -> None:
    rows = [manifest_tools.row(SM90[0], grid="persistent"), manifest_tools.row(SM90[1])]
    persistent, tiles = zyfa_core.Manifest.load(manifest_tools.write(tmp_path, rows)).kernels
    assert persistent.describe() == f"{SM90[0]} (bf16 d128x128, causal, grid=persistent, sm90a)"
    assert "grid" not in tiles.describe()


def test_select_exact_match(kernel_dir: Path) -> None:
    m = zyfa_core.Manifest.load(kernel_dir)
    assert m.select("sm90a", "bf16", 128, 128, True).name == SM90[0]
    assert m.select("sm90a", "bfloat16", 192, 128, True).name == SM90[1]
    assert m.select("gfx950", "bf16", 128, 128, True).name == GFX950[0]


def test_select_p_mode(kernel_dir: Path) -> None:
    m = zyfa_core.Manifest.load(kernel_dir)
    # On sm90a None prefers lean when exact, lean and f16 all exist (measured fastest there) ...
    assert m.select("sm90a", "e4m3fn", 128, 128, True).name == SM90[3]
    assert m.select("sm90a", "fp8_e4m3", 128, 128, True, p_mode="exact").name == SM90[2]
    assert m.select("sm90a", "fp8_e4m3", 128, 128, True, p_mode="lean").name == SM90[3]
    # ... and takes what was built otherwise (hd192x128 exact is in `skipped`).
    assert m.select("sm90a", "float8_e4m3fn", 192, 128, True).name == SM90[4]
    with pytest.raises(KernelNotFoundError):
        m.select("sm90a", "e4m3fn", 192, 128, True, p_mode="exact")
    # f16 P is served when asked for (None prefers lean, then exact, on sm90a) ...
    assert m.select("sm90a", "e4m3fn", 128, 128, True, p_mode="f16").name == SM90[5]
    # ... and a p_mode without a kernel for the key says so.
    with pytest.raises(KernelNotFoundError, match="p_mode=f16"):
        m.select("sm90a", "e4m3fn", 192, 128, True, p_mode="f16")


@pytest.mark.parametrize("arch", ["sm90a", "gfx950", "sm100a"])
def test_select_p_mode_preference_per_arch(tmp_path: Path, manifest_tools, arch: str) -> None:
    # Every FP8 P mode built for one key, in manifest order f16, lean, exact (so order cannot decide):
    # None takes the arch's preferred mode, then its next ones as the preferred are removed.
    names = [f"fa_fwd_e4m3fn_hd128_causal{tail}_{arch}" for tail in ("_pf16", "_leanp", "")]
    rows = [manifest_tools.row(name) for name in names]
    preference = mf.P_MODE_PREFERENCE.get(arch, mf.P_MODES)
    assert set(preference) <= set(mf.P_MODES)
    for expected in preference:
        m = zyfa_core.Manifest.load(manifest_tools.write(tmp_path / expected, rows, []))
        assert m.select(arch, "e4m3fn", 128, 128, True).p_mode == expected
        rows = [row for row in rows if row["p_mode"] != expected]
    assert mf.P_MODE_PREFERENCE["sm90a"][0] == "lean"  # the H200's measured choice
    assert mf.P_MODE_PREFERENCE["gfx950"][0] == "lean"  # the modelled choice: one FMA frees the VALU


def test_select_tag_picks_another_implementation(tmp_path: Path, manifest_tools) -> None:
    # The default (untagged) kernel and a tagged one share the key; tag picks between them.
    default = manifest_tools.row(SM90[0])
    simple = manifest_tools.row("fa_fwd_bf16_hd128_causal_simple_sm90a", tag="simple")
    manifest_tools.write(tmp_path, [simple, default], [])
    m = zyfa_core.Manifest.load(tmp_path)
    assert m.select("sm90a", "bf16", 128, 128, True).name == SM90[0]
    assert m.select("sm90a", "bf16", 128, 128, True, tag="simple").name == simple["name"]
    with pytest.raises(KernelNotFoundError, match="tag=fast"):
        m.select("sm90a", "bf16", 128, 128, True, tag="fast")


def test_select_rejects_bad_requests(kernel_dir: Path) -> None:
    m = zyfa_core.Manifest.load(kernel_dir)
    with pytest.raises(ValueError, match="FP8"):
        m.select("sm90a", "bf16", 128, 128, True, p_mode="exact")
    with pytest.raises(ValueError, match="p_mode"):
        m.select("sm90a", "e4m3fn", 128, 128, True, p_mode="approx")
    with pytest.raises(ValueError, match="float16"):
        m.select("sm90a", "float16", 128, 128, True)


def test_not_found_message_lists_what_exists(kernel_dir: Path) -> None:
    m = zyfa_core.Manifest.load(kernel_dir)
    with pytest.raises(KernelNotFoundError) as info:
        m.select("sm90a", "e4m3fn", 192, 128, True, p_mode="exact")
    text = str(info.value)
    assert "arch=sm90a dtype=e4m3fn d_qk=192 d_v=128 causal=True p_mode=exact" in text
    assert all(name in text for name in SM90)
    assert "fa_fwd_e4m3fn_hd192x128_causal_sm90a: nvcc 12.4 < 12.8" in text  # skipped, with reason
    assert "ziglang missing" not in text  # a gfx950 skip is not about this request
    assert "gfx950 (1 kernels)" in text
    with pytest.raises(KernelNotFoundError, match="No kernels were built for sm100"):
        m.select("sm100", "bf16", 128, 128, True)
    # No non-causal kernel is built: a non-causal call runs on the causal one with the flag clear.
    assert m.select("sm90a", "bf16", 128, 128, False).name == "fa_fwd_bf16_hd128_causal_sm90a"
    with pytest.raises(KernelNotFoundError, match="causal=False p_mode=any tag=default layout=varlen"):
        m.select("sm90a", "bf16", 128, 128, False, layout="varlen")
    with pytest.raises(KernelNotFoundError, match="fa_fwd_bf16_hd128_causal_sm90a"):
        m.get("fa_fwd_bf16_hd64_causal_sm90a")


def test_find_kernel_dir_env(monkeypatch: pytest.MonkeyPatch, kernel_dir: Path, tmp_path: Path) -> None:
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(kernel_dir))
    assert zyfa_core.find_kernel_dir() == kernel_dir.resolve()
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(tmp_path / "nope"))
    with pytest.raises(KernelDirNotFoundError, match=r"ZYFA_KERNEL_DIR=.*nope: directory does not exist"):
        zyfa_core.find_kernel_dir()
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(empty))
    with pytest.raises(KernelDirNotFoundError, match="no manifest.json in it"):
        zyfa_core.find_kernel_dir()


def test_module_level_select_uses_the_env_dir(monkeypatch: pytest.MonkeyPatch, kernel_dir: Path) -> None:
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(kernel_dir))
    assert zyfa_core.default_manifest().directory == kernel_dir.resolve()
    assert zyfa_core.select("sm90a", "bf16", 128, 128, True).name == SM90[0]


def test_search_order(tmp_path: Path, manifest_tools) -> None:
    package = tmp_path / "site" / "zyfa_core" / "kernels"
    repo = tmp_path / "repo"
    deep = repo / "packages" / "zyfa-core" / "src"
    deep.mkdir(parents=True)
    bazel = manifest_tools.write(repo / "bazel-bin" / "kernels", [manifest_tools.row(SM90[0])])
    # Nothing installed: Bazel's output is found by walking up from the start directory.
    assert mf._search_kernel_dir(None, package, [deep]) == bazel.resolve()
    # An installed package wins over Bazel's output.
    manifest_tools.write(package, [manifest_tools.row(SM90[0])])
    assert mf._search_kernel_dir(None, package, [deep]) == package
    # The environment variable wins over both.
    other = manifest_tools.write(tmp_path / "other", [manifest_tools.row(SM90[0])])
    assert mf._search_kernel_dir(str(other), package, [deep]) == other.resolve()


def test_nothing_found_names_every_place(tmp_path: Path) -> None:
    package = tmp_path / "zyfa_core" / "kernels"
    starts = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(KernelDirNotFoundError) as info:
        mf._search_kernel_dir(None, package, starts)
    text = str(info.value)
    assert "ZYFA_KERNEL_DIR: not set" in text
    assert f"{package}: directory does not exist" in text
    assert f"not found in {starts[0]} or any parent" in text
    assert f"not found in {starts[1]} or any parent" in text
    assert "bazel build //kernels:all" in text


def test_v_prep_is_read_and_sizes_the_workspace(tmp_path: Path, manifest_tools) -> None:
    """A row without "v_prep" (a manifest older than ABI 3's field) has none and needs no workspace; with
    it, Vt rows pad seqlen_k to lcm(tile_n, 128): 128 for tile_n 128, 384 for tile_n 192."""
    lean, exact = SM90[3], SM90[2]
    rows = [
        manifest_tools.row(lean, tile_n=128, v_prep=lean + "_vprep"),
        manifest_tools.row(exact, tile_n=192, v_prep=exact + "_vprep"),
        manifest_tools.row(SM90[0]),
    ]
    a, b, plain = zyfa_core.Manifest.load(manifest_tools.write(tmp_path, rows)).kernels
    assert (a.v_prep, plain.v_prep) == (lean + "_vprep", "")
    assert [a.vt_row_bytes(s) for s in (0, 1, 128, 129)] == [128, 128, 128, 256]
    assert [b.vt_row_bytes(s) for s in (1, 384, 385)] == [384, 384, 768]
    assert a.workspace_bytes(2, 8, 16384) == 2 * 8 * 128 * 16384 and plain.workspace_bytes(2, 8, 16384) == 0
    assert a.v_prep_grid(2, 8, 16385) == (129, 8, 2)
    assert a.describe().endswith(", V pre-pass, sm90a)") and "pre-pass" not in plain.describe()


@pytest.mark.parametrize(
    ("name", "extra", "problem"),
    [
        (SM90[3], {"v_prep": True}, "v_prep True must be a string"),
        (SM90[0], {"v_prep": "x_vprep"}, "v_prep is only for sm90a e4m3fn kernels"),  # BF16
        (SM90[3], {"v_prep": "x_vprep", "tile_n": 160}, "tile_n a multiple of 64"),
        (GFX950[0], {"v_prep": "x_vprep"}, "v_prep is only for sm90a e4m3fn kernels"),
    ],
)
def test_bad_v_prep_is_rejected_naming_kernel(
    tmp_path: Path, manifest_tools, name: str, extra: dict, problem: str
) -> None:
    manifest_tools.write(tmp_path, [manifest_tools.row(name, **extra)])
    with pytest.raises(ManifestError) as info:
        zyfa_core.Manifest.load(tmp_path)
    assert f"kernel {name!r}: v_prep" in str(info.value) and problem in str(info.value)
