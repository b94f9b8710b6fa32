// replay: a backend that completes work late, like a GPU behind its host thread.
//
// The host backend completes a marker as soon as its queue is idle, and a replay submits no work,
// so in a replay every marker completes at once: memory freed on one stream is known complete to
// the others the moment anyone asks. On a GPU it is not: the device runs behind the threads that
// queue its work, and a marker completes only when the device gets there. The lagged backend
// models that gap with the replay's own clock (the event count): a marker recorded at event i is
// complete from event i + lag on, never earlier. Deterministic, so a replay with a lag reproduces
// itself; and it shows what a replay without one hides: device waits (reuse of another stream's
// memory that is not yet known complete) and the growth that lag causes. For a replay only: it
// drops device-side waits (no work is submitted for them to order).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "streampool/backend.hpp"

namespace streampool::replay {

class lagged_backend final : public backend {
 public:
  /// Forwards everything to `inner`; markers complete `lag` ticks of `clock` after they were
  /// recorded (and when inner says so).
  lagged_backend(std::shared_ptr<backend> inner, const std::atomic<std::uint64_t>& clock,
                 std::uint64_t lag);

 private:
  struct lagged_marker {
    native_marker inner;
    std::uint64_t complete_at;  // clock value from which it may count as complete
  };

  void* do_allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  void do_deallocate(void* p, std::size_t bytes) noexcept override { inner_->deallocate(p, bytes); }
  native_queue do_create_queue() override { return inner_->create_queue(); }
  void do_destroy_queue(native_queue q) noexcept override { inner_->destroy_queue(q); }
  void do_submit(native_queue q, const command& c) override { inner_->submit(q, c); }
  native_marker do_record(native_queue q) override;
  bool do_query(native_marker m) override;
  void do_wait_host(native_marker m) override;
  void do_wait_device(native_queue q, native_marker m) override;
  void do_release_marker(native_marker m) noexcept override;
  void* do_reserve(std::size_t bytes) override { return inner_->reserve(bytes); }
  void do_unreserve(void* p, std::size_t bytes) noexcept override { inner_->unreserve(p, bytes); }
  native_physical do_create_physical() override { return inner_->create_physical(); }
  void do_release_physical(native_physical h) noexcept override { inner_->release_physical(h); }
  bool do_map(void* p, std::span<const native_physical> handles) override {
    return inner_->map(p, handles);
  }
  void do_unmap(void* p, std::size_t bytes) noexcept override { inner_->unmap(p, bytes); }

  const std::shared_ptr<backend> inner_;
  const std::atomic<std::uint64_t>& clock_;
  const std::uint64_t lag_;
};

}  // namespace streampool::replay
