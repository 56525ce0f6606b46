// The shared value checks (see checks.h). Each bound is checked on the float32 value the kernel receives:
// a value finite in float64 may overflow float32 (1e39 -> inf) or underflow to 0 (1e-50), and the kernels
// fold softmax_scale, q_descale, k_descale and log2(e) into one float32 factor, which may do either even
// when each value fits.

#include "checks.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>
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

// Heads and head dims, shared by the dense and the packed (varlen) checks; d_k is k's head_dim.
void check_heads_and_dims(long long heads_q, long long heads_kv, long long d_qk, long long d_k, long long d_v) {
  auto n = [](long long x) { return std::to_string(x); };
  if (heads_q < 1 || heads_kv < 1 || heads_q % heads_kv != 0) {
    refuse("zyfa: heads_q (" + n(heads_q) + ") must be a positive multiple of heads_kv (" + n(heads_kv) +
           ") (MHA, GQA or MQA)");
  }
  if (d_k != d_qk) refuse("zyfa: q and k need the same head_dim; got " + n(d_qk) + " and " + n(d_k));
  if (!((d_qk == 128 && d_v == 128) || (d_qk == 192 && d_v == 128))) {
    refuse("zyfa: head dims (d_qk=" + n(d_qk) + ", d_v=" + n(d_v) +
           ") are not supported; supported (d_qk, d_v): (128, 128), (192, 128)");
  }
}

void check_int32_sizes(const char *name, const zyfa_tensor_view &x) {
  for (int i = 0; i < x.dim; ++i) {
    if (x.sizes[i] > INT32_MAX_) {
      refuse(std::string("zyfa: ") + name + " is too large: sizes must fit in int32, got " + shape_text(x));
    }
  }
}

zyfa_call_dims check_shapes(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v) {
  const long long *a = q.sizes, *b = k.sizes, *c = v.sizes;
  const zyfa_call_dims d{a[0], a[1], b[1], a[2], b[2], a[3], c[3]};
  auto n = [](long long x) { return std::to_string(x); };
  if (!(a[0] == b[0] && b[0] == c[0])) refuse("zyfa: batch sizes differ: q " + n(a[0]) + ", k " + n(b[0]) + ", v " + n(c[0]));
  if (b[1] != c[1]) refuse("zyfa: k and v need the same seqlen_k; got " + n(b[1]) + " and " + n(c[1]));
  if (b[2] != c[2]) refuse("zyfa: k and v need the same number of heads; got " + n(b[2]) + " and " + n(c[2]));
  check_heads_and_dims(d.heads_q, d.heads_kv, d.d_qk, b[3], d.d_v);
  if (d.heads_q > GRID_YZ_MAX || d.batch > GRID_YZ_MAX) {
    refuse("zyfa: heads_q (" + n(d.heads_q) + ") and batch (" + n(d.batch) + ") must each be <= " + n(GRID_YZ_MAX));
  }
  check_int32_sizes("q", q);
  check_int32_sizes("k", k);
  check_int32_sizes("v", v);
  return d;
}

void check_layout(const char *name, const zyfa_tensor_view &x) {
  const int last = x.dim - 1;
  long long numel = 1;
  for (int i = 0; i < x.dim; ++i) numel *= x.sizes[i] > 0 ? 1 : 0;
  if (numel == 0) return;  // nothing is read from an empty tensor
  const std::string strides = tuple_text(x.strides, x.dim);
  if (x.strides[last] != 1) {
    refuse(std::string("zyfa: ") + name + " must be contiguous in its last dim (head_dim), got strides " + strides +
           "; call " + name + ".contiguous()");
  }
  bool misaligned = x.address_known && x.address % ALIGN_BYTES != 0;
  for (int i = 0; i < last; ++i) {  // a size-1 dim's stride is never used to step, so it may be anything
    if (x.sizes[i] > 1 && (x.strides[i] * x.element_size) % ALIGN_BYTES != 0) misaligned = true;
  }
  if (misaligned) {
    refuse(std::string("zyfa: ") + name + " must be " + std::to_string(ALIGN_BYTES) +
           "-byte aligned (data pointer and the strides of all but head_dim), got strides " + strides +
           " and storage offset " +
           std::to_string(x.storage_offset) + "; call " + name + ".contiguous()");
  }
}

// ---------------------------------------------------------------------------------- packed batches

std::string n_(long long x) { return std::to_string(x); }

