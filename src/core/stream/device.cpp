#include "streampool/device.hpp"

#include <atomic>

#include "core/pool/pool_state.hpp"
#include "core/stream/access.hpp"
#include "core/stream/device_state.hpp"
#include "core/support/biased_lock.hpp"
#include "streampool/host.hpp"
#include "streampool/pool.hpp"

namespace streampool {
namespace detail {
namespace {
std::atomic<std::uint64_t> next_device_id{1};
}
device_state::device_state(std::shared_ptr<backend> b)
    : backend_ptr(std::move(b)), id(next_device_id.fetch_add(1)) {}
}  // namespace detail

device::device(std::shared_ptr<backend> b) {
  STREAMPOOL_EXPECTS(b != nullptr, "device: null backend");
  // Parsed here, where a bad value can be refused: the locks that obey it read it in noexcept
  // code (biased_lock.hpp), after a device exists.
  (void)detail::biased_locks_wanted();
  state_ = std::make_shared<detail::device_state>(std::move(b));
  id_ = state_->id;
}

device::device(std::shared_ptr<detail::device_state> s) : state_(std::move(s)) {
  STREAMPOOL_EXPECTS(state_ != nullptr, "device: null state");
  id_ = state_->id;
}

device device::host() {
  // Deliberately leaked: thread-local default streams of threads that outlive static
  // destruction (and pools destroyed from atexit handlers) may still need it.
  static auto* d = new device(make_host_backend());
  return *d;
}

detail::device_state& device::checked_state() const {
  STREAMPOOL_EXPECTS(state_ != nullptr, "device: used after it was moved from");
  return *state_;
}

backend& device::get_backend() const { return *checked_state().backend_ptr; }
const std::shared_ptr<backend>& device::backend_ptr() const { return checked_state().backend_ptr; }

pool device::default_pool() const {
  detail::device_state& state = checked_state();
  std::lock_guard lock(state.mu);
  if (!state.default_pool) {
    // The device owns its default pool (the pool holds only the backend, so no cycle): the
    // cache survives between uses and goes when the device's last handle, stream or array does.
    state.default_pool = std::make_shared<detail::pool_state>(*this, pool_options{});
  }
  return detail::access::make_pool(state.default_pool);
}

}  // namespace streampool
