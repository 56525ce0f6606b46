// zyfa._C: the CUDA/ROCm hot path of the op zyfa::fwd, in C++ (host overhead).
//
// The op's schema lives in Python (zyfa/_ops.py, torch.library.define); this file only adds kernels
// for it, after Python has defined it:
//   CUDA          turn the tensors into zyfa_core's arguments, check them with zyfa_core's checks, allocate
//                 out/lse (and a V pre-pass's workspace), fill the ABI struct (kernels/abi/zyfa_abi.h) and
//                 launch it on torch's current stream through zyfa_core's launch plan;
//   AutogradCUDA  no grad needed: straight to the CUDA kernel; else the same under an autograd node
//                 whose backward raises (the op is forward-only), as the Python registration does.
// ROCm builds of torch report HIP devices as CUDA, so the same kernels serve them.
//
// Built against torch's headers only: no CUDA/HIP headers or libraries. The checks, the grid, the V
// pre-pass, the TMA maps and the launch are zyfa_core's C++, reached through its C API
// (packages/zyfa-core/csrc/zyfa_core_api.h) in the shared object zyfa_core._driver, which zyfa/_ops.py
// names once at import (`bind_core`). Kernel lookup: a small cache keyed by (device, dtype, d_qk, d_v,
// causal, p_mode, $ZYFA_KERNEL_DIR) of zyfa_core launch plans; a miss calls the Python resolver zyfa/_ops.py
// registers (`set_resolver`) once, with the GIL, which selects and loads the kernel through zyfa_core (the
// manifest is read there); a hit touches no Python.

#include <dlfcn.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "zyfa_abi.h"
#include "zyfa_core_api.h"

namespace py = pybind11;

