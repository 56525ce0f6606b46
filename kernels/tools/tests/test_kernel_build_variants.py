"""kernels/variants.bzl: parses, every entry is complete, names follow the rule and are unique."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import zyfa_kernel_build as kb
from kernel_build_testlib import REPO, make_root, variant
from zyfa_toolchains import BuildError, load_literal


def test_the_real_variant_list_is_valid() -> None:
    variants = kb.load_variants(REPO)
    assert variants, "kernels/variants.bzl lists no variant"
    names = [v["name"] for v in variants]
    assert len(names) == len(set(names))
    for v in variants:
        assert set(kb.VARIANT_FIELDS) <= set(v) <= {*kb.VARIANT_FIELDS, *kb.OPTIONAL_FIELDS}, v["name"]
        assert kb.variant_problems(v) == []
        assert v["name"] == kb.expected_name(v)
        assert v["kind"] in kb.ARCH_KINDS[v["arch"]]


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        (dict(dtype="bf16", d_qk=128, d_v=128, p_mode=None, arch="sm90a"), "fa_fwd_bf16_hd128_causal_sm90a"),
        (
            dict(dtype="e4m3fn", d_qk=192, d_v=128, p_mode="lean", arch="sm90a"),
            "fa_fwd_e4m3fn_hd192x128_causal_leanp_sm90a",
        ),
        (
            dict(dtype="e4m3fn", d_qk=128, d_v=128, p_mode="exact", arch="gfx950"),
            "fa_fwd_e4m3fn_hd128_causal_gfx950",
        ),
        (
            dict(dtype="e4m3fn", d_qk=128, d_v=128, p_mode="lean", arch="sm90a", tag="simple"),
            "fa_fwd_e4m3fn_hd128_causal_leanp_simple_sm90a",
        ),
        (
            dict(dtype="e4m3fn", d_qk=128, d_v=128, p_mode="f16", arch="sm90a"),
            "fa_fwd_e4m3fn_hd128_causal_pf16_sm90a",
        ),
    ],
)
def test_naming_rule_spelled_out(fields: dict, name: str) -> None:
    # Names written out by hand (the contract's examples), not derived from expected_name.
    assert kb.expected_name({"causal": True, **fields}) == name


def test_f16_p_needs_the_wgmma_kernel_and_sets_its_define() -> None:
    good = variant(arch="sm90a", kind="cuda", src="sm90/fa_fwd_wgmma.cu", dtype="e4m3fn", p_mode="f16")
    assert kb.variant_problems(good) == []
    assert "-DZYFA_WS_PV_F16=1" in kb.defines(good)
    assert not any("ZYFA_WS_PV_F16" in d for d in kb.defines(dict(good, p_mode="exact")))
    simple = dict(good, src="sm90/fa_fwd_simple.cu")
    assert any("p_mode 'f16' is built only from" in p for p in kb.variant_problems(simple))


def test_random_valid_variants_have_no_problems() -> None:
    rng = random.Random()
    for _ in range(50):
        dtype = rng.choice(kb.DTYPES)
        arch = rng.choice(sorted(kb.ARCH_KINDS))
        v = variant(
            arch=arch, kind=rng.choice(kb.ARCH_KINDS[arch]), dtype=dtype,
            p_mode=None if dtype == "bf16" else rng.choice(["exact", "lean"]),
            d_qk=rng.choice([64, 128, 192, 256]), d_v=rng.choice([64, 128]),
        )  # fmt: skip
        assert kb.variant_problems(v) == [], v


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"name": "fa_fwd_bf16_hd64_gfx950"}, "naming rule gives 'fa_fwd_bf16_hd64_causal_gfx950'"),
        ({"causal": 1}, "causal = 1 has the wrong type"),
        ({"d_qk": 64.0}, "d_qk = 64.0 has the wrong type"),
        ({"p_mode": "lean"}, "p_mode 'lean' with dtype bf16"),
        ({"kind": "cuda"}, "kind 'cuda' is not built for arch 'gfx950'"),
        ({"dtype": "e4m3fnuz", "p_mode": "exact"}, "dtype 'e4m3fnuz' is not one of"),
        ({"threads": 0}, "threads = 0 must be positive"),
        ({"extra": 1}, "unknown field(s) ['extra']"),
        ({"grid": "ring"}, "grid 'ring' is not one of ('tiles', 'persistent', 'batch_tiles', 'dynamic')"),
        ({"grid": None}, "grid = None has the wrong type"),
        ({"grid": "persistent"}, "grid 'persistent' needs src 'sm90/fa_fwd_wgmma.cu'"),
        ({"loads": "bulk"}, "loads 'bulk' is not one of ('cp.async', 'tma')"),
        ({"loads": 1}, "loads = 1 has the wrong type"),
        ({"loads": "tma"}, "loads 'tma' needs src 'sm90/fa_fwd_wgmma.cu' (ZYFA_WS_TMA)"),
        ({"stale_tau": 8}, "stale_tau = 8 has the wrong type"),
        ({"stale_tau": -1.0}, "stale_tau -1.0 must be a finite number >= 0"),
        ({"stale_tau": float("nan")}, "stale_tau nan must be a finite number >= 0"),
        ({"stale_tau": 8.0}, "stale_tau > 0 needs src in ('sm90/fa_fwd_wgmma.cu', 'gfx950/fa_fwd_bf16.hip',"),
        (
            {"tile_order": "sideways"},
            "tile_order 'sideways' is not one of ('ascending', 'descending', 'global",
        ),
        ({"tile_order": "global_descending"}, "tile_order 'global_descending' needs grid 'tiles' and src in"),
        ({"tile_order": 1}, "tile_order = 1 has the wrong type"),
        ({"tile_order": "descending"}, "tile_order 'descending' needs grid 'tiles' and src in"),
        ({"tile_order": "sequence_major"}, "tile_order 'sequence_major' needs a packed layout and src"),
    ],
)
def test_bad_variants_are_named(change: dict, needle: str) -> None:
    v = variant()
    v.update(change)
    problems = kb.variant_problems(v)
    assert any(needle in p for p in problems), problems


def test_missing_field_is_named() -> None:
    v = variant()
    del v["tile_n"]
    assert kb.variant_problems(v) == [f"{v['name']}: missing field(s) ['tile_n']"]


def test_duplicate_names_fail_the_load(tmp_path: Path) -> None:
    root = make_root(tmp_path, [variant(), variant()])
    with pytest.raises(BuildError, match="duplicate name 'fa_fwd_bf16_hd64_causal_gfx950'"):
        kb.load_variants(root)


def test_non_literal_list_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "variants.bzl"
    path.write_text('VARIANTS = [dict(name = "x")]\n')
    with pytest.raises(BuildError, match="must be a pure literal"):
        load_literal(path, "VARIANTS")
    path.write_text("OTHER = []\n")
    with pytest.raises(BuildError, match="no top-level assignment to VARIANTS"):
        load_literal(path, "VARIANTS")


def test_defines_carry_the_configuration() -> None:
    v = variant(dtype="e4m3fn", p_mode="lean", d_qk=192, d_v=128, arch="sm90a", kind="cuda", smem_bytes=4096)
    d = dict(flag[2:].split("=", 1) for flag in kb.defines(v))
    assert d == {
        "ZYFA_KERNEL_NAME": "fa_fwd_e4m3fn_hd192x128_causal_leanp_sm90a", "ZYFA_DTYPE_E4M3": "1",
        "ZYFA_D_QK": "192", "ZYFA_D_V": "128", "ZYFA_TILE_M": "32", "ZYFA_TILE_N": "32",
        "ZYFA_THREADS": "64", "ZYFA_SMEM_BYTES": "4096", "ZYFA_LEAN_P": "1",
    }  # fmt: skip


WGMMA = dict(arch="sm90a", kind="cuda", src="sm90/fa_fwd_wgmma.cu", d_qk=128, d_v=128, threads=384)


def test_grid_is_optional_and_tiles_by_default() -> None:
    """An absent grid and grid "tiles" are the same variant: no problem, the same defines."""
    absent, tiles = variant(**WGMMA), variant(**WGMMA, grid="tiles")
    assert kb.variant_problems(absent) == kb.variant_problems(tiles) == []
    assert kb.grid_mode(absent) == kb.grid_mode(tiles) == "tiles"
    assert kb.defines(absent) == kb.defines(tiles)
    assert not any("ZYFA_WS_PERSISTENT" in flag for flag in kb.defines(tiles))


def test_persistent_grid_needs_the_wgmma_source() -> None:
    assert kb.variant_problems(variant(**WGMMA, grid="persistent")) == []
    simple = variant(**{**WGMMA, "src": "sm90/fa_fwd_simple.cu", "tag": "simple"}, grid="persistent")
    needs = "grid 'persistent' needs src 'sm90/fa_fwd_wgmma.cu' (built with ZYFA_WS_PERSISTENT=1)"
    assert kb.variant_problems(simple) == [f"{simple['name']}: {needs}"]


def test_persistent_variant_defines_ws_persistent() -> None:
    v = variant(**WGMMA, grid="persistent")
    flags = kb.defines(v)
    assert flags[-1] == "-DZYFA_WS_PERSISTENT=1"
    assert flags[:-1] == kb.defines(variant(**WGMMA))  # everything else as the tile-grid build


def test_loads_is_optional_and_cp_async_by_default() -> None:
    """An absent loads field and "cp.async" are the same variant: no problem, no TMA define."""
    absent, cp = variant(**WGMMA), variant(**WGMMA, loads="cp.async")
    assert kb.variant_problems(absent) == kb.variant_problems(cp) == []
    assert kb.loads_mode(absent) == kb.loads_mode(cp) == "cp.async"
    assert kb.defines(absent) == kb.defines(cp)
    assert not any("ZYFA_WS_TMA" in flag for flag in kb.defines(cp))


def test_tma_loads_define_ws_tma_for_wgmma_bf16_and_e4m3fn() -> None:
    for extra in ({}, {"dtype": "e4m3fn", "p_mode": "exact"}):
        v = variant(**{**WGMMA, **extra}, loads="tma")
        assert kb.variant_problems(v) == []
        flags = kb.defines(v)
        assert flags[-1] == "-DZYFA_WS_TMA=1"
        assert flags[:-1] == kb.defines(variant(**{**WGMMA, **extra}))  # else as cp.async


def test_stale_tau_defines_ws_stale_tau_and_fp8_stays_below_448() -> None:
    """stale_tau 0.0 (or absent) adds no define; > 0 adds -DZYFA_WS_STALE_TAU=<tau>f to the wgmma build.
    FP8 kernels must keep P = 2^(8 + tau) below e4m3's 448: 0.75 is accepted, 0.8 refused."""
    bf16, fp8 = dict(WGMMA), {**WGMMA, "dtype": "e4m3fn", "p_mode": "lean"}
    assert kb.defines(variant(**bf16, stale_tau=0.0)) == kb.defines(variant(**bf16))
    v = variant(**bf16, stale_tau=8.0)
    assert kb.variant_problems(v) == [] and kb.stale_tau(v) == 8.0
    assert kb.defines(v) == [*kb.defines(variant(**bf16)), "-DZYFA_WS_STALE_TAU=8.0f"]
    assert kb.variant_problems(variant(**fp8, stale_tau=0.75)) == []
    (problem,) = kb.variant_problems(variant(**fp8, stale_tau=0.8))
    assert "would let FP8 P pass e4m3's 448" in problem


