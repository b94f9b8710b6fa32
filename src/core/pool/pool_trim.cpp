// streampool: trim and statistics. trim() gives back what the pool holds and nobody uses (slabs
// all of whose chunks are free and complete, large memory: pool_large.cpp), and forgets the
// caches of streams that are gone; statistics() sums the slow-path counters, the shards' and the
// stream caches'. Both walk the whole pool, as does the wait for all pending work at its end.
#include <algorithm>
#include <unordered_map>

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {

void pool_state::fold_cache_counters_locked(const stream_cache& c) noexcept {
  allocations_ += c.allocations();
  deallocations_ += c.deallocations();
  same_stream_reuses_folded_ += c.allocations();
  cache_contention_folded_ += c.contended();
}

void pool_state::forget_orphaned_caches_locked() {
  // Caches of destroyed streams are empty for good: fold their counters in and forget them.
  std::erase_if(caches_, [&](const std::shared_ptr<stream_cache>& c) {
    if (!c->orphaned()) return false;
    fold_cache_counters_locked(*c);
    return true;
  });
}

std::size_t pool_state::trim() {
  // Nothing goes back to the driver during a stream capture (backend.hpp, begin_capture).
  const backend::outside_capture_scope no_capture = backend_->outside_capture();
  if (!no_capture) return 0;
  flush_caches();
  std::vector<segment*> release;
  for (std::size_t cls = 0; cls < max_classes; ++cls) {
    class_list& l = shared_[cls];
    std::lock_guard lock(l.mu);
    if (l.chunks.empty() && l.carving.empty()) continue;
    // A slab goes back when every chunk ever carved from it is here, with its work complete.
    std::unordered_map<slab*, std::size_t> free_count;
    for (auto& c : l.chunks)
      if (all_complete(c.tokens)) ++free_count[c.owner];
    for (slab* sl : l.carving) free_count.try_emplace(sl, 0);
    std::unordered_map<slab*, bool> empty;
    for (auto& [sl, n] : free_count) {
      if (n == sl->carved) empty[sl] = true;
    }
    if (empty.empty()) continue;
    std::erase_if(l.chunks, [&](const free_chunk& c) { return empty.count(c.owner) != 0; });
    std::erase_if(l.carving, [&](slab* sl) { return empty.count(sl) != 0; });
    for (auto& [sl, yes] : empty) release.push_back(sl);
  }
  std::size_t released = trim_large();
  for (segment* seg : release) released += release_segment(seg);
  {
    std::lock_guard lock(caches_mu_);
    forget_orphaned_caches_locked();
  }
  STREAMPOOL_ASSERT_EXPENSIVE(valid());
  return released;
}

void pool_state::wait_all_pending() {
  for (auto& l : shared_) {
    std::lock_guard lock(l.mu);
    for (auto& c : l.chunks)
      for (auto& t : c.tokens) t.line->wait_host(t.at);
  }
  for (const auto& sh : shards_) {
    const auto lock = borrow_lock(sh->mu);
    sh->arena.for_each_mapped_free([](const arena_block* b) {
      for (const auto& t : b->tokens) t.line->wait_host(t.at);
    });
  }
}

std::size_t pool_state::live_bytes() const {
  // The counter plus what the threads have not added to it yet (live_cell.hpp): exact whenever
  // no other thread is inside an allocation or a free. Under cells_mu_, so that no thread's exit
  // folds its cell between the two reads.
  std::lock_guard lock(cells_mu_);
  std::int64_t live = live_.load();
  for (const auto& c : cells_) live += c->delta.load(std::memory_order_relaxed);
  return live > 0 ? static_cast<std::size_t>(live) : 0;
}

void pool_state::reset_peaks() {
  {
    std::lock_guard lock(segments_mu_);
    policy_peak_floor_.store(std::max(policy_peak_floor_.load(), peak_live_.load()));
    peak_reserved_.store(reserved_);
  }
  // A thread's allocation that raises the peak between the sum and the store is lost to it (as a
  // concurrent new peak may be to statistics() with several threads); the next read raises the
  // peak to the sum it takes, so no reader sees live above peak.
  peak_live_.store(live_bytes());
}

pool_statistics pool_state::statistics() const {
  pool_statistics st;
  st.live_bytes = live_bytes();
  st.reserved_bytes = reserved_now_.load();
  st.cached_bytes = st.reserved_bytes > st.live_bytes ? st.reserved_bytes - st.live_bytes : 0;
  // What a reader sees is never above the peak it reads: the sum just taken raises it (another
  // thread's pending change may have kept the allocation that reached it from seeing it).
  st.peak_live_bytes = raise_peak(st.live_bytes);
  st.peak_reserved_bytes = peak_reserved_.load();
  st.allocations = allocations_.load();
  st.deallocations = deallocations_.load();
  st.fresh_allocations = fresh_allocations_.load();
  st.same_stream_reuses = same_stream_reuses_folded_.load();
  st.ready_reuses = ready_reuses_.load();
  st.waited_reuses = waited_reuses_.load();
  st.device_waits = device_waits_.load();
  st.host_waits = host_waits_.load();
  st.upstream_allocations = upstream_allocations_.load();
  st.upstream_deallocations = upstream_deallocations_.load();
  st.upstream_reserves = upstream_reserves_.load();
  st.upstream_creates = upstream_creates_.load();
  st.upstream_releases = upstream_releases_.load();
  st.upstream_maps = upstream_maps_.load();
  st.upstream_unmaps = upstream_unmaps_.load();
  st.reclaim_calls = reclaim_calls_.load();
  st.alloc_retries = alloc_retries_.load();
  st.memory_limit = limit_.load();
  for (const auto& sh : shards_) {
    st.allocations += sh->allocations;
    st.deallocations += sh->deallocations;
    st.fresh_allocations += sh->fresh_allocations;
    st.ready_reuses += sh->ready_reuses;
    st.waited_reuses += sh->waited_reuses;
    st.same_stream_reuses += sh->shelf.hits();
    st.contention.per_large_shard.push_back(sh->mu.contended());
    st.contention.large_shards += st.contention.per_large_shard.back();
  }
  for (const class_list& l : shared_) {
    st.contention.per_class_list.push_back(l.mu.contended());
    st.contention.class_lists += st.contention.per_class_list.back();
  }
  st.contention.growth = growth_mu_.contended();
  st.contention.segments = segments_mu_.contended();
  st.contention.stream_caches = cache_contention_folded_.load();
  st.contention.other = caches_mu_.contended() + hooks_mu_.contended() + uses_mu_.contended();
  std::lock_guard lock(caches_mu_);
  for (auto& c : caches_) {
    stream_statistics ss;
    ss.timeline_id = c->timeline_id();
    ss.allocations = c->allocations();
    ss.deallocations = c->deallocations();
    ss.cached_bytes = c->cached_bytes();
    ss.contended = c->contended();
    ss.biased = c->biased();
    st.allocations += ss.allocations;
    st.deallocations += ss.deallocations;
    st.same_stream_reuses += ss.allocations;
    st.contention.stream_caches += ss.contended;
    st.streams.push_back(ss);
  }
  return st;
}

}  // namespace streampool::detail
