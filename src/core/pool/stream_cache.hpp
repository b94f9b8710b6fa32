// streampool: the stream cache, blocks freed on one stream kept for reuse on that stream.
//
// Glossary
//   bin      the chunks of one size class freed on this stream and not yet reused, oldest first.
//            An entry keeps the timeline's point at its free: on this stream it needs no wait
//            (in-order queue); anywhere else that point becomes its token.
//   spill    a bin over the pool's stream_cache_bytes gives its older half, with tokens, to the
//            pool's shared lists, where other streams can use it; so does the fullest bin (again
//            and again, down to three quarters of the bound) when all of them together hold more
//            than total_factor times that (a stream that frees many classes does not hoard
//            memory class by class).
//   steal    another stream takes a bin's oldest entry (behind a device-side wait) rather than
//            grow the pool, and in the same visit spills the rest of the bin's older half.
//   drain    every entry leaves for the shared lists (trim, out-of-memory, the pool's end, and,
//            per stream, a stream idle while the pool grew: pool_state::drain_idle_caches).
//
// One per (timeline, pool). Shared by the timeline (which finds it on the fast path) and by the
// pool (which walks its caches for statistics, trim and its own destruction). Whichever goes
// first tells the other through the cache:
//   orphan()  the timeline retired: its points are all complete, so the entries go back to the
//             pool's shared lists as free memory with no tokens (if the pool still exists); or
//             it is closing (stream::release): they go back with tokens on it;
//   detach()  the pool is being destroyed: the entries are dropped (the pool releases the
//             segments); nothing frees into a pool being destroyed.
//
// Invariants, under mu_ (pool_state::validate() checks them), for every size class c:
//   bin_bytes_[c] == bins_[c].size() * class_size(c);  total_bytes_ == the sum of bin_bytes_
//   e.owner->size_class == c  and  e.owner->state(e.owner->index_of(e.p)) == chunk_free
//                                                               for every entry e of bins_[c]
//   orphaned_ || detached_  ==>  bins_[c].empty()
//   allocations_ and deallocations_ only grow.
// Live bytes are not counted here but per thread (live_cell.hpp): owner_cell_ is the cell of the
// thread that made the cache (its lock's bias), which the fast path counts on once pop_biased or
// push_biased has told it that it is that thread.
// Lock order: pool caches lock -> cache lock -> shared class lock (a spill pushes to the shared
// lists under this cache's lock).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/pool/live_cell.hpp"
#include "core/support/biased_lock.hpp"
#include "core/support/locked_count.hpp"
#include "core/support/size_classes.hpp"
#include "streampool/error.hpp"
#include "streampool/timeline.hpp"

namespace streampool::detail {

class pool_state;
struct slab;
struct test_access;

class stream_cache {
 public:
  struct entry {
    void* p;
    slab* owner;
    timeline::point at;  // the timeline's point when it was freed
  };

  /// All bins together hold at most this many times the per-class limit (pool_options::
  /// stream_cache_bytes) after a push: 16 threads' caches then hold at most 16 x 32 MiB by
  /// default, however many classes each frees.
  static constexpr std::size_t total_factor = 4;

  /// `bin_limit`: the pool's stream_cache_bytes, the most one bin holds after a push.
  /// `owner_cell`: the live cell of the thread that makes the cache (its lock's bias).
  stream_cache(std::uint64_t pool_id, std::weak_ptr<pool_state> pool, std::weak_ptr<timeline> line,
               std::uint64_t timeline_id, std::size_t shard, std::size_t bin_limit,
               std::shared_ptr<live_cell> owner_cell);

  [[nodiscard]] std::uint64_t pool_id() const noexcept { return pool_id_; }
  [[nodiscard]] std::uint64_t timeline_id() const noexcept { return timeline_id_; }
  /// The pool's large shard for this stream (large_shard.hpp).
  [[nodiscard]] std::size_t shard() const noexcept { return shard_; }
  /// The live cell of the thread the cache is biased to: only that thread may count on it, which
  /// a successful pop_biased() or push_biased() proves the caller is.
  [[nodiscard]] live_cell& owner_cell() const noexcept { return *owner_cell_; }
  /// The calling thread's cell when the cache is biased to it (owner_cell()), else null.
  [[nodiscard]] live_cell* cell_if_owner() const noexcept {
    return mu_.biased_to_caller() ? owner_cell_.get() : nullptr;
  }

