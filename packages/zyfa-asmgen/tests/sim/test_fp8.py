"""FP8 and bf16 conversions against the oracle tables (through the conversion instructions)."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from zyfa_asmgen.sim import ops_vector
from zyfa_asmgen.sim.fp import FP8_DECODE
from zyfa_asmgen.sim.snippet import run_snippet


def test_e4m3_decode_table_matches_oracle(oracle) -> None:
    t = json.loads(oracle("fp8/fp8_e4m3fn_table.json").read_text())["table"]
    got = FP8_DECODE["e4m3"].view(np.uint32)
    for e in t:
        want = int(e["f32_bits"], 16)
        if e["class"] == "nan":
            assert np.isnan(FP8_DECODE["e4m3"][e["code"]])
        else:
            assert int(got[e["code"]]) == want, e


def test_e5m2_decode_table_matches_oracle(oracle) -> None:
    t = json.loads(oracle("fp8/fp8_other_formats_tables.json").read_text())["float8_e5m2"]
    rows = t["table"] if isinstance(t, dict) else t
    for e in rows:
        v = FP8_DECODE["e5m2"][e["code"]]
        if e.get("class") == "nan":
            assert np.isnan(v)
        else:
            assert int(np.float32(v).view(np.uint32)) == int(e["f32_bits"], 16), e


def _lanes(values: list[int]) -> list[np.ndarray]:
    """Spread input bit patterns over lanes of as many registers as needed (64 per register)."""
    arr = np.array(values, dtype=np.uint32)
    pad = (-arr.size) % 64
    arr = np.concatenate([arr, np.zeros(pad, np.uint32)])
    return [arr[i : i + 64] for i in range(0, arr.size, 64)]


@pytest.mark.parametrize("saturate", [False, True])
def test_cvt_pk_fp8_f32_vectors(oracle, saturate: bool, monkeypatch) -> None:
    """v_cvt_pk_fp8_f32: both halves, both words (op_sel), against the oracle vectors."""
    vecs = json.loads(oracle("fp8/f32_to_e4m3fn_vectors.json").read_text())["vectors"]
    key = "rne_satfinite" if saturate else "rne_nonsat"
    monkeypatch.setattr(ops_vector, "FP8_SATURATE", saturate)
    bits = [int(v["f32_bits"], 16) for v in vecs]
    want = [int(v[key], 16) for v in vecs]
    for chunk, wchunk in zip(_lanes(bits), _lanes(want), strict=True):
        rev = chunk[::-1].copy()
        old = np.full(64, 0xA5A5A5A5, dtype=np.uint32)
        r = run_snippet(
            "  v_cvt_pk_fp8_f32 v2, v0, v1\n  v_cvt_pk_fp8_f32 v3, v1, v0 op_sel:[0,0,1]",
            vgpr={0: chunk, 1: rev, 2: old, 3: old},
        )
        lo = r.wave.v[2] & 0xFF
        hi = (r.wave.v[2] >> 8) & 0xFF
        np.testing.assert_array_equal(lo, wchunk)
        np.testing.assert_array_equal(hi, wchunk[::-1])
        assert (r.wave.v[2] >> 16 == 0xA5A5).all()  # other word preserved
        np.testing.assert_array_equal((r.wave.v[3] >> 16) & 0xFF, wchunk[::-1])
        assert (r.wave.v[3] & 0xFFFF == 0xA5A5).all()


def test_cvt_f32_fp8_byte_select_all_codes() -> None:
    codes = np.arange(256, dtype=np.uint32)
    packed = [codes[i : i + 4] for i in range(0, 256, 4)]
    words = np.array([c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24) for c in packed], dtype=np.uint32)
    words = np.concatenate([words])  # 64 lanes, 4 codes each
    body = "\n".join(f"  v_cvt_f32_fp8_sdwa v{1 + b}, v0 src0_sel:BYTE_{b}" for b in range(4))
    body += "\n  v_cvt_pk_f32_fp8_sdwa v[6:7], v0 src0_sel:WORD_1"
    r = run_snippet(body, vgpr={0: words})
    got = np.stack([r.wave.v[1 + b] for b in range(4)], axis=1).reshape(-1).view(np.float32)
    want = codes.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    w2 = want.reshape(64, 4)
    for reg, col in ((6, 2), (7, 3)):
        ok = ~np.isnan(w2[:, col])
        np.testing.assert_array_equal(r.wave.v[reg].view(np.float32)[ok], w2[:, col][ok])


def test_cvt_pk_bf16_f32_round_to_nearest_even() -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal(64).astype(np.float32) * np.float32(3.0)
    x[:8] = [np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3.4e38, 1.0000001]
    # Ties: exact halfway cases between two bf16 values round to even.
    x[8:12] = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x00008000], dtype=np.uint32).view(np.float32)
    y = rng.standard_normal(64).astype(np.float32)
    r = run_snippet("  v_cvt_pk_bf16_f32 v2, v0, v1", vgpr={0: x.view(np.uint32), 1: y.view(np.uint32)})
    lo = (r.wave.v[2] & 0xFFFF).astype(np.uint16)
    hi = (r.wave.v[2] >> 16).astype(np.uint16)
    np.testing.assert_array_equal(lo, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(hi, y.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_cvt_pk_bf16_nan_stays_nan() -> None:
    x = np.full(64, np.nan, dtype=np.float32)
    r = run_snippet("  v_cvt_pk_bf16_f32 v2, v0, v0", vgpr={0: x.view(np.uint32)})
    lo = (r.wave.v[2] & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16)
    assert np.isnan(lo.astype(np.float32)).all()


def test_cvt_scalef32_pk_fp8_divides_by_the_scale_exponent() -> None:
    rng = np.random.default_rng()
    a = (rng.standard_normal(64) * 50).astype(np.float32)
    b = (rng.standard_normal(64) * 50).astype(np.float32)
    s = np.full(64, 4.0, dtype=np.float32)
    vgpr = {0: a.view(np.uint32), 1: b.view(np.uint32), 2: s.view(np.uint32)}
    r = run_snippet("  v_cvt_scalef32_pk_fp8_f32 v3, v0, v1, v2", vgpr=vgpr)
    want_lo = (a / 4).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    want_hi = (b / 4).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(r.wave.v[3] & 0xFF, want_lo)
    np.testing.assert_array_equal((r.wave.v[3] >> 8) & 0xFF, want_hi)
