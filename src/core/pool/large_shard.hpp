// streampool: one shard of the pool's large blocks (docs/large-blocks.md, "Shards").
//
// The large blocks are split into shards so that threads on their own streams never share a lock
// or a written cache line on the large path: each stream cache is given a shard when it is made
// (round robin), its large allocations come from that shard's arena, and each range belongs to
// one shard for good (large_range::shard), so a free goes to the shard of its block whatever
// stream frees it. A program with one stream has all its large blocks in one shard: the policy
// of pool_large.cpp is then exactly that of one arena.
//
// Invariants
//   - every block of a shard's arena lies in a range with range->shard == this shard;
//   - the counters below are written under mu only. (Live bytes are counted per thread, in its
//     live cell (live_cell.hpp), on both paths.)
// Locks: a thread holds at most one shard's mu, except a growth (which holds the pool's
// growth_mu_): it may hold its own shard's and then others', in any order, because no other
// thread ever waits for a second shard lock while holding one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/pool/block_arena.hpp"
#include "core/pool/large_shelf.hpp"
#include "core/support/biased_lock.hpp"
#include "core/support/locked_count.hpp"

namespace streampool::detail {

struct alignas(64) large_shard {
  large_shard(std::size_t shard_index, std::size_t granularity, bool keep_streams_apart,
              std::size_t index_min, std::size_t shelf_limit)
      : index(shard_index), arena(granularity, keep_streams_apart, index_min), shelf(shelf_limit) {}

  const std::size_t index;
  // Guards arena, the handles of its ranges, and what follows. Taken once per large allocation
  // and free and held for a few index operations, so not a mutex (its calls into libpthread are
  // cache misses of their own) but a biased lock (biased_lock.hpp), biased to the first thread
  // that locks it: the thread of the stream the shard is given to takes it with plain loads and
  // stores (docs/performance.md, "Large shards and their lock"). Another thread's lock drops the
  // bias for good; the pool's reaches into a shard that is not the calling stream's borrow it
  // (biased_lock::borrow), so an idle shard stays unclaimed for its next stream. Held longer only
  // by a growth's search; never across a driver call that creates, maps or unmaps memory, nor a
  // host wait.
  mutable biased_lock mu{biased_lock::to_first_locker};
  block_arena arena;
  // Large blocks just freed, kept live in `arena` for the next request of their size class
  // (large_shelf.hpp). Off (limit 0) on the segment path and when pool_options says so.
  large_shelf shelf;

  /// The live block at `p` as the program sees it: handed out and not on the shelf (a shelved
  /// block is live to the arena, free to the program). nullptr otherwise. Under mu.
  [[nodiscard]] arena_block* find_handed_out(std::uintptr_t p) const noexcept {
    arena_block* b = arena.find_live(p);
    return b != nullptr && !b->shelved ? b : nullptr;
  }

  /// Streams whose caches live and use this shard (pool_state::make_stream_cache gives a new
  /// stream the shard with the fewest, so that it inherits the memory of a stream that is gone).
  std::atomic<int> streams{0};

  // Statistics: written under mu (so by one thread at a time), read without.
  locked_count<std::uint64_t> allocations, deallocations;
  locked_count<std::uint64_t> fresh_allocations, ready_reuses, waited_reuses;
};

}  // namespace streampool::detail
