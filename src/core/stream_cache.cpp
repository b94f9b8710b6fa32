#include "stream_cache.hpp"

#include "pool_state.hpp"

namespace streampool::detail {

stream_cache::stream_cache(pool_state& pool, std::weak_ptr<pool_state> weak_pool,
                           std::weak_ptr<timeline> l, std::uint64_t timeline_id)
    : line(std::move(l)),
      pool_(&pool),
      weak_pool_(std::move(weak_pool)),
      pool_id_(pool.id()),
      timeline_id_(timeline_id) {}

void stream_cache::orphan() {
  std::vector<entry> all;
  {
    std::lock_guard lock(mu);
    if (detached || orphaned) return;
    orphaned = true;
    for (std::size_t c = 0; c < bins.size(); ++c) {
      all.insert(all.end(), bins[c].begin(), bins[c].end());
      bins[c].clear();
      bin_bytes[c] = 0;
    }
  }
  // The pool may be going away concurrently; the weak reference decides. If this ends up holding
  // the last reference, the pool is destroyed right here, which is fine: no lock is held.
  if (auto p = weak_pool_.lock()) {
    p->stream_gone(shard);
    p->add_live(live_delta.exchange(0, std::memory_order_relaxed));
    p->take_orphans(all);
  }
}

void stream_cache::detach() {
  std::lock_guard lock(mu);
  detached = true;
  pool_ = nullptr;
  for (std::size_t c = 0; c < bins.size(); ++c) {
    bins[c].clear();
    bin_bytes[c] = 0;
  }
}

}  // namespace streampool::detail
