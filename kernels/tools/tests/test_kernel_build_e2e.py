"""build-all / compile / manifest end to end in a throwaway repo root, with the real toolchains.

Each kind runs its real commands on small fixture kernels (tests/fixtures): HIP C++ and a stand-in
generator (emitting a hand-written .s) through the pinned ziglang LLVM, CUDA through nvcc. Kinds whose
toolchain is absent here are skipped by pytest, and must be skipped (with the reason) by build-all.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zyfa_kernel_build as kb
from kernel_build_testlib import FIXTURES, TOOLS, make_root, variant
from zyfa_toolchains import BuildError, ToolchainCache, ToolchainError

HIP = variant()
ASMGEN = variant(dtype="e4m3fn", p_mode="exact", kind="asmgen", src="tiny", tile_n=1)
CUDA = variant(arch="sm90a", kind="cuda", src="sm90/tiny.cu", d_qk=128, d_v=128, threads=128, smem_bytes=512)
EM_AMDGPU, ELFOSABI_AMDGPU_HSA = 0xE0, 64


def populate(tmp: Path, variants: list[dict[str, Any]], pins: dict[str, Any] | None = None) -> Path:
    """make_root plus the fixture sources and the stand-in generator package."""
    root = make_root(tmp, variants, pins)
    for arch_dir, src in (("gfx950", "tiny.hip"), ("sm90", "tiny.cu")):
        (root / "kernels" / arch_dir).mkdir(exist_ok=True)
        shutil.copy(FIXTURES / src, root / "kernels" / arch_dir / src)
    shutil.copytree(FIXTURES / "fake_asmgen", root / "packages" / "zyfa-asmgen" / "src")
    return root


@pytest.fixture(autouse=True)
def asm_template(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZYFA_TEST_ASM_TEMPLATE", str(FIXTURES / "tiny_gfx950.s"))


@pytest.fixture(scope="session")
def toolchains(tmp_path_factory: pytest.TempPathFactory) -> ToolchainCache:
    """The toolchains found here, probed against a root holding the stand-in generator."""
    return ToolchainCache(populate(tmp_path_factory.mktemp("probe"), []))


def has(toolchains: ToolchainCache, kind: str) -> bool:
    """Whether `kind` can be built here."""
    try:
        toolchains.get(kind)
    except ToolchainError:
        return False
    return True


needs_zig = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason="ziglang not installed")


def check_hsaco(path: Path) -> None:
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert data[7] == ELFOSABI_AMDGPU_HSA
    assert struct.unpack_from("<H", data, 18)[0] == EM_AMDGPU


@needs_zig
def test_asm_path_assembles_links_and_reads_resources(tmp_path: Path, toolchains: ToolchainCache) -> None:
    tc = toolchains.get("hip")
    asm = tmp_path / "fa_k.s"
    asm.write_text((FIXTURES / "tiny_gfx950.s").read_text().replace("KERNEL_NAME", "fa_k"))
    out = tmp_path / "fa_k.hsaco"
    kb.assemble_link(tc, asm, out, tmp_path, "fa_k")
    check_hsaco(out)
    assert b"fa_k.kd" in out.read_bytes()
    res = kb.read_gfx950_resources(asm.read_text(), "fa_k")
    assert (res["lds_bytes"], res["registers"], res["agprs"]) == (2048, 12, 4)


@needs_zig
def test_bad_asm_fails_with_the_assembler_message(tmp_path: Path, toolchains: ToolchainCache) -> None:
    tc = toolchains.get("hip")
    asm = tmp_path / "bad.s"
    asm.write_text(
        (FIXTURES / "tiny_gfx950.s").read_text().replace("s_endpgm", "v_fma_f32 v0, v1, v2, 0x3fb8aa3b")
    )
    with pytest.raises(BuildError) as err:
        kb.assemble_link(tc, asm, tmp_path / "bad.hsaco", tmp_path, "bad")
    assert "assembling bad.s failed" in str(err.value)
    assert "$ " in str(err.value) and "-mcpu=gfx950" in str(err.value)
    assert "literal operands are not supported" in str(err.value)


def test_build_all_builds_what_it_can_and_skips_the_rest(
    tmp_path: Path, real_pins: dict, toolchains: ToolchainCache
) -> None:
    # nvcc pinned impossibly new: CUDA must be skipped with the reason, whatever this machine has.
    pins = {**real_pins, "nvcc": {**real_pins["nvcc"], "min_version": "99.0"}}
    root = populate(tmp_path / "repo", [HIP, ASMGEN, CUDA], pins)
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale_kernel.hsaco").write_bytes(b"old")
    manifest = kb.build_all(root, out, jobs=2, arch=None, skip_all=None)
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    assert not (out / "stale_kernel.hsaco").exists()
    skipped = {s["name"]: s["reason"] for s in manifest["skipped"]}
    assert ">= 99.0" in skipped[CUDA["name"]]
    built = {k["name"]: k for k in manifest["kernels"]}
    if not has(toolchains, "hip"):
        assert set(skipped) == {HIP["name"], ASMGEN["name"], CUDA["name"]}
        return
    assert set(built) == {HIP["name"], ASMGEN["name"]}
    row = built[ASMGEN["name"]]
    assert row["file"] == ASMGEN["name"] + ".hsaco"
    assert (row["smem_bytes"], row["registers"], row["sgprs"], row["agprs"], row["spill_bytes"]) == (
        2048,
        12,
        8,
        4,
        0,
    )
    assert row["toolchain"]["zyfa_asmgen"] == "0.0.test"
    assert row["abi_version"] == manifest["abi_version"] == kb.abi_version(root)
    assert [k["grid"] for k in built.values()] == ["tiles", "tiles"]  # absent in the variant: written
    for name in built:
        check_hsaco(out / f"{name}.hsaco")
        assert (out / f"{name}.s").is_file()
    assert built[HIP["name"]]["toolchain"] == {
        "ziglang": "0.17.0",
        "clang": real_pins["ziglang"]["clang_version"],
    }
    assert manifest["toolchains"]["clang"] == real_pins["ziglang"]["clang_version"]


def test_source_hash_follows_source_and_abi(tmp_path: Path) -> None:
    root = populate(tmp_path, [HIP])
    first = kb.source_sha256(HIP, root)
    assert first == kb.source_sha256(HIP, root)
    (root / "kernels" / "gfx950" / "extra.h").write_text("// a header next to the source\n")
    second = kb.source_sha256(HIP, root)
    assert second != first
    (root / "kernels" / "gfx950" / "parts").mkdir()
    (root / "kernels" / "gfx950" / "parts" / "role.cuh").write_text("// a header below the source's folder\n")
    third = kb.source_sha256(HIP, root)
    assert third != second
    (root / "kernels" / "gfx950" / "parts" / "role.cuh").write_text("// edited\n")
    assert kb.source_sha256(HIP, root) != third
    second = kb.source_sha256(HIP, root)
    with (root / "kernels" / "abi" / "zyfa_abi.h").open("a") as f:
        f.write("\n")
    assert kb.source_sha256(HIP, root) != second
    gen = kb.source_sha256(ASMGEN, root)
    (root / "packages" / "zyfa-asmgen" / "src" / "zyfa_asmgen" / "__init__.py").write_text(
        "__version__ = '2'\n"
    )
    assert kb.source_sha256(ASMGEN, root) != gen


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_cuda_build_reads_ptxas(tmp_path: Path, toolchains: ToolchainCache) -> None:
    root = populate(tmp_path / "repo", [CUDA])
    if not has(toolchains, "cuda"):
        pytest.skip("nvcc here is not the pinned version")
    manifest = kb.build_all(root, tmp_path / "out", jobs=1, arch="sm90a", skip_all=None)
    (row,) = manifest["kernels"]
    assert row["smem_bytes"] == 512 and row["spill_bytes"] == 0
    assert 1 <= row["registers"] <= 255
    assert (tmp_path / "out" / row["file"]).read_bytes()[:4] == b"\x7fELF"


def _write_output(argv: list[str]) -> None:
    """What a stand-in compiler leaves behind: a file at its -o path."""
    out = Path(argv[argv.index("-o") + 1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"stand-in code object " + out.name.encode())


def _compile_with_stand_in_nvcc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, v: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """Variant `v` of a stand-in fa_fwd_wgmma.cu through a stand-in nvcc: (nvcc's one argv, the row)."""
    root = make_root(tmp_path / "repo", [v])
    (root / "kernels" / "sm90").mkdir()
    (root / "kernels" / "sm90" / "fa_fwd_wgmma.cu").write_text("// stand-in source\n")
    argvs: list[list[str]] = []

    def fake_nvcc(argv: list[str], env: dict[str, str], what: str) -> str:
        argvs.append(list(argv))
        _write_output(argv)
        return f"ptxas info    : Compiling entry function '{v['name']}'\nptxas info    : Used 168 registers\n"

    monkeypatch.setattr(kb, "run_tool", fake_nvcc)
    tc = kb.Toolchain("cuda", ("nvcc",), {"nvcc": "13.0.88"})
    row = kb.compile_variant(v, root, tc, tmp_path / "out" / f"{v['name']}.cubin")
    (argv,) = argvs
    return argv, row


@pytest.mark.parametrize("grid", ["tiles", "persistent"])
def test_cuda_compile_carries_the_grid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grid: str) -> None:
    """With a stand-in nvcc: a persistent variant compiles with -DZYFA_WS_PERSISTENT=1 and its manifest
    row says "grid": "persistent"; a tile-grid one has no such define and says "tiles"."""
    v = variant(arch="sm90a", kind="cuda", src="sm90/fa_fwd_wgmma.cu", d_qk=128, d_v=128, grid=grid)
    argv, row = _compile_with_stand_in_nvcc(tmp_path, monkeypatch, v)
    assert ("-DZYFA_WS_PERSISTENT=1" in argv) == (grid == "persistent")
    assert row["grid"] == grid and row["tile_m"] == v["tile_m"]
    assert "-DZYFA_WS_TMA=1" not in argv and row["loads"] == "cp.async"  # absent in the variant: written
    assert not any("STALE" in a for a in argv) and row["stale_tau"] == 0.0  # likewise
    assert not any("VPRE" in a for a in argv) and row["v_prep"] == ""  # likewise
    assert row["max_kv_seq_stride"] == 0  # no limit of its own (TMA / 64-bit addressing)
    built = tmp_path / "out" / f"{v['name']}.cubin"
    assert row["sha256"] == hashlib.sha256(built.read_bytes()).hexdigest()  # of the built file


