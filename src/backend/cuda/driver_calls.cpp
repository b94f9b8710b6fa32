// streampool: checked driver calls (driver_calls.hpp).
#include "driver_calls.hpp"

#include "streampool/error.hpp"

namespace streampool::detail::cu {

std::string failure(const char* call, std::va_list args, const std::string& why) {
  return "cuda: " + detail::vformat(call, args) + " failed: " + why;
}

void check(const driver& d, result r, const char* call, ...) {
  if (r == success) [[likely]]
    return;
  std::va_list args;
  va_start(args, call);
  std::string message;
  try {
    message = failure(call, args, d.describe(r));
  } catch (...) {  // no memory for the message; va_end must still run in this function
    va_end(args);
    throw;
  }
  va_end(args);
  throw backend_error(backend_error_kind::runtime, message, "cuda", r);
}

}  // namespace streampool::detail::cu
