#include "streampool/timeline.hpp"

#include "core/pool/pool_state.hpp"
#include "core/pool/stream_cache.hpp"

namespace streampool {
namespace {
std::atomic<std::uint64_t> next_timeline_id{1};
}

timeline::timeline(std::shared_ptr<backend> b, native_queue q)
    : id_(next_timeline_id.fetch_add(1)), backend_(std::move(b)), queue_(q) {}

timeline::~timeline() = default;

std::shared_ptr<marker> timeline::record_locked() {
  // Everything submitted before this marker belongs to the current epoch; later work to the next.
  const point p = epoch_.load(std::memory_order_relaxed);
  // Advance the epoch *before* the marker is enqueued. Another thread may be submitting to this
  // queue right now and will take its token (current()) after its submit returns: work enqueued
  // after the marker must get point p + 1, or a wait for its token would be satisfied by a marker
  // that precedes it in the queue. (The queue's lock orders this store before that submit.)
  epoch_.store(p + 1, std::memory_order_release);
  auto m = std::make_shared<marker>(backend_, backend_->record(queue_));
  pending_.emplace_back(p, m);
  return m;
}

void timeline::advance_locked() {
  while (!pending_.empty() && pending_.front().second->query()) {
    point p = pending_.front().first;
    pending_.pop_front();
    point c = completed_.load(std::memory_order_relaxed);
    if (c != retired_point && p > c) completed_.store(p, std::memory_order_release);
  }
  // Closing, and its last marker (which covers every point) completed: retired.
  if (pending_.empty() && queue_ == nullptr)
    completed_.store(retired_point, std::memory_order_release);
}

bool timeline::poll(point p) {
  if (completed() >= p) return true;
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // someone else is advancing it; never block here
  advance_locked();
  return completed() >= p;
}

std::shared_ptr<marker> timeline::marker_for(point p) {
  std::lock_guard lock(mu_);
  advance_locked();
  if (completed() >= p) return nullptr;
  for (auto& [q, m] : pending_)
    if (q >= p) return m;
  // Closing: nothing was submitted after the last marker, so it covers p (later points too).
  // Not complete and not closing (advance_locked retires a closed timeline whose markers are
  // all complete): the stream is alive, record a marker on its queue.
  if (queue_ == nullptr) return pending_.back().second;
  return record_locked();
}

void timeline::wait_host(point p) {
  if (auto m = marker_for(p)) {
    m->wait_host();
    std::lock_guard lock(mu_);
    advance_locked();
  }
}

bool timeline::wait_device(native_queue waiter, point p) {
  auto m = marker_for(p);
  if (!m) return false;
#ifdef STREAMPOOL_FAULT_SKIP_DEVICE_WAIT
  // Fault injection for test builds only (CMake option of the same name): the ordering bug this
  // library exists to prevent, so that the tests can be seen to catch it. Never in a release.
  (void)waiter;
  return true;
#else
  backend_->wait_device(waiter, m->native());
  return true;
#endif
}

void timeline::mark_now_and_then(std::uint32_t blocks, std::size_t bytes, std::uint32_t every,
                                 std::size_t bytes_between) {
  // Read and written back, not added atomically: a locked add is a full barrier on every large
  // free (docs/performance.md, "The free path").
  // Frees on one stream from two threads at once may lose a count, or put back one just reset,
  // which moves a marker a little later or earlier: no more than that.
  const std::uint32_t since = blocks_since_mark_.load(std::memory_order_relaxed) + blocks;
  const std::size_t freed = bytes_since_mark_.load(std::memory_order_relaxed) + bytes;
  blocks_since_mark_.store(since, std::memory_order_relaxed);
  bytes_since_mark_.store(freed, std::memory_order_relaxed);
  // A quarter of bytes_between at once marks at once: such a block is worth remapping or handing
  // to another stream on its own, and frees that big are few.
  if (since < every && freed < bytes_between && bytes < bytes_between / 4) return;
  // A capture under way: no marker now (backend.hpp); the counts keep growing, so the first free
  // after it marks.
  const backend::outside_capture_scope no_capture = backend_->outside_capture();
  if (!no_capture) return;
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || queue_ == nullptr) return;
  blocks_since_mark_.store(0, std::memory_order_relaxed);
  bytes_since_mark_.store(0, std::memory_order_relaxed);
  advance_locked();  // drops completed markers first, so the list stays as short as the queue
  (void)record_locked();
}

std::vector<std::shared_ptr<detail::stream_cache>> timeline::drop_queue_locked(native_queue& q) {
  q = queue_;
  queue_ = nullptr;
  std::vector<std::shared_ptr<detail::stream_cache>> caches;
  caches.swap(caches_);
  first_cache_.store(nullptr, std::memory_order_release);
  first_cache_pool_.store(0, std::memory_order_release);
  return caches;
}

native_queue timeline::retire() {
  std::shared_ptr<marker> last;
  // In a child that fork() made, the queue is the parent's: nothing is recorded or waited for
  // (backend::usable_in_this_process), and the caches go back as if complete.
  if (backend_->usable_in_this_process()) [[likely]] {
    {
      std::lock_guard lock(mu_);
      last = record_locked();
    }
    last->wait_host();
  }
  native_queue q;
  std::vector<std::shared_ptr<detail::stream_cache>> caches;
  {
    std::lock_guard lock(mu_);
    completed_.store(retired_point, std::memory_order_release);
    pending_.clear();
    caches = drop_queue_locked(q);
  }
  // Every point is complete now, so what the caches hold is free of pending work on this
  // timeline: hand it back to the pools that are still alive.
  for (auto& c : caches) c->orphan(nullptr);
  return q;
}

native_queue timeline::close() {
  native_queue q;
  std::vector<std::shared_ptr<detail::stream_cache>> caches;
  {
    std::lock_guard lock(mu_);
    // The last marker: after everything ever submitted to the queue (none in a forked child).
    if (backend_->usable_in_this_process()) [[likely]]
      (void)record_locked();
    caches = drop_queue_locked(q);  // nothing below throws: the caches always go back
  }
  // The memory may still be in use on the device: it goes back with a token on this timeline,
  // which the last marker covers, so reuse elsewhere waits for it (never for the queue).
  const std::shared_ptr<timeline> self = shared_from_this();
  for (auto& c : caches) c->orphan(self);
  return q;
}

detail::stream_cache* timeline::cache_for(detail::pool_state& pool) {
  if (detail::stream_cache* c = first_cache(pool.id())) return c;
  std::lock_guard lock(mu_);
  STREAMPOOL_EXPECTS(queue_ != nullptr,
                     detail::format("stream (timeline %llu) is already destroyed",
                                    static_cast<unsigned long long>(id_)));
  for (auto& c : caches_)
    if (c->pool_id() == pool.id()) return c.get();
  auto c = pool.make_stream_cache(*this);
  caches_.push_back(c);
  if (first_cache_.load(std::memory_order_relaxed) == nullptr) {
    first_cache_.store(c.get(), std::memory_order_release);
    first_cache_pool_.store(pool.id(), std::memory_order_release);
  }
  return c.get();
}

}  // namespace streampool
