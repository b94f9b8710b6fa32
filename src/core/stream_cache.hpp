// streampool: the stream cache, blocks freed on one stream kept for reuse on that stream.
//
// One per (timeline, pool). Shared by the timeline (which finds it on the fast path) and by the
// pool (which walks its caches for statistics, trim and its own destruction). Whichever goes
// first tells the other through the cache:
//   orphan()  the timeline retired: its points are all complete, so the entries go back to the
//             pool's shared lists as free memory with no tokens (if the pool still exists);
//   detach()  the pool is being destroyed: the entries are dropped (the pool releases the
//             segments) and later pushes are refused.
// Lock order: pool caches lock -> cache lock -> shared class lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "size_classes.hpp"
#include "spinlock.hpp"
#include "streampool/timeline.hpp"

namespace streampool::detail {

class pool_state;
struct slab;

// Cache-line aligned: each thread's stream cache is written on every alloc and free, and must not
// share a line with another thread's.
class alignas(64) stream_cache {
 public:
  struct entry {
    void* p;
    slab* owner;
    timeline::point at;  // the timeline's point when it was freed
  };

  stream_cache(pool_state& pool, std::weak_ptr<pool_state> weak_pool, std::weak_ptr<timeline> line,
               std::uint64_t timeline_id);

  [[nodiscard]] std::uint64_t pool_id() const noexcept { return pool_id_; }
  [[nodiscard]] std::uint64_t timeline_id() const noexcept { return timeline_id_; }

  void orphan();
  void detach();

  spinlock mu;  // guards bins, bin_bytes, orphaned, detached
  std::array<std::vector<entry>, max_classes> bins;
  std::array<std::size_t, max_classes> bin_bytes{};
  bool orphaned = false;
  bool detached = false;
  std::weak_ptr<timeline> line;
  std::size_t shard = 0;  // the pool's large shard for this stream (large_shard.hpp); set once

  // Statistics: written under mu by one writer at a time, read without it.
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> deallocations{0};
  // Live bytes allocated minus freed on this stream (small and large blocks) and not yet added to
  // the pool's live counter: it is added once its magnitude reaches live_flush_bytes, so that a
  // stream's allocations and frees touch no shared cache line (one shared counter cost 16 threads
  // 12x their 4 KiB pair rate on the H200). Large blocks are 256 KiB and up, and random sizes
  // walk the delta away from zero, so the step is large: at 64 KiB the mixed pattern flushed on
  // almost every large call. Written under mu, read without it.
  std::atomic<std::int64_t> live_delta{0};
  static constexpr std::int64_t live_flush_bytes = std::int64_t{16} << 20;

  /// Under mu: adds `bytes` (negative for a free) to live_delta. Returns the delta; once it
  /// reaches the flush size either way, live_delta is reset and the caller adds the returned
  /// delta to the pool's counter after unlocking (add_live), else it stays pending here.
  struct counted {
    std::int64_t delta;
    bool flush;
  };
  counted count_live(std::int64_t bytes) noexcept {
    const std::int64_t d = live_delta.load(std::memory_order_relaxed) + bytes;
    const bool flush = d >= live_flush_bytes || d <= -live_flush_bytes;
    live_delta.store(flush ? 0 : d, std::memory_order_relaxed);
    return {d, flush};
  }

 private:
  pool_state* pool_;  // valid until detach()
  std::weak_ptr<pool_state> weak_pool_;
  std::uint64_t pool_id_;
  std::uint64_t timeline_id_;
};

}  // namespace streampool::detail
