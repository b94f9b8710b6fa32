// streampool: timelines and tokens, the ordering model (docs/design.md, "The model").
//
// Glossary
//   timeline  the long-lived record of one stream's progress: a counter of points and the markers
//             recorded for some of them. It outlives its stream; tokens keep it alive, never the
//             stream. While the stream lives the timeline may record markers on the stream's queue;
//             when the stream is destroyed the timeline is *retired*: its last work has completed,
//             every point counts as complete, and it drops the queue. A retired timeline holds no
//             backend queue, so waiting for a destroyed queue cannot be expressed.
//   closing   a stream released without waiting (stream::release, for a queue whose owner is
//             about to destroy it): a last marker was recorded and the queue dropped at once.
//             That marker covers every point, past and future; when it completes the timeline
//             is retired. Like a retired one, a closing timeline never touches a queue.
//   point     a position on a timeline. Point p is complete once all work submitted to the stream
//             before p was taken has finished. `completed()` only grows.
//   token     (timeline, point): what a piece of memory has to wait for before reuse. Small,
//             copyable, meaningful forever.
//
// How points work: `current()` returns the point that covers all work submitted so far (the
// epoch). Taking a point is one relaxed load; nothing is recorded on the device. A marker is
// recorded lazily, only when someone on another stream must wait for a point that is not yet
// known complete (marker_for). This keeps free() at a few nanoseconds.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "streampool/backend.hpp"

namespace streampool {

class stream_ref;
namespace detail {
class stream_cache;
class pool_state;
struct access;
}  // namespace detail

/// A recorded backend marker with shared ownership; released when the last owner drops it.
class STREAMPOOL_EXPORT marker {
 public:
  marker(std::shared_ptr<backend> b, native_marker m) : backend_(std::move(b)), native_(m) {}
  marker(const marker&) = delete;
  marker& operator=(const marker&) = delete;
  ~marker() { backend_->release_marker(native_); }
  [[nodiscard]] native_marker native() const noexcept { return native_; }
  [[nodiscard]] bool query() const { return backend_->query(native_); }
  void wait_host() const { backend_->wait_host(native_); }

 private:
  std::shared_ptr<backend> backend_;
  native_marker native_;
};

class STREAMPOOL_EXPORT timeline : public std::enable_shared_from_this<timeline> {
 public:
  using point = std::uint64_t;
  /// The value of completed() once the timeline is retired: every point is complete.
  static constexpr point retired_point = ~point{0};

  timeline(std::shared_ptr<backend> b, native_queue q);
  timeline(const timeline&) = delete;
  timeline& operator=(const timeline&) = delete;
  ~timeline();

  /// Unique, never reused: identifies the timeline in statistics and messages.
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] const std::shared_ptr<backend>& get_backend() const noexcept { return backend_; }

  /// The point covering all work submitted so far (cheap: one load).
  [[nodiscard]] point current() const noexcept { return epoch_.load(std::memory_order_acquire); }
  /// Every point <= completed() is complete.
  [[nodiscard]] point completed() const noexcept {
    return completed_.load(std::memory_order_acquire);
  }
  [[nodiscard]] bool retired() const noexcept { return completed() == retired_point; }

  /// True when p is known complete; queries pending markers (never blocks, never records).
  [[nodiscard]] bool poll(point p);
  /// A marker whose completion implies p's, recording one on the queue if none exists yet.
  /// nullptr when p is already complete (in particular on a retired timeline).
  [[nodiscard]] std::shared_ptr<marker> marker_for(point p);
  /// Blocks the calling thread until p is complete.
  void wait_host(point p);
  /// Makes `waiter` (a live queue of the same backend) wait on the device until p is complete.
  /// Returns false when no wait was needed.
  bool wait_device(native_queue waiter, point p);

 private:
  // The library's own: stream_ref submits on the queue, a stream retires its timeline, the pool
  // finds its cache and records markers now and then (through detail::access).
  friend class stream_ref;
  friend class stream;
  friend struct detail::access;

