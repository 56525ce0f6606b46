// zyfa._C: the CUDA/ROCm hot path of the op zyfa::fwd, in C++ (issue 6: host overhead).
//
// The op's schema lives in Python (zyfa/_ops.py, torch.library.define); this file only adds kernels
// for it, after Python has defined it:
//   CUDA          check the tensors and scalars (as zyfa/_validate.py does, same exception types and
//                 messages), allocate out/lse, fill the ABI struct (kernels/abi/zyfa_abi.h), launch on
//                 torch's current stream through zyfa_core._driver's C entry point zyfa_driver_launch;
//                 a kernel whose manifest row says "loads": "tma" also gets the ABI's zyfa_tma_maps,
//                 encoded per call (zyfa_driver_encode_tensor_map) and passed by zyfa_driver_launch2.
//   AutogradCUDA  no grad needed: straight to the CUDA kernel; else the same under an autograd node
//                 whose backward raises (the op is forward-only), as the Python registration does.
// ROCm builds of torch report HIP devices as CUDA, so the same kernels serve them.
//
// Built against torch's headers only: no CUDA/HIP headers or libraries. The stream comes from torch's
// device-generic stream API, and the launch goes through a function pointer that zyfa_core hands over.
// Kernel lookup: a small cache keyed by (device, dtype, d_qk, d_v, causal, p_mode, $ZYFA_KERNEL_DIR);
// a miss calls the Python resolver zyfa/_ops.py registers (`set_resolver`) once, with the GIL, which
// selects and loads the kernel through zyfa_core; a hit touches no Python. An entry holds what the
// launch needs, the grid mode and (persistent grid) the device's multiprocessor count included, and for
// a TMA kernel its tile_n and the encode and two-parameter launch entries.

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "zyfa_abi.h"

namespace py = pybind11;

// zyfa_core._driver's C entry point (packages/zyfa-core/csrc/driver.cpp). Its version and the size
// of the error struct come from zyfa_core with every kernel and are checked against these.
extern "C" {
struct zyfa_driver_error {
  long code;
  char kernel[128];
  char call[128];
  char error_name[64];
  char message[1024];
};
using zyfa_driver_launch_fn = int (*)(const void *kernel, const unsigned *grid, const unsigned *block, unsigned smem,
                                      void *stream, const void *args, size_t size, zyfa_driver_error *error);
// map_out: 128 bytes, 64-byte aligned; dtype 0 = one-byte elements (e4m3fn), 1 = bf16; dims 4, strides 3
// (bytes), box 4, as zyfa_abi.h's comment above zyfa_tma_maps specifies.
using zyfa_driver_encode_fn = int (*)(void *map_out, int dtype, const void *address, const unsigned long long *dims,
                                      const unsigned long long *strides, const unsigned *box,
                                      zyfa_driver_error *error);
// zyfa_driver_launch with a second kernel parameter (`second`, `second_size` bytes) after `args`.
using zyfa_driver_launch2_fn = int (*)(const void *kernel, const unsigned *grid, const unsigned *block,
                                       unsigned smem, void *stream, const void *args, size_t size,
                                       const void *second, size_t second_size, zyfa_driver_error *error);
}

static_assert(alignof(zyfa_tma_maps) == 64 && offsetof(zyfa_tma_maps, k) == 128 &&
                  offsetof(zyfa_tma_maps, v) == 256 && offsetof(zyfa_tma_maps, valid) == 384,
              "zyfa_tma_maps: the layout zyfa_abi.h documents");

