// The shared value checks (see checks.h). Each bound is checked on the float32 value the kernel receives:
// a value finite in float64 may overflow float32 (1e39 -> inf) or underflow to 0 (1e-50), and the kernels
// fold softmax_scale, q_descale, k_descale and log2(e) into one float32 factor, which may do either even
// when each value fits.

#include "checks.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "driver.h"

namespace zyfa_core {

namespace {

constexpr float LOG2E = 1.4426950408889634f;  // the kernels' kLog2e
const char *const DESCALE_NAMES[3] = {"q_descale", "k_descale", "v_descale"};

[[noreturn]] void refuse(const std::string &message) { throw ArgumentError(message); }

std::string float32_limit() { return format_float(std::numeric_limits<float>::max()); }

// The shortest text that reads back as the float32 `x` (0.1f prints as 0.1, not 0.10000000149011612).
std::string format_float32(float x) {
  if (!std::isfinite(x)) return format_float(x);
  char buffer[64];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buffer, nullptr) == x) break;
  }
  std::string s(buffer);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A value's float32 rounding must be finite (else it overflowed) and non-zero (else it underflowed).
void check_float32(const std::string &who, const char *name, double value, float narrowed) {
  if (!std::isfinite(narrowed)) {
    refuse(who + ": " + name + " = " + format_float(value) + " overflows float32, the kernels' type (largest " +
           float32_limit() + ")");
  }
  if (narrowed == 0.0f) {
    refuse(who + ": " + name + " = " + format_float(value) + " is 0 in float32, the kernels' type; it must be " +
           "non-zero there");
  }
}

// The kernels' one factor, in their order: ((softmax_scale * q_descale) * k_descale) * log2(e), in float32.
void check_folded_factor(const std::string &who, bool fp8, const std::array<float, 4> &n) {
  volatile float factor = fp8 ? n[0] * n[1] : n[0];
  if (fp8) factor = factor * n[2];
  factor = factor * LOG2E;
  const float folded = factor;
  if (std::isfinite(folded) && folded != 0.0f) return;
  const std::string terms = fp8 ? "softmax_scale * q_descale * k_descale * log2(e)" : "softmax_scale * log2(e)";
  std::string given = "softmax_scale=" + format_float32(n[0]);
  if (fp8) given += ", q_descale=" + format_float32(n[1]) + ", k_descale=" + format_float32(n[2]);
  refuse(who + ": " + terms + " = " + format_float32(folded) + " in float32, the one factor the kernels scale " +
         "scores by; it must be finite and non-zero (got " + given + ")");
}

// ---------------------------------------------------------------------------------------------- tensors

constexpr long long ALIGN_BYTES = 16;  // 16-byte vector loads: pointers and batch/seq/head strides
constexpr long long INT32_MAX_ = 2147483647;
// heads_q and batch are the tile grid's y and z. A persistent kernel has no such limit, but the op keeps it
// for every kernel and device, so a call fails alike on CPU and GPU.
constexpr long long GRID_YZ_MAX = 65535;

[[noreturn]] void refuse_type(const std::string &message) { throw ArgumentError(message, true); }

std::string tuple_text(const long long *values, int n) {  // Python's repr of a tuple of ints
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + (n == 1 ? ",)" : ")");
}

std::string shape_text(const zyfa_tensor_view &x) { return tuple_text(x.sizes, x.dim); }

void check_dtypes(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v) {
  if (q.dtype != ZYFA_DTYPE_BF16 && q.dtype != ZYFA_DTYPE_E4M3FN) {
    refuse_type(std::string("zyfa: q has dtype ") + q.dtype_name + "; supported are torch.bfloat16 and " +
                "torch.float8_e4m3fn");
  }
  if (k.dtype != q.dtype || v.dtype != q.dtype) {
    refuse_type(std::string("zyfa: q, k, v must share one dtype; got ") + q.dtype_name + ", " + k.dtype_name + ", " +
                v.dtype_name);
  }
}

zyfa_call_dims check_shapes(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v) {
  const long long *a = q.sizes, *b = k.sizes, *c = v.sizes;
  const zyfa_call_dims d{a[0], a[1], b[1], a[2], b[2], a[3], c[3]};
  auto n = [](long long x) { return std::to_string(x); };
  if (!(a[0] == b[0] && b[0] == c[0])) refuse("zyfa: batch sizes differ: q " + n(a[0]) + ", k " + n(b[0]) + ", v " + n(c[0]));
  if (b[1] != c[1]) refuse("zyfa: k and v need the same seqlen_k; got " + n(b[1]) + " and " + n(c[1]));
  if (b[2] != c[2]) refuse("zyfa: k and v need the same number of heads; got " + n(b[2]) + " and " + n(c[2]));
  if (d.heads_q < 1 || d.heads_kv < 1 || d.heads_q % d.heads_kv != 0) {
    refuse("zyfa: heads_q (" + n(d.heads_q) + ") must be a positive multiple of heads_kv (" + n(d.heads_kv) +
           ") (MHA, GQA or MQA)");
  }
  if (b[3] != d.d_qk) refuse("zyfa: q and k need the same head_dim; got " + n(d.d_qk) + " and " + n(b[3]));
  if (!((d.d_qk == 128 && d.d_v == 128) || (d.d_qk == 192 && d.d_v == 128))) {
    refuse("zyfa: head dims (d_qk=" + n(d.d_qk) + ", d_v=" + n(d.d_v) +
           ") are not supported; supported (d_qk, d_v): (128, 128), (192, 128)");
  }
  if (d.heads_q > GRID_YZ_MAX || d.batch > GRID_YZ_MAX) {
    refuse("zyfa: heads_q (" + n(d.heads_q) + ") and batch (" + n(d.batch) + ") must each be <= " + n(GRID_YZ_MAX));
  }
  const std::pair<const char *, const zyfa_tensor_view *> tensors[3] = {{"q", &q}, {"k", &k}, {"v", &v}};
  for (const auto &[name, x] : tensors) {
    for (int i = 0; i < 4; ++i) {
      if (x->sizes[i] > INT32_MAX_) {
        refuse(std::string("zyfa: ") + name + " is too large: sizes must fit in int32, got " + shape_text(*x));
      }
    }
  }
  return d;
}

