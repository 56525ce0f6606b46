"""zyfa_core.abi against kernels/abi/zyfa_abi.h as the host compiler sees it.

The field list is parsed from the header, a C program is generated that prints offsetof/sizeof of
each field (and decodes struct bytes), and both are compared with the ctypes mirror: a field added,
removed, renamed, reordered or retyped on either side fails here.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from zyfa_core import abi, launcher
from zyfa_core import manifest as mf

HEADER_ENV = "ZYFA_ABI_HEADER"

# C type in the header -> (printf format, cast) used by the generated decoder.
_PRINT = {
    "const void *": ("%llu", "(unsigned long long)(uintptr_t)"),
    "void *": ("%llu", "(unsigned long long)(uintptr_t)"),
    "float *": ("%llu", "(unsigned long long)(uintptr_t)"),
    "int64_t": ("%lld", "(long long)"),
    "int32_t": ("%d", "(int)"),
    "uint32_t": ("%u", "(unsigned)"),
    "uint64_t": ("%llu", "(unsigned long long)"),
    "float": ('\\"%a\\"', "(double)"),
}


def find_header() -> Path | None:
    """$ZYFA_ABI_HEADER, else kernels/abi/zyfa_abi.h in a parent of this file (the repo checkout)."""
    if os.environ.get(HEADER_ENV):
        return Path(os.environ[HEADER_ENV])
    for directory in Path(__file__).resolve().parents:
        candidate = directory / "kernels" / "abi" / "zyfa_abi.h"
        if candidate.is_file():
            return candidate
    return None


def parse_fields(header_text: str) -> list[tuple[str, str]]:
    """[(C type, field name)] of struct zyfa_fwd_args, in declaration order."""
    body = re.search(r"typedef\s+struct\s+zyfa_fwd_args\s*\{(.*?)\}\s*zyfa_fwd_args\s*;", header_text, re.S)
    assert body, "struct zyfa_fwd_args not found in the header"
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", body.group(1), flags=re.S)
    fields = []
    for decl in filter(None, (d.strip() for d in text.split(";"))):
        match = re.fullmatch(r"(.*?)\b(\w+)", " ".join(decl.split()))
        assert match, f"cannot parse field declaration {decl!r}"
        ctype = match.group(1).strip().replace(" *", " *")
        fields.append((re.sub(r"\s*\*", " *", ctype), match.group(2)))
    return fields


# (seqlen_k, tile_n) at which the header's ZYFA_VT_ROW_BYTES and zyfa_core.manifest.vt_row_bytes must agree:
# empty and one-key rows, block edges, the tile_n 192 (lcm 384) and 64 (lcm 128) paddings.
VT_ROW_SAMPLES = [
    (0, 128),
    (1, 128),
    (128, 128),
    (129, 128),
    (16385, 128),
    (1, 192),
    (384, 192),
    (385, 192),
    (100, 64),
]
# (batch, total_k) samples of ZYFA_VT_PACKED_ROW_BYTES, and (b, k_start) of ZYFA_VT_PACKED_COLUMN (ABI 6).
VT_PACKED_ROW_SAMPLES = [(1, 1), (1, 100), (3, 520), (64, 32768), (1000, 1)]
VT_PACKED_COLUMN_SAMPLES = [(0, 0), (0, 1), (1, 16), (5, 17), (63, 30000)]


def program(fields: list[tuple[str, str]], header_name: str) -> str:
    """A C program: no argument -> layout JSON; argument "decode" -> field values of struct bytes on stdin."""
    layout_lines, decode_lines = [], []
    for i, (ctype, name) in enumerate(fields):
        sep = '""' if i == 0 else '", "'
        fmt, cast = _PRINT[ctype]
        layout_lines.append(
            f'  printf("%s{{\\"name\\": \\"{name}\\", \\"offset\\": %zu, \\"size\\": %zu}}", {sep}, '
            f"offsetof(zyfa_fwd_args, {name}), sizeof(a.{name}));"
        )
        decode_lines.append(f'  printf("%s\\"{name}\\": {fmt}", {sep}, {cast}a.{name});')
    text = _PROGRAM.replace("@HEADER@", header_name).replace("@LAYOUT@", "\n".join(layout_lines))
    text = text.replace("@VT_ROWS@", ", ".join(f"{{{s}, {t}}}" for s, t in VT_ROW_SAMPLES))
    text = text.replace("@VT_PACKED_ROWS@", ", ".join(f"{{{b}, {n}}}" for b, n in VT_PACKED_ROW_SAMPLES))
    text = text.replace("@VT_PACKED_COLS@", ", ".join(f"{{{b}, {k}}}" for b, k in VT_PACKED_COLUMN_SAMPLES))
    varlen = "".join(
        f'  printf("%s\\"{name}\\": %zu", {sep}, offsetof(zyfa_varlen_args, {name}));\n'
        for sep, name in zip(
            ['""'] + ['", "'] * (len(abi.VARLEN_FIELD_NAMES) - 1), abi.VARLEN_FIELD_NAMES, strict=True
        )
    )
    text = text.replace("@VARLEN@", varlen)
    return text.replace("@DECODE@", "\n".join(decode_lines))


_PROGRAM = r"""
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "@HEADER@"
static const int vt_rows[][2] = {@VT_ROWS@};  /* (seqlen_k, tile_n) samples of ZYFA_VT_ROW_BYTES */
static const int vt_packed_rows[][2] = {@VT_PACKED_ROWS@};  /* (batch, total_k): ZYFA_VT_PACKED_ROW_BYTES */
static const int vt_packed_cols[][2] = {@VT_PACKED_COLS@};  /* (b, k_start): ZYFA_VT_PACKED_COLUMN */
int main(int argc, char **argv) {
  zyfa_fwd_args a;
  (void)argv;
  memset(&a, 0, sizeof a);
  if (argc > 1) {
    if (fread(&a, 1, sizeof a, stdin) != sizeof a) return 2;
    printf("{");
@DECODE@
    printf("}\n");
    return 0;
  }
  printf("{\"tma\": [%zu, %zu, %zu, %zu, %zu, %zu, %zu], ", sizeof(zyfa_tma_maps), __alignof__(zyfa_tma_maps),
         offsetof(zyfa_tma_maps, q), offsetof(zyfa_tma_maps, k), offsetof(zyfa_tma_maps, v),
         offsetof(zyfa_tma_maps, valid), sizeof(zyfa_tensor_map));
  printf("\"fp8_max_stale_tau\": %.17g, ", (double)ZYFA_FP8_MAX_STALE_TAU);
  printf("\"varlen_flags\": [%u, %u, %u], ", (unsigned)ZYFA_FLAG_VARLEN, (unsigned)ZYFA_FLAG_PAGED,
         (unsigned)ZYFA_FLAG_DESCALE_TABLE);
  printf("\"varlen_size\": %zu, \"varlen\": {", sizeof(zyfa_varlen_args));
@VARLEN@
  printf("}, ");
  printf("\"item_counter_bytes\": %d, ", (int)ZYFA_ITEM_COUNTER_BYTES);
  printf("\"vprep\": [%d, %d", (int)ZYFA_VPREP_KEYS, (int)ZYFA_VPREP_THREADS);
  for (int i = 0; i < (int)(sizeof vt_rows / sizeof vt_rows[0]); ++i) {
    printf(", %lld", (long long)ZYFA_VT_ROW_BYTES(vt_rows[i][0], vt_rows[i][1]));
  }
  printf("], \"vt_packed\": [%d", (int)ZYFA_VT_PACKED_GAP);
  for (int i = 0; i < (int)(sizeof vt_packed_rows / sizeof vt_packed_rows[0]); ++i) {
    printf(", %lld", (long long)ZYFA_VT_PACKED_ROW_BYTES(vt_packed_rows[i][0], vt_packed_rows[i][1]));
  }
  printf("], \"vt_packed_columns\": [");
  for (int i = 0; i < (int)(sizeof vt_packed_cols / sizeof vt_packed_cols[0]); ++i) {
    const int *c = vt_packed_cols[i];
    printf("%s%lld", i ? ", " : "", (long long)ZYFA_VT_PACKED_COLUMN(c[0], c[1]));
  }
  printf("], ");
  printf("\"size\": %zu, \"version\": %d, \"flag_causal\": %u, \"flag_lse\": %u, \"fields\": [",
         sizeof(zyfa_fwd_args), (int)ZYFA_ABI_VERSION, (unsigned)ZYFA_FLAG_CAUSAL, (unsigned)ZYFA_FLAG_LSE);
@LAYOUT@
  printf("]}\n");
  return 0;
}
"""


@pytest.fixture(scope="module", params=["c", "c++"])
def compiled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, host_compiler):
    """(parsed fields, path of the compiled probe) for the C and the C++ compiler."""
    header = find_header()
    if header is None:
        pytest.skip(f"kernels/abi/zyfa_abi.h not found above this file; set {HEADER_ENV}")
    compiler = host_compiler(request.param)
    if compiler is None:
        pytest.skip(f"no host {request.param} compiler on PATH")
    fields = parse_fields(header.read_text())
    out = tmp_path_factory.mktemp(f"abi_{request.param.replace('+', 'x')}")
    source = out / ("probe.c" if request.param == "c" else "probe.cpp")
    source.write_text(program(fields, header.name))
    std = "-std=c11" if request.param == "c" else "-std=c++17"
    exe = out / "probe"
    result = subprocess.run(
        [compiler, std, "-Wall", f"-I{header.parent}", str(source), "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return fields, exe


def layout(exe: Path) -> dict:
    return json.loads(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)


def test_field_names_match_in_both_directions(compiled) -> None:
    fields, _ = compiled
    header_names = [name for _, name in fields]
    only_header = [n for n in header_names if n not in abi.FIELD_NAMES]
    only_ctypes = [n for n in abi.FIELD_NAMES if n not in header_names]
    assert not only_header, f"fields in zyfa_abi.h but not in zyfa_core.abi: {only_header}"
    assert not only_ctypes, f"fields in zyfa_core.abi but not in zyfa_abi.h: {only_ctypes}"
    assert header_names == list(abi.FIELD_NAMES), "field order differs"
    assert [name for name, _ in abi.ZyfaFwdArgs._fields_] == header_names


def test_every_offset_and_size_match(compiled) -> None:
    _, exe = compiled
    info = layout(exe)
    assert info["size"] == ctypes.sizeof(abi.ZyfaFwdArgs) == abi.ARGS_SIZE == 192
    for field in info["fields"]:
        mirror = getattr(abi.ZyfaFwdArgs, field["name"])
        assert mirror.offset == field["offset"], (
            f"{field['name']}: offset {mirror.offset} != C {field['offset']}"
        )
        assert mirror.size == field["size"], f"{field['name']}: size {mirror.size} != C {field['size']}"
    # Packed and gap-free: the parsed fields tile the struct exactly (a field the parser missed shows here).
    assert sum(f["size"] for f in info["fields"]) == info["size"]


def test_tma_maps_layout_matches(compiled) -> None:
    """zyfa_tma_maps: 448 bytes, 64-aligned, maps q/k/v of 128 bytes at 0/128/256, valid at 384."""
    _, exe = compiled
    size, align, q, k, v, valid, one_map = layout(exe)["tma"]
    assert (size, align) == (abi.TMA_MAPS_BYTES, 64)
    assert (q, k, v, valid, one_map) == (
        0,
        abi.TENSOR_MAP_BYTES,
        2 * abi.TENSOR_MAP_BYTES,
        384,
        abi.TENSOR_MAP_BYTES,
    )


def test_varlen_args_layout_matches(compiled) -> None:
    """zyfa_varlen_args (ABI 4): every field's offset and the size as the C and C++ compilers see them."""
    _, exe = compiled
    info = layout(exe)
    assert info["varlen_size"] == ctypes.sizeof(abi.ZyfaVarlenArgs) == abi.VARLEN_ARGS_SIZE
    assert info["varlen"] == {
        name: getattr(abi.ZyfaVarlenArgs, name).offset for name in abi.VARLEN_FIELD_NAMES
    }
    assert info["varlen_flags"] == [abi.FLAG_VARLEN, abi.FLAG_PAGED, abi.FLAG_DESCALE_TABLE]


