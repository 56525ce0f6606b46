// The GPU driver layer of zyfa_core._driver (driver.cpp), shared by the launch plan (plan.cpp) and the
// Python module (module.cpp): no pybind11 and no torch here, so every caller sees plain C++.
//
// Every driver failure throws DriverFailure (kernel, driver call, error name and code, message); a bad
// argument throws ArgumentError (Python sees ValueError or TypeError). Nothing here takes the GIL:
// Python callers release it around these calls.

#ifndef ZYFA_CORE_DRIVER_H
#define ZYFA_CORE_DRIVER_H

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace zyfa_core {

struct DriverFailure : std::exception {
  std::string message, kernel, call, error_name;
  long code = 0;
  const char *what() const noexcept override { return message.c_str(); }
};

// A refused argument: ValueError (or TypeError when `type_error`) with `message`.
struct ArgumentError : std::exception {
  std::string message;
  bool type_error = false;
  explicit ArgumentError(std::string m, bool type = false) : message(std::move(m)), type_error(type) {}
  const char *what() const noexcept override { return message.c_str(); }
};

[[noreturn]] void fail(const std::string &kernel, const std::string &call, long code, const std::string &error_name,
                       const std::string &text);

constexpr size_t TENSOR_MAP_BYTES = 128;  // sizeof(CUtensorMap)
constexpr size_t TENSOR_MAP_ALIGN = 64;   // CUtensorMap is 64-byte aligned
constexpr size_t MAX_ARGS_BYTES = 4096;   // CUDA's classic kernel-parameter limit
constexpr size_t MAX_PARAMS = 3;          // zyfa_fwd_args, zyfa_varlen_args, zyfa_tma_maps

// cuTensorMapEncodeTiled element types (CUtensorMapDataType).
constexpr int TENSOR_MAP_U8 = 0;
constexpr int TENSOR_MAP_BF16 = 9;

// What the probe found: "cuda", "hip" or "" (none), the library that loaded, and why each other did not.
struct ProbeReport {
  std::string backend, library;
  std::vector<std::string> attempts;
};

// Driver-reported properties of one device (CUDA fills the first five, HIP gcn_arch_name).
struct DeviceProperties {
  std::string name, gcn_arch_name;
  int major = 0, minor = 0, multiprocessors = 0, max_shared_memory_per_block_optin = 0, driver_version = 0;
};

// A loaded kernel function on one device (its module cached per device and file, never unloaded).
struct Kernel {
  std::string name;
  std::string path;
  int device = 0;
  void *function = nullptr;
  // CUDA with cuFuncGetParamInfo: the sizes of the kernel's parameters, as many of the expected ones as it
  // has (zyfa_fwd_args first); else empty (unknown).
  std::vector<size_t> param_sizes;
  int max_dynamic_smem = 0;
};

ProbeReport probe();  // loads a driver once per process; never throws
bool backend_is_cuda();  // the loaded backend is CUDA (throws DriverFailure when none loaded)
int device_count();
DeviceProperties device_properties(int device);

// Loads `name` from the code object at `path` on `device`; raises its dynamic shared memory limit to
// `dynamic_smem` on CUDA when above 48 KiB. `params` is the number of parameters the launch will pass (1 to
// MAX_PARAMS: kernels/abi/zyfa_abi.h lists each kernel's); on CUDA their sizes are read for the launch's ABI check.
Kernel load_kernel(int device, const std::string &path, const std::string &name, int dynamic_smem, size_t params);
void set_max_dynamic_smem(Kernel &k, int bytes);

// One kernel parameter: the host bytes of its value, its size, and its type's alignment (a power of two up to
// TENSOR_MAP_ALIGN).
struct KernelParam {
  const void *bytes;
  size_t size;
  size_t align;
};

// A launch's parameters in the kernel's order, at most MAX_PARAMS (a fixed array: no allocation per launch).
struct KernelParams {
  KernelParam items[MAX_PARAMS] = {};
  size_t count = 0;

  KernelParams(std::initializer_list<KernelParam> first) {
    for (const KernelParam &p : first) add(p);
  }
  void add(const KernelParam &p) {
    if (count == MAX_PARAMS) throw std::length_error("a kernel launch takes at most MAX_PARAMS parameters");
    items[count++] = p;
  }
};

// Launches `k` with `params` (1 to MAX_PARAMS, in the kernel's order). They are laid out as the kernel's
// parameter block has them: each at the end of the one before rounded up to its alignment (zyfa_varlen_args at
// 192, zyfa_tma_maps at the next multiple of 64). CUDA takes pointers into that block, HIP the block itself as
// the kernarg segment. The bytes must stay readable until the call returns (the driver copies them).
void launch_params(const Kernel &k, const unsigned grid[3], const unsigned block[3], unsigned smem, void *stream,
                   const KernelParams &params);

// Sets `count` 32-bit words at device address `address` to 0 on `stream` (cuMemsetD32Async, in stream order
// before the next launch), on `k`'s device; CUDA only. Throws DriverFailure.
void clear_u32(const Kernel &k, std::uint64_t address, size_t count, void *stream);

// cuTensorMapEncodeTiled of a rank-4 tensor (zyfa_abi.h's zyfa_tma_maps): map_out 128 bytes, 64-byte
// aligned; strides in bytes; 128-byte swizzle, 256-byte L2 promotion, zero fill. `kernel` names errors.
void encode_map(void *map_out, int data_type, const void *address, const std::uint64_t dims[4],
                const std::uint64_t strides[3], const std::uint32_t box[4], const std::string &kernel);

}  // namespace zyfa_core

#endif  // ZYFA_CORE_DRIVER_H
