// streampool: how the native allocator checks its calls into streampool's C ABI.
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "streampool.h"

namespace streampool::torch_native {

/// The C ABI's last error on this thread, for messages.
inline std::string last_error() {
  const char* m = sp_last_error_message();
  return m != nullptr ? std::string(m) : std::string("(no message)");
}

/// Raises c10::Error "<what...>: <the C ABI's last error>" unless `status` is success: every call
/// into the C ABI whose failure PyTorch must see goes through this.
template <class... What>
void check(sp_status_t status, const What&... what) {
  if (status == STREAMPOOL_STATUS_SUCCESS) [[likely]]
    return;
  TORCH_CHECK(false, what..., ": ", last_error());
}

}  // namespace streampool::torch_native