def test_version_and_flags_match(compiled) -> None:
    _, exe = compiled
    info = layout(exe)
    assert info["version"] == abi.ABI_VERSION, (
        f"ZYFA_ABI_VERSION {info['version']} != ABI_VERSION {abi.ABI_VERSION}"
    )
    assert info["flag_causal"] == abi.FLAG_CAUSAL
    assert info["flag_lse"] == abi.FLAG_LSE


def _random_fields(rng: random.Random) -> dict:
    values = {}
    for name, ctype in abi.ZyfaFwdArgs._fields_:
        if ctype in (ctypes.c_void_p, ctypes.c_uint64):
            values[name] = rng.randrange(1, 2**64)
        elif ctype is ctypes.c_int64:
            values[name] = rng.randrange(-(2**63), 2**63)
        elif ctype is ctypes.c_int32:
            values[name] = rng.randrange(-(2**31), 2**31)
        elif ctype is ctypes.c_uint32:
            values[name] = rng.randrange(0, 2**32)
        else:  # float32-exact values, so equality below is exact
            values[name] = ctypes.c_float(rng.uniform(-1e6, 1e6)).value
    return values


def test_bytes_decode_to_the_same_values_in_c(compiled) -> None:
    """Random values through make_fwd_args -> bytes -> C struct: every field reads back exactly."""
    _, exe = compiled
    rng = random.Random()
    for _ in range(3):
        values = _random_fields(rng)
        data = abi.args_bytes(abi.make_fwd_args(**values))
        assert len(data) == abi.ARGS_SIZE
        out = subprocess.run([str(exe), "decode"], input=data, capture_output=True, check=True).stdout
        decoded = json.loads(out)
        for name, value in values.items():
            got = decoded[name]
            got = float.fromhex(got) if isinstance(got, str) else got
            assert got == value, f"{name}: C read {got}, Python wrote {value}"