namespace zyfa {
namespace {

constexpr const char *kForwardOnly =
    "zyfa::fwd is forward-only (inference prefill): it has no backward. Use "
    "torch.nn.functional.scaled_dot_product_attention or flash-attn for training.";

using at::Tensor;
using OptionalStr = std::optional<c10::string_view>;

// ------------------------------------------------------------------------------------------------
// zyfa_core's C API, found by name in its shared object

struct CoreApi {
  decltype(&zyfa_check_tensors) check_tensors = nullptr;
  decltype(&zyfa_check_scalars) check_scalars = nullptr;
  decltype(&zyfa_check_p_mode) check_p_mode = nullptr;
  decltype(&zyfa_plan_workspace_bytes) workspace_bytes = nullptr;
  decltype(&zyfa_plan_launch) launch = nullptr;
};

CoreApi g_core;  // set once by bind_core, before any call

template <class F>
void find(void *library, const std::string &path, const char *name, F &out) {
  out = reinterpret_cast<F>(dlsym(library, name));
  TORCH_CHECK(out != nullptr, "zyfa._C: ", path, " has no ", name, ": reinstall zyfa-core and zyfa-torch");
}

// Binds the C API of zyfa_core._driver at `path` (already loaded by Python: RTLD_NOLOAD finds that copy).
void bind_core(const std::string &path) {
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char *why = dlerror();
    TORCH_CHECK(false, "zyfa._C: cannot open zyfa_core's extension ", path, ": ", why ? why : "unknown error");
  }
  decltype(&zyfa_core_api_version) version = nullptr;
  find(library, path, "zyfa_core_api_version", version);
  TORCH_CHECK(version() == ZYFA_CORE_API_VERSION, "zyfa._C was built for zyfa_core's C API version ",
              std::to_string(ZYFA_CORE_API_VERSION), "; ", path, " has version ", std::to_string(version()),
              ": install zyfa-core and zyfa-torch of one release");
  CoreApi api;
  find(library, path, "zyfa_check_tensors", api.check_tensors);
  find(library, path, "zyfa_check_scalars", api.check_scalars);
  find(library, path, "zyfa_check_p_mode", api.check_p_mode);
  find(library, path, "zyfa_plan_workspace_bytes", api.workspace_bytes);
  find(library, path, "zyfa_plan_launch", api.launch);
  g_core = api;
}

const CoreApi &core() {
  TORCH_CHECK(g_core.launch != nullptr, "zyfa._C: zyfa_core's C API is not bound (zyfa._ops binds it at import)");
  return g_core;
}

// Raises zyfa_core's failure as the Python exception it names: ValueError, TypeError or ZyfaDriverError.
[[noreturn]] void raise(const zyfa_core_error &err) {
  TORCH_CHECK_TYPE(err.kind != ZYFA_ERROR_TYPE, err.message);
  TORCH_CHECK_VALUE(err.kind != ZYFA_ERROR_VALUE, err.message);
  py::gil_scoped_acquire gil;
  py::object cls = py::module_::import("zyfa_core.errors").attr("ZyfaDriverError");
  py::object exc = cls(std::string(err.message), py::arg("kernel") = std::string(err.kernel),
                       py::arg("call") = std::string(err.call), py::arg("code") = err.code,
                       py::arg("error_name") = std::string(err.error_name));
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

// ------------------------------------------------------------------------------------------------
// Tensors into zyfa_core's arguments

bool is_fp8(const Tensor &x) { return x.scalar_type() == at::ScalarType::Float8_e4m3fn; }

std::string dtype_name(at::ScalarType t) {  // str(torch.<dtype>)
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

// A zyfa_tensor_view of `x`, with the strings it points to (filled in place: the view points into it).
struct View {
  std::string dtype, device;
  zyfa_tensor_view view{};
};

void fill_view(const Tensor &x, View &v) {
  v.dtype = dtype_name(x.scalar_type());
  v.device = x.device().str();
  v.view.dtype_name = v.dtype.c_str();
  v.view.device = v.device.c_str();
  const auto t = x.scalar_type();
  static_assert(sizeof(long long) == sizeof(int64_t), "torch's sizes are the C API's long long");
  v.view.dim = static_cast<int>(x.dim());
  v.view.sizes = reinterpret_cast<const long long *>(x.sizes().data());
  v.view.strides = reinterpret_cast<const long long *>(x.strides().data());
  v.view.element_size = x.element_size();
  v.view.storage_offset = x.storage_offset();
  v.view.dtype = t == at::ScalarType::BFloat16        ? ZYFA_DTYPE_BF16
                 : t == at::ScalarType::Float8_e4m3fn ? ZYFA_DTYPE_E4M3FN
                                                      : ZYFA_DTYPE_OTHER;
  v.view.address = reinterpret_cast<std::uintptr_t>(x.data_ptr());
  v.view.address_known = 1;
}

// The call's checks (zyfa_core's, in zyfa/_validate.py's order: tensors, p_mode, scalars).
struct Checked {
  zyfa_call_dims dims;
  float scalars[4];  // softmax_scale, q/k/v descales as float32
  int p_mode;        // 0: None, else 1 + its index in zyfa_core's P_MODES
  bool empty;
};

Checked check_all(const Tensor &q, const Tensor &k, const Tensor &v, double softmax_scale, double qd, double kd,
                  double vd, const OptionalStr &p_mode) {
  const CoreApi &api = core();
  Checked c{};
  zyfa_core_error err{};
  View views[3];
  fill_view(q, views[0]);
  fill_view(k, views[1]);
  fill_view(v, views[2]);
  if (api.check_tensors(&views[0].view, &views[1].view, &views[2].view, &c.dims, &err) != 0) raise(err);
  const std::optional<std::string> mode = p_mode ? std::optional<std::string>(std::string(*p_mode)) : std::nullopt;
  if (api.check_p_mode(is_fp8(q), mode ? mode->c_str() : nullptr, &c.p_mode, &err) != 0) raise(err);
  const double descales[3] = {qd, kd, vd};
  if (api.check_scalars("zyfa", is_fp8(q), softmax_scale, descales, c.scalars, &err) != 0) raise(err);
  c.empty = c.dims.batch == 0 || c.dims.seqlen_q == 0 || c.dims.seqlen_k == 0;
  return c;
}

std::tuple<Tensor, Tensor> empty_outputs(const Tensor &q, const zyfa_call_dims &d, bool return_lse) {
  Tensor out = at::zeros({d.batch, d.seqlen_q, d.heads_q, d.d_v}, q.options().dtype(at::kBFloat16));
  std::vector<int64_t> lse_shape = return_lse ? std::vector<int64_t>{d.batch, d.heads_q, d.seqlen_q} : std::vector<int64_t>{0};
  return {out, at::full(lse_shape, std::numeric_limits<float>::infinity(), q.options().dtype(at::kFloat))};
}

std::tuple<Tensor, Tensor> allocate_outputs(const Tensor &q, const zyfa_call_dims &d, bool return_lse) {
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

// The ABI struct; the sizes fit int32 and the scalars are float32 already (zyfa_core's checks).
zyfa_fwd_args pack(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out, const Tensor *lse,
                   const Checked &c, bool causal) {
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
  const zyfa_call_dims &d = c.dims;
  a.batch = static_cast<int32_t>(d.batch);
  a.heads_q = static_cast<int32_t>(d.heads_q);
  a.heads_kv = static_cast<int32_t>(d.heads_kv);
  a.seqlen_q = static_cast<int32_t>(d.seqlen_q);
  a.seqlen_k = static_cast<int32_t>(d.seqlen_k);
  a.d_qk = static_cast<int32_t>(d.d_qk);
  a.d_v = static_cast<int32_t>(d.d_v);
  a.flags = (causal ? ZYFA_FLAG_CAUSAL : 0u) | (lse ? ZYFA_FLAG_LSE : 0u);
  a.softmax_scale = c.scalars[0];
  a.q_descale = c.scalars[1];
  a.k_descale = c.scalars[2];
  a.v_descale = c.scalars[3];
  a.reserved = 0;
  return a;
}

// ------------------------------------------------------------------------------------------------
// Kernel cache: hits stay in C++; a miss asks the Python resolver once.

const char *const kPModes[4] = {nullptr, "exact", "lean", "f16"};  // zyfa_check_p_mode's numbering

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

std::mutex g_mutex;
struct Plan {
  std::string name;  // the kernel's name (cache_info)
  const void *handle = nullptr;
};
std::vector<std::pair<KernelKey, Plan>> g_plans;  // a handful of entries: a linear scan is fastest
py::object *g_resolver = nullptr;                         // leaked on purpose (lives until exit)
int g_resolves = 0;                                       // resolver calls, for the tests

Plan resolve(const KernelKey &key) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(g_resolver != nullptr, "zyfa._C: no kernel resolver registered (zyfa._ops registers it at import)");
  const char *mode = kPModes[key.p_mode];
  py::object found = (*g_resolver)(key.device, key.fp8 ? "e4m3fn" : "bf16", key.d_qk, key.d_v, key.causal,
                                   mode ? py::object(py::str(mode)) : py::object(py::none()));
  ++g_resolves;
  const auto [name, handle] = found.cast<std::tuple<std::string, std::uintptr_t>>();
  TORCH_CHECK(handle != 0, "zyfa._C: the resolver returned no launch plan for ", name);
  return {name, reinterpret_cast<const void *>(handle)};
}

const void *lookup(int device, const Tensor &q, const Checked &c, bool causal) {
  const char *dir = std::getenv("ZYFA_KERNEL_DIR");
  KernelKey key{device, is_fp8(q), c.dims.d_qk, c.dims.d_v, causal, c.p_mode, dir ? dir : ""};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const auto &[k, plan] : g_plans) {
      if (k == key) return plan.handle;
    }
  }
  const Plan plan = resolve(key);  // without the lock: the resolver may take a while
  std::lock_guard<std::mutex> lock(g_mutex);
  g_plans.emplace_back(key, plan);
  return plan.handle;
}

// ------------------------------------------------------------------------------------------------
// The op body

// Launch on `stream` of device `device`; out and lse are allocated by the caller. A V pre-pass's workspace
// comes from torch's caching allocator: freed when this returns, it is reused only by later work on `stream`.
void launch(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out, const Tensor *lse, const Checked &c,
            bool causal, int device, void *stream) {
  const void *plan = lookup(device, q, c, causal);
  alignas(16) const zyfa_fwd_args args = pack(q, k, v, out, lse, c, causal);
  zyfa_core_error err{};
  unsigned long long bytes = 0;
  if (core().workspace_bytes(plan, &args, nullptr, &bytes, &err) != 0) raise(err);
  Tensor workspace;
  if (bytes != 0) workspace = at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(at::kByte));
  const auto address = bytes != 0 ? reinterpret_cast<std::uintptr_t>(workspace.data_ptr()) : 0;
  if (core().launch(plan, &args, nullptr, stream, address, &err) != 0) raise(err);
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
  launch(q, k, v, out, return_lse ? &lse : nullptr, c, causal, device.index(), stream);
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
// Python entry points: binding, the resolver, the cache, and test entries that run the same C++ on any device.

OptionalStr as_view(const std::optional<std::string> &s) { return s ? OptionalStr(*s) : std::nullopt; }

// The checks, allocation and packing exactly as the CUDA kernel does them, on tensors of any device:
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
  const zyfa_fwd_args a = pack(q, k, v, out, return_lse ? &lse : nullptr, c, causal);
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
  launch(q, k, v, out, return_lse ? &lse : nullptr, c, causal, device, reinterpret_cast<void *>(stream));
  return {out, lse};
}

