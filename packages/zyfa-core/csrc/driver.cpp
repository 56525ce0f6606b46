// zyfa_core._driver's driver layer: loads the GPU driver at run time, loads kernels, launches them.
//
// Builds with a host C++ compiler only: no CUDA or HIP headers or libraries at build time. At run time it
// dlopens the CUDA driver (libcuda.so.1) or the HIP runtime (libamdhip64.so) and resolves the dozen entry
// points it needs; their types and constants are declared below. A launch hands the argument bytes to the
// driver as the kernel's parameters:
//   the parameters (zyfa_fwd_args, then zyfa_varlen_args, zyfa_tma_maps or the V pre-pass's workspace pointer,
//   as the kernel takes them) are copied into one block, each at the end of the one before rounded up to its
//   alignment, as the kernel's parameter layout has it;
//   CUDA: kernelParams = pointers into that block (the driver copies as many bytes as each parameter has);
//   HIP:  extra = {BUFFER_POINTER, block, BUFFER_SIZE, &size, END}: the block is the kernarg segment.
// Every failure throws DriverFailure naming the kernel, the driver call, and the driver's error name and text.
//
// Environment: ZYFA_BACKEND=cuda|hip restricts which driver is tried; ZYFA_LIBCUDA / ZYFA_LIBAMDHIP64
// give a library path to dlopen instead of the default names (a non-standard install, or a test double).

#include "driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace zyfa_core {

[[noreturn]] void fail(const std::string &kernel, const std::string &call, long code,
                       const std::string &error_name, const std::string &text) {
  DriverFailure f;
  f.kernel = kernel;
  f.call = call;
  f.code = code;
  f.error_name = error_name;
  // Built with strings and std::to_string, never iostreams: where the extension links libstdc++
  // statically (ldd lists none; hundreds of its symbols are defined in the .so), streaming an integer
  // has crashed in the locale facets (SIGSEGV in ostream<<long, seen under cuda-gdb on an H200 host).
  std::string msg;
  if (!kernel.empty()) msg += kernel + ": ";
  msg += call + " failed";
  if (!error_name.empty()) msg += " with " + error_name + " (" + std::to_string(code) + ")";
  if (!text.empty()) msg += ": " + text;
  f.message = msg;
  throw f;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Errors

// ---------------------------------------------------------------------------------------------
// The CUDA driver API subset (types and values as in cuda.h; declared here, see the file header).

using CUresult = int;
using CUdevice = int;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// cuTensorMapEncodeTiled's enums (CUtensorMapDataType, ...Interleave, ...Swizzle, ...L2promotion,
// ...FloatOOBfill); C enums, passed as int.
constexpr int CU_TENSOR_MAP_INTERLEAVE_NONE = 0;
constexpr int CU_TENSOR_MAP_SWIZZLE_128B = 3;
constexpr int CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3;
constexpr int CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;  // out-of-bounds elements read as zero
constexpr unsigned TENSOR_MAP_RANK = 4;               // (d, seq, head, batch), zyfa_abi.h's zyfa_tma_maps

struct CudaApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuMemsetD32Async)(std::uint64_t, unsigned, size_t, CUstream);
  // Optional (CUDA 12.4+): lets us check the kernel's parameter sizes against the ABI bytes.
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
  // Optional (CUDA 12.0+): needed only to launch TMA kernels, so an older driver still runs the rest.
  CUresult (*cuTensorMapEncodeTiled)(void *map, int data_type, unsigned rank, void *address,
                                     const std::uint64_t *dims, const std::uint64_t *strides, const std::uint32_t *box,
                                     const std::uint32_t *element_strides, int interleave, int swizzle, int l2_promotion,
                                     int oob_fill);
};

// ---------------------------------------------------------------------------------------------
// The HIP runtime subset (types and values as in hip_runtime_api.h for the AMD platform).

