// The value checks every path of a ZYFA call shares (the CPU reference, the Python GPU path, the C++ op,
// and zyfa_core.launch on a hand-filled argument struct): one copy, in C++, reached from Python through
// zyfa_core._driver and from native code through zyfa_core_api.h. A refusal throws ArgumentError.

#ifndef ZYFA_CORE_CHECKS_H
#define ZYFA_CORE_CHECKS_H

#include <array>
#include <string>

#include "zyfa_core_api.h"

namespace zyfa_core {

// The FP8 P modes, in the order zyfa_check_p_mode numbers them (1, 2, 3; 0 is None).
constexpr const char *P_MODES[3] = {"exact", "lean", "f16"};

// The shortest text that reads back as `x` (Python's repr of a float for finite values; nan, inf, -inf).
std::string format_float(double x);

// See zyfa_check_tensors in zyfa_core_api.h.
zyfa_call_dims check_tensors(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v);

// See zyfa_check_varlen in zyfa_core_api.h.
zyfa_varlen_dims check_varlen(const zyfa_tensor_view &q, const zyfa_tensor_view &k, const zyfa_tensor_view &v,
                              const zyfa_varlen_views &varlen);

// See zyfa_check_scalars in zyfa_core_api.h. Returns softmax_scale, q, k, v descales as float32.
std::array<float, 4> check_scalars(const std::string &who, bool fp8, double softmax_scale,
                                   const std::array<double, 3> &descales);

// See zyfa_check_p_mode in zyfa_core_api.h; `p_mode` nullptr is None.
int check_p_mode(bool fp8, const char *p_mode);

}  // namespace zyfa_core

#endif  // ZYFA_CORE_CHECKS_H
