// White-box: the pool's locks count their contended acquisitions (core/counted_mutex.hpp,
// core/spinlock.hpp), the numbers behind pool_statistics::contention. No sleeps: the holder
// waits until the other thread has counted its failed attempt, then lets it in.
#include "core/support/counted_mutex.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "core/support/spinlock.hpp"

namespace {

template <class Lock>
void count_one_contended_acquisition() {
  Lock mu;
  mu.lock();  // free: not counted
  mu.unlock();
  EXPECT_EQ(mu.contended(), 0u);
  mu.lock();
  std::thread waiter([&] {
    mu.lock();  // held: counted, then waits
    mu.unlock();
  });
  while (mu.contended() == 0) std::this_thread::yield();
  mu.unlock();
  waiter.join();
  EXPECT_EQ(mu.contended(), 1u);
  EXPECT_TRUE(mu.try_lock());  // a try_lock is never counted: it does not wait
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  EXPECT_EQ(mu.contended(), 1u);
}

TEST(CountedLocks, MutexCountsOnlyAcquisitionsThatWaited) {
  count_one_contended_acquisition<streampool::detail::counted_mutex>();
}

TEST(CountedLocks, SpinlockCountsOnlyAcquisitionsThatWaited) {
  count_one_contended_acquisition<streampool::detail::spinlock>();
}

}  // namespace
