// The C entry points of zyfa_core_api.h: thin wrappers that turn C++ exceptions into a filled
// zyfa_core_error and a non-zero return.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "checks.h"
#include "driver.h"
#include "plan.h"
#include "zyfa_core_api.h"

namespace {

using zyfa_core::ArgumentError;
using zyfa_core::DriverFailure;

void copy_field(char *to, size_t capacity, const std::string &from) {
  const size_t n = std::min(from.size(), capacity - 1);
  std::memcpy(to, from.data(), n);
  to[n] = 0;
}

void report(zyfa_core_error *error, int kind, const std::string &kernel, const std::string &call, long code,
            const std::string &error_name, const std::string &message) {
  if (error == nullptr) return;
  error->kind = kind;
  error->code = code;
  copy_field(error->kernel, sizeof(error->kernel), kernel);
  copy_field(error->call, sizeof(error->call), call);
  copy_field(error->error_name, sizeof(error->error_name), error_name);
  copy_field(error->message, sizeof(error->message), message);
}

// Runs `body`; returns 0, or 1 with `error` filled from the exception it threw.
template <class Body>
int guarded(zyfa_core_error *error, const std::string &kernel, const char *call, Body body) noexcept {
  try {
    body();
    return 0;
  } catch (const DriverFailure &f) {
    report(error, ZYFA_ERROR_DRIVER, f.kernel, f.call, f.code, f.error_name, f.message);
  } catch (const ArgumentError &e) {
    report(error, e.type_error ? ZYFA_ERROR_TYPE : ZYFA_ERROR_VALUE, kernel, call, 0, "", e.message);
  } catch (const std::exception &e) {
    report(error, ZYFA_ERROR_DRIVER, kernel, call, 0, "",
           (kernel.empty() ? "" : kernel + ": ") + call + " failed: " + e.what());
  }
  return 1;
}

}  // namespace

extern "C" int zyfa_core_api_version(void) { return ZYFA_CORE_API_VERSION; }

extern "C" int zyfa_check_tensors(const zyfa_tensor_view *q, const zyfa_tensor_view *k, const zyfa_tensor_view *v,
                                  zyfa_call_dims *dims, zyfa_core_error *error) {
  return guarded(error, "", "check", [&] { *dims = zyfa_core::check_tensors(*q, *k, *v); });
}

extern "C" int zyfa_check_varlen(const zyfa_tensor_view *q, const zyfa_tensor_view *k, const zyfa_tensor_view *v,
                                 const zyfa_varlen_views *varlen, zyfa_varlen_dims *dims, zyfa_core_error *error) {
  return guarded(error, "", "check", [&] { *dims = zyfa_core::check_varlen(*q, *k, *v, *varlen); });
}

extern "C" int zyfa_check_scalars(const char *who, int fp8, double softmax_scale, const double descales[3],
                                  float narrowed[4], zyfa_core_error *error) {
  return guarded(error, "", "check", [&] {
    const auto n = zyfa_core::check_scalars(who ? who : "zyfa", fp8 != 0, softmax_scale,
                                            {descales[0], descales[1], descales[2]});
    std::copy(n.begin(), n.end(), narrowed);
  });
}

extern "C" int zyfa_check_p_mode(int fp8, const char *p_mode, int *index, zyfa_core_error *error) {
  return guarded(error, "", "check", [&] { *index = zyfa_core::check_p_mode(fp8 != 0, p_mode); });
}

extern "C" int zyfa_plan_workspace_bytes(const void *plan, const zyfa_fwd_args *args, const zyfa_varlen_args *varlen,
                                         unsigned long long *bytes, zyfa_core_error *error) {
  if (plan == nullptr || args == nullptr || bytes == nullptr) {
    report(error, ZYFA_ERROR_VALUE, "", "plan", 0, "", "zyfa_plan_workspace_bytes: null plan, args or bytes");
    return 1;
  }
  const auto &p = *static_cast<const zyfa_core::LoadedPlan *>(plan);
  return guarded(error, p.spec.name, "plan", [&] { *bytes = zyfa_core::workspace_bytes(p.spec, *args, varlen); });
}

extern "C" int zyfa_plan_launch(const void *plan, const zyfa_fwd_args *args, const zyfa_varlen_args *varlen,
                                void *stream, unsigned long long workspace, zyfa_core_error *error) {
  if (plan == nullptr || args == nullptr) {
    report(error, ZYFA_ERROR_VALUE, "", "launch", 0, "", "zyfa_plan_launch: null plan or args");
    return 1;
  }
  const auto &p = *static_cast<const zyfa_core::LoadedPlan *>(plan);
  return guarded(error, p.spec.name, "launch", [&] { zyfa_core::launch(p, *args, varlen, stream, workspace); });
}