def test_stale_tau_on_the_gfx950_bf16_kernel_defines_zyfa_stale_tau() -> None:
    """The gfx950 BF16 HIP kernel takes stale_tau through its own define, -DZYFA_STALE_TAU=<tau>f."""
    hip = variant(kind="hip", src="gfx950/fa_fwd_bf16.hip")
    v = dict(hip, stale_tau=8.0)
    assert kb.variant_problems(v) == []
    assert kb.defines(v) == [*kb.defines(hip), "-DZYFA_STALE_TAU=8.0f"]


def test_stale_tau_on_the_mfma_fp8_generator_is_its_own_field() -> None:
    """The mfma_fp8 generator reads stale_tau from the row it is given (no define); FP8's bound holds."""
    gen = variant(kind="asmgen", src="mfma_fp8", dtype="e4m3fn", p_mode="lean", tile_order="descending")
    v = dict(gen, stale_tau=0.75)
    assert kb.variant_problems(v) == [] and kb.defines(v) == kb.defines(gen)
    (problem,) = kb.variant_problems(dict(gen, stale_tau=0.8))
    assert "would let FP8 P pass e4m3's 448" in problem


def test_v_prep_defines_ws_vpre_only_where_the_pass_exists() -> None:
    """v_prep True adds -DZYFA_WS_VPRE=1 (and names the entry <name>_vprep); False or absent adds nothing.
    It is refused on BF16, f16 P, another source, d_v != 128 or tile_n not a multiple of 64."""
    lean = {**WGMMA, "dtype": "e4m3fn", "p_mode": "lean", "tile_m": 128, "tile_n": 128}
    assert kb.defines(variant(**lean, v_prep=False)) == kb.defines(variant(**lean))
    v = variant(**lean, v_prep=True)
    assert kb.variant_problems(v) == [] and kb.v_prep_entry(v) == v["name"] + "_vprep"
    assert kb.defines(v) == [*kb.defines(variant(**lean)), "-DZYFA_WS_VPRE=1"]
    assert kb.v_prep_entry(variant(**lean)) == ""
    for bad in (
        {"dtype": "bf16", "p_mode": None},
        {"p_mode": "f16"},
        {"tile_n": 160},
        {"d_qk": 192, "d_v": 192},
    ):
        problems = kb.variant_problems(variant(**{**lean, **bad}, v_prep=True))
        assert any("v_prep needs src" in p for p in problems), (bad, problems)
    (problem,) = kb.variant_problems(variant(**lean, v_prep=1))
    assert "v_prep = 1 has the wrong type" in problem