using hipError_t = int;
using hipModule_t = void *;
using hipFunction_t = void *;
using hipStream_t = void *;
void *const HIP_LAUNCH_PARAM_BUFFER_POINTER = reinterpret_cast<void *>(0x01);
void *const HIP_LAUNCH_PARAM_BUFFER_SIZE = reinterpret_cast<void *>(0x02);
void *const HIP_LAUNCH_PARAM_END = reinterpret_cast<void *>(0x03);
// hipDeviceProp_t changed layout across ROCm releases; we never read its fields by offset (see
// hip_arch_name), but the buffer must be at least as large as any version's struct.
constexpr size_t HIP_PROPS_BUFFER = 16384;

struct HipApi {
  hipError_t (*hipInit)(unsigned);
  hipError_t (*hipGetDeviceCount)(int *);
  hipError_t (*hipGetDevice)(int *);
  hipError_t (*hipSetDevice)(int);
  hipError_t (*hipDeviceGetName)(char *, int, int);
  hipError_t (*hipGetDeviceProperties)(void *, int);
  hipError_t (*hipModuleLoadData)(hipModule_t *, const void *);
  hipError_t (*hipModuleGetFunction)(hipFunction_t *, hipModule_t, const char *);
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, hipStream_t, void **, void **);
  const char *(*hipGetErrorName)(hipError_t);
  const char *(*hipGetErrorString)(hipError_t);
  hipError_t (*hipDriverGetVersion)(int *);  // optional
};

// ---------------------------------------------------------------------------------------------
// Process-wide state: one backend per process, probed once.

enum class Backend { none, cuda, hip };

struct ModuleEntry {
  void *module = nullptr;
  std::shared_ptr<std::string> image;  // kept alive: HIP may read the image after hipModuleLoadData
};

struct State {
  std::mutex mutex;
  bool probed = false;
  Backend backend = Backend::none;
  std::string library;                // the library that loaded
  std::vector<std::string> attempts;  // "what: why" for each library that did not
  void *handle = nullptr;
  CudaApi cu{};
  HipApi hip{};
  std::map<int, CUcontext> contexts;                          // CUDA primary context per device
  std::map<std::pair<int, std::string>, ModuleEntry> modules;  // (device, file path) -> module
};

// Leaked on purpose: destroying it at exit would race the driver's own teardown.
State &state() {
  static State *s = new State;
  return *s;
}

template <class F>
bool resolve(void *handle, const char *name, F &out, std::string &missing) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (out == nullptr && missing.empty()) missing = name;
  return out != nullptr;
}

std::string dl_error() {
  const char *e = dlerror();
  return e ? e : "unknown dlopen error";
}

// Prefer a copy of the library the process already has (e.g. the HIP runtime inside a torch wheel):
// a second copy would not know the first one's streams.
void *open_library(const std::vector<std::string> &names, std::string &opened, std::string &why) {
  for (const auto &name : names) {
    if (void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      opened = name;
      return h;
    }
  }
  for (const auto &name : names) {
    if (void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      opened = name;
      return h;
    }
    why += (why.empty() ? "" : "; ") + dl_error();
  }
  return nullptr;
}

std::vector<std::string> library_names(const char *env, std::vector<std::string> defaults) {
  const char *override_path = std::getenv(env);
  if (override_path && *override_path) return {override_path};
  return defaults;
}

std::string cuda_error_name(const State &s, CUresult r) {
  const char *name = nullptr;
  if (s.cu.cuGetErrorName && s.cu.cuGetErrorName(r, &name) == 0 && name) return name;
  return "CUDA error " + std::to_string(r);
}

std::string cuda_error_text(const State &s, CUresult r) {
  const char *text = nullptr;
  if (s.cu.cuGetErrorString && s.cu.cuGetErrorString(r, &text) == 0 && text) return text;
  return "unknown CUDA error";
}

