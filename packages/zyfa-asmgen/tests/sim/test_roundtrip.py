"""The decoder's authority: every instruction of every gfx950 code object we can lay hands on is
decoded, printed in LLVM syntax, reassembled by the pinned clang, and must give back its bytes.

Inputs: ZYFA's own gfx950 kernels (each gfx950 entry of kernels/variants.bzl, built as the build
builds it), the simulator's test kernels (tests/sim/kernels/*.hip), the assembler probe of
the oracle data (data/oracles/toolchain), and AITER's eight fmha_v3_fwd code objects from the pinned PyPI
wheel (aiter_inputs.py; skipped with the reason when it cannot be had).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from asmgen_testlib import read_variants

from zyfa_asmgen.assembler import assemble, build_hsaco
from zyfa_asmgen.sim import decode
from zyfa_asmgen.sim.cli import locate_kernel
from zyfa_asmgen.sim.elf import read_elf
from zyfa_asmgen.sim.roundtrip import RoundTripError, roundtrip_file, roundtrip_text

from .aiter_inputs import CODE_OBJECTS
from .conftest import KERNELS, REPO

pytest.importorskip("tinygrad", reason="the decoder's CDNA4 tables: pip install 'zyfa-asmgen[decode]'")

GFX950 = [v["name"] for v in read_variants() if v["arch"] == "gfx950"]
TEST_KERNELS = sorted(p.stem for p in KERNELS.glob("*.hip"))


@pytest.fixture(scope="module")
def ours(toolchain, tmp_path_factory: pytest.TempPathFactory):
    """build(name) -> .hsaco of a gfx950 variant, made from the assembly the build makes (cached)."""
    out = tmp_path_factory.mktemp("ours")
    built: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name not in built:
            asm = out / f"{name}.s"
            asm.write_text(locate_kernel(name, None, REPO / "kernels" / "variants.bzl").asm)
            built[name] = build_hsaco(asm, out / f"{name}.hsaco", toolchain)
        return built[name]

    return build


@pytest.mark.parametrize("name", GFX950)
def test_roundtrip_zyfa_kernels(name, ours, toolchain) -> None:
    hsaco = ours(name)
    text = read_elf(hsaco).section(".text")
    result = roundtrip_file(hsaco, toolchain)
    assert result.bytes == text.size
    assert result.instructions > 500  # a whole attention kernel, not an empty section
    print(f"{name}: {result.instructions} instructions, {result.bytes} bytes round-tripped")


@pytest.mark.parametrize("name", TEST_KERNELS)
def test_roundtrip_simulator_test_kernels(name, hip, toolchain, tmp_path) -> None:
    asm = tmp_path / f"{name}.s"
    asm.write_text(hip(name))
    result = roundtrip_file(build_hsaco(asm, tmp_path / f"{name}.hsaco", toolchain), toolchain)
    assert result.instructions > 10


def test_roundtrip_assembler_probe(oracle, toolchain, tmp_path) -> None:
    """The oracle probe: every accepted gfx950 line (DPP, SDWA, scaled MFMA, bitop3, LDS loads...)."""
    probe = tmp_path / "gfx950_probe_accepted.s"
    probe.write_text(oracle("toolchain/gfx950_probe_accepted.s").read_text())
    obj = assemble(probe, tmp_path / "probe.o", toolchain)
    result = roundtrip_file(obj, toolchain)
    assert result.instructions >= 150


@pytest.mark.parametrize("name", CODE_OBJECTS)
def test_roundtrip_aiter(name, aiter, toolchain) -> None:
    result = roundtrip_file(aiter[name], toolchain)
    assert result.bytes == read_elf(aiter[name]).section(".text").size
    assert result.instructions > 2000
    print(f"{name}: {result.instructions} instructions, {result.bytes} bytes round-tripped")


def test_roundtrip_catches_a_wrong_spelling(ours, toolchain, monkeypatch) -> None:
    """The check can fail: a printer that drops the lgkmcnt of every s_waitcnt is caught, with the
    offset and both encodings in the message."""
    code = read_elf(ours(GFX950[0])).section_bytes(read_elf(ours(GFX950[0])).section(".text"))
    monkeypatch.setattr(decode, "waitcnt_text", lambda imm: "vmcnt(0)")
    with pytest.raises(RoundTripError, match=r"\.text\+0x[0-9a-f]+: 's_waitcnt vmcnt\(0\)' was"):
        roundtrip_text(code, toolchain)
