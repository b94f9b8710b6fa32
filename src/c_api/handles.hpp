// streampool C ABI: what the opaque handles hold, and the exception firewall.
//
// Glossary
//   handle      the heap object behind an sp_*_t. Each holds shared ownership of the C++ object
//               (device, stream, pool), so that dropping handles in any order is safe.
//   allocation  the C layer's record of one live pointer made through sp_pool_allocate
//               (allocation_registry.hpp): it owns its pool, so memory outlives pool handles.
//   firewall    guarded(): runs an entry point's body, catches every exception and turns it into
//               an sp_status_t plus the thread's last-error message. Nothing crosses into C.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "streampool.h"
#include "streampool/device.hpp"
#include "streampool/pool.hpp"
#include "streampool/stream.hpp"

struct sp_device_s {
  streampool::device dev;
};

struct sp_stream_s {
  streampool::stream s;
};

struct sp_pool_s {
  explicit sp_pool_s(streampool::pool q) : p(std::move(q)) {}
  streampool::pool p;                // shared ownership of the pool state
  std::mutex mu;                     // guards hooks
  std::vector<std::uint64_t> hooks;  // added through this handle; removed when it is destroyed
};

namespace streampool::c_api {

/// An error the C layer raises itself, with its status.
struct error {
  sp_status_t status;
  std::string message;
};

/// Records `message` as the calling thread's last error. Never throws.
void set_last_error(const char* message) noexcept;

/// Throws error{INVALID_ARGUMENT} naming `what` when `p` is NULL.
inline void require(const void* p, const char* function, const char* what) {
  if (p == nullptr) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                std::string("streampool: ") + function + ": " + what + " is NULL"};
  }
}

/// The firewall: every entry point's body runs inside it.
sp_status_t translate_current_exception() noexcept;

template <class F>
sp_status_t guarded(F&& body) noexcept {
  try {
    std::forward<F>(body)();
    return STREAMPOOL_STATUS_SUCCESS;
  } catch (...) {
    return translate_current_exception();
  }
}

}  // namespace streampool::c_api