def test_make_fwd_args_rejects_values_that_do_not_fit() -> None:
    base = {name: 16 for name in abi.FIELD_NAMES}
    base.update(softmax_scale=0.1, flags=abi.FLAG_CAUSAL, reserved=0)
    abi.make_fwd_args(**base)
    with pytest.raises(ValueError, match="seqlen_q"):
        abi.make_fwd_args(**{**base, "seqlen_q": 2**31})
    with pytest.raises(ValueError, match="q_stride_seq"):
        abi.make_fwd_args(**{**base, "q_stride_seq": 2**63})
    with pytest.raises(ValueError, match="flags"):
        abi.make_fwd_args(**{**base, "flags": -1})
    with pytest.raises(ValueError, match="softmax_scale"):
        abi.make_fwd_args(**{**base, "softmax_scale": 1e39})  # overflows float32
    with pytest.raises(ValueError, match="batch"):
        abi.make_fwd_args(**{**base, "batch": True})
    with pytest.raises(ValueError, match="heads_q"):
        abi.make_fwd_args(**{**base, "heads_q": 2.0})
    with pytest.raises(TypeError, match="bogus"):
        abi.make_fwd_args(**base, bogus=1)
    missing = dict(base)
    del missing["d_v"]
    with pytest.raises(ValueError, match="d_v"):
        abi.make_fwd_args(**missing)