  /// Called when `blocks` large blocks of `bytes` in all, freed on this timeline, become free to
  /// others (the pool's arena): records a marker for the current point once `every` blocks or
  /// `bytes_between` bytes have come since the last one, or at once for at least a quarter of
  /// that in one call.
  /// Lets others learn, without a marker per free, that memory freed on this timeline a little
  /// earlier is complete. Counts, not a clock: the same program records the same markers, every
  /// run, when one thread at a time frees on the timeline (counts are read and written back, not
  /// added atomically). Never blocks: skipped when the timeline is busy or retired.
  void mark_now_and_then(std::uint32_t blocks, std::size_t bytes, std::uint32_t every,
                         std::size_t bytes_between);

  /// Called once by the owning stream: waits for all submitted work, then drops the queue and
  /// hands every per-pool cache back to its pool. Returns the queue for the stream to destroy.
  native_queue retire();
  /// The non-blocking form, for a queue that its owner destroys next (stream::release): records
  /// a last marker, drops the queue and hands every per-pool cache back with this timeline's
  /// tokens (the marker decides when the memory is free). Never waits. Returns the queue.
  native_queue close();

  /// The queue work is submitted on (null once retired or closing).
  [[nodiscard]] native_queue queue_for_submit() const noexcept { return queue_; }
  /// The per-pool cache of blocks freed on this timeline (created on first use). Lock-free
  /// lookup for the first pool used with this timeline.
  [[nodiscard]] detail::stream_cache* cache_for(detail::pool_state& pool);
  /// The fast path of cache_for: the first pool's cache, or nullptr.
  [[nodiscard]] detail::stream_cache* first_cache(std::uint64_t pool_id) const noexcept {
    return first_cache_pool_.load(std::memory_order_acquire) == pool_id
               ? first_cache_.load(std::memory_order_acquire)
               : nullptr;
  }

  std::shared_ptr<marker> record_locked();
  void advance_locked();
  /// Drops the queue and takes the per-pool caches out (retire and close); under mu_.
  std::vector<std::shared_ptr<detail::stream_cache>> drop_queue_locked(native_queue& q);

  const std::uint64_t id_;
  const std::shared_ptr<backend> backend_;
  // The queue, until retire() or close(). Written only under mu_ by them; read by the owning
  // stream's submissions (which never race with them: the stream is being destroyed) and under
  // mu_. Null with points pending: closing (the last entry of pending_ covers every point).
  native_queue queue_;
  std::atomic<point> epoch_{1};
  std::atomic<point> completed_{0};
  std::atomic<std::uint32_t> blocks_since_mark_{0};  // mark_now_and_then's counts
  std::atomic<std::size_t> bytes_since_mark_{0};

  std::mutex mu_;  // guards pending_, queue_ (writes) and caches_
  std::deque<std::pair<point, std::shared_ptr<marker>>> pending_;  // ascending points

  // Per-pool caches. The first is published through an atomic for a lock-free fast path.
  std::atomic<detail::stream_cache*> first_cache_{nullptr};
  std::atomic<std::uint64_t> first_cache_pool_{0};
  std::vector<std::shared_ptr<detail::stream_cache>> caches_;  // guarded by mu_
};

/// What a piece of memory must wait for: a point on a timeline.
struct token {
  /// A use declared ahead of its work (pool::record_use with a stream, PyTorch's record_stream):
  /// "whatever the timeline has queued when the memory is freed". The pool replaces it by that
  /// point at the free; it is never waited for as such. Below retired_point, so a retired
  /// timeline still counts as complete.
  static constexpr timeline::point at_free = timeline::retired_point - 1;

  std::shared_ptr<timeline> line;
  timeline::point at = 0;

  /// True when reuse on `on` needs no wait: same timeline (in-order queue) or already complete.
  [[nodiscard]] bool ready_for(const timeline* on) const {
    return !line || line.get() == on || line->completed() >= at || line->poll(at);
  }
};

}  // namespace streampool