def test_cuda_compile_carries_tma_loads_and_stale_tau(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a stand-in nvcc: a "loads": "tma" variant compiles with -DZYFA_WS_TMA=1 and its manifest row
    says "loads": "tma" (launchers then pass zyfa_tma_maps as the second parameter); its stale_tau
    becomes -DZYFA_WS_STALE_TAU=8.0f and the row's stale_tau (the reference reproduces the kernel by it)."""
    v = variant(arch="sm90a", kind="cuda", src="sm90/fa_fwd_wgmma.cu", d_qk=128, d_v=128, loads="tma",
                stale_tau=8.0)  # fmt: skip
    argv, row = _compile_with_stand_in_nvcc(tmp_path, monkeypatch, v)
    assert "-DZYFA_WS_TMA=1" in argv and row["loads"] == "tma" and row["grid"] == "tiles"
    assert "-DZYFA_WS_STALE_TAU=8.0f" in argv and row["stale_tau"] == 8.0


def run_cli(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(TOOLS / "zyfa_kernel_build.py"), "--root", str(root), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_compile_and_manifest_cli(tmp_path: Path, real_pins: dict, toolchains: ToolchainCache) -> None:
    pins = {**real_pins, "nvcc": {**real_pins["nvcc"], "min_version": "99.0"}}
    root = populate(tmp_path / "repo", [HIP, CUDA], pins)
    out = tmp_path / "bin"
    out.mkdir()
    cuda_args = ["compile", CUDA["name"], "--out", str(out / "c.cubin"), "--meta", str(out / "c.meta.json")]
    proc = run_cli(root, *cuda_args)
    assert proc.returncode == 1 and ">= 99.0" in proc.stderr and "zyfa_kernel_build: error:" in proc.stderr
    proc = run_cli(root, *cuda_args, env={**os.environ, "ZYFA_MISSING_TOOLCHAINS": "skip"})
    assert proc.returncode == 0, proc.stderr
    assert (out / "c.cubin").read_bytes() == b""
    metas = [str(out / "c.meta.json")]
    if has(toolchains, "hip"):
        hip_args = ["--out", str(out / f"{HIP['name']}.hsaco"), "--meta", str(out / "h.meta.json")]
        proc = run_cli(root, "compile", HIP["name"], *hip_args)
        assert proc.returncode == 0, proc.stderr
        metas.append(str(out / "h.meta.json"))
    proc = run_cli(root, "manifest", "--out", str(out / "manifest.json"), *metas)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["name"] for s in manifest["skipped"]] == [CUDA["name"]]
    assert [k["name"] for k in manifest["kernels"]] == ([HIP["name"]] if has(toolchains, "hip") else [])


@needs_zig
def test_compile_error_is_readable(tmp_path: Path) -> None:
    root = populate(tmp_path / "repo", [HIP])
    src = root / "kernels" / "gfx950" / "tiny.hip"
    src.write_text(src.read_text().replace("(float)(ZYFA_D_QK + i)", "undeclared_thing"))
    with pytest.raises(BuildError) as err:
        kb.build_all(root, tmp_path / "out", jobs=1, arch=None, skip_all=None)
    text = str(err.value)
    assert f"clang -x hip ({HIP['name']}) failed" in text
    assert "--offload-arch=gfx950" in text and f"-DZYFA_KERNEL_NAME={HIP['name']}" in text
    assert "undeclared_thing" in text


def test_skip_all_lists_every_variant(tmp_path: Path) -> None:
    root = populate(tmp_path / "repo", [HIP, ASMGEN, CUDA])
    manifest = kb.build_all(root, tmp_path / "out", jobs=1, arch=None, skip_all="ZYFA_SKIP_KERNELS=1")
    assert manifest["kernels"] == []
    assert manifest["skipped"] == [
        {"name": v["name"], "reason": "ZYFA_SKIP_KERNELS=1"} for v in (HIP, ASMGEN, CUDA)
    ]


def test_merge_manifest_checks() -> None:
    row = {"name": "a", "file": "a.hsaco", "abi_version": 1, "toolchain": {"clang": "22.1.8"}}
    other = {**row, "name": "b", "file": "b.hsaco"}
    merged = kb.merge_manifest(
        [{"kernel": row}, {"kernel": other}, {"skipped": {"name": "c", "reason": "r"}}], 1
    )
    assert merged == {
        "abi_version": 1, "toolchains": {"clang": "22.1.8"}, "kernels": [row, other],
        "skipped": [{"name": "c", "reason": "r"}],
    }  # fmt: skip
    with pytest.raises(BuildError, match=r"duplicate kernel names in the manifest: \['a'\]"):
        kb.merge_manifest([{"kernel": row}, {"skipped": {"name": "a", "reason": "r"}}], 1)
    with pytest.raises(BuildError, match="built for ABI 1, the header says 2"):
        kb.merge_manifest([{"kernel": row}], 2)
    with pytest.raises(BuildError, match="built with clang 21.1.0, others with 22.1.8"):
        kb.merge_manifest([{"kernel": row}, {"kernel": {**other, "toolchain": {"clang": "21.1.0"}}}], 1)
    with pytest.raises(BuildError, match="code object .*a.hsaco is missing"):
        kb.merge_manifest([{"kernel": row}], 1, Path("/nonexistent"))


def _kernel_dir(path: Path, abi: int, rows: dict[str, bytes]) -> Path:
    """A kernel directory: one code object per name (its bytes given) and a manifest listing them."""
    path.mkdir()
    kernels = []
    for name, code in rows.items():
        (path / f"{name}.cubin").write_bytes(code)
        row = {"name": name, "file": f"{name}.cubin", "abi_version": abi, "toolchain": {"nvcc": "13.0"}}
        kernels.append(row)
    manifest = {"abi_version": abi, "toolchains": {"nvcc": "13.0"}, "kernels": kernels, "skipped": []}
    kb.write_json(path / "manifest.json", manifest)
    return path


def test_overlay_replaces_the_named_kernels_and_keeps_the_rest(tmp_path: Path) -> None:
    """overlay: base's rows and code objects, over's in place of the same names, in base's order; an unknown
    name, another ABI or a missing code object is refused by name."""
    base = _kernel_dir(tmp_path / "base", 4, {"a": b"base-a", "b": b"base-b", "c": b"base-c"})
    over = _kernel_dir(tmp_path / "over", 4, {"b": b"over-b"})
    out = tmp_path / "out"
    assert kb.main(["overlay", "--base", str(base), "--over", str(over), "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert [row["name"] for row in manifest["kernels"]] == ["a", "b", "c"]
    assert [(out / f"{n}.cubin").read_bytes() for n in "abc"] == [b"base-a", b"over-b", b"base-c"]
    with pytest.raises(BuildError, match=r"has kernels that .* lacks: \['d'\]"):
        kb.overlay(base, _kernel_dir(tmp_path / "unknown", 4, {"d": b""}), tmp_path / "o2")
    with pytest.raises(BuildError, match="is ABI 5, .* is ABI 4"):
        kb.overlay(base, _kernel_dir(tmp_path / "abi5", 5, {"b": b""}), tmp_path / "o3")
    (over / "b.cubin").unlink()
    with pytest.raises(BuildError, match="b: code object .*b.cubin is missing"):
        kb.overlay(base, over, tmp_path / "o4")


def test_cuda_compile_names_the_v_prep_entry_and_refuses_its_spills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a stand-in nvcc: a "v_prep": True variant compiles with -DZYFA_WS_VPRE=1 and its manifest row
    names the pass entry <name>_vprep (launchers run it first); a spilling pass entry fails the build, and so
    does a kernel whose wgmmas ptxas serialised."""
    v = variant(arch="sm90a", kind="cuda", src="sm90/fa_fwd_wgmma.cu", d_qk=128, d_v=128, dtype="e4m3fn",
                p_mode="lean", v_prep=True)  # fmt: skip
    root = make_root(tmp_path / "repo", [v])
    (root / "kernels" / "sm90").mkdir()
    (root / "kernels" / "sm90" / "fa_fwd_wgmma.cu").write_text("// stand-in source\n")
    spill = {"bytes": 0}
    note = {"text": ""}
    argvs: list[list[str]] = []

    def fake_nvcc(argv: list[str], env: dict[str, str], what: str) -> str:
        argvs.append(list(argv))
        _write_output(argv)
        prep = v["name"] + "_vprep"
        return (
            f"ptxas info    : Compiling entry function '{prep}'\n"
            f"    0 bytes stack frame, {spill['bytes']} bytes spill stores, 0 bytes spill loads\n"
            "ptxas info    : Used 32 registers, used 1 barriers, 16384 bytes smem\n"
            f"ptxas info    : Compiling entry function '{v['name']}'\nptxas info    : Used 168 registers\n"
            + note["text"]
        )

    monkeypatch.setattr(kb, "run_tool", fake_nvcc)
    tc = kb.Toolchain("cuda", ("nvcc",), {"nvcc": "13.0.88"})
    row = kb.compile_variant(v, root, tc, tmp_path / "out" / f"{v['name']}.cubin")
    assert "-DZYFA_WS_VPRE=1" in argvs[0] and row["v_prep"] == v["name"] + "_vprep"
    assert row["registers"] == 168  # the attention kernel's own entry, not the pass's
    spill["bytes"] = 8
    with pytest.raises(kb.BuildError, match="_vprep: the V pre-pass entry spills registers"):
        kb.compile_variant(v, root, tc, tmp_path / "out2" / f"{v['name']}.cubin")
    spill["bytes"] = 0
    note["text"] = (
        "ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
        f"to program dependence on compiler-inserted WG.AR in divergent path in the function '{v['name']}'\n"
    )
    with pytest.raises(kb.BuildError, match="ptxas serialised its wgmmas .C7520 due to program dependence"):
        kb.compile_variant(v, root, tc, tmp_path / "out3" / f"{v['name']}.cubin")


def test_build_progress_names_each_variant_and_what_is_left(capsys):
    """build-all is never silent: each variant's start (i of N) and end (built / skipped, how many left) go
    to stderr as they happen, and the metas come back in the variants' order."""
    variants = [{"name": f"k{i}"} for i in range(3)]

    def build(v: dict) -> dict:
        return {"skipped": {"name": v["name"], "reason": "no nvcc"}} if v["name"] == "k1" else {"kernel": v}

    metas = kb.build_with_progress(variants, build, jobs=2)
    assert [m.get("kernel", m.get("skipped"))["name"] for m in metas] == ["k0", "k1", "k2"]
    err = capsys.readouterr().err
    assert "compiling 3 code objects, 2 at a time" in err
    assert all(f"[{i}/3] k" in err for i in (1, 2, 3))
    assert "k1 skipped (no nvcc)" in err and "k0 built" in err and "; 0 left" in err