def test_descending_tile_order_sets_its_define() -> None:
    """tile_order "descending" on the BF16 HIP kernel is valid and adds -DZYFA_TILE_DESCENDING=1; absent and
    "ascending" are the same variant with the same defines."""
    hip = variant(kind="hip", src="gfx950/fa_fwd_bf16.hip")
    down = dict(hip, tile_order="descending")
    assert kb.variant_problems(down) == [] and "-DZYFA_TILE_DESCENDING=1" in kb.defines(down)
    assert kb.defines(hip) == kb.defines(dict(hip, tile_order="ascending"))
    assert not any("TILE_DESCENDING" in d for d in kb.defines(hip))
    assert kb.tile_order(hip) == "ascending"
    every = dict(hip, tile_order="global_descending")
    assert kb.variant_problems(every) == [] and "-DZYFA_TILE_DESCENDING=2" in kb.defines(every)


def test_mfma_fp8_rows_name_a_descending_order() -> None:
    """The mfma_fp8 generator runs the last query tile first in one of two orders, which its rows must
    name (the simulator and the models map workgroups by the field): ascending or absent is refused."""
    fp8 = variant(dtype="e4m3fn", p_mode="lean", kind="asmgen", src="mfma_fp8", d_qk=128, d_v=128,
                  tile_m=64, tile_n=64, threads=128)  # fmt: skip
    for order in ("descending", "global_descending"):
        assert kb.variant_problems(dict(fp8, tile_order=order)) == [], order
    for bad in (fp8, dict(fp8, tile_order="ascending")):
        problems = kb.variant_problems(bad)
        assert any("set tile_order 'descending' or 'global_descending'" in p for p in problems), problems


