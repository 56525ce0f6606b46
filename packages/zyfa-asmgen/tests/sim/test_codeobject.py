"""Loading gfx950 code objects: the descriptor, the metadata note and the decoded program of a
binary equal what the simulator reads from the same kernel's assembly, and the loaded kernel runs.

ZYFA's BF16 HIP kernel and its generated FP8 kernel are built to .hsaco files from their assembly;
the loaded binary and the parsed assembly must give the same descriptor (up to the descriptor's
register granules), the same metadata and the same instruction stream; the BF16 kernel loaded from
its binary gives bitwise the outputs of its assembly on fresh random inputs, which also match the
float64 reference. Malformed files fail with messages that name the problem.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from asmgen_testlib import read_variants

from zyfa_asmgen.assembler import build_hsaco
from zyfa_asmgen.sim import parse_asm
from zyfa_asmgen.sim.cli import locate_kernel
from zyfa_asmgen.sim.codeobject import CodeObjectError, load_code_object
from zyfa_asmgen.sim.decode import DecodeError, decode_text
from zyfa_asmgen.sim.elf import ElfError
from zyfa_asmgen.sim.kdescriptor import DescriptorError, parse_descriptor
from zyfa_asmgen.sim.msgpack import MsgpackError, unpackb

from .aiter_inputs import aiter_code_objects
from .conftest import REPO
from .test_fa_fwd_bf16 import VARIANTS, _defines, check, run

pytest.importorskip("tinygrad", reason="the decoder's CDNA4 tables: pip install 'zyfa-asmgen[decode]'")

VAR = VARIANTS[0] if VARIANTS else None
GENERATED = next((v for v in read_variants() if v["kind"] == "asmgen" and v["arch"] == "gfx950"), None)


@pytest.fixture(scope="module")
def built(hip_src, toolchain, tmp_path_factory):
    """(assembly text, .hsaco path) of the first gfx950 HIP variant."""
    if VAR is None:
        pytest.skip("no gfx950 hip variant in kernels/variants.bzl")
    asm = hip_src(f"kernels/{VAR['src']}", **_defines(VAR))
    d = tmp_path_factory.mktemp("co")
    (d / "k.s").write_text(asm)
    return asm, build_hsaco(d / "k.s", d / "k.hsaco", toolchain)


@pytest.fixture(scope="module", params=["hip", "generated"])
def any_built(request, built, toolchain, tmp_path_factory):
    """(kernel name, assembly text, .hsaco path) of the HIP kernel, then of the generated one."""
    if request.param == "hip":
        return VAR["name"], *built
    if GENERATED is None:
        pytest.skip("no gfx950 asmgen variant in kernels/variants.bzl")
    asm = locate_kernel(GENERATED["name"], None, REPO / "kernels" / "variants.bzl").asm
    d = tmp_path_factory.mktemp("gen")
    (d / "k.s").write_text(asm)
    return GENERATED["name"], asm, build_hsaco(d / "k.s", d / "k.hsaco", toolchain)


def test_descriptor_matches_the_assembly(any_built) -> None:
    name, asm, hsaco = any_built
    text_desc = parse_asm(asm).kernel(name).descriptor
    co = load_code_object(hsaco)
    assert co.code_object_version == 6 and co.target.endswith("gfx950")
    desc = co.kernel(name).descriptor
    granular = {"next_free_vgpr": 8, "next_free_sgpr": None}
    shared = [k for k in desc if k in text_desc and k not in granular]
    assert len(shared) >= 20
    assert {k: desc[k] for k in shared} == {k: text_desc[k] for k in shared}
    # The descriptor stores the allocation: the text's count rounded up to the granule.
    assert desc["next_free_vgpr"] == -(-text_desc["next_free_vgpr"] // 8) * 8
    assert text_desc["next_free_sgpr"] <= desc["next_free_sgpr"] <= 102


def test_metadata_note_matches_the_yaml(any_built) -> None:
    name, asm, hsaco = any_built
    yaml_meta = parse_asm(asm).kernel(name).metadata
    note_meta = load_code_object(hsaco).kernel(name).metadata
    assert note_meta == yaml_meta
    assert note_meta[".kernarg_segment_size"] == 192


def test_decoded_program_is_the_assembled_one(any_built) -> None:
    """The compiler's own assembly, instruction by instruction (mnemonic and register operands), then
    only the s_nop padding the linker puts after the code; the entry at the same index."""
    name, asm, hsaco = any_built
    parsed = parse_asm(asm).instructions
    loaded = load_code_object(hsaco).program

    def key(i):
        return i.op, [str(o.reg) for o in i.operands if o.reg is not None]

    assert [key(i) for i in loaded.instructions[: len(parsed)]] == [key(i) for i in parsed]
    assert {i.op for i in loaded.instructions[len(parsed) :]} <= {"s_nop"}
    assert loaded.kernel(name).entry == 0


def test_loaded_kernel_runs_like_its_assembly(built) -> None:
    """Ragged seqlen, GQA 2:1, two query tiles: bitwise equal to the .s run, and within tolerance."""
    asm, hsaco = built
    seed = int(np.random.SeedSequence().entropy % (1 << 32))
    runs = [run(prog, VAR, 1, 45, 45, 2, 1, rng=np.random.default_rng(seed))
            for prog in (parse_asm(asm), load_code_object(hsaco).program)]  # fmt: skip
    (res_s, *_, out_s, lse_s, _, _), (res_b, q, k, v, out_b, lse_b, rows, block_n) = runs
    assert res_b.instructions == res_s.instructions > 0
    assert np.array_equal(out_b.view(np.uint16), out_s.view(np.uint16))
    assert np.array_equal(lse_b.view(np.uint32), lse_s.view(np.uint32))
    check(res_b, q, k, v, out_b, lse_b, rows, block_n)


def test_aiter_kernel_loads() -> None:
    cos, reason = aiter_code_objects()
    if not cos:
        pytest.skip(reason)
    co = load_code_object(cos["fwd_hd128_bf16_causal.co"])
    (name, k), = co.kernels.items()  # fmt: skip
    assert name == k.metadata[".name"] and co.code_object_version == 6
    assert k.descriptor["group_segment_fixed_size"] == k.metadata[".group_segment_fixed_size"] > 0
    assert k.descriptor["user_sgpr_kernarg_segment_ptr"] == 1
    # AGPRs above accum_offset: the unified file split the MFMA accumulators live in.
    assert 0 < k.descriptor["accum_offset"] < k.descriptor["next_free_vgpr"] <= 512
    assert len(co.program.instructions) == 3031
    args = {a[".name"]: a for a in k.metadata[".args"]}
    assert args["Q"][".value_kind"] == "global_buffer" and args["Q"][".offset"] == 16


# ---- bad input ----------------------------------------------------------------------------------


def test_unknown_encoding_names_offset_and_bytes() -> None:
    good = struct.pack("<I", 0xBF800000)  # s_nop 0
    with pytest.raises(DecodeError, match=r"\.text\+0x4 .*bytes 00 00 80 ff"):
        decode_text(good + struct.pack("<I", 0xFF800000))


def test_missing_tables_name_the_pin(monkeypatch) -> None:
    from zyfa_asmgen.sim import decode

    def no_module(name: str):
        raise ImportError(name)

    monkeypatch.setattr(decode.importlib, "import_module", no_module)
    with pytest.raises(DecodeError, match=r"tinygrad==0\.14\.0.*zyfa-asmgen\[decode\]"):
        decode_text(struct.pack("<I", 0xBF800000))


def test_truncated_instruction_is_an_error() -> None:
    vop3 = bytes.fromhex("0000cfd1 02050e04")  # an 8-byte VOP3 encoding
    assert len(decode_text(vop3)) == 1
    with pytest.raises(DecodeError, match=r"\.text\+0x0 .*runs past the end"):
        decode_text(vop3[:4])


def test_bad_files(built, tmp_path) -> None:
    _, hsaco = built
    data = bytearray(hsaco.read_bytes())
    (tmp_path / "text.co").write_bytes(b"not an ELF file")
    with pytest.raises(ElfError, match="not an ELF file"):
        load_code_object(tmp_path / "text.co")
    v4 = bytearray(data)
    v4[8] = 2  # ABI version 2: code object v4
    (tmp_path / "v4.co").write_bytes(bytes(v4))
    with pytest.raises(CodeObjectError, match="code object version 4; supported: 5, 6"):
        load_code_object(tmp_path / "v4.co")
    gfx942 = bytearray(data)
    gfx942[48] = 0x4C  # e_flags low byte: EF_AMDGPU_MACH_AMDGCN_GFX942
    (tmp_path / "gfx942.co").write_bytes(bytes(gfx942))
    with pytest.raises(CodeObjectError, match="processor 0x04c in e_flags, not gfx950"):
        load_code_object(tmp_path / "gfx942.co")


def test_descriptor_fields() -> None:
    """Hand-built descriptor: every field lands where AMDGPUUsage puts it."""
    rsrc1 = 5 | 2 << 6 | 3 << 16 | 1 << 21 | 1 << 23
    rsrc2 = 1 << 0 | 4 << 1 | 1 << 7 | 1 << 9 | 2 << 11
    rsrc3 = (128 // 4 - 1) | 1 << 16
    props, preload = 1 << 3 | 1 << 1, 3 | 1 << 7
    kd = struct.pack("<IIII q 20x III HH4x", 65536, 16, 512, 0, -4096, rsrc3, rsrc1, rsrc2, props, preload)
    want = {
        "group_segment_fixed_size": 65536, "private_segment_fixed_size": 16, "kernarg_size": 512,
        "kernel_code_entry_byte_offset": -4096, "next_free_vgpr": 48, "next_free_sgpr": 42,
        "accum_offset": 128, "tg_split": 1, "float_denorm_mode_32": 3, "dx10_clamp": 1, "ieee_mode": 1,
        "float_round_mode_32": 0, "enable_private_segment": 1, "user_sgpr_count": 4,
        "system_vgpr_workitem_id": 2, "system_sgpr_workgroup_id_x": 1, "system_sgpr_workgroup_id_y": 0,
        "system_sgpr_workgroup_id_z": 1, "user_sgpr_kernarg_segment_ptr": 1, "user_sgpr_dispatch_ptr": 1,
        "user_sgpr_queue_ptr": 0, "user_sgpr_kernarg_preload_length": 3,
        "user_sgpr_kernarg_preload_offset": 1,
    }  # fmt: skip
    d = parse_descriptor(kd)
    assert {k: d[k] for k in want} == want
    with pytest.raises(DescriptorError, match="64 bytes, got 63"):
        parse_descriptor(kd[:63])
    wave32 = kd[:56] + struct.pack("<H", 1 << 10) + kd[58:]
    with pytest.raises(DescriptorError, match="wave32"):
        parse_descriptor(wave32)


def test_msgpack() -> None:
    """Hand-encoded MessagePack of every type the metadata uses (spec: msgpack/msgpack spec.md)."""
    blob = bytes.fromhex(
        "85"  # fixmap, 5 entries
        "a1 61 93 01 ff d0 80"  # "a": [1, -1, -128]
        "a1 62 82 c3 c2 c0 cd 01 00"  # "b": {True: False, None: 256}
        "a1 63 cb 3f f8 00 00 00 00 00 00"  # "c": 1.5
        "a1 64 d9 03 78 79 7a"  # "d": str8 "xyz"
        "a1 65 dc 00 02 ce ff ff ff ff d3 80 00 00 00 00 00 00 00"  # "e": array16 [2**32-1, -2**63]
    )
    assert unpackb(blob) == {"a": [1, -1, -128], "b": {True: False, None: 256}, "c": 1.5, "d": "xyz",
                             "e": [2**32 - 1, -(2**63)]}  # fmt: skip
    with pytest.raises(MsgpackError, match="truncated"):
        unpackb(blob[:-1])
    with pytest.raises(MsgpackError, match="type byte 0xd4"):
        unpackb(bytes.fromhex("d4 01 02"))  # fixext 1
    with pytest.raises(MsgpackError, match="left after"):
        unpackb(b"\x01\x02")


# ---- command line -------------------------------------------------------------------------------


def test_cli_summary_listing_and_roundtrip(built, tmp_path, capsys) -> None:
    from zyfa_asmgen.__main__ import main

    _, hsaco = built
    assert main(["codeobject", str(hsaco)]) == 0
    out = capsys.readouterr().out
    assert "code object v6, target amdgcn-amd-amdhsa--gfx950" in out
    assert f"kernel {VAR['name']}: entry instruction 0" in out
    lds = load_code_object(hsaco).kernel(VAR["name"]).descriptor["group_segment_fixed_size"]
    assert lds > 0  # the kernel stages K and V in LDS
    assert f"descriptor group_segment_fixed_size = {lds}" in out and "simulator lacks: nothing" in out
    assert main(["codeobject", str(hsaco), "--disassemble", "-o", str(tmp_path / "k.s")]) == 0
    listing = (tmp_path / "k.s").read_text()
    assert listing.startswith(".text\n") and f"\n{VAR['name']}:\n" in listing
    assert "v_mfma_f32_32x32x16_bf16" in listing
    assert main(["codeobject", str(hsaco), "--roundtrip"]) == 0
    assert "reassembled by the pinned clang, identical" in capsys.readouterr().out


def test_cli_bad_file(tmp_path, capsys) -> None:
    from zyfa_asmgen.__main__ import main

    (tmp_path / "x.co").write_bytes(b"\x7fELF\x01\x01" + bytes(80))
    assert main(["codeobject", str(tmp_path / "x.co")]) == 1
    assert "only ELF64 little-endian is supported" in capsys.readouterr().err
