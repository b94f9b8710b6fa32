// streampool: the Level Zero backend's queues, batches and markers (level_zero_backend.hpp).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>

#include "level_zero_backend.hpp"

namespace streampool::detail::ze {
namespace {

/// Waits and fill patterns a queue's open batch may hold before the backend closes it itself
/// (bound_open_batch).
constexpr std::size_t max_open_batch = 256;

/// Bytes of memory (old scratch buffers, staging) a queue's open batch may keep alive before the
/// backend closes it itself (bound_open_batch): 64 MiB.
constexpr std::size_t max_open_batch_bytes = std::size_t{64} << 20;

}  // namespace

native_queue level_zero_backend::do_create_queue() {
  auto q = std::make_unique<queue>();
  const ze_command_queue_desc_t desc{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
                                     nullptr,
                                     facts_.compute_group,
                                     0,
                                     0,
                                     ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                     ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  check(errors_, d_.command_list_create_immediate(ctx_, dev_, &desc, &q->cl),
        "zeCommandListCreateImmediate(queue group %u) on device %d", facts_.compute_group,
        ordinal_);
  try {
    std::lock_guard<std::mutex> lk(queues_mu_);
    queues_.push_back(q.get());
  } catch (...) {
    report_teardown(d_.command_list_destroy(q->cl), "zeCommandListDestroy");
    throw;
  }
  return q.release();
}

void level_zero_backend::do_destroy_queue(native_queue nq) noexcept {
  queue* q = as_queue(nq);
  // Lock order (level_zero_backend.hpp): a queue's mu, then queues_mu_, then other queues' mu by
  // try_lock only. Here queues_mu_ is taken while holding no queue's mu and released before q->mu
  // is taken, so it never waits in the reverse order. Once q is out of queues_ (under queues_mu_,
  // which a polling take_event holds for as long as it may hold q->mu by try_lock), no other
  // thread can reach q, and deleting it below is safe.
  {
    std::lock_guard<std::mutex> lk(queues_mu_);
    queues_.erase(std::find(queues_.begin(), queues_.end(), q));
  }
  {
    std::lock_guard<std::mutex> lk(q->mu);
    // The contract: all work submitted to q has completed, so q has passed every wait it
    // appended and finished with all of its memory (the reuse rule's "destroyed queue").
    while (!q->closed.empty()) {
      finish(q->closed.front());
      q->closed.pop_front();
    }
    finish(q->open);
    for (auto& by_type : q->kernels)
      for (ze_kernel_handle_t k : by_type)
        if (k != nullptr) report_teardown(d_.kernel_destroy(k), "zeKernelDestroy");
    if (q->scratch != nullptr) report_teardown(d_.mem_free(ctx_, q->scratch), "zeMemFree");
    report_teardown(d_.command_list_destroy(q->cl), "zeCommandListDestroy");
  }
  delete q;  // NOLINT(cppcoreguidelines-owning-memory): made by create_queue's release()
}

void level_zero_backend::finish(queue::batch& b) noexcept {
  for (event_slot* w : b.waits) events_->remove_waiter(w);
  b.waits.clear();
  for (void* m : b.memory) report_teardown(d_.mem_free(ctx_, m), "zeMemFree");
  b.memory.clear();
  b.memory_bytes = 0;
  b.patterns.clear();
  if (b.proof != nullptr) events_->remove_ref(b.proof);
  b.proof = nullptr;
}

void level_zero_backend::collect(queue* q) noexcept {
  while (!q->closed.empty()) {
    const ze_result_t r = d_.event_query_status(q->closed.front().proof->event);
    if (r == ZE_RESULT_NOT_READY) return;
    if (r != ZE_RESULT_SUCCESS) {
      report_teardown(r, "zeEventQueryStatus (batch proof)");
      return;  // keep everything: never free what might still be in use
    }
    finish(q->closed.front());
    q->closed.pop_front();
  }
}

event_slot* level_zero_backend::take_event(queue* self) {
  if (event_slot* s = events_->try_reuse()) return s;
  {
    std::lock_guard<std::mutex> lk(queues_mu_);
    for (queue* q : queues_) {
      if (q == self) continue;
      std::unique_lock<std::mutex> other(q->mu, std::try_to_lock);
      if (other.owns_lock()) collect(q);
    }
  }
  collect(self);
  return events_->acquire();
}

void level_zero_backend::order_next_command(queue* q) {
  if (!q->needs_barrier) return;
  check(errors_, d_.command_list_append_barrier(q->cl, nullptr, 0, nullptr),
        "zeCommandListAppendBarrier on device %d", ordinal_);
  q->needs_barrier = false;
}

event_slot* level_zero_backend::signal_locked(queue* q, bool internal) {
  event_slot* s = take_event(q);
  const ze_result_t r = close_batch(q, s, internal);
  check(errors_, r, "zeCommandListAppendBarrier (signal) on device %d", ordinal_);
  return s;
}

ze_result_t level_zero_backend::close_batch(queue* q, event_slot* s, bool internal) noexcept {
  const bool close = !q->open_is_empty();
  if (close) {
    try {
      q->closed.emplace_back();
    } catch (...) {
      events_->release(s);
      return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
  }
  const ze_result_t r = d_.command_list_append_barrier(q->cl, s->event, 0, nullptr);
  if (r != ZE_RESULT_SUCCESS) {
    if (close) q->closed.pop_back();
    events_->release(s);
    return r;
  }
  q->needs_barrier = false;
  if (close) {
    // Reference first, release second: the slot must never look free in between.
    events_->add_ref(s);
    queue::batch& b = q->closed.back();
    b.proof = s;
    b.waits.swap(q->open.waits);
    b.memory.swap(q->open.memory);
    std::swap(b.memory_bytes, q->open.memory_bytes);
    b.patterns.swap(q->open.patterns);
  }
  if (internal) events_->release(s);
  return ZE_RESULT_SUCCESS;
}

void level_zero_backend::close_batch_after_append(queue* q, event_slot* s) noexcept {
  const ze_result_t r = close_batch(q, s, /*internal=*/true);
  if (r != ZE_RESULT_SUCCESS) report_teardown(r, "zeCommandListAppendBarrier (batch proof)");
}

void level_zero_backend::bound_open_batch(queue* q) noexcept {
  if (q->open.waits.size() + q->open.patterns.size() < max_open_batch &&
      q->open.memory_bytes < max_open_batch_bytes)
    return;
  event_slot* s = nullptr;
  try {
    s = take_event(q);
  } catch (...) {
    report_teardown(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, "an event for a batch proof");
    return;
  }
  close_batch_after_append(q, s);
}

native_marker level_zero_backend::do_record(native_queue nq) {
  queue* q = as_queue(nq);
  std::lock_guard<std::mutex> lk(q->mu);
  collect(q);
  return signal_locked(q, /*internal=*/false);
}

bool level_zero_backend::do_query(native_marker m) {
  const ze_result_t r = d_.event_query_status(as_slot(m)->event);
  if (r == ZE_RESULT_NOT_READY) return false;
  check(errors_, r, "zeEventQueryStatus on device %d", ordinal_);
  return true;
}

void level_zero_backend::do_wait_host(native_marker m) {
  const ze_result_t r =
      d_.event_host_synchronize(as_slot(m)->event, std::numeric_limits<std::uint64_t>::max());
  check(errors_, r, "zeEventHostSynchronize on device %d", ordinal_);
}

void level_zero_backend::do_wait_device(native_queue nq, native_marker m) {
  queue* q = as_queue(nq);
  event_slot* s = as_slot(m);
  std::lock_guard<std::mutex> lk(q->mu);
  collect(q);
  q->open.waits.reserve(q->open.waits.size() + 1);  // the push below cannot fail then
  events_->add_waiter(s);
  const ze_result_t r = d_.command_list_append_wait_on_events(q->cl, 1, &s->event);
  if (r != ZE_RESULT_SUCCESS) {
    events_->remove_waiter(s);
    check(errors_, r, "zeCommandListAppendWaitOnEvents on device %d", ordinal_);
  }
  q->open.waits.push_back(s);
  bound_open_batch(q);
}

void level_zero_backend::do_release_marker(native_marker m) noexcept {
  events_->release(as_slot(m));
}

}  // namespace streampool::detail::ze