def test_layout_defines_ws_varlen_and_names_the_kernel() -> None:
    """layout "varlen" / "paged" adds -DZYFA_WS_VARLEN=1 / 2 and _varlen / _paged to the name; "dense" and
    absent are the same variant; a persistent grid adds -DZYFA_WS_PERSISTENT=1 as for a dense variant.
    Refused on another source; TMA loads only on BF16 varlen, a V pre-pass only on varlen with
    tile_n <= 128."""
    dense = variant(**WGMMA, tile_m=128, tile_n=128)
    assert kb.defines(dense) == kb.defines(variant(**WGMMA, tile_m=128, tile_n=128, layout="dense"))
    assert not any("ZYFA_WS_VARLEN" in d for d in kb.defines(dense))
    for layout, value in (("varlen", 1), ("paged", 2)):
        v = variant(**WGMMA, tile_m=128, tile_n=128, layout=layout)
        name = f"fa_fwd_bf16_hd128_causal_{layout}_sm90a"
        assert v["name"] == name and kb.variant_problems(v) == []
        want = [f"-DZYFA_KERNEL_NAME={name}", *kb.defines(dense)[1:], f"-DZYFA_WS_VARLEN={value}"]
        assert kb.defines(v) == want
        persistent = variant(**WGMMA, tile_m=128, tile_n=128, layout=layout, grid="persistent")
        assert kb.variant_problems(persistent) == []
        assert kb.defines(persistent) == [*want[:-1], "-DZYFA_WS_PERSISTENT=1", want[-1]]
        problems = kb.variant_problems(
            variant(**{**WGMMA, "tile_m": 128, "tile_n": 128, "src": "sm90/fa_fwd_simple.cu"}, layout=layout)
        )
        assert any(f"layout '{layout}' needs src" in p for p in problems), problems
        lean = {**WGMMA, "dtype": "e4m3fn", "p_mode": "lean", "tile_m": 128}
        prep = variant(**lean, tile_n=128, layout=layout, v_prep=True)
        if layout == "varlen":  # the packed Vt layout (ABI 6), for KV blocks of up to 128 keys
            assert kb.variant_problems(prep) == [] and "-DZYFA_WS_VPRE=1" in kb.defines(prep)
            wide = kb.variant_problems(variant(**lean, tile_n=192, layout=layout, v_prep=True))
            assert any("layout 'varlen' with tile_n <= 128 only" in p for p in wide), wide
        else:
            assert any("layout 'varlen' with tile_n <= 128 only" in p for p in kb.variant_problems(prep))
        tma = variant(**WGMMA, tile_m=128, tile_n=128, layout=layout, loads="tma")
        if layout == "varlen":  # BF16 varlen: Q / K by TMA, the maps as a third parameter
            assert kb.variant_problems(tma) == [] and "-DZYFA_WS_TMA=1" in kb.defines(tma)
        else:
            problems = kb.variant_problems(tma)
            assert any("built for layout 'varlen', dtype 'bf16' or e4m3fn with v_prep" in p for p in problems)
    fp8 = {**WGMMA, "dtype": "e4m3fn", "p_mode": "lean"}
    fp8_tma = variant(**fp8, tile_m=128, tile_n=128, layout="varlen", loads="tma")
    assert any("e4m3fn with v_prep" in p for p in kb.variant_problems(fp8_tma))
    two_q = variant(**WGMMA, tile_m=128, tile_n=128, layout="varlen", grid="persistent", q_tiles=2)
    assert kb.variant_problems(two_q) == [] and "-DZYFA_WS_Q_TILES=2" in kb.defines(two_q)
    assert not any("Q_TILES" in d for d in kb.defines({**two_q, "q_tiles": 1}))
    for bad in ({"q_tiles": 3}, {"layout": "paged"}, {"layout": "dense"}):
        assert any("q_tiles" in p for p in kb.variant_problems({**two_q, **bad})), bad
    fp8_tma_prep = variant(**fp8, tile_m=128, tile_n=128, layout="varlen", loads="tma", v_prep=True)
    assert kb.variant_problems(fp8_tma_prep) == []  # Q, K and the Vt tiles by TMA (ABI 7)
    assert {"-DZYFA_WS_TMA=1", "-DZYFA_WS_VPRE=1"} <= set(kb.defines(fp8_tma_prep))
    (problem,) = kb.variant_problems(variant(**WGMMA, layout="ragged"))
    assert "layout 'ragged' is not one of" in problem


