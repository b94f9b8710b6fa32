// streampool: a lock that one thread, its owner, takes and releases with plain loads and stores.
//
// Why: a stream cache (stream_cache.hpp) is locked on every allocate and free, nearly always by
// the one thread that runs its stream. A spinlock costs that thread a locked exchange per call,
// a full barrier (docs/performance.md, "Stream caches and their lock"). Biased, the owner's
// acquisition is a store, a compiler fence and a load.
//
// How (an asymmetric Dekker lock):
//   owner    busy_ = true; compiler fence; if revoked_ is clear, it holds the lock.
//            unlock: busy_ = false.
//   others   take slow_ (a spinlock: others exclude each other), then revoked_ = true; a heavy
//            fence (membarrier: every running thread of the process passes a full barrier); wait
//            until busy_ is clear. unlock: revoked_ = false, release slow_.
//   The heavy fence stands in for the full barrier that the owner's side leaves out: of "owner
//   stored busy_, then read revoked_" and "other stored revoked_, then read busy_", at least one
//   read sees the other's store, so both never enter. An owner that finds revoked_ set takes
//   slow_ like the others (and needs no fence: it is the only thread that sets busy_).
//
// Bias: given to the thread that makes the lock (the cache's first user), or, for a lock made
// before its user is known (a large shard, made with the pool), to the first thread whose lock()
// takes it. lock() by any other thread drops it for good (one heavy fence), and from then on every
// thread takes slow_, as a plain spinlock: a stream used from several threads (PyTorch's autograd
// thread frees what the main thread allocated) pays nothing per call for the bias it lost. visit()
// and try_visit() (the pool's own walks: statistics, snapshots, validation, drains, steals) lock
// without dropping it, at one heavy fence each. borrow() and try_borrow() (a thread that reaches
// into a lock meant for another: a growth that searches idle shards) are lock() and try_lock()
// that leave a lock biased to its first locker unclaimed: the thread that claims it is then the
// one its stream runs on, not whichever thread grew first. Without membarrier (not Linux, or
// refused) nothing is ever biased.
//
// Invariants
//   - owner_ is 0 (unbiased), a thread's tag, or `unclaimed` (biased to its first locker); it
//     changes only from `unclaimed` to the tag of the thread whose lock() takes it, and from a tag
//     to 0, each under slow_.
//   - busy_ is written only by the owner thread; true exactly while it holds the lock biased
//     (and for a moment while it finds revoked_ set).
//   - once owner_ is 0, revoked_ stays true: an owner that read owner_ before it changed finds
//     revoked_ set and goes the slow way.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/support/environment.hpp"
#include "core/support/spinlock.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {

/// The calling thread's tag: unique among live threads, never 0 (its thread control block).
[[nodiscard]] inline std::uintptr_t thread_tag() noexcept {
#if defined(__x86_64__) && defined(__linux__)
  std::uintptr_t tp;
  asm("mov %%fs:0, %0" : "=r"(tp));
  return tp;
#elif defined(__aarch64__) && defined(__linux__)
  std::uintptr_t tp;
  asm("mrs %0, tpidr_el0" : "=r"(tp));
  return tp;
#else
  static thread_local const char tag = 0;
  return reinterpret_cast<std::uintptr_t>(&tag);
#endif
}

#if defined(__linux__)
inline long membarrier(int cmd) noexcept { return syscall(__NR_membarrier, cmd, 0, 0); }

inline bool register_for_membarrier() noexcept {
  const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  return cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
         membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}
#endif

/// STREAMPOOL_BIASED_LOCKS (default on); throws logic_error naming a bad value. A device calls it
/// when it is made (device.cpp), where the error can reach the caller; the locks read it in
/// noexcept code below.
[[nodiscard]] inline bool biased_locks_wanted() {
  return environment::flag(environment::variable::biased_locks, true);
}

/// Whether the heavy fence works here (registers the process for it at the first call).
/// STREAMPOOL_BIASED_LOCKS=0 says no: every stream cache is then a plain spinlock (the tests run
/// both ways, and a user on a kernel that misbehaves has a way out).
[[nodiscard]] inline bool asymmetric_fences_available() noexcept {
#if defined(__linux__)
  static const bool available = [] {
    bool wanted = true;
    try {
      wanted = biased_locks_wanted();
    } catch (const std::exception& e) {
      // noexcept here: say so, keep the default. (A device refuses a bad value when it is made,
      // device.cpp; this is for a value set after that.)
      std::fprintf(stderr, "%s; the stream caches' locks stay biased\n", e.what());
    }
    return wanted && register_for_membarrier();
  }();
  return available;
#else
  return false;
#endif
}

