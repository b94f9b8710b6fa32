// streampool: a counter with one writer at a time (its owner's lock) and readers without the lock.
//
// The pool's statistics and the stream caches' byte totals are written only under a lock that
// serialises their writers, and read by statistics() and the pool's walks without it. A
// read-modify-write (fetch_add) would be a locked instruction on the fast path for nothing: +=,
// -= and ++ here are a relaxed load and a relaxed store. A reader sees some recent value. Always
// inlined: two instructions, which GCC otherwise calls out of line from a large fast path.
#pragma once

#include <atomic>

namespace streampool::detail {

template <class T>
class locked_count {
 public:
  [[gnu::always_inline]] locked_count& operator+=(T n) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    return *this;
  }
  [[gnu::always_inline]] locked_count& operator-=(T n) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
    return *this;
  }
  [[gnu::always_inline]] locked_count& operator++() noexcept { return *this += 1; }
  [[gnu::always_inline]] locked_count& operator=(T n) noexcept {
    v_.store(n, std::memory_order_relaxed);
    return *this;
  }
  // NOLINTNEXTLINE(google-explicit-constructor): reads as a count
  [[gnu::always_inline]] operator T() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<T> v_{0};
};

}  // namespace streampool::detail
