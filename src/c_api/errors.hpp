// streampool C ABI: the exception firewall, and what the C layer's error messages are made of.
//
// Glossary
//   entry point  an exported sp_* function. Its name leads every message it raises; it comes from
//                the function itself (`__func__`, handed to guarded()), never written by hand.
//   firewall     guarded(): runs an entry point's body, catches every exception and turns it into
//                an sp_status_t plus the thread's last-error message. Nothing crosses into C.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "streampool.h"
#include "streampool/export.hpp"

namespace streampool::c_api {

/// An error the C layer raises itself, with its status.
struct error {
  sp_status_t status;
  std::string message;
};

/// Records `message` as the calling thread's last error. Never throws. Exported, with
/// translate_current_exception, for the entry points of libstreampool_report (src/report/), which
/// share this thread's last error.
STREAMPOOL_EXPORT void set_last_error(const char* message) noexcept;

/// Throws error{INVALID_ARGUMENT} naming the entry point and `what` when `p` is NULL.
inline void require(const void* p, const char* entry, const char* what) {
  if (p == nullptr) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                std::string("streampool: ") + entry + ": " + what + " is NULL"};
  }
}

/// A value as detail::format() passes it to printf: a pointer or handle as const void* (%p), an
/// unsigned count or id as unsigned long long (%llu), whatever its own width on this platform.
template <class T>
constexpr auto printf_arg(T v) noexcept {
  if constexpr (std::is_pointer_v<T>) {
    return static_cast<const void*>(v);
  } else {
    static_assert(std::is_unsigned_v<T>, "printf_arg: a pointer or an unsigned number");
    return static_cast<unsigned long long>(v);
  }
}

/// The status and last error of the exception being handled. Inside a catch block only.
STREAMPOOL_EXPORT sp_status_t translate_current_exception() noexcept;

/// The firewall: every entry point's body runs inside it, as `guarded(__func__, body)`. The body
/// takes the entry point's name (for require(), the handle lookups and messages) or nothing.
template <class F>
sp_status_t guarded(const char* entry, F&& body) noexcept {
  try {
    if constexpr (std::is_invocable_v<F, const char*>) {
      std::forward<F>(body)(entry);
    } else {
      std::forward<F>(body)();
    }
    return STREAMPOOL_STATUS_SUCCESS;
  } catch (...) {
    return translate_current_exception();
  }
}

}  // namespace streampool::c_api