// An index tensor: the dtype, rank and sizes given (-1: any), the last dim contiguous, q's device.
void check_index(const char *name, const zyfa_tensor_view &x, int dtype, const char *dtype_text,
                 std::initializer_list<long long> sizes, const char *shape_text_expected, const zyfa_tensor_view &q) {
  if (x.dtype != dtype) {
    refuse_type(std::string("zyfa: ") + name + " must be a " + dtype_text + " tensor, got " + x.dtype_name);
  }
  bool ok = x.dim == static_cast<int>(sizes.size());
  int i = 0;
  for (long long want : sizes) ok = ok && (want < 0 || (i < x.dim && x.sizes[i] == want)), ++i;
  if (!ok) {
    refuse(std::string("zyfa: ") + name + " must have shape " + shape_text_expected + ", got " + shape_text(x));
  }
  if (x.dim > 0 && x.sizes[x.dim - 1] > 1 && x.strides[x.dim - 1] != 1) {
    refuse(std::string("zyfa: ") + name + " must be contiguous in its last dim, got strides " +
           tuple_text(x.strides, x.dim) + "; call " + name + ".contiguous()");
  }
  if (std::strcmp(x.device, q.device) != 0) {
    refuse(std::string("zyfa: ") + name + " must be on q's device (" + q.device + "), got " + x.device);
  }
}

const int32_t *host_int32(const zyfa_tensor_view &x) {
  return reinterpret_cast<const int32_t *>(static_cast<std::uintptr_t>(x.address));
}

// cu_seqlens values: non-decreasing, within 0..rows, each difference <= max_len.
void check_offsets(const char *name, const zyfa_tensor_view &cu, long long rows, const char *rows_name,
                   long long max_len, const char *max_name) {
  const int32_t *c = host_int32(cu);
  const long long stride = cu.strides[0];
  const long long count = cu.sizes[0];
  if (c[0] < 0) refuse(std::string("zyfa: ") + name + "[0] = " + n_(c[0]) + " is negative");
  for (long long b = 0; b + 1 < count; ++b) {
    const long long len = static_cast<long long>(c[(b + 1) * stride]) - c[b * stride];
    if (len < 0) {
      refuse(std::string("zyfa: ") + name + " must be non-decreasing; " + name + "[" + n_(b + 1) + "] = " +
             n_(c[(b + 1) * stride]) + " < " + name + "[" + n_(b) + "] = " + n_(c[b * stride]));
    }
    if (len > max_len) {
      refuse(std::string("zyfa: sequence ") + n_(b) + " has " + n_(len) + " rows by " + name + ", more than " +
             max_name + " = " + n_(max_len));
    }
  }
  if (c[(count - 1) * stride] > rows) {
    refuse(std::string("zyfa: ") + name + "[-1] = " + n_(c[(count - 1) * stride]) + " exceeds the " + n_(rows) +
           " rows of " + rows_name);
  }
}

// Key counts from seqused_k against the packed rows or the pages of each sequence, and the pages used.
void check_key_counts(const zyfa_varlen_views &vl, const zyfa_varlen_dims &d) {
  if (vl.seqused_k == nullptr) return;
  const int32_t *used = host_int32(*vl.seqused_k);
  const int32_t *cu = vl.cu_seqlens_k ? host_int32(*vl.cu_seqlens_k) : nullptr;
  for (long long b = 0; b < d.batch; ++b) {
    const long long len = used[b * vl.seqused_k->strides[0]];
    const std::string which = "seqused_k[" + n_(b) + "] = " + n_(len);
    if (len < 0) refuse("zyfa: " + which + " is negative");
    if (len > vl.max_seqlen_k) refuse("zyfa: " + which + " exceeds max_seqlen_k = " + n_(vl.max_seqlen_k));
    if (d.page_size == 0 && cu != nullptr) {
      const long long s = vl.cu_seqlens_k->strides[0];
      const long long rows = static_cast<long long>(cu[(b + 1) * s]) - cu[b * s];
      if (len > rows) refuse("zyfa: " + which + " exceeds the " + n_(rows) + " rows cu_seqlens_k gives sequence " + n_(b));
    }
    if (d.page_size > 0 && len > d.max_pages * d.page_size) {
      refuse("zyfa: " + which + " exceeds the " + n_(d.max_pages) + " pages x " + n_(d.page_size) +
             " keys of page_table's row");
    }
  }
}

