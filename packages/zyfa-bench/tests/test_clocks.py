"""Clock sampling: the parsers, the window summary, normalisation, and the nvidia-smi streaming path."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from zyfa_bench.clocks import (
    ClockSample,
    ClockSampler,
    normalised_throughput,
    parse_amd_json,
    parse_nvidia_smi_line,
    summarise,
)


def test_parse_nvidia_smi_line():
    s = parse_nvidia_smi_line("1980, 3201, 612.45, 54, 0x0000000000000004", 1.0)
    assert (s.sm_mhz, s.mem_mhz, s.power_w, s.temp_c, s.throttle) == (
        1980.0,
        3201.0,
        612.45,
        54.0,
        "0x0000000000000004",
    )
    s = parse_nvidia_smi_line("1755, 3201, [N/A], 61", 2.0)
    assert s.sm_mhz == 1755.0 and s.power_w is None and s.throttle is None
    assert parse_nvidia_smi_line("[N/A], 1, 2, 3", 0.0) is None
    assert parse_nvidia_smi_line("garbage", 0.0) is None


AMD_SMI = [
    {
        "gpu": 0,
        "power": {"socket_power": {"value": 612, "unit": "W"}, "power_limit": {"value": 1400, "unit": "W"}},
        "clock": {
            "gfx_0": {"clk": {"value": 2100, "unit": "MHz"}, "min_clk": {"value": 500, "unit": "MHz"}},
            "mem_0": {"clk": {"value": 1900, "unit": "MHz"}},
        },
        "temperature": {"edge": {"value": "N/A"}, "hotspot": {"value": 71, "unit": "C"}},
    }
]
ROCM_SMI = {
    "card0": {
        "sclk clock speed:": "(2100Mhz)",
        "mclk clock speed:": "(1900Mhz)",
        "Current Socket Graphics Package Power (W)": "612.0",
        "Temperature (Sensor junction) (C)": "71.0",
    }
}


@pytest.mark.parametrize("doc", [AMD_SMI, ROCM_SMI])
def test_parse_amd_json(doc):
    s = parse_amd_json(json.dumps(doc), 3.0)
    assert (s.sm_mhz, s.mem_mhz, s.power_w, s.temp_c) == (2100.0, 1900.0, 612.0, 71.0)


def test_parse_amd_json_rejects_garbage():
    assert parse_amd_json("not json", 0.0) is None
    assert parse_amd_json(json.dumps({"card0": {"nothing": 1}}), 0.0) is None


def test_summary_and_normalisation():
    samples = [
        ClockSample(t, mhz, 3201, w, 50 + t, "0x0")
        for t, mhz, w in ((1, 1800, 600), (2, 1700, 650), (3, 1900, 640))
    ]
    s = summarise(samples, source="test")
    assert s["sm_mhz_mean"] == pytest.approx(1800) and s["sm_mhz_min"] == 1700 and s["sm_mhz_max"] == 1900
    assert s["power_w_max"] == 650 and s["temp_c_max"] == 53 and s["throttle_reasons"] == []
    n = normalised_throughput(900.0, 1800.0, 1980.0)
    assert n["tflops_per_ghz"] == pytest.approx(500.0) and n["tflops_at_ref_clock"] == pytest.approx(990.0)
    assert normalised_throughput(900.0, None, 1980.0)["tflops_per_ghz"] is None
    assert summarise([])["sm_mhz_mean"] is None


def test_sampler_without_a_source():
    with ClockSampler(source="none") as s:
        pass
    assert s.samples == [] and s.window(0, 1)["samples"] == 0


def test_window_picks_samples_inside_or_the_nearest():
    s = ClockSampler(source="none")
    s.samples = [ClockSample(t, 1000 + t) for t in (1.0, 2.0, 3.0, 4.0)]
    assert s.window(1.5, 3.5)["samples"] == 2 and s.window(1.5, 3.5)["sm_mhz_mean"] == pytest.approx(1002.5)
    assert s.window(10, 11)["sm_mhz_mean"] == 1004.0  # nothing inside: the nearest sample


def test_windows_pool_several_spans():
    s = ClockSampler(source="none")
    s.samples = [ClockSample(t, 1000 + t) for t in (1.0, 2.0, 3.0, 4.0)]
    w = s.windows([(0.5, 1.5), (3.5, 4.5)])  # the samples between the spans (2.0, 3.0) stay out
    assert w["samples"] == 2 and w["sm_mhz_mean"] == pytest.approx(1002.5) and w["sm_mhz_max"] == 1004.0
    assert s.windows([(1.5, 1.6), (3.9, 3.95)])["sm_mhz_mean"] == 1004.0  # none inside: nearest to an edge
    assert s.windows([(1.5, 3.5)]) == s.window(1.5, 3.5)
    assert s.windows([])["samples"] == 0


def test_nvidia_smi_streaming(tmp_path, monkeypatch):
    # A stand-in nvidia-smi that streams one CSV line per -lms period, like the real one.
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\nwhile true; do echo '1830, 3201, 605.1, 57, 0x0000000000000000'; sleep 0.01; done\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with ClockSampler(source="nvidia-smi", interval_s=0.01) as s:
        t0 = time.monotonic()
        time.sleep(0.3)
        t1 = time.monotonic()
    w = s.window(t0, t1)
    assert s.error is None and w["samples"] >= 3 and w["sm_mhz_mean"] == 1830.0 and w["power_w_mean"] == 605.1
