// streampool: how every backend turns a failed runtime call into a backend_error (check.hpp).
#include "backend/common/check.hpp"

#include <cstdarg>
#include <cstdio>

namespace streampool::detail {

void raise_backend_error(backend_error_kind kind, const char* backend, long code,
                         const std::string& message) {
  throw backend_error(kind, std::string(backend) + ": " + message, backend, code);
}

void check(const runtime_errors& runtime, long code, const char* call, ...) {
  if (code == 0) [[likely]]
    return;
  const std::string why = runtime.describe(code);
  std::va_list args;
  va_start(args, call);
  std::string message;
  try {
    message = vformat(call, args) + " failed: " + why;
  } catch (...) {  // no memory for the message; va_end must still run in this function
    va_end(args);
    throw;
  }
  va_end(args);
  raise_backend_error(backend_error_kind::runtime, runtime.backend(), code, message);
}

void report_teardown_error(const runtime_errors& runtime, long code, const char* what) noexcept {
  if (code == 0 || runtime.shutting_down(code)) return;
  try {
    std::fprintf(stderr, "streampool: %s: %s failed: %s\n", runtime.backend(), what,
                 runtime.describe(code).c_str());
  } catch (...) {  // no memory for the words: the number at least
    std::fprintf(stderr, "streampool: %s: %s failed: %ld (0x%lx)\n", runtime.backend(), what, code,
                 static_cast<unsigned long>(code));
  }
}

}  // namespace streampool::detail
