"""`zyfa-asmgen sim`: the manifest's gfx950 kernels on tiny shapes, a seeded bug, the variants path.

The manifest directory is <repo>/bazel-bin/kernels (the Bazel build keeps NAME.s beside each
gfx950 code object); without it the tests compile from kernels/variants.bzl (needs ziglang).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil

import pytest

from zyfa_asmgen.__main__ import main
from zyfa_asmgen.sim.cli import locate_kernel, tile_of, workgroup_of

from .conftest import REPO

MANIFEST_DIR = REPO / "bazel-bin" / "kernels"
HAVE_MANIFEST = (MANIFEST_DIR / "manifest.json").is_file()
HAVE_ZIG = importlib.util.find_spec("ziglang") is not None
# Small enough to be quick, two query tiles each so the modelled cost is fitted on two block counts.
SHAPES = {
    "fa_fwd_bf16_hd128_causal_gfx950": ["--seqlen-q", "64", "--heads-q", "2", "--heads-kv", "1"],
    "fa_fwd_bf16_hd192x128_causal_gfx950": ["--seqlen-q", "64", "--seqlen-k", "80", "--heads-q", "1",
                                            "--heads-kv", "1"],
    # A packed build: the batch as two sequences of equal lengths (zyfa_varlen_args as the second argument).
    "fa_fwd_bf16_hd128_causal_varlen_gfx950": ["--seqlen-q", "64", "--seqlen-k", "90", "--batch", "2",
                                               "--heads-q", "4", "--heads-kv", "1"],
    "fa_fwd_bf16_hd192x128_causal_paged_gfx950": ["--seqlen-q", "64", "--seqlen-k", "90", "--batch", "2",
                                                  "--heads-q", "2", "--heads-kv", "2"],
    "fa_fwd_e4m3fn_hd128_causal_gfx950": ["--seqlen-q", "96", "--heads-q", "1", "--heads-kv", "1"],
    "fa_fwd_e4m3fn_hd128_causal_leanp_gfx950": ["--seqlen-q", "96", "--heads-q", "1", "--heads-kv", "1"],
    "fa_fwd_e4m3fn_hd128_causal_leanp_varlen_gfx950": ["--seqlen-q", "96", "--seqlen-k", "100", "--batch",
                                                       "2", "--heads-q", "2", "--heads-kv", "1"],
    "fa_fwd_e4m3fn_hd192x128_causal_paged_gfx950": ["--seqlen-q", "64", "--seqlen-k", "90", "--batch", "2",
                                                    "--heads-q", "2", "--heads-kv", "2"],
}  # fmt: skip
LAUNCH = ["--launch-shape", "1,4096,4096,8,2"]


def _source_args() -> list[str]:
    if HAVE_MANIFEST:
        return ["--manifest-dir", str(MANIFEST_DIR)]
    if not HAVE_ZIG:
        pytest.skip("no bazel-bin/kernels manifest and no ziglang to compile kernels/variants.bzl")
    return ["--variants", str(REPO / "kernels" / "variants.bzl")]


def _sim(capsys, *args: str) -> tuple[int, str]:
    rc = main(["sim", *args])
    return rc, capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_manifest_kernels_on_tiny_shapes(capsys, name) -> None:
    if HAVE_MANIFEST:
        names = [k["name"] for k in json.loads((MANIFEST_DIR / "manifest.json").read_text())["kernels"]]
        if name not in names:
            pytest.skip(f"{name} not in the manifest")
    rc, out = _sim(capsys, name, *_source_args(), *SHAPES[name], *LAUNCH)
    assert rc == 0, out
    for needle in ("result:", "reference 1: numpy float64", "hazards: none found", "unwritten output rows: 0",
                   "modelled timing", "MODELLED", "assumptions:", "verdict: PASS"):  # fmt: skip
        assert needle in out, (needle, out)
    assert re.search(r"relative L2 \S+ \(tolerance \S+: ok\)", out)
    assert len(re.findall(r"TFLOP/s MODELLED", out)) == 2  # the simulated shape and --launch-shape
    assert re.search(r"a = -?\d+, b = \d+ modelled cycles/block", out)
    assert "reference 2" not in out and "zyfa.reference" not in out  # zyfa-asmgen never imports zyfa


def test_a_seeded_bug_fails_the_run(capsys, tmp_path) -> None:
    """NAME.s with its first `s_waitcnt vmcnt(N)` removed: the checker reports it, exit status 1."""
    name = "fa_fwd_bf16_hd128_causal_gfx950"
    if HAVE_MANIFEST:  # the Bazel build's assembly
        shutil.copy(MANIFEST_DIR / "manifest.json", tmp_path / "manifest.json")
        text = (MANIFEST_DIR / f"{name}.s").read_text()
    else:  # no Bazel output: the same assembly compiled now from variants.bzl, with its row as the manifest
        src = locate_kernel(name, None, REPO / "kernels" / "variants.bzl")
        (tmp_path / "manifest.json").write_text(json.dumps({"kernels": [src.entry]}))
        text = src.asm
    lines = text.splitlines()
    i = next(i for i, s in enumerate(lines) if re.match(r"\s*s_waitcnt vmcnt\(\d+\)", s))
    (tmp_path / f"{name}.s").write_text("\n".join(lines[:i] + lines[i + 1 :]))
    abi = str(REPO / "kernels/abi/zyfa_abi.h")
    rc, out = _sim(capsys, name, "--manifest-dir", str(tmp_path), "--seqlen-q", "32", "--heads-q", "1",
                   "--heads-kv", "1", "--no-timing", "--abi-header", abi)  # fmt: skip
    assert rc == 1
    assert "[waitcnt]" in out and "verdict: FAIL" in out


@pytest.mark.skipif(not HAVE_ZIG, reason="ziglang (pinned clang) not installed")
@pytest.mark.parametrize(
    "name,origin",
    [
        ("fa_fwd_bf16_hd128_causal_gfx950", "compiled now by the pinned clang"),
        ("fa_fwd_e4m3fn_hd128_causal_gfx950", "generator 'mfma_fp8' run now"),
    ],
)
def test_variants_path_builds_the_assembly(capsys, name, origin) -> None:  # fmt: skip
    rc, out = _sim(capsys, name, "--variants", str(REPO / "kernels" / "variants.bzl"), "--seqlen-q", "32",
                   "--heads-q", "1", "--heads-kv", "1", "--no-timing")  # fmt: skip
    assert rc == 0, out
    assert origin in out and "verdict: PASS" in out


def test_errors(capsys) -> None:
    variants = ["--variants", str(REPO / "kernels" / "variants.bzl")]
    assert main(["sim", "no_such_kernel", *variants]) == 1
    assert "no kernel 'no_such_kernel'" in capsys.readouterr().err
    assert main(["sim", "fa_fwd_bf16_hd128_causal_sm90a", *variants]) == 1
    assert "gfx950" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seqlen-q", "0"], "argument --seqlen-q: must be an integer >= 1, got 0"),
        (["--batch", "0"], "argument --batch: must be an integer >= 1, got 0"),
        (["--heads-kv", "0"], "argument --heads-kv: must be an integer >= 1, got 0"),
        (["--seqlen-k", "x"], "argument --seqlen-k: not an integer: 'x'"),
        (["--descales", "0", "1", "1"], "argument --descales: must be finite and > 0 as a float32, got 0"),
        (["--descales", "-1", "1", "1"], "got -1"),
        (["--descales", "1e-50", "1", "1"], "got 1e-50"),
        (["--descales", "1", "1e39", "nan"], "got 1e39"),
        (["--launch-shape", "1,0,8,2,1"], "each >= 1"),
        (["--launch-shape", "1,8,8,3,2"], "HQ a multiple of HKV"),
    ],
)
def test_bad_arguments_stop_the_parse(capsys, args, message) -> None:
    """Each bad value exits 2 with argparse's usage message naming it, before any kernel is looked up."""
    with pytest.raises(SystemExit) as exc:
        main(["sim", "fa_fwd_bf16_hd128_causal_gfx950", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_heads_not_dividing_and_unknown_names_are_refused(capsys, tmp_path) -> None:
    """--heads-q 3 --heads-kv 2 names both; an unknown name lists the gfx950 kernels of the manifest it
    was looked for in (no variants.bzl reachable from there)."""
    rows = [
        {"name": "fa_fwd_bf16_hd128_causal_gfx950", "arch": "gfx950"},
        {"name": "k_sm90a", "arch": "sm90a"},
    ]
    (tmp_path / "manifest.json").write_text(json.dumps({"kernels": rows}))
    rc = main(["sim", "no_such_kernel", "--manifest-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "no kernel 'no_such_kernel'" in err
    assert "gfx950 kernels there: fa_fwd_bf16_hd128_causal_gfx950" in err and "k_sm90a" not in err
    variants = ["--variants", str(REPO / "kernels" / "variants.bzl")]
    assert main(["sim", "no_such_kernel", *variants]) == 1
    assert "fa_fwd_bf16_hd128_causal_gfx950" in capsys.readouterr().err
    assert (
        main(["sim", "fa_fwd_bf16_hd128_causal_gfx950", *variants, "--heads-q", "3", "--heads-kv", "2"]) == 1
    )
    assert "--heads-q 3 is not a multiple of --heads-kv 2" in capsys.readouterr().err


@pytest.mark.parametrize("order", [None, "ascending", "descending", "global_descending"])
def test_tile_order_maps_workgroups_one_to_one(order) -> None:
    """workgroup_of and tile_of are inverse bijections of the grid for every tile_order; under
    "global_descending" the dispatch order (x fastest) visits the query tiles from the last one down, every
    (head, batch) of a tile before the tile below it."""
    grid = (3, 2, 5)
    entry = {} if order is None else {"tile_order": order}
    every = [(t, h, b) for b in range(grid[2]) for h in range(grid[1]) for t in range(grid[0])]
    wgs = [workgroup_of(t, h, b, grid, entry) for t, h, b in every]
    assert sorted(wgs) == sorted((x, y, z) for x in range(3) for y in range(2) for z in range(5))
    assert [tile_of(w, grid, entry) for w in wgs] == every
    dispatch = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    tiles = [tile_of(w, grid, entry)[0] for w in dispatch]
    if order == "global_descending":
        assert tiles == sorted(tiles, reverse=True)
    elif order == "descending":
        assert tiles[:3] == [2, 1, 0]
    else:
        assert tiles[:3] == [0, 1, 2]