std::string hip_error_name(const State &s, hipError_t r) {
  const char *name = s.hip.hipGetErrorName ? s.hip.hipGetErrorName(r) : nullptr;
  return name ? name : "HIP error " + std::to_string(r);
}

std::string hip_error_text(const State &s, hipError_t r) {
  const char *text = s.hip.hipGetErrorString ? s.hip.hipGetErrorString(r) : nullptr;
  return text ? text : "unknown HIP error";
}

// Throws DriverFailure when a driver call returned an error.
void check(const State &s, int result, const std::string &kernel, const char *call) {
  if (result == 0) return;
  if (s.backend == Backend::hip) fail(kernel, call, result, hip_error_name(s, result), hip_error_text(s, result));
  fail(kernel, call, result, cuda_error_name(s, result), cuda_error_text(s, result));
}

bool try_cuda(State &s) {
  const auto names = library_names("ZYFA_LIBCUDA", {"libcuda.so.1"});
  std::string opened, why;
  void *h = open_library(names, opened, why);
  if (!h) {
    s.attempts.push_back("cuda (" + names[0] + "): " + why);
    return false;
  }
  std::string missing;
  auto &c = s.cu;
  resolve(h, "cuInit", c.cuInit, missing);
  resolve(h, "cuDriverGetVersion", c.cuDriverGetVersion, missing);
  resolve(h, "cuDeviceGetCount", c.cuDeviceGetCount, missing);
  resolve(h, "cuDeviceGet", c.cuDeviceGet, missing);
  resolve(h, "cuDeviceGetName", c.cuDeviceGetName, missing);
  resolve(h, "cuDeviceGetAttribute", c.cuDeviceGetAttribute, missing);
  resolve(h, "cuDevicePrimaryCtxRetain", c.cuDevicePrimaryCtxRetain, missing);
  resolve(h, "cuCtxGetCurrent", c.cuCtxGetCurrent, missing);
  resolve(h, "cuCtxSetCurrent", c.cuCtxSetCurrent, missing);
  resolve(h, "cuModuleLoadData", c.cuModuleLoadData, missing);
  resolve(h, "cuModuleGetFunction", c.cuModuleGetFunction, missing);
  resolve(h, "cuFuncSetAttribute", c.cuFuncSetAttribute, missing);
  resolve(h, "cuLaunchKernel", c.cuLaunchKernel, missing);
  resolve(h, "cuGetErrorName", c.cuGetErrorName, missing);
  resolve(h, "cuGetErrorString", c.cuGetErrorString, missing);
  resolve(h, "cuMemsetD32Async", c.cuMemsetD32Async, missing);
  c.cuFuncGetParamInfo = reinterpret_cast<decltype(c.cuFuncGetParamInfo)>(dlsym(h, "cuFuncGetParamInfo"));
  c.cuTensorMapEncodeTiled = reinterpret_cast<decltype(c.cuTensorMapEncodeTiled)>(dlsym(h, "cuTensorMapEncodeTiled"));
  if (!missing.empty()) {
    s.attempts.push_back("cuda (" + opened + "): missing symbol " + missing);
    s.cu = CudaApi{};
    dlclose(h);
    return false;
  }
  int count = 0;
  CUresult r = c.cuInit(0);
  if (r == 0) r = c.cuDeviceGetCount(&count);
  if (r != 0 || count == 0) {
    s.attempts.push_back("cuda (" + opened + "): " +
                         (r != 0 ? "cuInit: " + cuda_error_name(s, r) + ": " + cuda_error_text(s, r)
                                 : std::string("no CUDA devices")));
    s.cu = CudaApi{};
    dlclose(h);
    return false;
  }
  s.handle = h;
  s.library = opened;
  return true;
}