def test_gfx950_bf16_varlen_layout() -> None:
    """The gfx950 BF16 kernel's packed builds: layout "varlen" / "paged" add -DZYFA_VARLEN=1 / 2 (not the sm90
    define) and _varlen / _paged to the name, on grid "batch_tiles"; the compact "tiles" and persistent grids,
    "batch_tiles" on a dense row and a packed generator row on another grid are refused."""
    hip = dict(arch="gfx950", kind="hip", src="gfx950/fa_fwd_bf16.hip", d_qk=128, d_v=128, tile_m=256,
               tile_n=64, threads=512, smem_bytes=0, tile_order="global_descending")  # fmt: skip
    dense = variant(**hip)
    packed = variant(**hip, layout="varlen", grid="batch_tiles")
    assert packed["name"] == "fa_fwd_bf16_hd128_causal_varlen_gfx950"
    assert kb.variant_problems(packed) == []
    want = [f"-DZYFA_KERNEL_NAME={packed['name']}", *kb.defines(dense)[1:], "-DZYFA_VARLEN=1"]
    assert kb.defines(packed) == want
    assert not any("VARLEN" in d for d in kb.defines(dense))
    paged = variant(**hip, layout="paged", grid="batch_tiles")
    assert kb.variant_problems(paged) == []
    assert kb.defines(paged)[-1] == "-DZYFA_VARLEN=2" and paged["name"].endswith("_paged_gfx950")
    fp8 = variant(
        arch="gfx950", kind="asmgen", src="mfma_fp8", dtype="e4m3fn", p_mode="exact", layout="paged"
    )
    problems = kb.variant_problems(fp8)
    assert any("layout 'paged' of 'mfma_fp8' is built for grid batch_tiles" in p for p in problems), problems
    for grid in ("tiles", "persistent"):
        compact = variant(**hip, layout="varlen", grid=grid)
        assert any("is built for grid batch_tiles" in p for p in kb.variant_problems(compact)), grid
    (problem,) = kb.variant_problems(variant(**hip, grid="batch_tiles"))
    assert "grid 'batch_tiles' is for layouts 'varlen' and 'paged'" in problem


