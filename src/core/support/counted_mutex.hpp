// streampool: a mutex that counts how often a thread found it held.
//
// The pool's locks are meant to be uncontended on every path but growth (one thread per stream,
// each stream on its own cache and large shard). A contended acquisition is what makes threads
// scale badly, and it is invisible in a profile of one thread; counting them per lock, at the
// cost of one try_lock that succeeds when the lock is free, makes a regression visible in the
// statistics and the benchmarks' output (pool_statistics::contention).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace streampool::detail {

class counted_mutex {
 public:
  void lock() {
    if (mu_.try_lock()) return;
    contended_.fetch_add(1, std::memory_order_relaxed);
    mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() { mu_.unlock(); }

  /// Acquisitions that had to wait for another holder.
  [[nodiscard]] std::uint64_t contended() const noexcept {
    return contended_.load(std::memory_order_relaxed);
  }

 private:
  std::mutex mu_;
  std::atomic<std::uint64_t> contended_{0};
};

}  // namespace streampool::detail