bool try_hip(State &s) {
  const auto names = library_names(
      "ZYFA_LIBAMDHIP64", {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so"});
  std::string opened, why;
  void *h = open_library(names, opened, why);
  if (!h) {
    s.attempts.push_back("hip (" + names[0] + "): " + why);
    return false;
  }
  std::string missing;
  auto &p = s.hip;
  resolve(h, "hipInit", p.hipInit, missing);
  resolve(h, "hipGetDeviceCount", p.hipGetDeviceCount, missing);
  resolve(h, "hipGetDevice", p.hipGetDevice, missing);
  resolve(h, "hipSetDevice", p.hipSetDevice, missing);
  resolve(h, "hipDeviceGetName", p.hipDeviceGetName, missing);
  resolve(h, "hipModuleLoadData", p.hipModuleLoadData, missing);
  resolve(h, "hipModuleGetFunction", p.hipModuleGetFunction, missing);
  resolve(h, "hipModuleLaunchKernel", p.hipModuleLaunchKernel, missing);
  resolve(h, "hipGetErrorName", p.hipGetErrorName, missing);
  resolve(h, "hipGetErrorString", p.hipGetErrorString, missing);
  // ROCm 6 renamed the entry point with the new struct layout; older releases have only the plain one.
  p.hipGetDeviceProperties = reinterpret_cast<decltype(p.hipGetDeviceProperties)>(dlsym(h, "hipGetDevicePropertiesR0600"));
  if (!p.hipGetDeviceProperties) resolve(h, "hipGetDeviceProperties", p.hipGetDeviceProperties, missing);
  p.hipDriverGetVersion = reinterpret_cast<decltype(p.hipDriverGetVersion)>(dlsym(h, "hipDriverGetVersion"));
  if (!missing.empty()) {
    s.attempts.push_back("hip (" + opened + "): missing symbol " + missing);
    s.hip = HipApi{};
    dlclose(h);
    return false;
  }
  s.backend = Backend::hip;  // so that error names come from HIP below
  int count = 0;
  hipError_t r = p.hipInit(0);
  if (r == 0) r = p.hipGetDeviceCount(&count);
  if (r != 0 || count == 0) {
    s.attempts.push_back("hip (" + opened + "): " +
                         (r != 0 ? "hipInit: " + hip_error_name(s, r) + ": " + hip_error_text(s, r)
                                 : std::string("no HIP devices")));
    s.backend = Backend::none;
    s.hip = HipApi{};
    dlclose(h);
    return false;
  }
  s.handle = h;
  s.library = opened;
  return true;
}

// Loads a driver once per process. Never throws: failures are recorded in `attempts`.
State &probed_state() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.probed) return s;
  s.probed = true;
  const char *want_env = std::getenv("ZYFA_BACKEND");
  const std::string want = want_env ? want_env : "";
  if (!want.empty() && want != "cuda" && want != "hip") {
    s.attempts.push_back("ZYFA_BACKEND=" + want + ": must be 'cuda', 'hip' or unset");
    return s;
  }
  if (want != "hip" && try_cuda(s)) {
    s.backend = Backend::cuda;
  } else if (want != "cuda" && try_hip(s)) {
    s.backend = Backend::hip;
  }
  return s;
}

std::string attempts_text(const State &s) {
  std::string text;
  for (const auto &a : s.attempts) text += (text.empty() ? "" : "; ") + a;
  return text.empty() ? "nothing tried" : text;
}

// The loaded backend; throws DriverFailure (naming every library tried, and why) when none loaded.
State &ready_state(const std::string &kernel) {
  State &s = probed_state();
  if (s.backend == Backend::none) fail(kernel, "load GPU driver", 0, "", "no GPU driver could be used: " + attempts_text(s));
  return s;
}

void check_device(State &s, int device) {
  int count = 0;
  check(s, s.backend == Backend::cuda ? s.cu.cuDeviceGetCount(&count) : s.hip.hipGetDeviceCount(&count), "",
        s.backend == Backend::cuda ? "cuDeviceGetCount" : "hipGetDeviceCount");
  if (device < 0 || device >= count) {
    throw ArgumentError("device index " + std::to_string(device) + " out of range: " + std::to_string(count) +
                        " device(s) present");
  }
}

