// SmClock: the SM clock of one GPU from NVML, for the self-test's timing (test_fa_fwd_wgmma.cu).
//
// libnvidia-ml.so.1 is opened at run time (dlopen): no NVML header, no link dependency, and a program that runs
// without it (mhz() then returns 0). The device is found by its PCI bus id, which the caller takes from CUDA
// (cudaDeviceGetPCIBusId), since CUDA and NVML number devices each their own way. Host-only C++: the header is
// also compiled by kernels/tools/tests/test_sm_clock.py against a stand-in NVML.
#pragma once

#include <dlfcn.h>

class SmClock {
 public:
  explicit SmClock(const char* pci_bus_id) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    const auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    const auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    const bool ok = init != nullptr && by_bus != nullptr && clock_ != nullptr && init() == kNvmlSuccess &&
                    by_bus(pci_bus_id, &dev_) == kNvmlSuccess;
    if (!ok) clock_ = nullptr;
  }

  // The current SM clock in MHz; 0 without NVML or when the query fails.
  float mhz() const {
    unsigned v = 0;
    return clock_ != nullptr && clock_(dev_, kNvmlClockSm, &v) == kNvmlSuccess ? static_cast<float>(v) : 0.0f;
  }

 private:
  static constexpr int kNvmlSuccess = 0;  // nvmlReturn_t NVML_SUCCESS
  static constexpr int kNvmlClockSm = 1;  // nvmlClockType_t NVML_CLOCK_SM (0 graphics, 2 memory, 3 video)
  int (*clock_)(void*, int, unsigned*) = nullptr;
  void* dev_ = nullptr;
};