void check_layout(const char *name, const zyfa_tensor_view &x) {
  long long numel = 1;
  for (int i = 0; i < 4; ++i) numel *= x.sizes[i] > 0 ? 1 : 0;
  if (numel == 0) return;  // nothing is read from an empty tensor
  const std::string strides = tuple_text(x.strides, 4);
  if (x.strides[3] != 1) {
    refuse(std::string("zyfa: ") + name + " must be contiguous in its last dim (head_dim), got strides " + strides +
           "; call " + name + ".contiguous()");
  }
  bool misaligned = x.address_known && x.address % ALIGN_BYTES != 0;
  for (int i = 0; i < 3; ++i) {  // a size-1 dim's stride is never used to step, so it may be anything
    if (x.sizes[i] > 1 && (x.strides[i] * x.element_size) % ALIGN_BYTES != 0) misaligned = true;
  }
  if (misaligned) {
    refuse(std::string("zyfa: ") + name + " must be " + std::to_string(ALIGN_BYTES) +
           "-byte aligned (data pointer and batch/seq/head strides), got strides " + strides + " and storage offset " +
           std::to_string(x.storage_offset) + "; call " + name + ".contiguous()");
  }
}

}  // namespace

zyfa_call_dims check_tensors(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v) {
  const std::pair<const char *, const zyfa_tensor_view *> tensors[3] = {{"q", &q}, {"k", &k}, {"v", &v}};
  for (const auto &[name, x] : tensors) {
    if (x->dim != 4) {
      refuse(std::string("zyfa: ") + name + " must be 4-D [batch, seqlen, heads, head_dim], got shape " +
             shape_text(*x));
    }
  }
  check_dtypes(q, k, v);
  const zyfa_call_dims dims = check_shapes(q, k, v);
  if (std::strcmp(q.device, k.device) != 0 || std::strcmp(k.device, v.device) != 0) {
    refuse(std::string("zyfa: q, k, v must be on one device; got ") + q.device + ", " + k.device + ", " + v.device);
  }
  for (const auto &[name, x] : tensors) check_layout(name, *x);
  return dims;
}

std::string format_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, x);
    if (std::strtod(buffer, nullptr) == x) break;
  }
  std::string s(buffer);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::array<float, 4> check_scalars(const std::string &who, bool fp8, double softmax_scale,
                                   const std::array<double, 3> &descales) {
  if (!std::isfinite(softmax_scale)) {
    refuse(who + ": softmax_scale must be a finite float or None, got " + format_float(softmax_scale));
  }
  if (!fp8 && !(descales[0] == 1.0 && descales[1] == 1.0 && descales[2] == 1.0)) {
    refuse(who + ": descales apply to float8_e4m3fn inputs only; pass 1.0 for bf16");
  }
  for (int i = 0; i < 3; ++i) {
    if (!(std::isfinite(descales[i]) && descales[i] > 0.0)) {
      refuse(who + ": " + DESCALE_NAMES[i] + " must be finite and > 0, got " + format_float(descales[i]));
    }
  }
  std::array<float, 4> n = {static_cast<float>(softmax_scale), static_cast<float>(descales[0]),
                            static_cast<float>(descales[1]), static_cast<float>(descales[2])};
  check_float32(who, "softmax_scale", softmax_scale, n[0]);
  for (int i = 0; i < 3; ++i) check_float32(who, DESCALE_NAMES[i], descales[i], n[i + 1]);
  check_folded_factor(who, fp8, n);
  return n;
}

int check_p_mode(bool fp8, const char *p_mode) {
  if (p_mode == nullptr) return 0;
  const std::string mode(p_mode);
  if (!fp8) refuse("zyfa: p_mode='" + mode + "' applies to float8_e4m3fn inputs only; bf16 takes p_mode=None");
  for (int i = 0; i < 3; ++i) {
    if (mode == P_MODES[i]) return i + 1;
  }
  refuse("zyfa: p_mode='" + mode + "' is not supported; supported: 'exact', 'lean', 'f16' or None");
}

}  // namespace zyfa_core