// ---------------------------------------------------------------------------------------------
// Making a device current for the duration of a call, and restoring what was current before, so
// that we never disturb the caller's (e.g. PyTorch's) choice of device.

CUcontext cuda_context(State &s, int device, const std::string &kernel) {
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.contexts.find(device);
  if (it != s.contexts.end()) return it->second;
  CUdevice dev = 0;
  check(s, s.cu.cuDeviceGet(&dev, device), kernel, "cuDeviceGet");
  CUcontext ctx = nullptr;
  // The primary context is the one the CUDA runtime (and so PyTorch) uses: pointers and streams match.
  check(s, s.cu.cuDevicePrimaryCtxRetain(&ctx, dev), kernel, "cuDevicePrimaryCtxRetain");
  s.contexts[device] = ctx;
  return ctx;
}

class DeviceScope {
 public:
  DeviceScope(State &s, int device, const std::string &kernel) : s_(s) {
    if (s.backend == Backend::cuda) {
      CUcontext ctx = cuda_context(s, device, kernel);
      check(s, s.cu.cuCtxGetCurrent(&previous_ctx_), kernel, "cuCtxGetCurrent");
      if (previous_ctx_ != ctx) {
        check(s, s.cu.cuCtxSetCurrent(ctx), kernel, "cuCtxSetCurrent");
        changed_ = true;
      }
    } else {
      check(s, s.hip.hipGetDevice(&previous_device_), kernel, "hipGetDevice");
      if (previous_device_ != device) {
        check(s, s.hip.hipSetDevice(device), kernel, "hipSetDevice");
        changed_ = true;
      }
    }
  }
  ~DeviceScope() {
    if (!changed_) return;  // restoring is best effort: a destructor cannot report failure
    if (s_.backend == Backend::cuda) {
      s_.cu.cuCtxSetCurrent(previous_ctx_);
    } else {
      s_.hip.hipSetDevice(previous_device_);
    }
  }
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;

 private:
  State &s_;
  bool changed_ = false;
  CUcontext previous_ctx_ = nullptr;
  int previous_device_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Kernels

std::shared_ptr<std::string> read_file(const std::string &path, const std::string &kernel) {
  std::FILE *in = std::fopen(path.c_str(), "rb");  // C stdio, no iostreams (see `fail`)
  if (in == nullptr) fail(kernel, "open", errno, "", path + ": " + std::strerror(errno));
  auto image = std::make_shared<std::string>();
  char chunk[1 << 16];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), in)) > 0;) image->append(chunk, n);
  const bool failed = std::ferror(in) != 0;
  std::fclose(in);
  if (failed) fail(kernel, "read", errno, "", path + ": " + std::strerror(errno));
  if (image->empty()) fail(kernel, "read", 0, "", path + ": empty code object");
  return image;
}

void *load_module(State &s, int device, const std::string &path, const std::string &kernel) {
  const auto key = std::make_pair(device, path);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.modules.find(key);
    if (it != s.modules.end()) return it->second.module;
  }
  ModuleEntry entry;
  entry.image = read_file(path, kernel);
  if (s.backend == Backend::cuda) {
    check(s, s.cu.cuModuleLoadData(&entry.module, entry.image->data()), kernel, "cuModuleLoadData");
  } else {
    check(s, s.hip.hipModuleLoadData(&entry.module, entry.image->data()), kernel, "hipModuleLoadData");
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  // Another thread may have loaded the same file meanwhile; keep the first (a module is never unloaded).
  return s.modules.emplace(key, entry).first->second.module;
}

// Asks for up to `bytes` dynamic shared memory; CUDA needs this opt-in above 48 KiB.
}  // namespace

