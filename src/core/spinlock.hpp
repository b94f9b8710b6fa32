// streampool: a test-and-test-and-set spinlock for the per-stream caches.
//
// Why not std::mutex: the lock guards a few loads and stores, is uncontended in the common case
// (one thread per stream) and sits on the 20 ns fast path, where a futex-based mutex costs about
// twice as much. Under contention it yields instead of burning the core.
#pragma once

#include <atomic>
#include <thread>

namespace streampool::detail {

class spinlock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins)
        if (spins > 64) std::this_thread::yield();
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace streampool::detail
