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

#include "biased_lock.hpp"
#include "block_arena.hpp"
#include "large_shelf.hpp"
#include "locked_count.hpp"

namespace streampool::detail {

struct alignas(64) large_shard {
  large_shard(std::size_t shard_index, std::size_t granularity, bool keep_streams_apart,
              std::size_t index_min, std::size_t shelf_limit)
      : index(shard_index), arena(granularity, keep_streams_apart, index_min), shelf(shelf_limit) {}

  const std::size_t index;
  // Guards arena, the handles of its ranges, and what follows. Not a mutex: it is taken once per
  // large allocation and free and held for a few index operations, and in a running program the
  // mutex's calls into libpthread (two per critical section, through the PLT) are cache misses of
  // their own. A biased lock (biased_lock.hpp), biased to the first thread that locks it: the shard
  // is given to one stream, whose thread then takes it with plain loads and stores, no locked
  // exchange (on the 2-core host, a 1 MiB pair 41 -> 37 ns; the mixed step at most 2% faster:
  // bench/RESULTS.md, twenty-fifth session). Another thread's lock (a free on another stream, a
  // growth that takes from this shard) drops the bias for good at one heavy fence, and the lock is
  // a plain spinlock from then on. The pool's reaches into a shard that is not the calling
  // stream's borrow the lock (biased_lock::borrow): an idle shard stays unclaimed for the stream
  // it is given to next. Held for long only by a growth's search (windows, granules to remap,
  // and the marker queries its polls make) under the growing shard's lock and its donors';
  // never across a driver call that creates, maps or unmaps memory, nor a host wait. A
  // waiter spins briefly, then yields; growth is rare once a program settles (0 driver calls per
  // step).
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
