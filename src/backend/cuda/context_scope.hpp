// streampool: the device's primary context made current for one CUDA driver call. Shared by the
// backend (cuda_backend.cpp) and the sharing of memory with other processes (sharing.cpp).
#pragma once

#include "driver.hpp"

namespace streampool::detail::cu {

/// Makes `ctx` current on this thread for the scope of one backend call. The common case (it is
/// already current) costs one cuCtxGetCurrent. A thread with no current context gets ours set
/// for good (nothing to disturb, and later calls are then cheap); a thread that has another
/// context current (a user's, another device's) gets ours pushed and popped, so the user's
/// state is left as it was.
class context_scope {
 public:
  context_scope(const driver& d, context ctx) noexcept : d_(d) {
    context cur = nullptr;
    if (d.ctx_get_current(&cur) != success || cur == ctx) return;
    if (cur == nullptr) {
      (void)d.ctx_set_current(ctx);
    } else {
      pushed_ = d.ctx_push_current(ctx) == success;
    }
  }
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;
  ~context_scope() {
    if (pushed_) {
      context popped = nullptr;
      (void)d_.ctx_pop_current(&popped);
    }
  }

 private:
  const driver& d_;
  bool pushed_ = false;
};

}  // namespace streampool::detail::cu
