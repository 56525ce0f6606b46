"""kernels/sm90/sm_clock.h (the self-test's SM clock from NVML) against a stand-in libnvidia-ml.so.1.

The header opens NVML at run time and names its symbols as strings, so a wrong name or argument order would
only show on the device, as a silent "bench clock n/a". Here a C stand-in library with NVML's names and
signatures (NVML API reference: nvmlInit_v2(void), nvmlDeviceGetHandleByPciBusId_v2(const char*,
nvmlDevice_t*), nvmlDeviceGetClockInfo(nvmlDevice_t, nvmlClockType_t, unsigned int*); NVML_CLOCK_SM = 1,
NVML_SUCCESS = 0) answers 1755 MHz for the SM clock of one bus id and an error for anything else; a small
host program built from the header must read 1755 for that bus id and 0 for another (and 0 without any
libnvidia-ml, where the machine has none).
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

FAKE_NVML = r"""
#include <string.h>
static int inited = 0;
static int device = 42;
int nvmlInit_v2(void) { inited = 1; return 0; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** dev) {
  if (!inited || strcmp(bus, "00000000:19:00.0") != 0) return 6;  /* NVML_ERROR_NOT_FOUND */
  *dev = &device;
  return 0;
}
int nvmlDeviceGetClockInfo(void* dev, int type, unsigned* mhz) {
  if (dev != &device) return 2;  /* NVML_ERROR_INVALID_ARGUMENT */
  if (type != 1) return 3;        /* only NVML_CLOCK_SM is answered */
  *mhz = 1755;
  return 0;
}
"""

PROGRAM = r"""
#include <cstdio>
#include "sm90/sm_clock.h"
int main(int argc, char** argv) {
  std::printf("%.0f\n", SmClock(argv[1]).mhz());
  return 0;
}
"""


@pytest.mark.skipif(not (shutil.which("cc") and shutil.which("c++")), reason="needs a C and a C++ compiler")
def test_sm_clock_reads_nvml(tmp_path: Path) -> None:
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    (tmp_path / "nvml.c").write_text(FAKE_NVML)
    (tmp_path / "main.cpp").write_text(PROGRAM)
    fake = lib_dir / "libnvidia-ml.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", str(tmp_path / "nvml.c"), "-o", str(fake)], check=True)
    exe = tmp_path / "clock"
    cxx = ["c++", "-std=c++17", f"-I{REPO / 'kernels'}"]
    subprocess.run([*cxx, str(tmp_path / "main.cpp"), "-o", str(exe), "-ldl"], check=True)

    def run(bus: str, with_lib: bool) -> str:
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir) if with_lib else ""}
        done = subprocess.run([str(exe), bus], env=env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    assert run("00000000:19:00.0", True) == "1755"
    assert run("00000000:1a:00.0", True) == "0"  # another device: no handle, no clock
    if ctypes.util.find_library("nvidia-ml") is None:  # a GPU machine's own NVML would answer
        assert run("00000000:19:00.0", False) == "0"  # no NVML at all
