// White-box: the stream caches' biased lock (src/core/support/biased_lock.hpp). Mutual exclusion
// between the owner's store-and-load entry and other threads' visits (a plain counter that every
// holder increments must end exact; under TSan, any overlap is also a reported race), the bias kept
// by visits and dropped by another thread's lock(), and try_visit never waiting. CTest runs this
// program twice: as is, and with STREAMPOOL_BIASED_LOCKS=0 (no bias: a plain spinlock).
#include "core/support/biased_lock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace sd = streampool::detail;

namespace {

#ifdef STREAMPOOL_TEST_UNDER_SANITIZER
constexpr int rounds = 20'000;
#else
constexpr int rounds = 200'000;
#endif

/// Read-modify-write of a plain counter, in two steps so that an overlap loses an increment.
void bump(std::uint64_t& n) {
  const std::uint64_t v = n;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  n = v + 1;
}

/// The other side of an exclusion test: a thread that waits for `go`, then bumps `counter` n
/// times, each under a fresh Guard on l (std::lock_guard: a lock(); sd::visit_guard: a visit).
template <class Guard>
std::thread bump_after(const std::atomic<bool>& go, sd::biased_lock& l, std::uint64_t& counter,
                       int n) {
  return std::thread([&go, &l, &counter, n] {
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < n; ++i) {
      const Guard g(l);
      bump(counter);
    }
  });
}

TEST(BiasedLock, IsBiasedToItsMakerExactlyWhenTheFenceIsAvailable) {
  const sd::biased_lock l(/*bias=*/true);
  EXPECT_EQ(l.biased(), sd::asymmetric_fences_available());
  const sd::biased_lock plain(/*bias=*/false);
  EXPECT_FALSE(plain.biased());
}

TEST(BiasedLock, OwnerAndVisitorsExcludeEachOtherAndVisitsKeepTheBias) {
  sd::biased_lock l(/*bias=*/true);
  const bool biased = l.biased();
  std::uint64_t counter = 0;
  std::atomic<bool> go{false};
  std::vector<std::thread> visitors;
  constexpr int visitor_count = 2;
  constexpr int visits = rounds / 100;  // each visit is a heavy fence: fewer of them
  std::atomic<int> tried{0};
  for (int v = 0; v < visitor_count; ++v) {
    visitors.emplace_back([&, v] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < visits; ++i) {
        if (v == 0) {
          const sd::visit_guard g(l);
          bump(counter);
        } else {
          // try_visit: never waits; count only what it got.
          if (l.try_visit()) {
            bump(counter);
            l.unlock();
            tried.fetch_add(1);
          }
        }
      }
    });
  }
  go.store(true);
  for (int i = 0; i < rounds; ++i) {
    const std::lock_guard g(l);
    bump(counter);
  }
  for (auto& t : visitors) t.join();
  EXPECT_EQ(counter, static_cast<std::uint64_t>(rounds + visits + tried.load()));
  EXPECT_EQ(l.biased(), biased) << "visits must not drop the bias";
}

/// This thread and another lock() l `rounds` times each, bumping one counter, which must end
/// exact.
/// std::lock_guard for a borrow (a Guard for bump_after).
struct borrow_guard {
  explicit borrow_guard(sd::biased_lock& l) : lock(sd::borrow_lock(l)) {}
  std::unique_lock<sd::biased_lock> lock;
};

/// This thread lock()s l while another takes it with OtherGuard (a lock(), or a borrow): the
/// counter both bump must end exact.
template <class OtherGuard = std::lock_guard<sd::biased_lock>>
void lock_beside_another_locker(sd::biased_lock& l) {
  std::uint64_t counter = 0;
  std::atomic<bool> go{false};
  std::thread other = bump_after<OtherGuard>(go, l, counter, rounds);
  go.store(true);
  for (int i = 0; i < rounds; ++i) {
    const std::lock_guard g(l);
    bump(counter);
  }
  other.join();
  EXPECT_EQ(counter, 2u * rounds);
}