  // ---- the fast path (each takes mu_: biased to this stream's thread, no atomic read-modify-
  // write there) ----

  /// The most recently freed chunk of class `cls` (warm, and freed on this very stream: no wait
  /// is ever needed), counted as an allocation; false when the bin is empty.
  bool pop(std::size_t cls, entry& out) noexcept {
    const std::lock_guard lock(mu_);
    return pop_locked(cls, out);
  }
  /// pop() by the thread the cache is biased to, while it is: false, with nothing changed, when
  /// the bias does not hold (then pop() decides) or the bin is empty. It makes no call, so the
  /// allocation that inlines it saves no registers (pool_state::allocate).
  [[gnu::always_inline]] bool pop_biased(std::size_t cls, entry& out) noexcept {
    if (!mu_.try_enter_biased()) return false;
    const bool popped = pop_locked(cls, out);
    mu_.exit_biased();
    return popped;
  }

  /// Keeps a chunk of class `cls` (`bytes` == class_size(cls), which the caller has at hand)
  /// freed on this stream, counted as a free. When the bin then holds more than the bin limit,
  /// its older half goes to `spill(entries, line)` (entries of one class; line: this stream's
  /// timeline, null once it is gone), still under mu_; the most recently freed half stays (warm,
  /// and the likeliest to be reused here). When the bins together then hold more than
  /// total_factor x the bin limit, the fullest bin spills its older half the same way. A spill
  /// lists all its entries or none (it may throw bad_alloc): entries leave the bin only after.
  template <class Spill>
  void push(std::size_t cls, std::size_t bytes, const entry& e, Spill&& spill) {
    STREAMPOOL_ASSERT_INTERNAL(bytes == class_size(cls));
    const std::lock_guard lock(mu_);
    push_locked(cls, bytes, e);
    if (bin_bytes_[cls] > bin_limit_) [[unlikely]]
      spill_oldest(cls, bins_[cls].size() / 2, spill);
    if (total_bytes_ > total_limit_) [[unlikely]]
      spill_to_total(total_limit_, spill);
  }
  /// push() by the thread the cache is biased to, while it is, when the bin has room for the entry
  /// (no allocation) and neither bound is passed (no spill): false, with nothing changed,
  /// otherwise (then push() decides). Like pop_biased(), it makes no call.
  [[gnu::always_inline]] bool push_biased(std::size_t cls, std::size_t bytes,
                                          const entry& e) noexcept {
    STREAMPOOL_ASSERT_INTERNAL(bytes == class_size(cls));
    if (!mu_.try_enter_biased()) return false;
    const bool room = bins_[cls].size() < bins_[cls].capacity() &&
                      bin_bytes_[cls] + bytes <= bin_limit_ && total_bytes_ + bytes <= total_limit_;
    if (room) [[likely]] {
      // push_back's growth path, inlined, would make the free's fast path save registers and
      // reserve a stack frame on every call, though `room` rules it out. Told so just before the
      // push_back, in pointers (GCC does not relate size() < capacity() to push_back's test),
      // the compiler drops it (docs/performance.md, "Stream caches and their lock").
      auto& bin = bins_[cls];
      if (bin.data() + bin.size() == bin.data() + bin.capacity()) __builtin_unreachable();
      bin.push_back(e);
      count_push(cls, bytes);
    }
    mu_.exit_biased();
    return room;
  }

  // ---- the slow paths ----

