// streampool: how every backend turns a failed runtime call into a backend_error.
//
// Glossary
//   runtime errors  what one runtime adds to the checks: the backend's name and its words for a
//                   result code (cuGetErrorName, the CL_* and ZE_RESULT_* names). Everything else
//                   is written once here. Every runtime's success is 0 (CUDA_SUCCESS,
//                   cudaSuccess, CL_SUCCESS, ZE_RESULT_SUCCESS), so a code is all a check needs.
#pragma once

#include <string>

#include "streampool/error.hpp"

namespace streampool::detail {

/// How one runtime names its results (see the glossary). The runtimes' function tables implement
/// it, so that a check needs only the table the call went through.
class runtime_errors {
 public:
  /// The backend's name: backend_error::backend() and the prefix of every message.
  [[nodiscard]] virtual const char* backend() const noexcept = 0;
  /// The words for a failed result, e.g. "CL_OUT_OF_RESOURCES (-5)".
  [[nodiscard]] virtual std::string describe(long code) const = 0;
  /// Whether `code` only says that the runtime is shutting down at process exit: teardown paths
  /// do not report it, since everything the runtime owned goes with it.
  [[nodiscard]] virtual bool shutting_down(long /*code*/) const noexcept { return false; }

 protected:
  runtime_errors() = default;
  runtime_errors(const runtime_errors&) = default;
  runtime_errors& operator=(const runtime_errors&) = default;
  ~runtime_errors() = default;  // never deleted through this type
};

/// Throws backend_error(kind, "<backend>: <message>", backend, code): every backend error names
/// its backend first.
[[noreturn]] void raise_backend_error(backend_error_kind kind, const char* backend, long code,
                                      const std::string& message);

/// The check of every runtime call: when `code` is not 0, throws backend_error (kind runtime,
/// `code` as the native code) "<backend>: <call> failed: <describe(code)>", `call` printf-formatted
/// with the values only then. Results that are not errors to the caller (out of memory where the
/// contract returns nullptr or false, not ready) are handled before it.
[[gnu::format(printf, 3, 4)]] void check(const runtime_errors& runtime, long code, const char* call,
                                         ...);

/// For teardown paths (noexcept operations, destructors), where there is no caller to throw to: a
/// failure is reported once on stderr, "streampool: <backend>: <what> failed: <describe(code)>".
/// It means a broken precondition or a lost device.
void report_teardown_error(const runtime_errors& runtime, long code, const char* what) noexcept;

}  // namespace streampool::detail