TEST(BiasedLock, AnotherThreadsLockDropsTheBiasAndBothStillExcludeEachOther) {
  sd::biased_lock l(/*bias=*/true);
  lock_beside_another_locker(l);
  EXPECT_FALSE(l.biased()) << "a lock() by a thread other than the owner drops the bias";
}

/// try_lock() (`lock`) or try_visit() on a new thread, released at once if it got in.
bool try_on_another_thread(sd::biased_lock& l, bool lock) {
  bool got = false;
  std::thread([&] {
    got = lock ? l.try_lock() : l.try_visit();
    if (got) l.unlock();
  }).join();
  return got;
}

TEST(BiasedLock, TryVisitFailsWhileTheOwnerHoldsItAndSucceedsAfter) {
  sd::biased_lock l(/*bias=*/true);
  l.lock();
  EXPECT_FALSE(try_on_another_thread(l, /*lock=*/false));
  l.unlock();
  EXPECT_TRUE(try_on_another_thread(l, /*lock=*/false));
  // The owner takes it again at once: the failed and the successful visit left nothing behind.
  l.lock();
  l.unlock();
  EXPECT_EQ(l.biased(), sd::asymmetric_fences_available());
}

TEST(BiasedLock, TheOwnerWaitsForAVisitorInside) {
  sd::biased_lock l(/*bias=*/true);
  std::atomic<bool> inside{false}, release{false};
  std::uint64_t counter = 0;
  std::thread visitor([&] {
    const sd::visit_guard g(l);
    inside.store(true);
    while (!release.load()) std::this_thread::yield();
    bump(counter);
  });
  while (!inside.load()) std::this_thread::yield();
  std::thread releaser([&] { release.store(true); });
  {
    const std::lock_guard g(l);  // blocks until the visitor is out
    EXPECT_EQ(counter, 1u);
    bump(counter);
  }
  visitor.join();
  releaser.join();
  EXPECT_EQ(counter, 2u);
}

TEST(BiasedLock, TryEnterBiasedIsTheOwnersAloneAndChangesNothingWhenRefused) {
  sd::biased_lock l(/*bias=*/true);
  const bool biased = l.biased();
  ASSERT_EQ(l.try_enter_biased(), biased);
  if (biased) l.exit_biased();
  bool other = true;
  std::thread([&] { other = l.try_enter_biased(); }).join();
  EXPECT_FALSE(other) << "only the owner enters biased";
  EXPECT_EQ(l.biased(), biased) << "a refused entry leaves the bias";
  // A visitor inside: the owner's entry is refused and leaves nothing behind (the visitor's
  // revoke then finds the owner out, and the owner enters again afterwards).
  std::atomic<bool> inside{false}, release{false};
  std::thread visitor([&] {
    const sd::visit_guard g(l);
    inside.store(true);
    while (!release.load()) std::this_thread::yield();
  });
  while (!inside.load()) std::this_thread::yield();
  EXPECT_FALSE(l.try_enter_biased());
  release.store(true);
  visitor.join();
  EXPECT_EQ(l.try_enter_biased(), biased);
  if (biased) l.exit_biased();
  // Another thread's lock() drops the bias for good: the owner is refused from then on.
  std::thread([&] {
    l.lock();
    l.unlock();
  }).join();
  EXPECT_FALSE(l.biased());
  EXPECT_FALSE(l.try_enter_biased());
}

TEST(BiasedLock, TheOwnersTryEntryWithALockAfterItExcludesVisitors) {
  // The stream caches' fast paths: try_enter_biased(), else lock() (pool_state::allocate).
  sd::biased_lock l(/*bias=*/true);
  std::uint64_t counter = 0;
  std::atomic<bool> go{false};
  constexpr int visits = rounds / 100;
  std::thread visitor = bump_after<sd::visit_guard>(go, l, counter, visits);
  go.store(true);
  int refused = 0;
  for (int i = 0; i < rounds; ++i) {
    if (l.try_enter_biased()) {
      bump(counter);
      l.exit_biased();
    } else {
      ++refused;
      const std::lock_guard g(l);
      bump(counter);
    }
  }
  visitor.join();
  EXPECT_EQ(counter, static_cast<std::uint64_t>(rounds + visits));
  if (sd::asymmetric_fences_available()) {
    EXPECT_TRUE(l.biased()) << "visits must not drop the bias";
    EXPECT_LT(refused, rounds) << "the owner entered biased at least sometimes";
  } else {
    EXPECT_EQ(refused, rounds);
  }
}

}  // namespace