  /// For another stream: the oldest chunk of class `cls` (the likeliest to be complete) and this
  /// stream's timeline (null once it is gone), for its token. In the same visit the rest of the
  /// bin's older half goes to `spill(entries, line)` (the shared lists), so that a stream that
  /// keeps taking from this cache visits it (a heavy fence, while the cache is biased) once per
  /// half bin, not once per chunk. Only when the bin holds something (checked before the visit),
  /// the lock is free (a busy cache belongs to a running thread: skipped, never waited for) and the
  /// cache is neither orphaned nor detached.
  template <class Spill>
  bool try_steal(std::size_t cls, entry& out, std::shared_ptr<timeline>& line, Spill&& spill) {
    if (bin_bytes_[cls] == 0 || !mu_.try_visit()) return false;
    const std::lock_guard lock(mu_, std::adopt_lock);
    if (detached_ || orphaned_.load(std::memory_order_relaxed) || bins_[cls].empty()) return false;
    auto& bin = bins_[cls];
    line = line_.lock();
    // The rest of the older half to the shared lists first (all or nothing: an exception leaves
    // the bin whole), then the oldest to the caller: this stream keeps the newer half.
    const std::size_t rest = (bin.size() - 1) / 2;
    if (rest != 0) spill(std::span<const entry>(bin.data() + 1, rest), line);
    out = bin.front();
    drop_oldest(cls, 1 + rest);
    return true;
  }

  /// Hands every entry to `take(cls, entry, line)` (line: this stream's timeline, null once it is
  /// gone) and empties the bins, under mu_. Nothing on a detached cache.
  template <class Take>
  void drain(Take&& take) {
    const visit_guard lock(mu_);
    if (detached_) return;
    const std::shared_ptr<timeline> line = line_.lock();
    for (std::size_t cls = 0; cls < max_classes; ++cls) {
      for (const entry& e : bins_[cls]) take(cls, e, line);
      bins_[cls].clear();
      bin_bytes_[cls] = 0;
    }
    total_bytes_ = 0;
  }

  /// Whether this stream neither allocated nor freed since the previous call (false at the first);
  /// the pool's idle check (pool_state::drain_idle_caches) is the only caller.
  bool idle_since_last_look() noexcept {
    const std::uint64_t now = allocations() + deallocations();
    return activity_at_last_look_.exchange(now, std::memory_order_relaxed) == now;
  }

  /// The timeline is gone: every entry goes to the pool's shared lists, with a token on `line`
  /// when it is closing (its work may still run), with none when it retired (line null).
  void orphan(const std::shared_ptr<timeline>& line);
  void detach();

  // ---- statistics: read without the lock, except where said ----

  [[nodiscard]] std::uint64_t allocations() const noexcept { return allocations_; }
  [[nodiscard]] std::uint64_t deallocations() const noexcept { return deallocations_; }
  [[nodiscard]] std::uint64_t contended() const noexcept { return mu_.contended(); }
  /// The lock is still biased to one thread (biased_lock.hpp).
  [[nodiscard]] bool biased() const noexcept { return mu_.biased(); }
  /// Bytes in the bins (no lock: a moment's value, exact while the stream is not running).
  [[nodiscard]] std::size_t cached_bytes() const;
  /// The timeline retired: the cache is empty for good (no lock: a flag set once).
  [[nodiscard]] bool orphaned() const;

  // ---- snapshots (pool_state::snapshot) ----

  /// What the cache holds, copied under one hold of mu_.
  struct contents {
    std::shared_ptr<timeline> line;                      // null once the stream is gone
    bool gone = false;                                   // orphaned or detached: empty for good
    std::vector<std::pair<std::size_t, entry>> entries;  // (size class, entry)
  };
  [[nodiscard]] contents copy() const;

  // ---- validation (pool_state::validate holds every cache's lock at once) ----

  [[nodiscard]] visit_guard hold() const { return visit_guard(mu_); }
  /// Under hold(): the first broken invariant of this header, or empty.
  [[nodiscard]] std::string find_broken_locked() const;
  /// Under hold(): f(entry) for every entry of class `cls`.
  template <class F>
  void for_each_entry_locked(std::size_t cls, F&& f) const {
    for (const entry& e : bins_[cls]) f(e);
  }

 private:
  friend struct test_access;  // tests that break an invariant on purpose (tests/unit)

