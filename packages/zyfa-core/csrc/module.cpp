// zyfa_core._driver, the Python face of zyfa_core's C++: driver probe and device queries (driver.cpp), the
// shared value checks (checks.cpp) and the launch plan (plan.cpp). zyfa_core.launcher is its only caller in
// the package; native callers use the C API of zyfa_core_api.h instead (c_api.cpp).
//
// C++ exceptions become Python ones here: DriverFailure -> zyfa_core.errors.ZyfaDriverError (with kernel,
// call, code and error_name), ArgumentError -> ValueError or TypeError. Driver calls release the GIL.

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "checks.h"
#include "driver.h"
#include "plan.h"
#include "zyfa_core_api.h"

namespace py = pybind11;
using namespace zyfa_core;

namespace {

PyObject *g_error_class = nullptr;  // zyfa_core.errors.ZyfaDriverError, looked up once; lives until exit

zyfa_fwd_args args_from(const py::bytes &bytes) {
  const std::string_view view = bytes;
  if (view.size() != sizeof(zyfa_fwd_args)) {
    throw ArgumentError("args must be the " + std::to_string(sizeof(zyfa_fwd_args)) +
                        " bytes of zyfa_fwd_args, got " + std::to_string(view.size()));
  }
  zyfa_fwd_args a;
  std::memcpy(&a, view.data(), sizeof(a));
  return a;
}

// zyfa_varlen_args from its bytes, or nullptr for None (a dense call).
struct VarlenBytes {
  zyfa_varlen_args value{};
  bool present = false;
  const zyfa_varlen_args *get() const { return present ? &value : nullptr; }
};

VarlenBytes varlen_from(const py::object &bytes) {
  VarlenBytes v;
  if (bytes.is_none()) return v;
  const std::string data = py::bytes(bytes);
  if (data.size() != sizeof(zyfa_varlen_args)) {
    throw ArgumentError("varlen must be the " + std::to_string(sizeof(zyfa_varlen_args)) +
                        " bytes of zyfa_varlen_args, got " + std::to_string(data.size()));
  }
  std::memcpy(&v.value, data.data(), sizeof(v.value));
  v.present = true;
  return v;
}

// A zyfa_tensor_view with its own storage, from Python's (sizes, strides, element_size, storage_offset,
// dtype code, dtype name, device name, address or None).
struct View {
  std::vector<long long> sizes, strides;
  std::string dtype_name, device;
  zyfa_tensor_view view{};
  // Points the view at this object's own storage (again after a move: short strings move their bytes).
  void bind() {
    view.sizes = sizes.data();
    view.strides = strides.data();
    view.dtype_name = dtype_name.c_str();
    view.device = device.c_str();
  }
};

View view_from(const py::tuple &t) {
  if (t.size() != 8) throw ArgumentError("check_tensors: a tensor is described by 8 values", true);
  View v;
  v.sizes = t[0].cast<std::vector<long long>>();
  v.strides = t[1].cast<std::vector<long long>>();
  v.dtype_name = t[5].cast<std::string>();
  v.device = t[6].cast<std::string>();
  if (v.strides.size() != v.sizes.size()) throw ArgumentError("check_tensors: sizes and strides differ in length");
  v.view.dim = static_cast<int>(v.sizes.size());
  v.view.sizes = v.sizes.data();
  v.view.strides = v.strides.data();
  v.view.element_size = t[2].cast<long long>();
  v.view.storage_offset = t[3].cast<long long>();
  v.view.dtype = t[4].cast<int>();
  v.view.dtype_name = v.dtype_name.c_str();
  v.view.device = v.device.c_str();
  v.view.address_known = !t[7].is_none();
  v.view.address = v.view.address_known ? t[7].cast<unsigned long long>() : 0;
  return v;
}

py::tuple check_tensors_py(const py::tuple &q, const py::tuple &k, const py::tuple &v) {
  View a = view_from(q), b = view_from(k), c = view_from(v);
  for (View *x : {&a, &b, &c}) x->bind();
  const zyfa_call_dims d = check_tensors(a.view, b.view, c.view);
  return py::make_tuple(d.batch, d.seqlen_q, d.seqlen_k, d.heads_q, d.heads_kv, d.d_qk, d.d_v);
}

// check_varlen's optional tensors: a View per given tuple, kept alive with the views struct.
py::tuple check_varlen_py(const py::tuple &q, const py::tuple &k, const py::tuple &v, const py::object &cu_q,
                          const py::object &cu_k, const py::object &seqused_k, const py::object &page_table,
                          const py::object &descales, long long max_seqlen_q, long long max_seqlen_k,
                          bool values_readable) {
  View a = view_from(q), b = view_from(k), c = view_from(v);
  for (View *x : {&a, &b, &c}) x->bind();
  std::vector<View> held;
  held.reserve(5);
  auto optional = [&](const py::object &t) -> const zyfa_tensor_view * {
    if (t.is_none()) return nullptr;
    held.push_back(view_from(t.cast<py::tuple>()));
    held.back().bind();
    return &held.back().view;
  };
  zyfa_varlen_views vl{};
  vl.cu_seqlens_q = optional(cu_q);
  vl.cu_seqlens_k = optional(cu_k);
  vl.seqused_k = optional(seqused_k);
  vl.page_table = optional(page_table);
  vl.descales = optional(descales);
  vl.max_seqlen_q = max_seqlen_q, vl.max_seqlen_k = max_seqlen_k, vl.values_readable = values_readable;
  const zyfa_varlen_dims d = check_varlen(a.view, b.view, c.view, vl);
  return py::make_tuple(d.batch, d.total_q, d.total_k, d.heads_q, d.heads_kv, d.d_qk, d.d_v, d.page_size, d.num_pages,
                        d.max_pages);
}

py::dict probe_dict() {
  ProbeReport r;
  {
    py::gil_scoped_release no_gil;
    r = probe();
  }
  py::dict out;
  out["backend"] = r.backend.empty() ? py::object(py::none()) : py::object(py::str(r.backend));
  out["library"] = r.library;
  out["attempts"] = r.attempts;
  return out;
}

py::dict properties_dict(int device) {
  DeviceProperties p;
  bool cuda = false;
  {
    py::gil_scoped_release no_gil;
    cuda = backend_is_cuda();
    p = device_properties(device);
  }
  py::dict out;
  out["name"] = p.name;
  if (cuda) {
    out["major"] = p.major;
    out["minor"] = p.minor;
    out["multiprocessors"] = p.multiprocessors;
    out["max_shared_memory_per_block_optin"] = p.max_shared_memory_per_block_optin;
  } else {
    out["gcn_arch_name"] = p.gcn_arch_name;
  }
  out["driver_version"] = p.driver_version;
  return out;
}

int data_type_of(const std::string &element) {
  if (element == "bf16") return TENSOR_MAP_BF16;
  if (element == "u8") return TENSOR_MAP_U8;
  throw ArgumentError("encode_tensor_map: dtype must be 'bf16' or 'u8', got '" + element + "'");
}

py::bytes encode_tensor_map(const std::string &element, std::uint64_t address, const std::vector<std::uint64_t> &dims,
                            const std::vector<std::uint64_t> &strides, const std::vector<std::uint32_t> &box,
                            const std::string &kernel) {
  const int data_type = data_type_of(element);
  if (dims.size() != 4 || strides.size() != 3 || box.size() != 4) {
    throw ArgumentError("encode_tensor_map: needs 4 dims, 3 strides and 4 box sizes; got " +
                        std::to_string(dims.size()) + ", " + std::to_string(strides.size()) + " and " +
                        std::to_string(box.size()));
  }
  alignas(TENSOR_MAP_ALIGN) unsigned char map[TENSOR_MAP_BYTES] = {0};
  {
    py::gil_scoped_release no_gil;
    encode_map(map, data_type, reinterpret_cast<const void *>(static_cast<std::uintptr_t>(address)), dims.data(),
               strides.data(), box.data(), kernel);
  }
  return py::bytes(reinterpret_cast<const char *>(map), TENSOR_MAP_BYTES);
}

// Plan.tma_maps: the maps encoded by the driver, or by `encode` (a Python callable, as
// encode_tensor_map's signature) when given.
py::bytes tma_maps(const PlanSpec &spec, const py::bytes &args, const py::object &encode, const py::object &varlen) {
  const zyfa_fwd_args a = args_from(args);
  const VarlenBytes v = varlen_from(varlen);
  alignas(64) zyfa_tma_maps maps;
  fill_tma_maps(spec, a, v.get(), maps, [&](void *map_out, int data_type, const MapGeometry &g) {
    if (encode.is_none()) {
      py::gil_scoped_release no_gil;
      encode_map(map_out, data_type, g.address, g.dims, g.strides, g.box, spec.name);
      return;
    }
    const std::string element = data_type == TENSOR_MAP_BF16 ? "bf16" : "u8";
    const std::string map = py::bytes(encode(element, reinterpret_cast<std::uintptr_t>(g.address),
                                             std::vector<std::uint64_t>(g.dims, g.dims + 4),
                                             std::vector<std::uint64_t>(g.strides, g.strides + 3),
                                             std::vector<std::uint32_t>(g.box, g.box + 4)));
    if (map.size() != TENSOR_MAP_BYTES) {
      throw ArgumentError(spec.name + ": a tensor map must be " + std::to_string(TENSOR_MAP_BYTES) + " bytes, got " +
                          std::to_string(map.size()));
    }
    std::memcpy(map_out, map.data(), TENSOR_MAP_BYTES);
  });
  return py::bytes(reinterpret_cast<const char *>(&maps), sizeof(maps));
}

PlanSpec make_spec(const std::string &name, const std::string &dtype, int d_qk, int d_v, bool causal, int tile_m,
                   int tile_n, int threads, unsigned smem, const std::string &grid, const std::string &loads,
                   const std::string &v_prep, const std::string &layout, long long max_kv_seq_stride) {
  if (layout != "dense" && layout != "varlen" && layout != "paged") {
    throw ArgumentError(name + ": layout must be 'dense', 'varlen' or 'paged'");
  }
  if (dtype != "bf16" && dtype != "e4m3fn") throw ArgumentError(name + ": dtype must be 'bf16' or 'e4m3fn'");
  if (grid != "tiles" && grid != "persistent" && grid != "batch_tiles" && grid != "dynamic") {
    throw ArgumentError(name + ": grid must be 'tiles', 'persistent', 'batch_tiles' or 'dynamic'");
  }
  if (loads != "cp.async" && loads != "tma") throw ArgumentError(name + ": loads must be 'cp.async' or 'tma'");
  PlanSpec s;
  s.name = name, s.v_prep = v_prep, s.fp8 = dtype == "e4m3fn", s.causal = causal;
  s.grid = grid == "persistent" ? Grid::persistent
           : grid == "batch_tiles" ? Grid::batch_tiles
           : grid == "dynamic"     ? Grid::dynamic
                                   : Grid::tiles;
  s.tma = loads == "tma";
  s.layout = layout == "dense" ? Layout::dense : layout == "varlen" ? Layout::varlen : Layout::paged;
  s.d_qk = d_qk, s.d_v = d_v, s.tile_m = tile_m, s.tile_n = tile_n, s.threads = threads, s.smem = smem;
  s.max_kv_seq_stride = max_kv_seq_stride;
  check_spec(s);
  return s;
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const DriverFailure &f) {
    py::object cls = py::reinterpret_borrow<py::object>(g_error_class);
    py::object exc = cls(f.message, py::arg("kernel") = f.kernel, py::arg("call") = f.call, py::arg("code") = f.code,
                         py::arg("error_name") = f.error_name);
    PyErr_SetObject(g_error_class, exc.ptr());
  } catch (const ArgumentError &e) {
    PyErr_SetString(e.type_error ? PyExc_TypeError : PyExc_ValueError, e.message.c_str());
  }
}

}  // namespace

