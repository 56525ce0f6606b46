"""The ABI parser against kernels/abi/zyfa_abi.h and against edited copies of it."""

from __future__ import annotations

import re

import pytest

from zyfa_asmgen.abi import AbiError, parse_abi_header, parse_abi_text


def _comment_offsets(text: str) -> list[tuple[str, int]]:
    """(name, offset) as the header's comments state them, read independently of the parser."""
    body = text[text.index("typedef struct zyfa_fwd_args") : text.index("} zyfa_fwd_args;")]
    return [(m.group(1), int(m.group(2))) for m in re.finditer(r"(\w+);\s*/\*\s*(\d+)", body)]


def test_offsets_match_header_comments(abi_header):
    abi = parse_abi_header(abi_header)
    stated = _comment_offsets(abi_header.read_text())
    assert [(f.name, f.offset) for f in abi.fields] == stated
    assert len(stated) == 30
    assert abi.size == 192
    assert abi.packed
    assert abi.version >= 1
    assert abi.flags == {
        "ZYFA_FLAG_CAUSAL": 1,
        "ZYFA_FLAG_LSE": 2,
        "ZYFA_FLAG_VARLEN": 4,
        "ZYFA_FLAG_PAGED": 8,
        "ZYFA_FLAG_DESCALE_TABLE": 16,
    }


def test_fields_tile_the_struct(abi_header):
    abi = parse_abi_header(abi_header)
    end = 0
    for f in abi.fields:
        assert f.offset == end, f.name
        end += f.size
    assert end == abi.size
    assert abi.field("q_stride_seq").kind == "i64"
    assert abi.field("out").kind == "ptr"
    assert abi.field("softmax_scale").kind == "f32"
    assert abi.span("batch", 8) == (136, 32)


def test_wrong_comment_offset_is_rejected(abi_header):
    text = abi_header.read_text().replace("/*  40 */", "/*  44 */")
    with pytest.raises(AbiError, match="q_stride_batch"):
        parse_abi_text(text)


def test_wrong_size_comment_is_rejected(abi_header):
    text = abi_header.read_text().replace("/* 192 bytes */", "/* 200 bytes */")
    with pytest.raises(AbiError, match="200 bytes"):
        parse_abi_text(text)


def test_inserted_field_moves_later_offsets(abi_header):
    text = re.sub(r"/\*.*?\*/", "", abi_header.read_text(), flags=re.S)  # drop the offset comments
    text = text.replace("int32_t batch;", "int32_t pad;\n  int32_t batch;")
    abi = parse_abi_text(text.replace("sizeof(zyfa_fwd_args) == 192", "sizeof(zyfa_fwd_args) == 196"))
    assert abi.offset("batch") == 140
    assert abi.offset("reserved") == 188
    assert abi.size == 196


def test_unpacked_struct_is_aligned_and_spans_checked():
    text = """#define ZYFA_ABI_VERSION 7
typedef struct zyfa_fwd_args {
  int32_t a;
  int64_t b;
  float c;
} zyfa_fwd_args;"""
    abi = parse_abi_text(text)
    assert not abi.packed
    assert [f.offset for f in abi.fields] == [0, 8, 16]
    assert abi.size == 24
    assert abi.version == 7
    with pytest.raises(AbiError, match="not contiguous"):
        abi.span("a", 2)


def test_unknown_type_and_missing_struct():
    with pytest.raises(AbiError, match="unsupported member type"):
        parse_abi_text(
            "#define ZYFA_ABI_VERSION 1\ntypedef struct zyfa_fwd_args {\n  half h;\n} zyfa_fwd_args;"
        )
    with pytest.raises(AbiError, match="no 'typedef struct"):
        parse_abi_text("#define ZYFA_ABI_VERSION 1\n")


def test_varlen_struct_offsets_match_header_comments(abi_header):
    """zyfa_varlen_args (the second parameter of packed-batch kernels): natural alignment, the offsets its
    comments state, 80 bytes, placed right after zyfa_fwd_args (192 is a multiple of its alignment 8)."""
    text = abi_header.read_text()
    body = text[text.index("typedef struct zyfa_varlen_args") : text.index("} zyfa_varlen_args;")]
    stated = [(m.group(1), int(m.group(2))) for m in re.finditer(r"(\w+);\s*/\*\s*(\d+)", body)]
    varlen = parse_abi_header(abi_header).varlen
    assert varlen is not None
    assert [(f.name, f.offset) for f in varlen.fields] == stated
    assert len(stated) == 13
    assert (varlen.size, varlen.align) == (80, 8)
    assert [varlen.fields[i].kind for i in (0, 5, 12)] == ["ptr", "i64", "ptr"]
    assert parse_abi_header(abi_header).varlen_offset() == 192


def test_varlen_struct_wrong_comment_and_unaligned_kernarg(abi_header):
    text = abi_header.read_text()
    with pytest.raises(AbiError, match="total_q"):
        parse_abi_text(text.replace("/* 60  rows of q", "/* 64  rows of q"))
    # A zyfa_fwd_args of 196 bytes would put the second parameter at 200, its alignment.
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = text.replace("int32_t batch;", "int32_t pad;\n  int32_t batch;")
    abi = parse_abi_text(text.replace("sizeof(zyfa_fwd_args) == 192", "sizeof(zyfa_fwd_args) == 196"))
    assert abi.varlen_offset() == 200
    assert parse_abi_text("#define ZYFA_ABI_VERSION 1\ntypedef struct zyfa_fwd_args {\n  int32_t a;\n"
                          "} zyfa_fwd_args;").varlen is None  # fmt: skip
