// streampool: a test-and-test-and-set spinlock: the slow half of the biased lock (the stream
// caches and the large shards, biased_lock.hpp) and the pool's idle check.
//
// Why not std::mutex: the lock guards a few loads and stores (a stream cache) or a few index
// operations (a shard), is uncontended in the common case (one thread per stream) and sits on the
// fast paths, where a futex-based mutex's calls into libpthread are cache misses of their own in
// a running program (docs/performance.md, "Stream caches and their lock"). Under contention it
// yields instead of burning the core.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace streampool::detail {

class spinlock {
 public:
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    // Contended (counted_mutex.hpp says why the count). Written only here, so an uncontended
    // lock touches nothing but its flag.
    contended_.fetch_add(1, std::memory_order_relaxed);
    for (;;) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins)
        if (spins > 64) std::this_thread::yield();
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }
  /// Acquisitions that had to wait for another holder.
  [[nodiscard]] std::uint64_t contended() const noexcept {
    return contended_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<bool> locked_{false};
  std::atomic<std::uint64_t> contended_{0};
};

}  // namespace streampool::detail
