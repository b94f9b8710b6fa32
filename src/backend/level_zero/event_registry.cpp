// streampool: the Level Zero backend's events (see event_registry.hpp for the reuse rule).
#include "event_registry.hpp"

#include <algorithm>

#include "check.hpp"

namespace streampool::detail::ze {
namespace {

// Pools start small (most programs use a few dozen markers at once) and double up to this size;
// a pool is never destroyed before the registry, since any of its events may be a live marker.
constexpr std::uint32_t first_pool_capacity = 64;
constexpr std::uint32_t max_pool_capacity = 1024;

}  // namespace

event_registry::event_registry(const driver& d, ze_context_handle_t ctx, ze_driver_handle_t drv)
    : d_(d), ctx_(ctx), errors_(d, drv) {}

event_registry::~event_registry() {
  for (auto& s : slots_) report_teardown_error(d_, d_.event_destroy(s->event), "zeEventDestroy");
  for (ze_event_pool_handle_t p : pools_)
    report_teardown_error(d_, d_.event_pool_destroy(p), "zeEventPoolDestroy");
}

event_slot* event_registry::try_reuse() {
  std::lock_guard<std::mutex> lk(mu_);
  if (idle_.empty()) reset_drained();
  if (idle_.empty()) return nullptr;
  event_slot* s = idle_.back();
  idle_.pop_back();
  s->released = false;
  return s;
}

event_slot* event_registry::acquire() {
  if (event_slot* s = try_reuse()) return s;
  std::lock_guard<std::mutex> lk(mu_);
  return create();
}

event_slot* event_registry::create() {
  if (pool_used_ == pool_capacity_) {
    const std::uint32_t capacity =
        pools_.empty() ? first_pool_capacity : std::min(pool_capacity_ * 2, max_pool_capacity);
    // Host visible: markers are queried and waited on by the host (zeEventQueryStatus,
    // zeEventHostSynchronize); no timestamps.
    ze_event_pool_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                              ZE_EVENT_POOL_FLAG_HOST_VISIBLE, capacity};
    ze_event_pool_handle_t pool = nullptr;
    pools_.reserve(pools_.size() + 1);
    check(errors_, d_.event_pool_create(ctx_, &desc, 0, nullptr, &pool),
          "zeEventPoolCreate(%u events)", capacity);
    pools_.push_back(pool);
    pool_capacity_ = capacity;
    pool_used_ = 0;
  }
  slots_.reserve(slots_.size() + 1);
  auto slot = std::make_unique<event_slot>();
  // Signal scope host: what the device wrote before the signal (a download) is visible to the
  // host once it sees the event signalled. Wait scope host likewise for host writes before it.
  ze_event_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, pool_used_, ZE_EVENT_SCOPE_FLAG_HOST,
                       ZE_EVENT_SCOPE_FLAG_HOST};
  check(errors_, d_.event_create(pools_.back(), &desc, &slot->event),
        "zeEventCreate(index %u of a pool of %u)", pool_used_, pool_capacity_);
  ++pool_used_;
  slots_.push_back(std::move(slot));
  return slots_.back().get();
}

void event_registry::release(event_slot* s) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  s->released = true;
  maybe_retire(s);
}

void event_registry::add_waiter(event_slot* s) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  ++s->waiters;
}

void event_registry::remove_waiter(event_slot* s) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  --s->waiters;
  maybe_retire(s);
}

void event_registry::add_ref(event_slot* s) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  ++s->refs;
}

void event_registry::remove_ref(event_slot* s) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  --s->refs;
  maybe_retire(s);
}

void event_registry::maybe_retire(event_slot* s) noexcept {
  if (!s->released || s->waiters != 0 || s->refs != 0) return;
  try {
    draining_.push_back(s);
  } catch (...) {
    // No memory for the list: the event is never reused (it is still destroyed with the
    // registry). Losing one event is the safe failure.
  }
}

void event_registry::reset_drained() noexcept {
  // (4): reset only what has been signalled; the rest stays for a later call.
  auto keep = draining_.begin();
  for (event_slot* s : draining_) {
    const ze_result_t r = d_.event_query_status(s->event);
    if (r == ZE_RESULT_SUCCESS) {
      const ze_result_t reset = d_.event_host_reset(s->event);
      if (reset == ZE_RESULT_SUCCESS) {
        try {
          idle_.push_back(s);
          continue;
        } catch (...) {  // dropped: never reused, still destroyed with the registry
          continue;
        }
      }
      report_teardown_error(d_, reset, "zeEventHostReset");
      continue;  // never reuse an event that could not be reset
    }
    if (r != ZE_RESULT_NOT_READY) {
      report_teardown_error(d_, r, "zeEventQueryStatus (released event)");
      continue;
    }
    *keep++ = s;
  }
  draining_.erase(keep, draining_.end());
}

}  // namespace streampool::detail::ze