namespace zyfa {
namespace {

constexpr int kLaunchAbi = 1;
constexpr int64_t kAlignBytes = 16;  // 16-byte vector loads: pointers and batch/seq/head strides
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// heads_q and batch are the tile grid's y and z. A persistent kernel has no such limit, but the op keeps
// it for every kernel and device, as zyfa/_validate.py does, so a call fails alike on CPU and GPU.
constexpr int64_t kGridYZMax = 65535;
constexpr const char *kForwardOnly =
    "zyfa::fwd is forward-only (inference prefill): it has no backward. Use "
    "torch.nn.functional.scaled_dot_product_attention or flash-attn for training.";

using at::Tensor;
using OptionalStr = std::optional<c10::string_view>;

// ------------------------------------------------------------------------------------------------
// Formatting as Python prints (the messages match zyfa/_validate.py's)

// Integers are formatted with std::to_string, never streamed: on the H200 image the extensions link
// libstdc++ statically, and streaming an integer crashed there in the locale facets (SIGSEGV in
// ostream<<long, 2026-12-01; see zyfa_core's driver.cpp `fail`). So every message argument is a string.
std::string num(int64_t value) { return std::to_string(value); }

std::string tuple_str(c10::IntArrayRef values) {
  std::string s = "(";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + num(values[i]);
  s += values.size() == 1 ? ",)" : ")";
  return s;
}

std::string dtype_str(at::ScalarType t) {  // str(torch.<dtype>)
  using T = at::ScalarType;
  switch (t) {
    case T::BFloat16: return "torch.bfloat16";
    case T::Float8_e4m3fn: return "torch.float8_e4m3fn";
    case T::Float8_e5m2: return "torch.float8_e5m2";
    case T::Float8_e4m3fnuz: return "torch.float8_e4m3fnuz";
    case T::Float8_e5m2fnuz: return "torch.float8_e5m2fnuz";
    case T::Half: return "torch.float16";
    case T::Float: return "torch.float32";
    case T::Double: return "torch.float64";
    case T::Byte: return "torch.uint8";
    case T::Char: return "torch.int8";
    case T::Short: return "torch.int16";
    case T::Int: return "torch.int32";
    case T::Long: return "torch.int64";
    case T::Bool: return "torch.bool";
    case T::ComplexHalf: return "torch.complex32";
    case T::ComplexFloat: return "torch.complex64";
    case T::ComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(t);
  }
}

std::string float_str(double x) {  // Python's repr of a float for the usual values: shortest round trip
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, x);
    if (std::strtod(buffer, nullptr) == x) break;
  }
  std::string s(buffer);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// ------------------------------------------------------------------------------------------------
// Validation: zyfa/_validate.py's check_tensors, check_p_mode and check_scalars, in that order.

struct Dims {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, d_qk, d_v;
};

bool is_fp8(const Tensor &x) { return x.scalar_type() == at::ScalarType::Float8_e4m3fn; }

void check_dtypes(const Tensor &q, const Tensor &k, const Tensor &v) {
  const auto t = q.scalar_type();
  TORCH_CHECK_TYPE(t == at::ScalarType::BFloat16 || t == at::ScalarType::Float8_e4m3fn, "zyfa: q has dtype ",
                   dtype_str(t), "; supported are torch.bfloat16 and torch.float8_e4m3fn");
  TORCH_CHECK_TYPE(k.scalar_type() == t && v.scalar_type() == t, "zyfa: q, k, v must share one dtype; got ",
                   dtype_str(t), ", ", dtype_str(k.scalar_type()), ", ", dtype_str(v.scalar_type()));
}

Dims check_shapes(const Tensor &q, const Tensor &k, const Tensor &v) {
  const int64_t batch = q.size(0), seqlen_q = q.size(1), heads_q = q.size(2), d_qk = q.size(3);
  const int64_t bk = k.size(0), seqlen_k = k.size(1), heads_kv = k.size(2), dk = k.size(3);
  const int64_t bv = v.size(0), seqlen_v = v.size(1), heads_v = v.size(2), d_v = v.size(3);
  TORCH_CHECK_VALUE(batch == bk && bk == bv, "zyfa: batch sizes differ: q ", num(batch), ", k ", num(bk), ", v ", num(bv));
  TORCH_CHECK_VALUE(seqlen_k == seqlen_v, "zyfa: k and v need the same seqlen_k; got ", num(seqlen_k), " and ",
                    num(seqlen_v));
  TORCH_CHECK_VALUE(heads_kv == heads_v, "zyfa: k and v need the same number of heads; got ", num(heads_kv),
                    " and ", num(heads_v));
  TORCH_CHECK_VALUE(heads_q >= 1 && heads_kv >= 1 && heads_q % heads_kv == 0, "zyfa: heads_q (", num(heads_q),
                    ") must be a positive multiple of heads_kv (", num(heads_kv), ") (MHA, GQA or MQA)");
  TORCH_CHECK_VALUE(dk == d_qk, "zyfa: q and k need the same head_dim; got ", num(d_qk), " and ", num(dk));
  const bool supported = (d_qk == 128 && d_v == 128) || (d_qk == 192 && d_v == 128);
  TORCH_CHECK_VALUE(supported, "zyfa: head dims (d_qk=", num(d_qk), ", d_v=", num(d_v),
                    ") are not supported; supported (d_qk, d_v): (128, 128), (192, 128)");
  TORCH_CHECK_VALUE(heads_q <= kGridYZMax && batch <= kGridYZMax, "zyfa: heads_q (", num(heads_q), ") and batch (",
                    num(batch), ") must each be <= ", num(kGridYZMax));
  for (const auto &[name, x] : {std::pair<const char *, const Tensor &>{"q", q}, {"k", k}, {"v", v}}) {
    int64_t largest = 0;
    for (int64_t n : x.sizes()) largest = std::max(largest, n);
    TORCH_CHECK_VALUE(largest <= kInt32Max, "zyfa: ", name, " is too large: sizes must fit in int32, got ",
                      tuple_str(x.sizes()));
  }
  return {batch, seqlen_q, seqlen_k, heads_q, heads_kv, d_qk, d_v};
}

void check_layout(const char *name, const Tensor &x) {
  if (x.numel() == 0) return;  // nothing is read from an empty tensor
  TORCH_CHECK_VALUE(x.stride(3) == 1, "zyfa: ", name, " must be contiguous in its last dim (head_dim), got strides ",
                    tuple_str(x.strides()), "; call ", name, ".contiguous()");
  const int64_t size = x.element_size();
  bool misaligned = reinterpret_cast<std::uintptr_t>(x.data_ptr()) % kAlignBytes != 0;
  for (int dim = 0; dim < 3; ++dim) {  // a size-1 dim's stride is never used to step
    if (x.size(dim) > 1 && (x.stride(dim) * size) % kAlignBytes != 0) misaligned = true;
  }
  TORCH_CHECK_VALUE(!misaligned, "zyfa: ", name, " must be ", num(kAlignBytes),
                    "-byte aligned (data pointer and batch/seq/head strides), got strides ", tuple_str(x.strides()),
                    " and storage offset ", num(x.storage_offset()), "; call ", name, ".contiguous()");
}

Dims check_tensors(const Tensor &q, const Tensor &k, const Tensor &v) {
  for (const auto &[name, x] : {std::pair<const char *, const Tensor &>{"q", q}, {"k", k}, {"v", v}}) {
    TORCH_CHECK_VALUE(x.dim() == 4, "zyfa: ", name, " must be 4-D [batch, seqlen, heads, head_dim], got shape ",
                      tuple_str(x.sizes()));
  }
  check_dtypes(q, k, v);
  const Dims dims = check_shapes(q, k, v);
  TORCH_CHECK_VALUE(q.device() == k.device() && k.device() == v.device(), "zyfa: q, k, v must be on one device; got ",
                    q.device().str(), ", ", k.device().str(), ", ", v.device().str());
  check_layout("q", q);
  check_layout("k", k);
  check_layout("v", v);
  return dims;
}

// The FP8 P modes by index (0: None); the Python side's _validate.P_MODES in the same order.
const char *const kPModes[4] = {nullptr, "exact", "lean", "f16"};

int check_p_mode(const Tensor &q, const OptionalStr &p_mode) {
  if (!p_mode.has_value()) return 0;
  const std::string mode(p_mode->data(), p_mode->size());
  TORCH_CHECK_VALUE(is_fp8(q), "zyfa: p_mode='", mode, "' applies to float8_e4m3fn inputs only; bf16 takes p_mode=None");
  for (int i = 1; i < 4; ++i) {
    if (mode == kPModes[i]) return i;
  }
  TORCH_CHECK_VALUE(false, "zyfa: p_mode='", mode, "' is not supported; supported: 'exact', 'lean', 'f16' or None");
  return 0;
}

void check_scalars(const Tensor &q, double softmax_scale, const double (&descales)[3]) {
  TORCH_CHECK_VALUE(std::isfinite(softmax_scale), "zyfa: softmax_scale must be a finite float or None, got ",
                    float_str(softmax_scale));
  TORCH_CHECK_VALUE(is_fp8(q) || (descales[0] == 1.0 && descales[1] == 1.0 && descales[2] == 1.0),
                    "zyfa::fwd: descales apply to float8_e4m3fn inputs only; pass 1.0 for bf16");
  const char *names[3] = {"q_descale", "k_descale", "v_descale"};
  for (int i = 0; i < 3; ++i) {
    TORCH_CHECK_VALUE(std::isfinite(descales[i]) && descales[i] > 0.0, "zyfa: ", names[i],
                      " must be finite and > 0, got ", float_str(descales[i]));
  }
}

// ------------------------------------------------------------------------------------------------
// Outputs and the ABI struct

std::tuple<Tensor, Tensor> empty_outputs(const Tensor &q, const Dims &d, bool return_lse) {
  Tensor out = at::zeros({d.batch, d.seqlen_q, d.heads_q, d.d_v}, q.options().dtype(at::kBFloat16));
  std::vector<int64_t> lse_shape = return_lse ? std::vector<int64_t>{d.batch, d.heads_q, d.seqlen_q} : std::vector<int64_t>{0};
  return {out, at::full(lse_shape, std::numeric_limits<float>::infinity(), q.options().dtype(at::kFloat))};
}

std::tuple<Tensor, Tensor> allocate_outputs(const Tensor &q, const Dims &d, bool return_lse) {
  Tensor out = at::empty({d.batch, d.seqlen_q, d.heads_q, d.d_v}, q.options().dtype(at::kBFloat16));
  Tensor lse = return_lse ? at::empty({d.batch, d.heads_q, d.seqlen_q}, q.options().dtype(at::kFloat))
                          : at::empty({0}, q.options().dtype(at::kFloat));
  return {out, lse};
}

// zyfa/_ops.py's _kernel_strides: a size-1 dim gets the stride it would have in a dense layout.
void kernel_strides(const Tensor &x, int64_t (&strides)[3]) {
  int64_t all[4] = {x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
  for (int dim = 2; dim >= 0; --dim) {
    if (x.size(dim) == 1) all[dim] = all[dim + 1] * x.size(dim + 1);
  }
  strides[0] = all[0];
  strides[1] = all[1];
  strides[2] = all[2];
}

zyfa_fwd_args pack(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out, const Tensor *lse,
                   const Dims &d, double softmax_scale, bool causal, const double (&descales)[3]) {
  zyfa_fwd_args a;
  std::memset(&a, 0, sizeof(a));
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.out = out.data_ptr();
  a.lse = lse ? static_cast<float *>(lse->data_ptr()) : nullptr;
  int64_t s[3];
  kernel_strides(q, s);
  a.q_stride_batch = s[0], a.q_stride_seq = s[1], a.q_stride_head = s[2];
  kernel_strides(k, s);
  a.k_stride_batch = s[0], a.k_stride_seq = s[1], a.k_stride_head = s[2];
  kernel_strides(v, s);
  a.v_stride_batch = s[0], a.v_stride_seq = s[1], a.v_stride_head = s[2];
  kernel_strides(out, s);
  a.out_stride_batch = s[0], a.out_stride_seq = s[1], a.out_stride_head = s[2];
  a.batch = static_cast<int32_t>(d.batch);
  a.heads_q = static_cast<int32_t>(d.heads_q);
  a.heads_kv = static_cast<int32_t>(d.heads_kv);
  a.seqlen_q = static_cast<int32_t>(d.seqlen_q);
  a.seqlen_k = static_cast<int32_t>(d.seqlen_k);
  a.d_qk = static_cast<int32_t>(d.d_qk);
  a.d_v = static_cast<int32_t>(d.d_v);
  a.flags = (causal ? ZYFA_FLAG_CAUSAL : 0u) | (lse ? ZYFA_FLAG_LSE : 0u);
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.q_descale = static_cast<float>(descales[0]);
  a.k_descale = static_cast<float>(descales[1]);
  a.v_descale = static_cast<float>(descales[2]);
  a.reserved = 0;
  return a;
}

// ------------------------------------------------------------------------------------------------
// Kernel cache: hits stay in C++; a miss asks the Python resolver once.

struct KernelKey {
  int device;
  bool fp8;
  int64_t d_qk, d_v;
  bool causal;
  int p_mode;
  std::string kernel_dir;  // $ZYFA_KERNEL_DIR, part of zyfa/_ops.py's cache key too
  bool operator==(const KernelKey &o) const {
    return device == o.device && fp8 == o.fp8 && d_qk == o.d_qk && d_v == o.d_v && causal == o.causal &&
           p_mode == o.p_mode && kernel_dir == o.kernel_dir;
  }
};

struct KernelEntry {
  std::string name;
  const void *kernel = nullptr;
  zyfa_driver_launch_fn launch = nullptr;
  int64_t tile_m = 0;
  unsigned block[3] = {0, 0, 0};
  unsigned smem = 0;
  bool persistent = false;      // manifest "grid": "persistent" (else "tiles")
  int64_t multiprocessors = 0;  // the device's SM count, read once by the resolver; > 0 when persistent
  bool tma = false;             // manifest "loads": "tma" (else "cp.async"): launched with zyfa_tma_maps
  int64_t tile_n = 0;           // TMA kernels: the k and v maps' box rows
  zyfa_driver_encode_fn encode = nullptr;    // TMA kernels only
  zyfa_driver_launch2_fn launch2 = nullptr;  // TMA kernels and kernels with a V pre-pass
  const void *v_prep = nullptr;              // the V pre-pass entry (ABI 3; manifest "v_prep"), or none
  unsigned v_prep_block[3] = {0, 0, 0};
};

std::mutex g_mutex;
std::vector<std::pair<KernelKey, KernelEntry>> g_kernels;  // a handful of entries: a linear scan is fastest
py::object *g_resolver = nullptr;                          // leaked on purpose (lives until exit)
int g_resolves = 0;                                        // resolver calls, for the tests

// The grid mode and SM count of a NativeLaunch. A zyfa_core older than the manifest "grid" field has
// neither attribute: its kernels all take the tile grid.
void read_grid(const py::object &found, KernelEntry &e) {
  const std::string grid = py::hasattr(found, "grid") ? found.attr("grid").cast<std::string>() : "tiles";
  TORCH_CHECK(grid == "tiles" || grid == "persistent", "zyfa._C: kernel ", e.name, " has grid '", grid,
              "'; this zyfa._C launches 'tiles' and 'persistent': reinstall zyfa-torch");
  e.persistent = grid == "persistent";
  e.multiprocessors = py::hasattr(found, "multiprocessors") ? found.attr("multiprocessors").cast<int64_t>() : 0;
  TORCH_CHECK(!e.persistent || e.multiprocessors > 0, "zyfa._C: kernel ", e.name,
              " takes a persistent grid, but the resolver gave no multiprocessor count (", num(e.multiprocessors), ")");
}

// The load mode of a NativeLaunch and, for "tma", what the maps need. A zyfa_core older than the
// manifest "loads" field has no such attribute: its kernels all load with cp.async.
void read_loads(const py::object &found, KernelEntry &e) {
  const std::string loads = py::hasattr(found, "loads") ? found.attr("loads").cast<std::string>() : "cp.async";
  TORCH_CHECK(loads == "cp.async" || loads == "tma", "zyfa._C: kernel ", e.name, " has loads '", loads,
              "'; this zyfa._C launches 'cp.async' and 'tma': reinstall zyfa-torch");
  e.tma = loads == "tma";
  if (!e.tma) return;
  const auto address = [&](const char *attr) {
    return py::hasattr(found, attr) ? found.attr(attr).cast<std::uintptr_t>() : std::uintptr_t{0};
  };
  e.encode = reinterpret_cast<zyfa_driver_encode_fn>(address("encode_function"));
  e.launch2 = reinterpret_cast<zyfa_driver_launch2_fn>(address("launch2_function"));
  TORCH_CHECK(e.encode && e.launch2, "zyfa._C: kernel ", e.name, " loads with TMA, but the installed zyfa_core "
              "gave no tensor-map encode or two-parameter launch entry (encode_function, launch2_function): "
              "reinstall zyfa-core");
  e.tile_n = py::hasattr(found, "tile_n") ? found.attr("tile_n").cast<int64_t>() : 0;
  TORCH_CHECK(e.tile_n > 0, "zyfa._C: kernel ", e.name, " loads with TMA, but the resolver gave no tile_n (",
              num(e.tile_n), ")");
}

// The V pre-pass of a NativeLaunch (kernels/abi/zyfa_abi.h, ABI 3): the loaded entry's handle and block, and
// tile_n for the row padding. A zyfa_core older than ABI 3 has no such attribute (and no such kernels).
void read_v_prep(const py::object &found, KernelEntry &e) {
  const auto handle = py::hasattr(found, "v_prep_kernel") ? found.attr("v_prep_kernel").cast<std::uintptr_t>() : 0;
  if (handle == 0) return;
  e.v_prep = reinterpret_cast<const void *>(handle);
  auto block = found.attr("v_prep_block").cast<std::tuple<unsigned, unsigned, unsigned>>();
  e.v_prep_block[0] = std::get<0>(block), e.v_prep_block[1] = std::get<1>(block), e.v_prep_block[2] = std::get<2>(block);
  e.launch2 = reinterpret_cast<zyfa_driver_launch2_fn>(found.attr("launch2_function").cast<std::uintptr_t>());
  e.tile_n = found.attr("tile_n").cast<int64_t>();
  TORCH_CHECK(e.launch2 && e.tile_n > 0 && e.tile_n % 64 == 0, "zyfa._C: kernel ", e.name, " has a V pre-pass, "
              "but the resolver gave no two-parameter launch entry or a tile_n that is not a multiple of 64 (",
              num(e.tile_n), ")");
}

KernelEntry resolve(const KernelKey &key, const char *p_mode) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(g_resolver != nullptr, "zyfa._C: no kernel resolver registered (zyfa._ops registers it at import)");
  py::object found = (*g_resolver)(key.device, key.fp8 ? "e4m3fn" : "bf16", key.d_qk, key.d_v, key.causal,
                                   p_mode ? py::object(py::str(p_mode)) : py::object(py::none()));
  ++g_resolves;
  const int abi = found.attr("launch_abi").cast<int>();
  const size_t error_size = found.attr("error_size").cast<size_t>();
  TORCH_CHECK(abi == kLaunchAbi && error_size == sizeof(zyfa_driver_error), "zyfa._C was built for zyfa_core's launch "
              "entry point version ", num(kLaunchAbi), " (error struct ", num(sizeof(zyfa_driver_error)), " bytes); the "
              "installed zyfa_core._driver has version ", num(abi), " (", num(static_cast<int64_t>(error_size)),
              " bytes): reinstall zyfa-core and zyfa-torch");
  KernelEntry e;
  e.name = found.attr("name").cast<std::string>();
  e.kernel = reinterpret_cast<const void *>(found.attr("kernel").cast<std::uintptr_t>());
  e.launch = reinterpret_cast<zyfa_driver_launch_fn>(found.attr("launch_function").cast<std::uintptr_t>());
  e.tile_m = found.attr("tile_m").cast<int64_t>();
  auto block = found.attr("block").cast<std::tuple<unsigned, unsigned, unsigned>>();
  e.block[0] = std::get<0>(block), e.block[1] = std::get<1>(block), e.block[2] = std::get<2>(block);
  e.smem = found.attr("smem_bytes").cast<unsigned>();
  TORCH_CHECK(e.kernel && e.launch && e.tile_m > 0, "zyfa._C: the resolver returned no kernel for ", e.name);
  read_grid(found, e);
  read_loads(found, e);
  read_v_prep(found, e);
  return e;
}

KernelEntry lookup(int device, const Tensor &q, const Dims &d, bool causal, int p_mode) {
  const char *dir = std::getenv("ZYFA_KERNEL_DIR");
  KernelKey key{device, is_fp8(q), d.d_qk, d.d_v, causal, p_mode, dir ? dir : ""};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const auto &[k, e] : g_kernels) {
      if (k == key) return e;
    }
  }
  KernelEntry e = resolve(key, kPModes[p_mode]);  // without the lock: the resolver may take a while
  std::lock_guard<std::mutex> lock(g_mutex);
  g_kernels.emplace_back(key, e);
  return e;
}

