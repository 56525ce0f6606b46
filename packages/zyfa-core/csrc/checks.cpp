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

}  // namespace

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