void set_max_dynamic_smem(Kernel &k, int bytes) {
  State &s = ready_state(k.name);
  if (s.backend != Backend::cuda || bytes <= k.max_dynamic_smem) return;
  DeviceScope scope(s, k.device, k.name);
  check(s, s.cu.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes), k.name,
        "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  k.max_dynamic_smem = bytes;
}

namespace {

std::string parameters_text(const size_t *sizes, size_t count) {
  static const char *const counts[] = {"no", "one", "two", "three"};
  std::string text =
      std::string(counts[std::min<size_t>(count, 3)]) + (count == 1 ? " parameter of " : " parameters of ");
  for (size_t i = 0; i < count; ++i) {
    text += (i == 0 ? "" : i + 1 == count ? " and " : ", ") + std::to_string(sizes[i]);
  }
  return text + " bytes";
}

// Throws the "ABI mismatch" DriverFailure unless the launch's parameter sizes match what cuFuncGetParamInfo
// reported; no check when that is unknown.
void check_parameters(const Kernel &k, const size_t *sizes, size_t count) {
  const std::vector<size_t> &want = k.param_sizes;
  if (want.empty() || (count == want.size() && std::equal(want.begin(), want.end(), sizes))) return;
  fail(k.name, "launch", 0, "",
       "the kernel takes " + parameters_text(want.data(), want.size()) + " but the launch passes " +
           parameters_text(sizes, count) +
           " (ABI mismatch between the code object and zyfa_core, or a manifest 'loads' that is wrong)");
}

}  // namespace

// The launch itself, for the launch plan (plan.cpp). Throws DriverFailure for a parameter mismatch with the
// kernel's declared parameters or a failing driver call.
void launch_params(const Kernel &k, const unsigned grid[3], const unsigned block[3], unsigned smem, void *stream,
                   const KernelParams &params) {
  State &s = state();  // a Kernel exists only once a backend has loaded; no need for the probe lock
  if (params.count == 0) {
    fail(k.name, "launch", 0, "", "no parameters: a kernel takes 1 to " + std::to_string(MAX_PARAMS));
  }
  // The parameter block, laid out as the kernel's: one buffer serves both backends (CUDA's parameters point
  // into it, so a 64-byte aligned __grid_constant__ zyfa_tma_maps has an aligned host copy; HIP takes it
  // whole as the kernarg segment).
  alignas(TENSOR_MAP_ALIGN) unsigned char buffer[MAX_ARGS_BYTES];
  void *pointers[MAX_PARAMS] = {};
  size_t sizes[MAX_PARAMS] = {};
  size_t end = 0;
  for (size_t i = 0; i < params.count; ++i) {
    const KernelParam &p = params.items[i];
    if (p.align == 0 || p.align > TENSOR_MAP_ALIGN || (p.align & (p.align - 1)) != 0) {
      fail(k.name, "launch", 0, "", "parameter alignment " + std::to_string(p.align) +
                                        " is not a power of two up to " + std::to_string(TENSOR_MAP_ALIGN));
    }
    const size_t offset = (end + p.align - 1) / p.align * p.align;
    if (p.size > MAX_ARGS_BYTES || offset + p.size > MAX_ARGS_BYTES) {
      fail(k.name, "launch", 0, "", "kernel parameters of " + std::to_string(offset + p.size) +
                                        " bytes or more exceed " + std::to_string(MAX_ARGS_BYTES));
    }
    std::memset(buffer + end, 0, offset - end);
    std::memcpy(buffer + offset, p.bytes, p.size);
    pointers[i] = buffer + offset;
    sizes[i] = p.size;
    end = offset + p.size;
  }
  check_parameters(k, sizes, params.count);
  DeviceScope scope(s, k.device, k.name);
  if (s.backend == Backend::cuda) {
    check(s,
          s.cu.cuLaunchKernel(k.function, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                              static_cast<CUstream>(stream), pointers, nullptr),
          k.name, "cuLaunchKernel");
    return;
  }
  size_t segment_size = end;
  void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, buffer, HIP_LAUNCH_PARAM_BUFFER_SIZE, &segment_size,
                   HIP_LAUNCH_PARAM_END};
  check(s,
        s.hip.hipModuleLaunchKernel(k.function, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                                    static_cast<hipStream_t>(stream), nullptr, extra),
        k.name, "hipModuleLaunchKernel");
}