[[noreturn]] void raise_driver_error(const zyfa_driver_error &err) {
  py::gil_scoped_acquire gil;
  py::object cls = py::module_::import("zyfa_core.errors").attr("ZyfaDriverError");
  py::object exc = cls(std::string(err.message), py::arg("kernel") = std::string(err.kernel),
                       py::arg("call") = std::string(err.call), py::arg("code") = err.code,
                       py::arg("error_name") = std::string(err.error_name));
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

// An encode failure names no kernel (the entry does not know it): name it here, then raise as a launch error.
[[noreturn]] void raise_encode_error(const std::string &kernel, zyfa_driver_error &err) {
  if (err.kernel[0] == 0) std::snprintf(err.kernel, sizeof(err.kernel), "%s", kernel.c_str());
  raise_driver_error(err);
}

// ------------------------------------------------------------------------------------------------
// TMA maps: zyfa_abi.h's comment above zyfa_tma_maps is the specification.

struct TmaOperand {
  const void *address;
  int64_t stride_seq, stride_head, stride_batch;  // elements
  int32_t d, seqlen, heads;
  int64_t rows;  // box rows: tile_m for q, tile_n for k and v
};

// cuTensorMapEncodeTiled's rules (zyfa_core.abi.tma_maps_usable): the address and every stride in bytes a
// multiple of 16, strides below 2^40 bytes.
bool tma_usable(const TmaOperand &t, int64_t elem) {
  constexpr int64_t kStrideLimit = int64_t{1} << 40;
  const int64_t strides[3] = {t.stride_seq, t.stride_head, t.stride_batch};
  bool ok = reinterpret_cast<std::uintptr_t>(t.address) % kAlignBytes == 0;
  for (int64_t s : strides) ok = ok && s >= 0 && s < kStrideLimit / elem && (s * elem) % kAlignBytes == 0;
  return ok;
}

// Fill `maps` for the kernel args `a` (as packed: size-1 dims with dense strides): valid = 1 and the three
// maps encoded, or all bytes zero (valid = 0: the kernel loads with cp.async) when a q / k / v pointer or
// stride in bytes is not a multiple of 16 (or a stride is 2^40 bytes or more). The same bytes as
// zyfa_core.abi.tma_maps_bytes. Returns false with `err` filled when an encode call failed.
bool fill_tma_maps(const zyfa_fwd_args &a, bool fp8, int64_t tile_m, int64_t tile_n, zyfa_driver_encode_fn encode,
                   zyfa_tma_maps &maps, zyfa_driver_error &err) {
  std::memset(&maps, 0, sizeof(maps));
  const int64_t elem = fp8 ? 1 : 2;
  const TmaOperand operands[3] = {
      {a.q, a.q_stride_seq, a.q_stride_head, a.q_stride_batch, a.d_qk, a.seqlen_q, a.heads_q, tile_m},
      {a.k, a.k_stride_seq, a.k_stride_head, a.k_stride_batch, a.d_qk, a.seqlen_k, a.heads_kv, tile_n},
      {a.v, a.v_stride_seq, a.v_stride_head, a.v_stride_batch, a.d_v, a.seqlen_k, a.heads_kv, tile_n},
  };
  for (const TmaOperand &t : operands) {
    if (!tma_usable(t, elem)) return true;
  }
  zyfa_tensor_map *out[3] = {&maps.q, &maps.k, &maps.v};
  for (int i = 0; i < 3; ++i) {
    const TmaOperand &t = operands[i];
    using u64 = unsigned long long;
    const u64 dims[4] = {u64(t.d), u64(t.seqlen), u64(t.heads), u64(a.batch)};
    const u64 strides[3] = {u64(t.stride_seq * elem), u64(t.stride_head * elem), u64(t.stride_batch * elem)};
    const unsigned box[4] = {unsigned(128 / elem), unsigned(t.rows), 1, 1};  // one 128-byte swizzle row wide
    if (encode(out[i], fp8 ? 0 : 1, t.address, dims, strides, box, &err) != 0) return false;
  }
  maps.valid = 1;
  return true;
}

// ------------------------------------------------------------------------------------------------
// The op body

struct Checked {
  Dims dims;
  double descales[3];
  int p_mode;
  bool empty;
};

Checked check_all(const Tensor &q, const Tensor &k, const Tensor &v, double softmax_scale, double qd, double kd,
                  double vd, const OptionalStr &p_mode) {
  Checked c{check_tensors(q, k, v), {qd, kd, vd}, 0, false};
  c.p_mode = check_p_mode(q, p_mode);
  check_scalars(q, softmax_scale, c.descales);
  c.empty = c.dims.batch == 0 || c.dims.seqlen_q == 0 || c.dims.seqlen_k == 0;
  return c;
}

// zyfa_core.launcher.launch_grid: one block per (query tile, head, batch), or for a persistent kernel
// (min(SMs, items), 1, 1), each block walking items x, x + grid, ... (a block without items would only exit).
void launch_grid(const KernelEntry &e, const Dims &d, unsigned (&grid)[3]) {
  const int64_t tiles = (d.seqlen_q + e.tile_m - 1) / e.tile_m;
  if (!e.persistent) {
    grid[0] = static_cast<unsigned>(tiles), grid[1] = static_cast<unsigned>(d.heads_q);
    grid[2] = static_cast<unsigned>(d.batch);
    return;
  }
  int64_t items = 0;  // heads_q * batch <= 65535^2 (check_shapes); tiles * that may still overflow int64
  const bool overflow = __builtin_mul_overflow(tiles, d.heads_q * d.batch, &items);
  TORCH_CHECK_VALUE(!overflow && items <= kInt32Max, e.name, ": ", overflow ? std::string("over 2^63") : num(items),
                    " work items (query tiles x heads_q x batch) exceed ", num(kInt32Max),
                    ", which the persistent kernel counts in 32 bits");
  grid[0] = static_cast<unsigned>(std::min(e.multiprocessors, items)), grid[1] = 1, grid[2] = 1;
}

// ABI 3's V pre-pass (zyfa_core.KernelSpec.workspace_bytes / v_prep_grid): allocate the workspace, run the pass
// into it on `stream`, and point args.v at it. The workspace tensor is returned so that it outlives the launches
// that read it (freed after, the caching allocator reuses it only for later work on this stream).
Tensor run_v_prep(const KernelEntry &e, const Tensor &q, const Dims &d, zyfa_fwd_args &args, void *stream) {
  const int64_t row_bytes = ZYFA_VT_ROW_BYTES(d.seqlen_k, e.tile_n);  // (grid y/z: check_shapes)
  Tensor workspace = at::empty({d.batch * d.heads_kv * d.d_v * row_bytes}, q.options().dtype(at::kByte));
  void *vt = workspace.data_ptr();
  const unsigned grid[3] = {static_cast<unsigned>(row_bytes / ZYFA_VPREP_KEYS), static_cast<unsigned>(d.heads_kv),
                            static_cast<unsigned>(d.batch)};
  zyfa_driver_error err;
  if (e.launch2(e.v_prep, grid, e.v_prep_block, 0, stream, &args, sizeof(args), &vt, sizeof(vt), &err) != 0) {
    raise_driver_error(err);
  }
  args.v = vt;
  return workspace;
}

// Launch on `stream` of CUDA/HIP device `device`; out and lse are allocated by the caller.
void launch(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out, const Tensor *lse, const Checked &c,
            double softmax_scale, bool causal, int device, void *stream) {
  const KernelEntry e = lookup(device, q, c.dims, causal, c.p_mode);
  alignas(16) zyfa_fwd_args args = pack(q, k, v, out, lse, c.dims, softmax_scale, causal, c.descales);
  unsigned grid[3];
  launch_grid(e, c.dims, grid);
  const Tensor workspace = e.v_prep ? run_v_prep(e, q, c.dims, args, stream) : Tensor();
  zyfa_driver_error err;
  if (!e.tma) {
    if (e.launch(e.kernel, grid, e.block, e.smem, stream, &args, sizeof(args), &err) != 0) raise_driver_error(err);
    return;
  }
  alignas(64) zyfa_tma_maps maps;
  if (!fill_tma_maps(args, is_fp8(q), e.tile_m, e.tile_n, e.encode, maps, err)) raise_encode_error(e.name, err);
  if (e.launch2(e.kernel, grid, e.block, e.smem, stream, &args, sizeof(args), &maps, sizeof(maps), &err) != 0) {
    raise_driver_error(err);
  }
}

std::tuple<Tensor, Tensor> fwd_cuda(const Tensor &q, const Tensor &k, const Tensor &v, double softmax_scale,
                                    bool causal, double q_descale, double k_descale, double v_descale,
                                    bool return_lse, OptionalStr p_mode) {
  const Checked c = check_all(q, k, v, softmax_scale, q_descale, k_descale, v_descale, p_mode);
  if (c.empty) return empty_outputs(q, c.dims, return_lse);
  TORCH_CHECK_NOT_IMPLEMENTED(q.is_cuda(), "zyfa: tensors on '", c10::DeviceTypeName(q.device().type(), true),
                              "' are not supported; use CPU or CUDA/ROCm tensors");
  auto [out, lse] = allocate_outputs(q, c.dims, return_lse);
  const c10::Device device = q.device();
  void *stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
  launch(q, k, v, out, return_lse ? &lse : nullptr, c, softmax_scale, causal, device.index(), stream);
  return {out, lse};
}

// ------------------------------------------------------------------------------------------------
// Autograd: forward-only

const c10::TypedOperatorHandle<decltype(fwd_cuda)> &fwd_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("zyfa::fwd", "").typed<decltype(fwd_cuda)>();
  return op;
}