def test_assignments_are_range_checked_too() -> None:
    """ctypes alone wraps: seqlen_q = 2**32 + 256 would read as 256 in the kernel. A ZyfaFwdArgs refuses it
    on assignment, as make_fwd_args does, and keeps the old value."""
    args = abi.ZyfaFwdArgs()
    args.seqlen_q = 300
    for name, value in (("seqlen_q", 2**32 + 256), ("heads_q", -(2**31) - 1), ("q", -16), ("flags", 2**32)):
        with pytest.raises(ValueError, match=f"zyfa_fwd_args.{name} = "):
            setattr(args, name, value)
    with pytest.raises(ValueError, match="softmax_scale = 1e\\+39 is not a finite float32"):
        args.softmax_scale = 1e39
    assert args.seqlen_q == 300 and args.heads_q == 0 and args.softmax_scale == 0.0


def test_make_fwd_args_defaults() -> None:
    required = {n: 8 for n in abi.FIELD_NAMES if n not in ("lse", "flags", "reserved") and "descale" not in n}
    args = abi.make_fwd_args(**{**required, "softmax_scale": 0.125, "q": None})
    assert (args.q or 0) == 0 and (args.lse or 0) == 0
    assert args.flags == abi.FLAG_CAUSAL and args.reserved == 0
    assert (args.q_descale, args.k_descale, args.v_descale) == (1.0, 1.0, 1.0)