long long key_count(const zyfa_varlen_views &vl, long long b) {
  if (vl.seqused_k) return host_int32(*vl.seqused_k)[b * vl.seqused_k->strides[0]];
  const long long s = vl.cu_seqlens_k->strides[0];
  const int32_t *cu = host_int32(*vl.cu_seqlens_k);
  return static_cast<long long>(cu[(b + 1) * s]) - cu[b * s];
}

void check_pages(const zyfa_varlen_views &vl, const zyfa_varlen_dims &d) {
  const zyfa_tensor_view &t = *vl.page_table;
  const int32_t *table = host_int32(t);
  for (long long b = 0; b < d.batch; ++b) {
    const long long len = key_count(vl, b);
    if (len > d.max_pages * d.page_size) {
      refuse("zyfa: sequence " + n_(b) + " has " + n_(len) + " keys, more than the " + n_(d.max_pages) + " pages x " +
             n_(d.page_size) + " keys of page_table's row");
    }
    for (long long p = 0; p < (len + d.page_size - 1) / d.page_size; ++p) {
      const long long page = table[b * t.strides[0] + p * (t.dim > 1 ? t.strides[1] : 1)];
      if (page < 0 || page >= d.num_pages) {
        refuse("zyfa: page_table[" + n_(b) + ", " + n_(p) + "] = " + n_(page) + " is not a page of the cache (0.." +
               n_(d.num_pages - 1) + ")");
      }
    }
  }
}

// The shapes of q, k, v in the packed (or paged) layout; fills every dims field but batch.
zyfa_varlen_dims check_packed_shapes(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v,
                                     bool paged) {
  const int kv_rank = paged ? 4 : 3;
  const char *kv_layout = paged ? "[num_pages, page_size, heads_kv, head_dim] (a paged cache, with page_table)"
                                : "[total_k, heads_kv, head_dim] (packed; pass page_table for a paged cache)";
  if (q.dim != 3) refuse("zyfa: q must be 3-D [total_q, heads_q, head_dim] (packed), got shape " + shape_text(q));
  for (const auto &[name, x] : {std::pair<const char *, const zyfa_tensor_view *>{"k", &k}, {"v", &v}}) {
    if (x->dim != kv_rank) refuse(std::string("zyfa: ") + name + " must be " + kv_layout + ", got shape " + shape_text(*x));
  }
  const int h = kv_rank - 2;
  for (int i = 0; i < h + 1; ++i) {
    if (k.sizes[i] != v.sizes[i]) {
      refuse("zyfa: k and v need the same shape but head_dim; got " + shape_text(k) + " and " + shape_text(v));
    }
  }
  zyfa_varlen_dims d{};
  d.total_q = q.sizes[0], d.heads_q = q.sizes[1], d.d_qk = q.sizes[2];
  d.heads_kv = k.sizes[h], d.d_v = v.sizes[h + 1];
  check_heads_and_dims(d.heads_q, d.heads_kv, d.d_qk, k.sizes[h + 1], d.d_v);
  if (paged) {
    d.num_pages = k.sizes[0], d.page_size = k.sizes[1], d.total_k = d.num_pages * d.page_size;
    if (d.page_size < 1) refuse("zyfa: the paged cache has page_size " + n_(d.page_size) + "; it must be >= 1");
  } else {
    d.total_k = k.sizes[0];
  }
  if (d.heads_q > GRID_YZ_MAX) refuse("zyfa: heads_q (" + n_(d.heads_q) + ") must be <= " + n_(GRID_YZ_MAX));
  check_int32_sizes("q", q);
  check_int32_sizes("k", k);
  check_int32_sizes("v", v);
  if (d.total_k > INT32_MAX_) refuse("zyfa: the paged cache holds " + n_(d.total_k) + " keys; at most " + n_(INT32_MAX_));
  return d;
}