struct ForwardOnly : public torch::autograd::Function<ForwardOnly> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext *, const Tensor &q, const Tensor &k,
                                                const Tensor &v, double scale, bool causal, double qd, double kd,
                                                double vd, bool return_lse, std::optional<std::string> p_mode) {
    at::AutoDispatchBelowADInplaceOrView guard;
    OptionalStr mode = p_mode ? OptionalStr(*p_mode) : std::nullopt;
    auto [out, lse] = fwd_op().call(q, k, v, scale, causal, qd, kd, vd, return_lse, mode);
    return {out, lse};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *, torch::autograd::variable_list) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, kForwardOnly);
  }
};

std::tuple<Tensor, Tensor> fwd_autograd(const Tensor &q, const Tensor &k, const Tensor &v, double softmax_scale,
                                        bool causal, double q_descale, double k_descale, double v_descale,
                                        bool return_lse, OptionalStr p_mode) {
  const bool grad = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!grad) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return fwd_op().call(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, return_lse, p_mode);
  }
  std::optional<std::string> mode = p_mode ? std::optional<std::string>(std::string(p_mode->data(), p_mode->size()))
                                           : std::nullopt;
  auto outs = ForwardOnly::apply(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, return_lse, mode);
  return {outs[0], outs[1]};
}