# ------------------------------------------------------------ zyfa_tma_maps: the TMA kernels' 2nd parameter
# Built by the C++ launch plan (zyfa_core.launcher.tma_maps_bytes); with an encoder given, no driver runs.


class _RecordingEncoder:
    """Stands in for `_driver.encode_tensor_map`: records each call, returns 128 recognisable bytes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, list[int], list[int], list[int]]] = []

    def __call__(self, dtype: str, address: int, dims, strides, box) -> bytes:
        self.calls.append((dtype, address, list(dims), list(strides), list(box)))
        return bytes([len(self.calls)]) * abi.TENSOR_MAP_BYTES


def _tma_case(dtype: str = "bf16", **overrides) -> tuple[mf.KernelSpec, abi.ZyfaFwdArgs]:
    """GQA (8 query heads over 2 kv heads), q/k/v as views of packed buffers (non-contiguous strides)."""
    spec = mf.KernelSpec(
        name="fa_fwd_tma_test",
        file="x.cubin",
        arch="sm90a",
        dtype=dtype,
        d_qk=192,
        d_v=128,
        causal=True,
        p_mode=None,
        kind="cuda",
        tile_m=128,
        tile_n=176,
        threads=384,
        smem_bytes=0,
        registers=0,
        spill_bytes=0,
        abi_version=abi.ABI_VERSION,
        source_sha256="0" * 64,
        path=Path("x.cubin"),
        loads="tma",
    )
    b, sq, sk, hq, hkv, dqk, dv = 3, 300, 500, 8, 2, 192, 128
    fields = dict(
        q=0x7F0000000000,
        k=0x7F1000000000,
        v=0x7F2000000000,
        out=0x7F3000000000,
        # q inside a packed [b, sq, 3, hq, dqk] qkv buffer; k and v with padded rows and batches.
        q_stride_batch=sq * 3 * hq * dqk,
        q_stride_seq=3 * hq * dqk,
        q_stride_head=dqk,
        k_stride_batch=sk * hkv * 256 + 64,
        k_stride_seq=hkv * 256,
        k_stride_head=256,
        v_stride_batch=sk * hkv * dv * 2,
        v_stride_seq=hkv * dv * 2,
        v_stride_head=dv,
        out_stride_batch=sq * hq * dv,
        out_stride_seq=hq * dv,
        out_stride_head=dv,
        batch=b,
        heads_q=hq,
        heads_kv=hkv,
        seqlen_q=sq,
        seqlen_k=sk,
        d_qk=dqk,
        d_v=dv,
        softmax_scale=0.1,
    )
    fields.update(overrides)
    return spec, abi.make_fwd_args(**fields)


@pytest.mark.parametrize(
    ("dtype", "element", "size", "inner"), [("bf16", "bf16", 2, 64), ("e4m3fn", "u8", 1, 128)]
)
def test_tma_maps_encode_q_k_v_as_the_header_says(dtype: str, element: str, size: int, inner: int) -> None:
    spec, args = _tma_case(dtype)
    encode = _RecordingEncoder()
    maps = launcher.tma_maps_bytes(spec, args, encode)

    def call(address: int, dims: list[int], strides: tuple[int, int, int], rows: int) -> tuple:
        return (element, address, dims, [stride * size for stride in strides], [inner, rows, 1, 1])

    assert encode.calls == [
        call(args.q, [192, 300, 8, 3], (3 * 8 * 192, 192, 300 * 3 * 8 * 192), 128),  # tile_m rows
        call(args.k, [192, 500, 2, 3], (2 * 256, 256, 500 * 2 * 256 + 64), 176),  # tile_n rows
        call(args.v, [128, 500, 2, 3], (2 * 128 * 2, 128, 500 * 2 * 128 * 2), 176),
    ]
    assert len(maps) == abi.TMA_MAPS_BYTES == 448
    assert maps[:384] == b"\x01" * 128 + b"\x02" * 128 + b"\x03" * 128
    assert maps[384:388] == (1).to_bytes(4, "little") and maps[388:] == bytes(60)  # valid = 1, reserved zero


@pytest.mark.parametrize(
    "override",
    [
        {"k_stride_seq": 2 * 256 + 4},  # 1032 bytes: not a multiple of 16
        {"v_stride_head": 132},  # 264 bytes
        {"q_stride_batch": 3},  # even along a dim the kernel never steps (batch 1 below is not required)
        {"v": 0x7F2000000008},  # an 8-byte aligned pointer
        {"q_stride_batch": 2**39},  # 2**40 bytes: past cuTensorMapEncodeTiled's stride limit
    ],
)
def test_tma_maps_unusable_strides_or_pointers_give_valid_0(override: dict) -> None:
    """cuTensorMapEncodeTiled needs 16-byte multiples: otherwise no map is encoded, all 448 bytes are
    zero (valid = 0) and the kernel loads with cp.async."""
    spec, args = _tma_case(**override)
    encode = _RecordingEncoder()
    assert not launcher._plan(spec).tma_usable(bytes(args))
    assert launcher.tma_maps_bytes(spec, args, encode) == bytes(448)
    assert encode.calls == []


def test_tma_maps_checks_the_encoders_answer() -> None:
    spec, args = _tma_case()
    with pytest.raises(ValueError, match="a tensor map must be 128 bytes, got 64"):
        launcher.tma_maps_bytes(spec, args, lambda *_: bytes(64))


def test_fp8_stale_tau_bound_matches(compiled) -> None:
    """The FP8 running-max staleness bound the kernels and the build tool take from zyfa_abi.h is the one
    zyfa_core's manifest check (and so zyfa.reference) uses."""
    _, exe = compiled
    assert layout(exe)["fp8_max_stale_tau"] == mf.FP8_MAX_STALE_TAU


