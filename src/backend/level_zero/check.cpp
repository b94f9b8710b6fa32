// streampool: how the Level Zero backend checks its calls (see check.hpp).
#include "check.hpp"

#include <cstdarg>
#include <cstdio>
#include <string>

#include "streampool/error.hpp"

namespace streampool::detail::ze {

void check(const driver& d, ze_driver_handle_t drv, ze_result_t r, const char* call, ...) {
  if (r == ZE_RESULT_SUCCESS) [[likely]]
    return;
  std::va_list args;
  va_start(args, call);
  std::string message;
  try {
    message = "level_zero: " + detail::vformat(call, args) + " failed: " + d.describe(r, drv);
  } catch (...) {  // no memory for the message; va_end must still run in this function
    va_end(args);
    throw;
  }
  va_end(args);
  throw backend_error(backend_error_kind::runtime, message, "level_zero", static_cast<long>(r));
}

void report_teardown_error(const driver& d, ze_result_t r, const char* what) noexcept {
  if (r == ZE_RESULT_SUCCESS) return;
  try {
    std::fprintf(stderr, "streampool: level_zero: %s failed: %s\n", what, d.describe(r).c_str());
  } catch (...) {  // no memory for the text: the number at least
    std::fprintf(stderr, "streampool: level_zero: %s failed: 0x%x\n", what,
                 static_cast<unsigned>(r));
  }
}

}  // namespace streampool::detail::ze