void clear_u32(const Kernel &k, std::uint64_t address, size_t count, void *stream) {
  State &s = state();
  if (s.backend != Backend::cuda) {
    fail(k.name, "clear_u32", 0, "", "a work counter is cleared on CUDA only (no HIP kernel takes grid dynamic)");
  }
  DeviceScope scope(s, k.device, k.name);
  check(s, s.cu.cuMemsetD32Async(address, 0u, count, static_cast<CUstream>(stream)), k.name, "cuMemsetD32Async");
}

namespace {

// Reads the sizes of the kernel's first `expected` parameters into `k.param_sizes`, which stays empty
// ("unknown") without cuFuncGetParamInfo. Only indices below `expected` are queried: a query past the last
// parameter is a failing driver call, which compute-sanitizer reports as an error on every load. A kernel with
// fewer parameters than expected gets its true count, and the launch refuses it as an ABI mismatch; an extra
// parameter cannot be seen this way (the manifest's SHA-256 of the code object guards against a kernel built
// from other sources).
void cuda_param_info(State &s, Kernel &k, size_t expected) {
  if (!s.cu.cuFuncGetParamInfo) return;
  for (size_t i = 0; i < expected; ++i) {
    size_t offset = 0, size = 0;
    // A failing first query (old driver, unsupported module) just means "unknown"; the launch works.
    if (s.cu.cuFuncGetParamInfo(k.function, i, &offset, &size) != 0) return;
    k.param_sizes.push_back(size);
  }
}

}  // namespace

Kernel load_kernel(int device, const std::string &path, const std::string &name, int dynamic_smem,
                   size_t params) {
  State &s = ready_state(name);
  Kernel k;
  k.name = name;
  k.path = path;
  k.device = device;
  {
    check_device(s, device);
    DeviceScope scope(s, device, name);
    void *module = load_module(s, device, path, name);
    if (s.backend == Backend::cuda) {
      check(s, s.cu.cuModuleGetFunction(&k.function, module, name.c_str()), name, "cuModuleGetFunction");
      cuda_param_info(s, k, params);
    } else {
      check(s, s.hip.hipModuleGetFunction(&k.function, module, name.c_str()), name, "hipModuleGetFunction");
    }
  }
  if (dynamic_smem > 48 * 1024) set_max_dynamic_smem(k, dynamic_smem);
  return k;
}

// ---------------------------------------------------------------------------------------------
// TMA tensor maps (zyfa_abi.h's zyfa_tma_maps): cuTensorMapEncodeTiled with ZYFA's fixed choices.