  /// push()'s spill, out of line: it runs once in many frees. The `older` oldest entries go.
  /// The spill lists all its entries or none, so an exception leaves them here, none listed
  /// twice; they leave the bin only after.
  template <class Spill>
  [[gnu::noinline]] void spill_oldest(std::size_t cls, std::size_t older, Spill& spill) {
    if (older == 0) return;
    spill(std::span<const entry>(bins_[cls].data(), older), line_.lock());
    drop_oldest(cls, older);
  }
  /// The `count` oldest entries of class `cls` leave the bin (spilled or stolen).
  void drop_oldest(std::size_t cls, std::size_t count) noexcept {
    auto& bin = bins_[cls];
    bin.erase(bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(count));
    // One subtraction: cached_bytes() reads total_bytes_ without the lock.
    total_bytes_ -= count * class_size(cls);
    bin_bytes_[cls] = bin.size() * class_size(cls);
  }
  /// push()'s total bound: the fullest bin spills its older half (its one entry, when it has
  /// one) until the bins hold at most three quarters of `bound`. The quarter below the bound
  /// makes the next spills many pushes away: a stream that frees chunks of many large classes
  /// (one or two per bin) would otherwise go over the bound, and search for the fullest bin, at
  /// nearly every push (docs/performance.md, "Stream caches and their lock").
  template <class Spill>
  [[gnu::noinline]] void spill_to_total(std::size_t bound, Spill& spill) {
    while (total_bytes_ > bound - bound / 4) {
      const std::size_t fullest = fullest_bin();
      spill_oldest(fullest, std::max<std::size_t>(1, bins_[fullest].size() / 2), spill);
    }
  }
  /// The class whose bin holds the most bytes (under mu_).
  [[nodiscard]] std::size_t fullest_bin() const noexcept;

  bool pop_locked(std::size_t cls, entry& out) noexcept {
    auto& bin = bins_[cls];
    if (bin.empty()) return false;
    out = bin.back();
    bin.pop_back();
    const std::size_t bytes = class_size(cls);
    bin_bytes_[cls] -= bytes;
    total_bytes_ -= bytes;
    ++allocations_;
    return true;
  }
  /// The entry joins its bin (which may then be over a bound: push() spills).
  [[gnu::always_inline]] void push_locked(std::size_t cls, std::size_t bytes, const entry& e) {
    bins_[cls].push_back(e);
    count_push(cls, bytes);
  }
  /// push_locked's counting, after the entry joined bin `cls`.
  [[gnu::always_inline]] void count_push(std::size_t cls, std::size_t bytes) noexcept {
    ++deallocations_;
    bin_bytes_[cls] += bytes;
    total_bytes_ += bytes;
  }

  // Guards bins_, bin_bytes_, total_bytes_, orphaned_'s changes, detached_. Biased to the thread
  // that made the cache (the stream's first user): pop and push are its fast path,
  // with no atomic read-modify-write; every other member takes it as a visit (biased_lock.hpp).
  // Cache-line aligned (and so the whole cache): each thread's stream cache is written on every
  // alloc and free, and must not share a line with another thread's.
  alignas(64) mutable biased_lock mu_{/*bias=*/true};
  std::array<std::vector<entry>, max_classes> bins_;
  // Read without mu_ by try_steal (a class this cache holds nothing of is not visited).
  std::array<locked_count<std::size_t>, max_classes> bin_bytes_;
  locked_count<std::size_t>
      total_bytes_;  // read without mu_ by cached_bytes() (statistics, idle drains)
  std::atomic<bool> orphaned_{false};  // read without mu_ by orphaned(); set once, under it
  bool detached_ = false;
  const std::weak_ptr<timeline> line_;
  const std::weak_ptr<pool_state> pool_;
  const std::uint64_t pool_id_;
  const std::uint64_t timeline_id_;
  const std::size_t shard_;
  const std::size_t bin_limit_;
  // total_factor x bin_limit_, saturated: a bin limit over a quarter of SIZE_MAX means no total
  // bound, not a wrapped one.
  const std::size_t total_limit_;

  locked_count<std::uint64_t> allocations_;  // statistics: written under mu_, read without it
  locked_count<std::uint64_t> deallocations_;
  const std::shared_ptr<live_cell> owner_cell_;
  std::atomic<std::uint64_t> activity_at_last_look_{UINT64_MAX};
};

}  // namespace streampool::detail