def test_gfx950_fp8_varlen_layout() -> None:
    """The mfma_fp8 generator's packed builds: layouts "varlen" and "paged" on grid "batch_tiles" are accepted
    and named _varlen / _paged; they add no define (the generator reads the field); other grids are
    refused."""
    gen = dict(arch="gfx950", kind="asmgen", src="mfma_fp8", dtype="e4m3fn", p_mode="lean", d_qk=128, d_v=128,
               tile_m=64, tile_n=64, threads=128, smem_bytes=0, tile_order="global_descending")  # fmt: skip
    packed = variant(**gen, layout="varlen", grid="batch_tiles")
    assert packed["name"] == "fa_fwd_e4m3fn_hd128_causal_leanp_varlen_gfx950"
    assert kb.variant_problems(packed) == []
    assert kb.defines(packed)[1:] == kb.defines(variant(**gen))[1:]
    (problem,) = kb.variant_problems(variant(**gen, layout="varlen", grid="tiles"))
    assert "is built for grid batch_tiles" in problem
    paged = variant(**gen, layout="paged", grid="batch_tiles")
    assert paged["name"] == "fa_fwd_e4m3fn_hd128_causal_leanp_paged_gfx950"
    assert kb.variant_problems(paged) == [] and kb.defines(paged)[1:] == kb.defines(variant(**gen))[1:]


def test_sequence_major_tile_order_sets_its_define() -> None:
    """tile_order "sequence_major" is valid on a packed row of the sm90 wgmma kernel and adds
    -DZYFA_WS_SEQ_MAJOR=1; the same row tile-major ("ascending") has no such define; a dense row is
    refused."""
    packed = variant(src="sm90/fa_fwd_wgmma.cu", grid="persistent", layout="varlen")
    seq = dict(packed, tile_order="sequence_major")
    assert kb.variant_problems(seq) == [] and "-DZYFA_WS_SEQ_MAJOR=1" in kb.defines(seq)
    assert not any("SEQ_MAJOR" in d for d in kb.defines(packed))
    dense = variant(src="sm90/fa_fwd_wgmma.cu", tile_order="sequence_major")
    assert any("'sequence_major' needs a packed layout" in p for p in kb.variant_problems(dense))


def test_dynamic_grid_defines_persistent_and_dynamic() -> None:
    """grid "dynamic" on a packed row of the sm90 wgmma kernel builds the persistent kernel plus
    -DZYFA_WS_DYNAMIC=1 (everything else as the persistent build); a dense row, another source and the
    gfx950 packed builds are refused."""
    persistent = variant(src="sm90/fa_fwd_wgmma.cu", grid="persistent", layout="varlen")
    dynamic = dict(persistent, grid="dynamic")
    assert kb.variant_problems(dynamic) == []
    flags = kb.defines(persistent)
    at = flags.index("-DZYFA_WS_PERSISTENT=1") + 1
    assert kb.defines(dynamic) == [*flags[:at], "-DZYFA_WS_DYNAMIC=1", *flags[at:]]
    assert not any("DYNAMIC" in d for d in kb.defines(persistent))
    dense = variant(src="sm90/fa_fwd_wgmma.cu", grid="dynamic")
    assert any("grid 'dynamic' is for layouts 'varlen' and 'paged'" in p for p in kb.variant_problems(dense))
    simple = variant(src="sm90/fa_fwd_simple.cu", tag="simple", grid="dynamic", layout="varlen")
    assert any("grid 'dynamic' needs src 'sm90/fa_fwd_wgmma.cu'" in p for p in kb.variant_problems(simple))