TEST(BiasedLock, AFirstLockerLockIsClaimedByTheFirstLockNotByAVisit) {
  // The large shards' lock: made with the pool, biased to the stream's thread that locks it first.
  sd::biased_lock l(sd::biased_lock::to_first_locker);
  const bool fences = sd::asymmetric_fences_available();
  EXPECT_EQ(l.biased(), fences);
  EXPECT_FALSE(l.try_enter_biased()) << "nobody owns it before a lock()";
  // A visit (statistics, from another thread) takes it without claiming it.
  std::thread([&] { const sd::visit_guard g(l); }).join();
  EXPECT_FALSE(l.try_enter_biased());
  // The first lock() claims it for its thread: that thread enters biased from then on.
  bool claimed = false, other = true;
  std::thread([&] {
    l.lock();
    l.unlock();
    claimed = l.try_enter_biased();
    if (claimed) l.exit_biased();
    // A second thread started now is refused the owner's entry.
    std::thread([&] { other = l.try_enter_biased(); }).join();
  }).join();
  EXPECT_EQ(claimed, fences);
  EXPECT_FALSE(other);
  EXPECT_EQ(l.biased(), fences);
  // Another thread's lock() then drops the bias as for a lock biased when made.
  l.lock();
  l.unlock();
  EXPECT_FALSE(l.biased());
}

TEST(BiasedLock, AFirstLockersOwnerAndOtherLockersExcludeEachOther) {
  sd::biased_lock l(sd::biased_lock::to_first_locker);
  l.lock();  // this thread claims it
  l.unlock();
  lock_beside_another_locker(l);
  EXPECT_FALSE(l.biased()) << "the other thread's lock() drops the bias";
}

TEST(BiasedLock, TryLockNeverWaitsAndDropsAnotherThreadsBiasOnlyWhenItGetsIn) {
  sd::biased_lock l(/*bias=*/true);
  const bool fences = sd::asymmetric_fences_available();
  l.lock();
  EXPECT_FALSE(try_on_another_thread(l, /*lock=*/true)) << "the owner holds it";
  EXPECT_EQ(l.biased(), fences) << "a refused try_lock leaves the bias";
  l.unlock();
  EXPECT_TRUE(try_on_another_thread(l, /*lock=*/true));
  EXPECT_FALSE(l.biased()) << "a try_lock that gets in is a lock(): the bias is gone";
  EXPECT_TRUE(l.try_lock());
  l.unlock();
}

TEST(BiasedLock, ABorrowLeavesAFirstLockerLockUnclaimedForItsUser) {
  // A growth that searches an idle shard borrows its lock: the stream later given the shard must
  // still find it unclaimed, so that its own thread's first lock() claims it.
  sd::biased_lock l(sd::biased_lock::to_first_locker);
  const bool fences = sd::asymmetric_fences_available();
  std::thread([&] {
    { const auto g = sd::borrow_lock(l); }
    EXPECT_FALSE(l.try_enter_biased()) << "the borrowing thread did not claim it";
    ASSERT_TRUE(l.try_borrow());
    l.unlock();
  }).join();
  EXPECT_EQ(l.biased(), fences);
  bool claimed = false;
  std::thread([&] {
    l.lock();
    l.unlock();
    claimed = l.try_enter_biased();
    if (claimed) l.exit_biased();
  }).join();
  EXPECT_EQ(claimed, fences) << "the first lock() after the borrows claims it";
}

TEST(BiasedLock, ABorrowDropsAClaimedBiasAndExcludesTheOwner) {
  sd::biased_lock l(sd::biased_lock::to_first_locker);
  l.lock();  // this thread claims it
  l.unlock();
  lock_beside_another_locker<borrow_guard>(l);
  EXPECT_FALSE(l.biased()) << "a borrow by another thread drops a claimed bias, as lock() does";
}
