// streampool: the pool's side of the stream caches (stream_cache.hpp): the registry (a cache per
// stream that used the pool, each given a large shard), stealing from other streams' caches
// before the pool grows, and flushing every cache into the shared lists. The fast path never
// comes here: it finds its cache through the timeline.
#include <algorithm>

#include "core/pool/pool_state.hpp"

namespace streampool::detail {

std::shared_ptr<stream_cache> pool_state::make_stream_cache(timeline& line) {
  std::lock_guard lock(caches_mu_);
  // A program that makes a stream per task (the origin report's, CuPy's) would otherwise keep
  // every gone stream's cache until the next trim, and walk them all when it steals. Only when
  // some stream has gone since: a walk takes every cache's lock.
  if (gone_since_forget_.exchange(0, std::memory_order_acq_rel) != 0)
    forget_orphaned_caches_locked();
  // The shard with the fewest live streams, the lowest first: a new stream gets the memory of
  // one that is gone (a program that replaces its streams, or a benchmark's next round), not an
  // empty shard next to a full one that nobody uses.
  std::size_t best = 0;
  for (std::size_t i = 1; i < shard_count; ++i)
    if (shards_[i]->streams.load() < shards_[best]->streams.load()) best = i;
  shards_[best]->streams.fetch_add(1);
  auto c =
      std::make_shared<stream_cache>(id_, weak_from_this(), line.weak_from_this(), line.id(), best,
                                     options_.stream_cache_bytes, thread_live_cell_shared(*this));
  caches_.push_back(c);
  return c;
}

void pool_state::forget_cache(const stream_cache& c) {
  std::lock_guard lock(caches_mu_);
  const auto it =
      std::find_if(caches_.begin(), caches_.end(),
                   [&](const std::shared_ptr<stream_cache>& x) { return x.get() == &c; });
  if (it == caches_.end()) return;  // forgotten already (a trim, a new stream)
  fold_cache_counters_locked(c);
  caches_.erase(it);
}

void pool_state::register_cell(std::shared_ptr<live_cell> cell) {
  std::lock_guard lock(cells_mu_);
  // Cells of threads that exited, which no stream cache holds any more: only the registry can
  // still see them. What they took after their thread's fold (a late thread_local destructor)
  // goes into the counter with them.
  std::erase_if(cells_, [&](const std::shared_ptr<live_cell>& c) {
    if (!c->folded.load(std::memory_order_relaxed) || c.use_count() != 1) return false;
    live_.fetch_add(c->delta.exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
    return true;
  });
  cells_.push_back(std::move(cell));
}

void pool_state::fold_thread_cell(live_cell& cell) noexcept {
  std::lock_guard lock(cells_mu_);
  live_.fetch_add(cell.delta.exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
  cell.folded.store(true, std::memory_order_relaxed);
}

void pool_state::stream_gone(std::size_t shard) {
  if (shards_[shard]->shelf.on()) {
    // What the stream shelved goes back with it (the shard may be shared: all of it).
    const auto lock = borrow_lock(shards_[shard]->mu);  // any thread may end a stream
    empty_shelf(*shards_[shard]);
  }
  shards_[shard]->streams.fetch_sub(1);
  gone_since_forget_.fetch_add(1, std::memory_order_acq_rel);
}

void pool_state::take_orphans(std::vector<stream_cache::entry>& entries,
                              const std::shared_ptr<timeline>& line) {
  for (auto& e : entries) push_shared(e, line);
}

std::vector<std::shared_ptr<stream_cache>> pool_state::caches() const {
  std::lock_guard lock(caches_mu_);
  return caches_;
}

void pool_state::flush_caches() {
  for (auto& c : caches()) {
    c->drain([this](std::size_t /*cls*/, const stream_cache::entry& e,
                    const std::shared_ptr<timeline>& line) { push_shared(e, line); });
  }
}

void* pool_state::try_steal(stream_ref s, std::size_t cls) {
  // Before growing: a chunk another stream freed and keeps in its own cache. Its work may still
  // run, so s waits for it on the device; that is the cross-stream reuse the pool prefers to new
  // memory. Other caches are only try-locked: a busy one is skipped, never waited for. The visit
  // also moves the rest of the bin's older half to the shared list, where s's next misses find
  // it without visiting again (stream_cache::try_steal).
  // During a stream capture nothing may wait (backend.hpp, begin_capture): grow instead.
  const backend::outside_capture_scope no_capture = backend_->outside_capture();
  if (!no_capture) return nullptr;
  const timeline* me = &s.get_timeline();
  for (auto& c : caches()) {
    if (c->timeline_id() == me->id()) continue;
    stream_cache::entry e{};
    std::shared_ptr<timeline> line;
    if (!c->try_steal(cls, e, line, spiller())) continue;
    token_set tokens;
    merge_point(tokens, line, e.at);  // none when the victim's stream is gone
    const bool waited = order_after(s, tokens);
    count_chunk_out(class_size(cls), /*fresh=*/false, waited);
    e.owner->state(e.owner->index_of(e.p)).store(chunk_live, std::memory_order_release);
    return e.p;
  }
  return nullptr;
}

bool pool_state::drain_idle_caches(const timeline& me) {
  const std::size_t made = slab_bytes_made_.load(std::memory_order_relaxed);
  if (made - idle_checked_at_.load(std::memory_order_relaxed) < idle_check_bytes) return false;
  const std::unique_lock look(idle_check_mu_, std::try_to_lock);
  if (!look.owns_lock()) return false;
  idle_checked_at_.store(made, std::memory_order_relaxed);
  bool drained = false;
  for (auto& c : caches()) {
    // Every cache is looked at, this stream's too, so that "since the last look" means the same
    // interval for all; this one is busy (it is growing).
    if (!c->idle_since_last_look() || c->timeline_id() == me.id()) continue;
    if (c->cached_bytes() == 0) continue;  // nothing to drain: no visit (a heavy fence)
    timeline::point latest = 0;
    std::shared_ptr<timeline> line;
    c->drain(
        [&](std::size_t /*cls*/, const stream_cache::entry& e, const std::shared_ptr<timeline>& l) {
          push_shared(e, l);
          latest = std::max(latest, e.at);
          if (!line) line = l;  // the same timeline for every entry
          drained = true;
        });
    // Markers are lazy: without one, nothing says that the idle stream's work on these chunks
    // is done, and another stream would take them only behind a wait.
    if (line) {
      const backend::outside_capture_scope no_capture = backend_->outside_capture();
      if (no_capture) (void)line->marker_for(latest);
    }
  }
  return drained;
}

}  // namespace streampool::detail