/// The heavy half: every running thread of the process passes a full memory barrier.
[[gnu::noinline]] inline void heavy_fence() noexcept {
#if defined(__linux__)
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // Registration belongs to the process; a child after fork() may not have it. Once more, else
  // there is no safe way on: a biased owner could be inside.
  if (register_for_membarrier() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  std::fprintf(stderr,
               "streampool: membarrier(PRIVATE_EXPEDITED) failed after it was registered (errno "
               "%d): a biased stream cache cannot be revoked safely; set "
               "STREAMPOOL_BIASED_LOCKS=0\n",
               errno);
  std::abort();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);  // never biased here: not reached
#endif
}

class biased_lock {
 public:
  /// Biased to the calling thread when `bias` and the heavy fence is available.
  explicit biased_lock(bool bias) noexcept
      : owner_(bias && asymmetric_fences_available() ? thread_tag() : 0) {}
  /// Biased to the first thread whose lock() takes it (a large shard: made with the pool, first
  /// locked by the thread of the stream it is given to), when the heavy fence is available.
  struct to_first_locker_t {};
  static constexpr to_first_locker_t to_first_locker{};
  explicit biased_lock(to_first_locker_t) noexcept
      : owner_(asymmetric_fences_available() ? unclaimed : 0) {}
  biased_lock(const biased_lock&) = delete;
  biased_lock& operator=(const biased_lock&) = delete;

  /// The calls of the lock's user: by another thread than the owner, drops the bias. Inline
  /// wherever it is called (a std::lock_guard's lock() included): the owner's entry, and an
  /// uncontended take of an unbiased lock (a stream or a shard used from several threads), make no
  /// call; left to the compiler, it can stay a call at every shard lock and live count of the
  /// large path.
  [[gnu::always_inline]] void lock() noexcept {
    if (enter_biased()) [[likely]]
      return;
    // Unbiased for good (owner_ 0 never changes): a plain spinlock.
    if (owner_.load(std::memory_order_relaxed) == 0 && slow_.try_lock()) return;
    lock_slow();
  }
  /// A visit that keeps the bias (the pool's walks over its caches).
  void visit() noexcept {
    if (!enter_biased()) acquire(take::visit);
  }
  /// lock() that leaves a lock biased to its first locker unclaimed (a thread that is not the
  /// lock's user: a growth in an idle shard). Released with unlock().
  void borrow() noexcept {
    if (!enter_biased()) acquire(take::borrow);
  }
  /// lock(), or false when another thread holds the lock (never waits for it).
  [[gnu::noinline]] bool try_lock() noexcept { return try_take(take::lock); }
  /// visit(), or false when another thread holds the lock (never waits for it).
  [[gnu::noinline]] bool try_visit() noexcept { return try_take(take::visit); }
  /// borrow(), or false when another thread holds the lock (never waits for it).
  [[gnu::noinline]] bool try_borrow() noexcept { return try_take(take::borrow); }
  [[gnu::always_inline]] void unlock() noexcept {
    // Only the owner sets busy_, and only for a biased hold or for a moment in enter_biased(),
    // which this thread is not in: its own busy_ set means it holds the lock biased.
    if (busy_.load(std::memory_order_relaxed) &&
        owner_.load(std::memory_order_relaxed) == thread_tag()) [[likely]] {
      busy_.store(false, std::memory_order_release);
      return;
    }
    if (owner_.load(std::memory_order_relaxed) == 0) {
      slow_.unlock();
      return;
    }
    release_slow();
  }

  /// The owner's entry alone, for a caller with a way of its own when it fails: true when the
  /// calling thread now holds the lock biased (release with exit_biased(), not unlock()); false,
  /// with nothing changed, for any other thread, an unbiased lock, or a visit in progress. No
  /// call in it: the stream caches' fast paths save no registers for it.
  [[gnu::always_inline]] bool try_enter_biased() noexcept { return enter_biased(); }
  /// Ends a hold that try_enter_biased() took.
  [[gnu::always_inline]] void exit_biased() noexcept {
    busy_.store(false, std::memory_order_release);
  }

  /// Whether the lock is biased to a thread, or will be to its first locker (tests, statistics).
  [[nodiscard]] bool biased() const noexcept { return owner_.load(std::memory_order_relaxed) != 0; }
  /// Whether the lock is biased to the calling thread (its owner's fast path is the caller's).
  [[nodiscard]] bool biased_to_caller() const noexcept {
    return owner_.load(std::memory_order_relaxed) == thread_tag();
  }
  /// Acquisitions that had to wait for another holder.
  [[nodiscard]] std::uint64_t contended() const noexcept {
    return slow_.contended() + owner_waits_.load(std::memory_order_relaxed);
  }