// ------------------------------------------------------------------------------------------------
// Python entry points: the resolver, the cache, and test entries that run the same C++ on any device.

OptionalStr as_view(const std::optional<std::string> &s) { return s ? OptionalStr(*s) : std::nullopt; }

// Validation, allocation and packing exactly as the CUDA kernel does them, on tensors of any device:
// returns (the 192 argument bytes, out, lse); b"" and the empty problem's outputs when nothing to compute.
py::tuple pack_args(const Tensor &q, const Tensor &k, const Tensor &v, double softmax_scale, bool causal,
                    double q_descale, double k_descale, double v_descale, bool return_lse,
                    const std::optional<std::string> &p_mode) {
  const Checked c = check_all(q, k, v, softmax_scale, q_descale, k_descale, v_descale, as_view(p_mode));
  if (c.empty) {
    auto [out, lse] = empty_outputs(q, c.dims, return_lse);
    return py::make_tuple(py::bytes(""), out, lse);
  }
  auto [out, lse] = allocate_outputs(q, c.dims, return_lse);
  const zyfa_fwd_args a = pack(q, k, v, out, return_lse ? &lse : nullptr, c.dims, softmax_scale, causal, c.descales);
  return py::make_tuple(py::bytes(reinterpret_cast<const char *>(&a), sizeof(a)), out, lse);
}

