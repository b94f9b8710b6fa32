// streampool: one thread's change of one pool's live bytes, not yet added to the pool's counter.
//
// Why per thread: every allocation and free changes the live count, and a counter that every
// thread writes does not scale (docs/performance.md, "Live counts per thread"). So each thread
// keeps its change here and adds it to the pool's counter (pool_state::live_) in steps of
// flush_bytes (or twice a larger block: pool_state::count_live). Per thread, not per stream: a
// program whose streams all run on one thread has one pending change, so its peak (the counter
// plus the calling thread's change) is exact; with several threads, each other thread's pending
// change (under flush_bytes, or twice its last large block) is what the peak may miss or, while
// negative, overstate, and the peak is never taken above the reserved bytes
// (pool_state::note_peak). The sum (the counter plus every cell) is exact whenever no other
// thread is between two calls.
//
// Invariants
//   - delta is written only by the cell's thread (a plain load and store, no read-modify-write),
//     or by pool_state::fold_thread_cell() once that thread has exited; anyone may read it.
//   - |delta| < bound (the largest step so far; the last change's step, which is at most
//     that, is what count_live flushes at): every change that reaches it is added to the pool.
//   - a cell is in its pool's registry (pool_state::cells_) from its first use until the pool
//     forgets it: after its thread exited (folded) and no stream cache points at it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "streampool/export.hpp"

namespace streampool::detail {

class pool_state;

struct alignas(64) live_cell {
  static constexpr std::int64_t flush_bytes = std::int64_t{16} << 20;

  std::atomic<std::int64_t> delta{0};
  // The largest step of any change so far (pool_state::count_live): at least flush_bytes, so
  // |delta| stays below it. Written by the cell's thread only, when it grows (not at every
  // change: a store per large allocation and free); atomic because validate() reads it.
  std::atomic<std::int64_t> bound{flush_bytes};
  // Set by the thread's exit (after its delta was folded into the pool): the registry may drop
  // the cell once no stream cache holds it.
  std::atomic<bool> folded{false};
};

/// The calling thread's cell for `pool`, made and registered on its first use (pool_state::
/// register_cell); throws only bad_alloc. Valid while the thread lives (the thread's registry
/// holds it). Null once the thread's registry is gone (its exit, in a later thread_local
/// destructor): the caller counts on the pool's counter directly.
STREAMPOOL_EXPORT live_cell* thread_live_cell(pool_state& pool);  // exported for tests
/// The calling thread's cell for `pool` as its registry holds it, for a stream cache that the
/// thread makes (stream_cache::owner_cell). An exiting thread gets a cell of the cache's own.
std::shared_ptr<live_cell> thread_live_cell_shared(pool_state& pool);

}  // namespace streampool::detail