PYBIND11_MODULE(_driver, m) {
  m.doc() = "zyfa_core's C++: GPU driver (dlopens libcuda.so.1 or libamdhip64.so), checks, launch plan.";
  g_error_class = py::object(py::module_::import("zyfa_core.errors").attr("ZyfaDriverError")).release().ptr();
  py::register_exception_translator(&translate);

  py::class_<PlanSpec>(m, "Plan", "A kernel's launch plan (from its manifest row); needs no GPU.")
      .def(py::init(&make_spec), py::arg("name"), py::arg("dtype"), py::arg("d_qk"), py::arg("d_v"),
           py::arg("causal"), py::arg("tile_m"), py::arg("tile_n"), py::arg("threads"), py::arg("smem"),
           py::arg("grid"), py::arg("loads"), py::arg("v_prep"), py::arg("layout") = "dense",
           py::arg("max_kv_seq_stride") = 0)
      .def_readonly("name", &PlanSpec::name)
      .def("check", [](const PlanSpec &s, const py::bytes &args, const py::object &varlen) {
             check_args(s, args_from(args), varlen_from(varlen).get());
           }, py::arg("args"), py::arg("varlen") = py::none(),
           "Raise ValueError unless the argument bytes (and zyfa_varlen_args bytes of a packed call) can be "
           "launched with this kernel.")
      .def("grid", [](const PlanSpec &s, const py::bytes &args, long long mp, const py::object &varlen) {
             return launch_grid(s, args_from(args), varlen_from(varlen).get(), mp);
           }, py::arg("args"), py::arg("multiprocessors"), py::arg("varlen") = py::none(),
           "The launch grid (multiprocessors: persistent only; varlen: the zyfa_varlen_args bytes of a packed "
           "kernel).")
      .def("workspace_bytes", [](const PlanSpec &s, const py::bytes &args, const py::object &varlen) {
             return workspace_bytes(s, args_from(args), varlen_from(varlen).get());
           }, py::arg("args"), py::arg("varlen") = py::none(),
           "Device workspace bytes of one launch (V pre-pass, item counter; 0 for none).")
      .def("check_workspace", [](const PlanSpec &s, const py::bytes &args, std::uint64_t workspace,
                                 const py::object &varlen) {
             check_workspace(s, args_from(args), varlen_from(varlen).get(), workspace);
           }, py::arg("args"), py::arg("workspace"), py::arg("varlen") = py::none())
      .def("tma_usable", [](const PlanSpec &s, const py::bytes &args, const py::object &varlen) {
             std::array<MapGeometry, 3> g;
             return tma_geometry(s, args_from(args), varlen_from(varlen).get(), g);
           }, py::arg("args"), py::arg("varlen") = py::none())
      .def("tma_maps", &tma_maps, py::arg("args"), py::arg("encode") = py::none(), py::arg("varlen") = py::none(),
           "The zyfa_tma_maps bytes (448): encoded by the driver, or by encode(element, address, dims, strides, "
           "box) -> 128 bytes when given; all zero when q/k/v cannot be described by maps. varlen: the "
           "zyfa_varlen_args bytes of a packed call (maps over its total rows).");

  py::class_<LoadedPlan>(m, "LoadedPlan", "A plan with its kernels loaded on one device (kept for the process).")
      .def_property_readonly("name", [](const LoadedPlan &p) { return p.spec.name; })
      .def_property_readonly("device", [](const LoadedPlan &p) { return p.kernel.device; })
      .def_readonly("multiprocessors", &LoadedPlan::multiprocessors)
      .def_property_readonly("handle", [](const LoadedPlan &p) { return reinterpret_cast<std::uintptr_t>(&p); },
                             "This plan's address for zyfa_plan_launch (zyfa_core_api.h); valid while it lives.")
      .def_property_readonly(
          "kernel_params",
          [](const LoadedPlan &p) {
            return py::tuple(py::cast(p.kernel.param_sizes));
          },
          "The byte sizes of the kernel's declared parameters, in order; empty where the driver cannot tell.")
      .def("launch", [](const LoadedPlan &p, const py::bytes &args, std::uintptr_t stream, std::uint64_t workspace,
                        const py::object &varlen) {
             const zyfa_fwd_args a = args_from(args);
             const VarlenBytes v = varlen_from(varlen);
             py::gil_scoped_release no_gil;
             launch(p, a, v.get(), reinterpret_cast<void *>(stream), workspace);
           }, py::arg("args"), py::arg("stream"), py::arg("workspace") = 0, py::arg("varlen") = py::none(),
           "Check and launch (V pre-pass, kernel with zyfa_varlen_args and / or TMA maps) on `stream`; the GIL is released.");

  m.def("load_plan", [](const PlanSpec &spec, int device, const std::string &path) {
          py::gil_scoped_release no_gil;
          return new LoadedPlan(load_plan(spec, device, path));
        }, py::arg("plan"), py::arg("device"), py::arg("path"), py::return_value_policy::take_ownership,
        "Load a plan's kernels (and V pre-pass) from the code object at `path` on `device`.");
  m.def("check_tensors", &check_tensors_py, py::arg("q"), py::arg("k"), py::arg("v"),
        "See zyfa_check_tensors in zyfa_core_api.h; each tensor is (sizes, strides, element_size, storage_offset, "
        "dtype code (DTYPE_*), dtype name, device name, data address or None). Returns (batch, seqlen_q, seqlen_k, "
        "heads_q, heads_kv, d_qk, d_v).");
  m.def("check_varlen", &check_varlen_py, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens_q"),
        py::arg("cu_seqlens_k"), py::arg("seqused_k"), py::arg("page_table"), py::arg("descales"),
        py::arg("max_seqlen_q"), py::arg("max_seqlen_k"), py::arg("values_readable"),
        "See zyfa_check_varlen in zyfa_core_api.h; tensors as check_tensors takes them, None where absent. Returns "
        "(batch, total_q, total_k, heads_q, heads_kv, d_qk, d_v, page_size, num_pages, max_pages).");
  m.def("check_scalars", [](const std::string &who, bool fp8, double scale, double qd, double kd, double vd) {
          const auto n = check_scalars(who, fp8, scale, {qd, kd, vd});
          return py::make_tuple(n[0], n[1], n[2], n[3]);
        }, py::arg("who"), py::arg("fp8"), py::arg("softmax_scale"), py::arg("q_descale"), py::arg("k_descale"),
        py::arg("v_descale"), "See zyfa_check_scalars in zyfa_core_api.h; returns the float32 values.");
  m.def("check_p_mode", [](bool fp8, const std::optional<std::string> &p_mode) {
          return check_p_mode(fp8, p_mode ? p_mode->c_str() : nullptr);
        }, py::arg("fp8"), py::arg("p_mode"), "See zyfa_check_p_mode in zyfa_core_api.h.");
  m.def("probe", &probe_dict, "Load a GPU driver once; returns {'backend', 'library', 'attempts'}. Never raises.");
  m.def("device_count", [] {
    py::gil_scoped_release no_gil;
    return device_count();
  }, "Number of devices of the loaded backend.");
  m.def("device_properties", &properties_dict, py::arg("device"),
        "CUDA: name, major, minor, multiprocessors, max_shared_memory_per_block_optin, driver_version. "
        "HIP: name, gcn_arch_name, driver_version.");
  m.def("encode_tensor_map", &encode_tensor_map, py::arg("dtype"), py::arg("address"), py::arg("dims"),
        py::arg("strides"), py::arg("box"), py::arg("kernel") = "",
        "cuTensorMapEncodeTiled of a rank-4 tensor: dtype 'bf16' or 'u8', the device address, dims (4, "
        "elements), strides (3, bytes), box (4). Returns the 128 map bytes. CUDA only.");
  m.attr("P_MODES") = py::make_tuple(P_MODES[0], P_MODES[1], P_MODES[2]);
  m.attr("API_VERSION") = ZYFA_CORE_API_VERSION;
  m.attr("DTYPE_OTHER") = ZYFA_DTYPE_OTHER;
  m.attr("DTYPE_BF16") = ZYFA_DTYPE_BF16;
  m.attr("DTYPE_E4M3FN") = ZYFA_DTYPE_E4M3FN;
  m.attr("DTYPE_INT32") = ZYFA_DTYPE_INT32;
  m.attr("DTYPE_FLOAT32") = ZYFA_DTYPE_FLOAT32;
  m.attr("VARLEN_ARGS_SIZE") = sizeof(zyfa_varlen_args);
  m.attr("TENSOR_MAP_BYTES") = TENSOR_MAP_BYTES;
}