// The whole CUDA body minus the stream lookup, on tensors of any device (a fake driver's "device"):
// check, allocate, look up (resolving on a miss), pack, launch on `stream` of `device`.
std::tuple<Tensor, Tensor> launch_for_test(const Tensor &q, const Tensor &k, const Tensor &v, double softmax_scale,
                                           bool causal, double q_descale, double k_descale, double v_descale,
                                           bool return_lse, const std::optional<std::string> &p_mode, int device,
                                           std::uintptr_t stream) {
  const Checked c = check_all(q, k, v, softmax_scale, q_descale, k_descale, v_descale, as_view(p_mode));
  if (c.empty) return empty_outputs(q, c.dims, return_lse);
  auto [out, lse] = allocate_outputs(q, c.dims, return_lse);
  py::gil_scoped_release no_gil;  // as under torch's dispatcher: the resolver must take the GIL itself
  launch(q, k, v, out, return_lse ? &lse : nullptr, c, softmax_scale, causal, device, reinterpret_cast<void *>(stream));
  return {out, lse};
}

// The TMA maps the launch of a "tma" kernel passes for the packed `args` (pack_args' bytes), encoded through
// the C entry at `encode_function` (NativeLaunch.encode_function): the 448 bytes of zyfa_tma_maps.
py::bytes tma_maps_for_test(const py::bytes &args, bool fp8, int64_t tile_m, int64_t tile_n,
                            std::uintptr_t encode_function, const std::string &kernel) {
  const std::string_view bytes = args;
  TORCH_CHECK_VALUE(bytes.size() == sizeof(zyfa_fwd_args), "zyfa._C: args must be ", num(sizeof(zyfa_fwd_args)),
                    " bytes, got ", num(static_cast<int64_t>(bytes.size())));
  TORCH_CHECK_VALUE(encode_function != 0, "zyfa._C: encode_function is null");
  zyfa_fwd_args a;
  std::memcpy(&a, bytes.data(), sizeof(a));
  alignas(64) zyfa_tma_maps maps;
  zyfa_driver_error err;
  if (!fill_tma_maps(a, fp8, tile_m, tile_n, reinterpret_cast<zyfa_driver_encode_fn>(encode_function), maps, err)) {
    raise_encode_error(kernel, err);
  }
  return py::bytes(reinterpret_cast<const char *>(&maps), sizeof(maps));
}

