"""GPU clocks, power and temperature sampled while kernels run, and clock-normalised throughput.

Why: FP8 kernels can run at lower clocks than BF16 ones on real data (seed figures: 1,628 vs 2,108 MHz),
and a power-limited card moves its clock from run to run; a TFLOP/s figure without the clock it ran at
is only half a figure.

Sources, first that works:
- NVIDIA: NVML through `pynvml` (package nvidia-ml-py), else `nvidia-smi --query-gpu=... -lms N`;
- AMD: `amd-smi metric --json`, else `rocm-smi --json`, polled.  Their JSON layouts differ between
  ROCm releases, so the parser walks the JSON for the first numeric clock / power / temperature field
  (tested with sample outputs; no AMD GPU is reachable here).
`ClockSampler` is a context manager running a sampling thread; `window(t0, t1)` summarises the samples
taken inside a timed region (times from time.monotonic(), as `zyfa_bench.timing.Timing` records them),
`windows([(t0, t1), ...])` those inside several (one implementation's interleaved timing rounds).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "ClockSample",
    "ClockSampler",
    "normalised_throughput",
    "parse_amd_json",
    "parse_nvidia_smi_line",
    "summarise",
]


@dataclass
class ClockSample:
    """One reading: monotonic time, SM (graphics) clock and memory clock in MHz, watts, degrees C."""

    t: float
    sm_mhz: float | None
    mem_mhz: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    throttle: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Fields as a plain dict."""
        return asdict(self)