// Encodes one rank-4 map into `map_out` (128 bytes, 64-byte aligned). `kernel` only names the error.
// Throws DriverFailure: no CUDA backend, a driver without cuTensorMapEncodeTiled, or the call failing.
void encode_map(void *map_out, int data_type, const void *address, const std::uint64_t dims[4],
                const std::uint64_t strides[3], const std::uint32_t box[4], const std::string &kernel) {
  const char *call = "cuTensorMapEncodeTiled";
  State &s = ready_state(kernel);
  if (s.backend != Backend::cuda) {
    fail(kernel, call, 0, "", "TMA tensor maps exist only on CUDA; the loaded backend is HIP (" + s.library + ")");
  }
  if (s.cu.cuTensorMapEncodeTiled == nullptr) {
    fail(kernel, call, 0, "",
         "the CUDA driver " + s.library + " has no cuTensorMapEncodeTiled (needs a CUDA 12 driver); TMA kernels "
         "cannot launch with it");
  }
  if (reinterpret_cast<std::uintptr_t>(map_out) % TENSOR_MAP_ALIGN != 0) {
    fail(kernel, call, 0, "", "the map buffer must be 64-byte aligned");
  }
  const std::uint32_t element_strides[4] = {1, 1, 1, 1};
  check(s,
        s.cu.cuTensorMapEncodeTiled(map_out, data_type, TENSOR_MAP_RANK, const_cast<void *>(address), dims, strides,
                                    box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        kernel, call);
}

// ---------------------------------------------------------------------------------------------
// Queries

ProbeReport probe() {
  const State &s = probed_state();
  ProbeReport r;
  r.backend = s.backend == Backend::cuda ? "cuda" : s.backend == Backend::hip ? "hip" : "";
  r.library = s.library;
  r.attempts = s.attempts;
  return r;
}

bool backend_is_cuda() { return ready_state("").backend == Backend::cuda; }

int device_count() {
  State &s = ready_state("");
  int count = 0;
  if (s.backend == Backend::cuda) {
    check(s, s.cu.cuDeviceGetCount(&count), "", "cuDeviceGetCount");
  } else {
    check(s, s.hip.hipGetDeviceCount(&count), "", "hipGetDeviceCount");
  }
  return count;
}

namespace {

// The gfx target name, e.g. "gfx950:sramecc+:xnack-". hipDeviceProp_t's layout differs between ROCm
// releases, so rather than trust one version's offset we find the one string field that holds a gfx
// target name (gcnArchName; `name` holds the marketing name).
std::string hip_arch_name(const unsigned char *props, size_t size) {
  for (size_t i = 0; i + 4 < size; ++i) {
    if (std::memcmp(props + i, "gfx", 3) != 0 || props[i + 3] < '0' || props[i + 3] > '9') continue;
    if (i > 0 && props[i - 1] >= 0x20 && props[i - 1] < 0x7f) continue;  // starts a string, not inside one
    size_t end = i;
    while (end < size && props[end] != 0 && end - i < 255) ++end;
    return std::string(reinterpret_cast<const char *>(props + i), end - i);
  }
  return "";
}

DeviceProperties cuda_properties(State &s, int device) {
  CUdevice dev = 0;
  check(s, s.cu.cuDeviceGet(&dev, device), "", "cuDeviceGet");
  char name[256] = {0};
  check(s, s.cu.cuDeviceGetName(name, sizeof(name) - 1, dev), "", "cuDeviceGetName");
  auto attribute = [&](int which, const char *what) {
    int value = 0;
    check(s, s.cu.cuDeviceGetAttribute(&value, which, dev), "", what);
    return value;
  };
  DeviceProperties p;
  check(s, s.cu.cuDriverGetVersion(&p.driver_version), "", "cuDriverGetVersion");
  p.name = name;
  p.major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  p.minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  p.multiprocessors =
      attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  p.max_shared_memory_per_block_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                                  "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  return p;
}

DeviceProperties hip_properties(State &s, int device) {
  char name[256] = {0};
  check(s, s.hip.hipDeviceGetName(name, sizeof(name) - 1, device), "", "hipDeviceGetName");
  std::vector<unsigned char> props(HIP_PROPS_BUFFER, 0);
  check(s, s.hip.hipGetDeviceProperties(props.data(), device), "", "hipGetDeviceProperties");
  DeviceProperties p;
  if (s.hip.hipDriverGetVersion) check(s, s.hip.hipDriverGetVersion(&p.driver_version), "", "hipDriverGetVersion");
  p.name = name;
  p.gcn_arch_name = hip_arch_name(props.data(), props.size());
  return p;
}

}  // namespace

DeviceProperties device_properties(int device) {
  State &s = ready_state("");
  check_device(s, device);
  return s.backend == Backend::cuda ? cuda_properties(s, device) : hip_properties(s, device);
}

}  // namespace zyfa_core