void set_resolver(py::object resolver) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_resolver == nullptr) g_resolver = new py::object();
  *g_resolver = std::move(resolver);
}

void clear_kernel_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_kernels.clear();
}

py::dict cache_info() {
  std::lock_guard<std::mutex> lock(g_mutex);
  py::dict info;
  py::list names;
  for (const auto &[k, e] : g_kernels) names.append(e.name);
  info["kernels"] = names;
  info["resolves"] = g_resolves;
  return info;
}

}  // namespace
}  // namespace zyfa

TORCH_LIBRARY_IMPL(zyfa, CUDA, m) { m.impl("fwd", &zyfa::fwd_cuda); }

TORCH_LIBRARY_IMPL(zyfa, AutogradCUDA, m) { m.impl("fwd", &zyfa::fwd_autograd); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ZYFA's C++ hot path: CUDA/ROCm kernels of the op zyfa::fwd (see zyfa/_ops.py).";
  m.attr("LAUNCH_ABI") = zyfa::kLaunchAbi;
  m.def("set_resolver", &zyfa::set_resolver, py::arg("resolver"),
        "resolver(device, dtype, d_qk, d_v, causal, p_mode) -> zyfa_core.launcher.NativeLaunch, called once "
        "per kernel-cache miss with the GIL held.");
  m.def("clear_kernel_cache", &zyfa::clear_kernel_cache, "Forget every kernel the C++ cache holds.");
  m.def("cache_info", &zyfa::cache_info, "{'kernels': [names], 'resolves': resolver calls so far}.");
  m.def(
      "fwd_cuda",
      [](const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, double scale, bool causal, double qd, double kd,
         double vd, bool return_lse, const std::optional<std::string> &p_mode) {
        return zyfa::fwd_cuda(q, k, v, scale, causal, qd, kd, vd, return_lse, zyfa::as_view(p_mode));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("softmax_scale"),
        py::arg("causal"), py::arg("q_descale"), py::arg("k_descale"), py::arg("v_descale"), py::arg("return_lse"),
        py::arg("p_mode") = py::none(), "The CUDA kernel of zyfa::fwd without torch's dispatcher (zyfa.overhead).");
  m.def("pack_args", &zyfa::pack_args, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("softmax_scale"),
        py::arg("causal"), py::arg("q_descale"), py::arg("k_descale"), py::arg("v_descale"), py::arg("return_lse"),
        py::arg("p_mode") = py::none(), "Test entry: the op's checks, allocation and packing on any device.");
  m.def("launch_for_test", &zyfa::launch_for_test, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("softmax_scale"), py::arg("causal"), py::arg("q_descale"), py::arg("k_descale"), py::arg("v_descale"),
        py::arg("return_lse"), py::arg("p_mode"), py::arg("device"), py::arg("stream"),
        "Test entry: the CUDA body on any device's tensors, launching on `stream` of `device`.");
  m.def("tma_maps_for_test", &zyfa::tma_maps_for_test, py::arg("args"), py::arg("fp8"), py::arg("tile_m"),
        py::arg("tile_n"), py::arg("encode_function"), py::arg("kernel") = "",
        "Test entry: the zyfa_tma_maps bytes a TMA launch passes for packed args (encoded at encode_function).");
  m.attr("TMA_MAPS_SIZE") = sizeof(zyfa_tma_maps);
}
