#include "lagged_backend.hpp"

namespace streampool::replay {

lagged_backend::lagged_backend(std::shared_ptr<backend> inner,
                               const std::atomic<std::uint64_t>& clock, std::uint64_t lag)
    : backend(inner->name(), inner->caps()), inner_(std::move(inner)), clock_(clock), lag_(lag) {}

native_marker lagged_backend::do_record(native_queue q) {
  return new lagged_marker{inner_->record(q), clock_.load(std::memory_order_relaxed) + lag_};
}

bool lagged_backend::do_query(native_marker m) {
  auto* l = static_cast<lagged_marker*>(m);
  return clock_.load(std::memory_order_relaxed) >= l->complete_at && inner_->query(l->inner);
}

void lagged_backend::do_wait_host(native_marker m) {
  // The host thread blocks until the device gets there: from then on the marker is complete.
  auto* l = static_cast<lagged_marker*>(m);
  inner_->wait_host(l->inner);
  l->complete_at = 0;
}

void lagged_backend::do_wait_device(native_queue /*q*/, native_marker /*m*/) {
  // Dropped: a replay submits no work for a wait to order, and a wait command would keep the
  // host queue busy, so that its later markers completed on the worker thread's schedule and the
  // replay depended on timing.
}

void lagged_backend::do_release_marker(native_marker m) noexcept {
  auto* l = static_cast<lagged_marker*>(m);
  inner_->release_marker(l->inner);
  delete l;
}

}  // namespace streampool::replay