 private:
  /// The owner's entry; false for any other thread, or when the owner finds revoked_ set.
  [[gnu::always_inline]] bool enter_biased() noexcept {
    if (owner_.load(std::memory_order_relaxed) != thread_tag()) return false;
    // Not re-entrant (neither is a spinlock): a nested hold would release the outer one.
    STREAMPOOL_ASSERT_INTERNAL(!busy_.load(std::memory_order_relaxed));
    busy_.store(true, std::memory_order_relaxed);
    // The light half of the fence (heavy_fence() is the other): the compiler keeps the store
    // before the load; the CPU is made to by the other side's membarrier.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!revoked_.load(std::memory_order_acquire)) [[likely]]
      return true;
    busy_.store(false, std::memory_order_release);
    return false;
  }
  [[gnu::noinline]] void release_slow() noexcept {
    if (owner_.load(std::memory_order_relaxed) != 0)
      revoked_.store(false, std::memory_order_release);
    slow_.unlock();
  }
  /// How a non-owner takes the lock: lock() claims an unclaimed bias or drops another thread's;
  /// borrow() only drops; visit() does neither.
  enum class take { lock, borrow, visit };
  bool try_take(take how) noexcept {
    if (enter_biased()) return true;
    if (!slow_.try_lock()) return false;
    if (take_slow(how, /*wait=*/false)) return true;
    slow_.unlock();
    return false;
  }
  /// lock() past its inline cases: a contended unbiased lock, or a biased one taken by another
  /// thread.
  [[gnu::noinline]] void lock_slow() noexcept {
    if (owner_.load(std::memory_order_relaxed) == 0) {
      slow_.lock();  // counts the contention
      return;
    }
    acquire(take::lock);
  }
  [[gnu::noinline]] void acquire(take how) noexcept {
    slow_.lock();
    (void)take_slow(how, /*wait=*/true);
  }
  /// Under slow_: makes the hold exclusive of a biased owner, and claims or drops the bias as
  /// `how` says. false when `wait` is false and the owner holds the lock (nothing changed).
  bool take_slow(take how, bool wait) noexcept {
    const std::uintptr_t owner = owner_.load(std::memory_order_relaxed);
    // The owner itself needs no revoke: it is the only thread that sets busy_. Unclaimed, no
    // thread can have entered biased: no tag equals `unclaimed`.
    if (owner == 0 || owner == thread_tag()) return true;
    if (owner == unclaimed) {
      // No thread read its own tag here before now, so none can enter on a stale owner_; the
      // release of slow_ (release_slow) publishes it with revoked_ clear.
      if (how == take::lock) owner_.store(thread_tag(), std::memory_order_relaxed);
      return true;
    }
    if (!revoke(wait)) return false;
    // revoked_ stays set for good (see the invariants).
    if (how != take::visit) owner_.store(0, std::memory_order_relaxed);
    return true;
  }
  /// Under slow_: keeps the owner out (revoked_, the heavy fence) and waits until it is out.
  /// false when `wait` is false and the owner holds the lock (revoked_ is then clear again).
  bool revoke(bool wait) noexcept {
    revoked_.store(true, std::memory_order_relaxed);
    heavy_fence();
    if (!busy_.load(std::memory_order_acquire)) return true;
    if (!wait) {
      revoked_.store(false, std::memory_order_release);
      return false;
    }
    owner_waits_.fetch_add(1, std::memory_order_relaxed);
    for (int spins = 0; busy_.load(std::memory_order_acquire); ++spins)
      if (spins > 64) std::this_thread::yield();
    return true;
  }

  /// owner_ of a lock biased to its first locker before that lock(): never a thread's tag (an
  /// odd address).
  static constexpr std::uintptr_t unclaimed = 1;
  std::atomic<std::uintptr_t> owner_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> revoked_{false};
  spinlock slow_;
  std::atomic<std::uint64_t> owner_waits_{0};
};

/// std::lock_guard for the lock's user, whose lock() and unlock() stay inline where it is used:
/// GCC may make std::lock_guard<biased_lock>'s constructor and destructor calls of their own on
/// the large path (one shard lock and one live count per large allocation and free).
class biased_guard {
 public:
  [[gnu::always_inline]] explicit biased_guard(biased_lock& l) noexcept : l_(l) { l.lock(); }
  [[gnu::always_inline]] ~biased_guard() { l_.unlock(); }
  biased_guard(const biased_guard&) = delete;
  biased_guard& operator=(const biased_guard&) = delete;

 private:
  biased_lock& l_;
};

/// A borrow() held as a std::unique_lock (released by its unlock()).
[[nodiscard]] inline std::unique_lock<biased_lock> borrow_lock(biased_lock& l) noexcept {
  l.borrow();
  return {l, std::adopt_lock};
}

/// std::lock_guard for a visit.
class visit_guard {
 public:
  explicit visit_guard(biased_lock& l) noexcept : l_(&l) { l.visit(); }
  visit_guard(visit_guard&& o) noexcept : l_(o.l_) { o.l_ = nullptr; }
  visit_guard(const visit_guard&) = delete;
  visit_guard& operator=(const visit_guard&) = delete;
  visit_guard& operator=(visit_guard&&) = delete;
  ~visit_guard() {
    if (l_ != nullptr) l_->unlock();
  }

 private:
  biased_lock* l_;
};

}  // namespace streampool::detail