def test_v_prep_constants_and_row_padding_match(compiled) -> None:
    """ABI 3's V pre-pass: the keys and threads per block and the Vt row padding the kernel and the C++ op
    take from zyfa_abi.h are the ones zyfa_core sizes the workspace and grid with."""
    _, exe = compiled
    keys, threads, *rows = layout(exe)["vprep"]
    assert (keys, threads) == (mf.VPREP_KEYS, mf.VPREP_THREADS)
    assert rows == [mf.vt_row_bytes(s, t) for s, t in VT_ROW_SAMPLES]
    assert rows == [128, 128, 128, 256, 16512, 384, 384, 768, 128]


def test_packed_v_prep_layout_matches(compiled) -> None:
    """ABI 6's packed V pre-pass: the gap and row bytes zyfa_core sizes the workspace with are the header's,
    and the header's layout keeps its promise: each sequence's column a multiple of 16, at least 128 zero
    columns after each sequence (within the row), on random packed batches."""
    _, exe = compiled
    gap, *rows = layout(exe)["vt_packed"]
    assert gap == mf.VT_PACKED_GAP
    assert rows == [mf.vt_packed_row_bytes(b, n) for b, n in VT_PACKED_ROW_SAMPLES]
    columns = layout(exe)["vt_packed_columns"]
    assert columns == [gap * b + -(-k // 16) * 16 for b, k in VT_PACKED_COLUMN_SAMPLES]
    rng = random.Random()
    for _ in range(200):
        lens = [
            rng.choice([0, 1, 15, 16, 17, 127, 128, 129, rng.randint(0, 3000)])
            for _ in range(rng.randint(1, 40))
        ]
        starts = [sum(lens[:b]) for b in range(len(lens))]
        row = mf.vt_packed_row_bytes(len(lens), sum(lens))
        first = [gap * b + -(-k // 16) * 16 for b, k in enumerate(starts)]
        ends = [*first[1:], row]  # the next sequence's first column, or the row's end
        for b, n in enumerate(lens):
            assert first[b] % 16 == 0 and row % mf.VPREP_KEYS == 0
            assert ends[b] - (first[b] + n) >= 128, (lens, b)


def test_item_counter_bytes_match(compiled) -> None:
    """ABI 5: the bytes at the end of a grid "dynamic" launch's workspace that the launch plan clears and
    points item_counter at are the ones zyfa_core's workspace_bytes adds."""
    _, exe = compiled
    assert layout(exe)["item_counter_bytes"] == mf.ITEM_COUNTER_BYTES == 16
