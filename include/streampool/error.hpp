// streampool: errors.
//
// Glossary
//   logic_error     the caller broke a precondition (double free, foreign pointer, a view out of
//                   bounds, wrong device). The pool is left exactly as it was before the call.
//   out_of_memory   the upstream or the pool's memory limit refused, even after trimming the cache
//                   and running every reclaim hook. Carries the numbers.
//   backend_error   a GPU runtime (or the host backend) reported a failure; carries the backend's
//                   name, its native error code and a kind, so that callers (the C ABI) decide
//                   by the kind, never by the wording of the message:
//     unavailable   the runtime cannot be loaded or initialised (no driver, cuInit failed): the
//                   backend does not exist on this machine. The C ABI says NOT_AVAILABLE.
//     no_device     the runtime works but has no device of the requested ordinal. NOT_AVAILABLE.
//     runtime       a call into a working runtime failed (the native code says which); anything
//                   the program may not simply skip. The C ABI says BACKEND_ERROR.
//
// Raise them with STREAMPOOL_EXPECTS / STREAMPOOL_FAIL, which add file:line. The file is named
// from the source tree's root (src/core/pool/pool.cpp, include/streampool/array.hpp), never by the
// absolute path the compiler saw: the macros also expand in users' translation units (inline
// code in the public headers), and a message must not carry the build machine's directories.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

#include "streampool/export.hpp"

namespace streampool {

/// A precondition was violated. The pool is unchanged.
class STREAMPOOL_EXPORT logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Out of memory after trimming and reclaiming. `what()` names the request, the limit, live and
/// cached bytes; the fields carry the same numbers for programs.
class STREAMPOOL_EXPORT out_of_memory : public std::bad_alloc {
 public:
  out_of_memory(std::string message, std::size_t requested, std::size_t limit, std::size_t live,
                std::size_t cached)
      : message_(std::move(message)),
        requested_(requested),
        limit_(limit),
        live_(live),
        cached_(cached) {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  [[nodiscard]] std::size_t requested() const noexcept { return requested_; }
  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t live() const noexcept { return live_; }
  [[nodiscard]] std::size_t cached() const noexcept { return cached_; }

 private:
  std::string message_;
  std::size_t requested_, limit_, live_, cached_;
};

/// What kind of failure a backend_error is (see the glossary above).
enum class backend_error_kind : std::uint8_t { unavailable, no_device, runtime };

/// A backend (GPU runtime) is missing, has no such device, or one of its calls failed.
class STREAMPOOL_EXPORT backend_error : public std::runtime_error {
 public:
  backend_error(backend_error_kind kind, const std::string& message, std::string backend,
                long native_code)
      : std::runtime_error(message),
        backend_(std::move(backend)),
        native_code_(native_code),
        kind_(kind) {}
  [[nodiscard]] backend_error_kind kind() const noexcept { return kind_; }
  [[nodiscard]] const std::string& backend() const noexcept { return backend_; }
  [[nodiscard]] long native_code() const noexcept { return native_code_; }

 private:
  std::string backend_;
  long native_code_;
  backend_error_kind kind_;
};

namespace detail {
/// Throws logic_error "streampool: <message> (<file>:<line>)", `file` (a __FILE__) named from the
/// source tree's root (see the header comment).
[[noreturn]] STREAMPOOL_EXPORT void throw_logic_error(const char* file, int line,
                                                      const std::string& message);
/// Formats a pointer the same way everywhere in messages.
STREAMPOOL_EXPORT std::string format_ptr(const void* p);
/// printf-style formatting into a std::string, for messages that carry numbers.
[[gnu::format(printf, 1, 2)]] STREAMPOOL_EXPORT std::string format(const char* fmt, ...);
/// format() for a va_list, for functions that take printf-style arguments themselves.
[[gnu::format(printf, 1, 0)]] STREAMPOOL_EXPORT std::string vformat(const char* fmt,
                                                                    std::va_list args);
}  // namespace detail

}  // namespace streampool

/// Throws streampool::logic_error with file:line and the message when `cond` is false.
#define STREAMPOOL_EXPECTS(cond, message)                                     \
  do {                                                                        \
    if (!(cond)) [[unlikely]] {                                               \
      ::streampool::detail::throw_logic_error(__FILE__, __LINE__, (message)); \
    }                                                                         \
  } while (0)

/// Throws streampool::logic_error with file:line and the message.
#define STREAMPOOL_FAIL(message) \
  ::streampool::detail::throw_logic_error(__FILE__, __LINE__, (message))

// Graded assertions (mimalloc style). STREAMPOOL_DEBUG_LEVEL: 0 none, 1 cheap checks,
// 2 internal invariants, 3 expensive full validation.
#ifndef STREAMPOOL_DEBUG_LEVEL
#define STREAMPOOL_DEBUG_LEVEL 1
#endif
namespace streampool::detail {
/// Prints "streampool: internal assertion failed: <expr> (<file>:<line>)" on stderr, `file` named
/// as in throw_logic_error, and aborts.
[[noreturn]] STREAMPOOL_EXPORT void assert_fail(const char* expr, const char* file,
                                                int line) noexcept;
}  // namespace streampool::detail
#define STREAMPOOL_ASSERT_IMPL(expr) \
  ((expr) ? (void)0 : ::streampool::detail::assert_fail(#expr, __FILE__, __LINE__))
#if STREAMPOOL_DEBUG_LEVEL >= 1
#define STREAMPOOL_ASSERT(expr) STREAMPOOL_ASSERT_IMPL(expr)
#else
#define STREAMPOOL_ASSERT(expr) ((void)0)
#endif
#if STREAMPOOL_DEBUG_LEVEL >= 2
#define STREAMPOOL_ASSERT_INTERNAL(expr) STREAMPOOL_ASSERT_IMPL(expr)
#else
#define STREAMPOOL_ASSERT_INTERNAL(expr) ((void)0)
#endif
#if STREAMPOOL_DEBUG_LEVEL >= 3
#define STREAMPOOL_ASSERT_EXPENSIVE(expr) STREAMPOOL_ASSERT_IMPL(expr)
#else
#define STREAMPOOL_ASSERT_EXPENSIVE(expr) ((void)0)
#endif