def parse_nvidia_smi_line(line: str, t: float) -> ClockSample | None:
    """Parse 'sm, mem, power, temp, throttle' from `nvidia-smi --format=csv,noheader,nounits`."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 4:
        return None

    def num(x: str) -> float | None:
        try:
            return float(x)
        except ValueError:
            return None  # "[N/A]", "[Not Supported]"

    sm = num(parts[0])
    if sm is None:
        return None
    return ClockSample(
        t, sm, num(parts[1]), num(parts[2]), num(parts[3]), parts[4] if len(parts) > 4 else None
    )


_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _walk(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [kv for k, v in obj.items() for kv in _walk(v, f"{path}/{str(k).lower()}")]
    if isinstance(obj, list):
        return [kv for i, v in enumerate(obj) for kv in _walk(v, f"{path}/{i}")]
    return [(path, obj)]


def _first_number(pairs: list[tuple[str, Any]], want: Callable[[str], bool]) -> float | None:
    for path, value in pairs:
        if not want(path):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            m = _NUM.search(value)
            if m:
                return float(m.group())
    return None


def parse_amd_json(text: str, t: float) -> ClockSample | None:
    """Pull the graphics clock, socket power and hotspot/edge temperature out of amd-smi or rocm-smi JSON.

    amd-smi (ROCm 6.x) nests e.g. {"clock": {"gfx_0": {"clk": {"value": 2100, "unit": "MHz"}}}, "power":
    {"socket_power": {"value": 600, ...}}, "temperature": {"hotspot": {"value": 60, ...}}}; rocm-smi
    gives flat strings, e.g. {"card0": {"sclk clock speed:": "(2100Mhz)", "Current Socket Graphics
    Package Power (W)": "600.0", "Temperature (Sensor junction) (C)": "60.0"}}.
    """
    try:
        pairs = _walk(json.loads(text))
    except json.JSONDecodeError:
        return None

    def is_sm(p: str) -> bool:
        return (
            "gfx" in p and "clk" in p and "min" not in p and "max" not in p and "unit" not in p
        ) or "sclk" in p

    def is_mem(p: str) -> bool:
        return (
            "mem" in p and "clk" in p and "unit" not in p and "min" not in p and "max" not in p
        ) or "mclk" in p

    def is_power(p: str) -> bool:
        return "power" in p and "unit" not in p and "limit" not in p and "cap" not in p

    def is_temp(p: str) -> bool:
        return ("hotspot" in p or "junction" in p or "edge" in p) and "unit" not in p and "limit" not in p

    sm = _first_number(pairs, is_sm)
    if sm is None:
        return None
    return ClockSample(
        t, sm, _first_number(pairs, is_mem), _first_number(pairs, is_power), _first_number(pairs, is_temp)
    )


class ClockSampler:
    """Sample GPU clocks every `interval_s` on a thread while the `with` block runs.

    Args:
        device_index: the torch device index (mapped to the management library's index through the
            PCI bus id where possible).
        interval_s: sampling period (NVML reads take ~1 ms; the tools' subprocesses ~50-200 ms).
        source: "auto", "nvml", "nvidia-smi", "amd-smi", "rocm-smi" or "none".
    """

    def __init__(self, device_index: int = 0, *, interval_s: float = 0.05, source: str = "auto") -> None:
        self.device_index = device_index
        self.interval_s = interval_s
        self.samples: list[ClockSample] = []
        self.source, self.error = self._pick(source)
        self.max_sm_mhz: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _pick(self, source: str) -> tuple[str, str | None]:
        if source != "auto":
            return source, None
        try:
            import pynvml

            pynvml.nvmlInit()
            return "nvml", None
        except Exception:  # no NVML: try the command-line tools
            pass
        for tool in ("nvidia-smi", "amd-smi", "rocm-smi"):
            if shutil.which(tool):
                return tool, None
        return "none", "no clock source: NVML (pynvml), nvidia-smi, amd-smi and rocm-smi are all absent"

    def __enter__(self) -> ClockSampler:
        if self.source == "none":
            return self
        target = {"nvml": self._run_nvml, "nvidia-smi": self._run_nvidia_smi}.get(self.source, self._run_amd)
        self._thread = threading.Thread(target=self._guard(target), name="zyfa-clocks", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # sampling must never break a benchmark
                self.error = f"{self.source}: {type(exc).__name__}: {exc}"

        return run

    def _add(self, sample: ClockSample | None) -> None:
        if sample is not None:
            with self._lock:
                self.samples.append(sample)

    def _run_nvml(self) -> None:
        import pynvml

        handle = self._nvml_handle(pynvml)
        try:
            self.max_sm_mhz = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        except pynvml.NVMLError:
            self.max_sm_mhz = None
        while not self._stop.is_set():
            self._add(self._nvml_sample(pynvml, handle))
            self._stop.wait(self.interval_s)

    def _nvml_handle(self, pynvml: Any) -> Any:
        try:
            import torch

            props = torch.cuda.get_device_properties(self.device_index)
            bus = getattr(props, "pci_bus_id", None)
            if bus is not None:
                domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
                return pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08X}:{bus:02X}:{device:02X}.0")
        except Exception:  # fall back to the same index (true unless CUDA_VISIBLE_DEVICES reorders)
            pass
        return pynvml.nvmlDeviceGetHandleByIndex(self.device_index)

    @staticmethod
    def _nvml_sample(pynvml: Any, handle: Any) -> ClockSample:
        def read(fn: Callable[[], float]) -> float | None:
            try:
                return float(fn())
            except Exception:  # NVMLError, or a query this driver/binding lacks
                return None

        # Renamed "event reasons" in newer NVML bindings; either name reports the same bit mask.
        get_reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        reasons = read(lambda: get_reasons(handle)) if get_reasons else None
        return ClockSample(
            time.monotonic(),
            read(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            read(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
            read(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            read(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
            None if reasons is None else hex(int(reasons)),
        )

    def _run_nvidia_smi(self) -> None:
        query = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
        cmd = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"]
        cmd += [f"-lms={max(1, int(self.interval_s * 1000))}", f"--id={self.device_index}"]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            self._add(parse_nvidia_smi_line(line, time.monotonic()))

    def _run_amd(self) -> None:
        if self.source == "amd-smi":
            cmd = [
                "amd-smi",
                "metric",
                "-g",
                str(self.device_index),
                "--clock",
                "--power",
                "--temperature",
                "--json",
            ]
        else:
            cmd = [
                "rocm-smi",
                "-d",
                str(self.device_index),
                "--showclocks",
                "--showpower",
                "--showtemp",
                "--json",
            ]
        while not self._stop.is_set():
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
            self._add(parse_amd_json(out, time.monotonic()))
            self._stop.wait(self.interval_s)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        """Summary of the samples with t0 <= t <= t1 (the nearest one if none fell inside)."""
        return self.windows([(t0, t1)])

    def windows(self, spans: Sequence[tuple[float, float]]) -> dict[str, Any]:
        """Summary of the samples inside any of `spans`, (t0, t1) pairs such as one implementation's rounds.

        The sample nearest to a span's edge stands in if none fell inside (as for `window`).
        """
        with self._lock:
            inside = [s for s in self.samples if any(t0 <= s.t <= t1 for t0, t1 in spans)]
            if not inside and self.samples and spans:
                edges = [t for span in spans for t in span]
                inside = [min(self.samples, key=lambda s: min(abs(s.t - t) for t in edges))]
        return summarise(inside, source=self.source, error=self.error)


def summarise(samples: list[ClockSample], *, source: str = "", error: str | None = None) -> dict[str, Any]:
    """Mean/min/max SM clock, mean memory clock, power and temperature over `samples`."""

    def stats(values: list[float | None]) -> tuple[float | None, float | None, float | None]:
        vals = [v for v in values if v is not None]
        if not vals:
            return None, None, None
        return statistics.fmean(vals), min(vals), max(vals)

    sm_mean, sm_min, sm_max = stats([s.sm_mhz for s in samples])
    throttles = sorted(
        {s.throttle for s in samples if s.throttle and s.throttle not in ("0x0", "0x0000000000000000")}
    )
    return {
        "source": source,
        "error": error,
        "samples": len(samples),
        "sm_mhz_mean": sm_mean,
        "sm_mhz_min": sm_min,
        "sm_mhz_max": sm_max,
        "mem_mhz_mean": stats([s.mem_mhz for s in samples])[0],
        "power_w_mean": stats([s.power_w for s in samples])[0],
        "power_w_max": stats([s.power_w for s in samples])[2],
        "temp_c_max": stats([s.temp_c for s in samples])[2],
        "throttle_reasons": throttles,
    }


def normalised_throughput(
    tflops: float, sm_mhz: float | None, ref_mhz: float | None
) -> dict[str, float | None]:
    """TFLOP/s per GHz of SM clock, and TFLOP/s scaled to `ref_mhz` (e.g. the max clock) linearly.

    Linear scaling holds for compute-bound kernels; memory-bound ones would overstate.  Both are None
    when no clock was read.
    """
    if not sm_mhz:
        return {"tflops_per_ghz": None, "tflops_at_ref_clock": None, "ref_mhz": ref_mhz}
    return {
        "tflops_per_ghz": tflops / (sm_mhz / 1000.0),
        "tflops_at_ref_clock": tflops * ref_mhz / sm_mhz if ref_mhz else None,
        "ref_mhz": ref_mhz,
    }