void check_index_tensors(const zyfa_tensor_view &q, const zyfa_varlen_views &vl, zyfa_varlen_dims &d) {
  if (vl.cu_seqlens_q == nullptr) refuse("zyfa: cu_seqlens_q is required (int32 [batch + 1] query row offsets)");
  check_index("cu_seqlens_q", *vl.cu_seqlens_q, ZYFA_DTYPE_INT32, "torch.int32", {-1}, "(batch + 1,)", q);
  d.batch = vl.cu_seqlens_q->sizes[0] - 1;
  if (d.batch < 0) refuse("zyfa: cu_seqlens_q must have batch + 1 >= 1 values, got shape (0,)");
  if (d.batch > GRID_YZ_MAX) refuse("zyfa: batch (" + n_(d.batch) + ") must be <= " + n_(GRID_YZ_MAX));
  const std::string bp1 = "(" + n_(d.batch + 1) + ",) (batch + 1, as cu_seqlens_q)";
  const std::string b = "(" + n_(d.batch) + ",) (batch)";
  if (vl.cu_seqlens_k) {
    check_index("cu_seqlens_k", *vl.cu_seqlens_k, ZYFA_DTYPE_INT32, "torch.int32", {d.batch + 1}, bp1.c_str(), q);
  } else if (!(vl.page_table && vl.seqused_k)) {
    refuse("zyfa: cu_seqlens_k is required unless page_table and seqused_k give the keys of each sequence");
  }
  if (vl.seqused_k) check_index("seqused_k", *vl.seqused_k, ZYFA_DTYPE_INT32, "torch.int32", {d.batch}, b.c_str(), q);
  if (vl.page_table) {
    const std::string shape = "(" + n_(d.batch) + ", max_pages) (batch rows)";
    check_index("page_table", *vl.page_table, ZYFA_DTYPE_INT32, "torch.int32", {d.batch, -1}, shape.c_str(), q);
    d.max_pages = vl.page_table->sizes[1];
  }
  if (vl.descales) {
    const std::string shape = "(3, " + n_(d.batch) + ", " + n_(d.heads_kv) + ") (q, k, v x batch x heads_kv)";
    check_index("descales", *vl.descales, ZYFA_DTYPE_FLOAT32, "torch.float32", {3, d.batch, d.heads_kv}, shape.c_str(),
                q);
    const zyfa_tensor_view &t = *vl.descales;
    if (t.strides[0] != d.batch * d.heads_kv || t.strides[1] != d.heads_kv) {
      refuse("zyfa: the descale table must be contiguous, got strides " + tuple_text(t.strides, 3));
    }
  }
  for (const auto &[name, value] : {std::pair<const char *, long long>{"max_seqlen_q", vl.max_seqlen_q},
                                    {"max_seqlen_k", vl.max_seqlen_k}}) {
    if (value < 0 || value > INT32_MAX_) {
      refuse(std::string("zyfa: ") + name + " = " + n_(value) + " must be in 0.." + n_(INT32_MAX_));
    }
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

zyfa_varlen_dims check_varlen(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v,
                              const zyfa_varlen_views &vl) {
  check_dtypes(q, k, v);
  zyfa_varlen_dims d = check_packed_shapes(q, k, v, vl.page_table != nullptr);
  check_index_tensors(q, vl, d);
  if (std::strcmp(q.device, k.device) != 0 || std::strcmp(k.device, v.device) != 0) {
    refuse(std::string("zyfa: q, k, v must be on one device; got ") + q.device + ", " + k.device + ", " + v.device);
  }
  const std::pair<const char *, const zyfa_tensor_view *> tensors[3] = {{"q", &q}, {"k", &k}, {"v", &v}};
  for (const auto &[name, x] : tensors) check_layout(name, *x);
  if (!vl.values_readable || d.batch == 0) return d;
  check_offsets("cu_seqlens_q", *vl.cu_seqlens_q, d.total_q, "q", vl.max_seqlen_q, "max_seqlen_q");
  if (vl.cu_seqlens_k && !vl.page_table) {
    const long long max_k = vl.seqused_k ? INT32_MAX_ : vl.max_seqlen_k;
    check_offsets("cu_seqlens_k", *vl.cu_seqlens_k, d.total_k, "k", max_k, "max_seqlen_k");
  }
  check_key_counts(vl, d);
  if (!vl.seqused_k && vl.page_table) {
    for (long long b = 0; b < d.batch; ++b) {
      const long long len = key_count(vl, b);
      if (len < 0) refuse("zyfa: cu_seqlens_k must be non-decreasing; sequence " + n_(b) + " has " + n_(len) + " keys");
      if (len > vl.max_seqlen_k) {
        refuse("zyfa: sequence " + n_(b) + " has " + n_(len) + " keys, more than max_seqlen_k = " + n_(vl.max_seqlen_k));
      }
    }
  }
  if (vl.page_table) check_pages(vl, d);
  return d;
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