void set_resolver(py::object resolver) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_resolver == nullptr) g_resolver = new py::object();
  *g_resolver = std::move(resolver);
}

void clear_kernel_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_plans.clear();
}

py::dict cache_info() {
  std::lock_guard<std::mutex> lock(g_mutex);
  py::dict info;
  py::list names;
  for (const auto &[k, plan] : g_plans) names.append(plan.name);
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
  m.attr("CORE_API_VERSION") = ZYFA_CORE_API_VERSION;
  m.def("bind_core", &zyfa::bind_core, py::arg("path"),
        "Bind zyfa_core's C API in its extension at `path` (zyfa_core._driver.__file__); checks its version.");
  m.def("set_resolver", &zyfa::set_resolver, py::arg("resolver"),
        "resolver(device, dtype, d_qk, d_v, causal, p_mode) -> (kernel name, zyfa_core launch plan handle "
        "(zyfa_core.launcher.native_plan)), called once per kernel-cache miss with the GIL held.");
  m.def("clear_kernel_cache", &zyfa::clear_kernel_cache, "Forget every plan the C++ cache holds.");
  m.def("cache_info", &zyfa::cache_info, "{'kernels': [names], 'resolves': resolver calls so far}.");
  m.def(
      "fwd_cuda",
      [](const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, double scale, bool causal, double qd, double kd,
         double vd, bool return_lse, const std::optional<std::string> &p_mode) {
        return zyfa::fwd_cuda(q, k, v, scale, causal, qd, kd, vd, return_lse, zyfa::as_view(p_mode));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("softmax_scale"), py::arg("causal"), py::arg("q_descale"),
      py::arg("k_descale"), py::arg("v_descale"), py::arg("return_lse"), py::arg("p_mode") = py::none(),
      "The CUDA kernel of zyfa::fwd without torch's dispatcher (zyfa.overhead).");
  m.def("pack_args", &zyfa::pack_args, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("softmax_scale"),
        py::arg("causal"), py::arg("q_descale"), py::arg("k_descale"), py::arg("v_descale"), py::arg("return_lse"),
        py::arg("p_mode") = py::none(), "Test entry: the op's checks, allocation and packing on any device.");
  m.def("launch_for_test", &zyfa::launch_for_test, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("softmax_scale"), py::arg("causal"), py::arg("q_descale"), py::arg("k_descale"), py::arg("v_descale"),
        py::arg("return_lse"), py::arg("p_mode"), py::arg("device"), py::arg("stream"),
        "Test entry: the CUDA body on any device's tensors, launching on `stream` of `device`.");
}
