// streampool: snapshot(), every range and block of the pool (streampool/snapshot.hpp).
//
// The pool is read one lock at a time, in the order of pool_state.hpp: each stream cache under its
// own lock, then each size class under its lock with the segment registry's (what validate_small
// holds for one class), then each large shard under its lock. No thread waits for more than one
// of those reads, and none for the driver: growth_mu_, held across driver calls, is not taken.
// What moves between two reads is seen where each read found it: a chunk a stream took from its
// cache after the cache was read shows as live (its state byte, read later, decides), and a chunk
// on its way between two lists as in transit. Whether a token is complete is asked after every
// lock is released (token::ready_for may poll the timeline's marker, which a pool lock must not be
// held across; pool_state.hpp, "Order").
#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "core/pool/pool_state.hpp"
#include "streampool/snapshot.hpp"

namespace streampool::detail {

/// A block's tokens as the pool holds them, resolved into snapshot_tokens once no lock is held.
struct snapshot_unresolved {
  std::size_t range;  // index into pool_snapshot::ranges
  std::size_t block;  // index into that range's blocks
  token_set tokens;
};

/// A free chunk of a stream's cache: reused there with no wait; elsewhere after (line, at).
struct snapshot_cached_chunk {
  std::uint64_t timeline_id;
  std::shared_ptr<timeline> line;  // null once the stream is gone: nothing to wait for
  timeline::point at;
};

namespace {

using unresolved = snapshot_unresolved;
using cached_chunks = snapshot_cached_chunks;

/// True when two adjacent chunks may be one block of the snapshot: they agree in everything the
/// snapshot says of them (tokens: the same timelines; the run keeps each one's latest point).
bool same_run(const snapshot_block& b, block_status status, block_place place, std::uint64_t stream,
              const token_set& run_tokens, const token_set& tokens) {
  if (b.status != status || b.place != place || b.stream != stream) return false;
  if (run_tokens.size() != tokens.size()) return false;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (run_tokens[i].line != tokens[i].line) return false;
  return true;
}

/// One slab as a range of runs of like chunks; the runs' tokens go to `tokens_of`. `in_shared`:
/// the free chunks of its class's shared list.
snapshot_range slab_range(const slab& sl, std::size_t range_index,
                          const std::unordered_map<const void*, const token_set*>& in_shared,
                          const cached_chunks& in_cache, std::vector<unresolved>& tokens_of) {
  snapshot_range r;
  r.base = to_addr(sl.base);
  r.bytes = sl.bytes;
  r.reserved_bytes = sl.bytes;
  r.kind = range_kind::slab;
  r.chunk_bytes = sl.chunk_size;
  token_set run_tokens;  // the tokens of r.blocks.back()
  const auto flush_tokens = [&] {
    if (!run_tokens.empty())
      tokens_of.push_back({range_index, r.blocks.size() - 1, std::move(run_tokens)});
    run_tokens.clear();
  };
  const std::size_t carved = std::min(sl.carved, sl.chunks);
  for (std::size_t i = 0; i < sl.chunks; ++i) {
    const void* p = sl.chunk_at(i);
    block_status status = block_status::live;
    block_place place = block_place::none;
    std::uint64_t stream = 0;
    token_set tokens;
    if (sl.state(i).load(std::memory_order_acquire) == chunk_free) {
      status = block_status::free;
      if (auto s = in_shared.find(p); s != in_shared.end()) {
        place = block_place::shared_list;
        tokens = *s->second;
      } else if (auto c = in_cache.find(p); c != in_cache.end()) {
        place = block_place::stream_cache;
        stream = c->second.timeline_id;
        if (c->second.line) tokens.push_back({c->second.line, c->second.at});
      } else {
        place = i >= carved ? block_place::never_used : block_place::in_transit;
      }
    }
    if (!r.blocks.empty() && same_run(r.blocks.back(), status, place, stream, run_tokens, tokens)) {
      snapshot_block& b = r.blocks.back();
      b.size += sl.chunk_size;
      ++b.chunks;
      for (std::size_t t = 0; t < tokens.size(); ++t)
        run_tokens[t].at = std::max(run_tokens[t].at, tokens[t].at);
      continue;
    }
    flush_tokens();
    snapshot_block b;
    b.offset = i * sl.chunk_size;
    b.size = sl.chunk_size;
    b.status = status;
    b.place = place;
    b.stream = stream;
    r.blocks.push_back(b);
    run_tokens = std::move(tokens);
  }
  flush_tokens();
  // The slab's tail beyond its last chunk (bytes not a multiple of the chunk): never used.
  if (const std::size_t end = sl.chunks * sl.chunk_size; end < sl.bytes) {
    snapshot_block tail;
    tail.offset = end;
    tail.size = sl.bytes - end;
    tail.chunks = 0;
    tail.status = block_status::free;
    tail.place = block_place::never_used;
    r.blocks.push_back(tail);
  }
  return r;
}

/// One block of a large range as the snapshot says it.
snapshot_block large_block(const arena_block& a, std::uintptr_t range_base) {
  snapshot_block b;
  b.offset = a.start - range_base;
  b.size = a.size;
  switch (a.state) {
    case block_state::live:
      // A shelved block is free to the program, kept for its stream (large_shelf.hpp).
      b.status = a.shelved ? block_status::free : block_status::live;
      b.place = a.shelved ? block_place::stream_cache : block_place::none;
      b.stream = a.stream;
      break;
    case block_state::mapped:
      b.status = block_status::free;
      b.place = block_place::large_free;
      break;
    case block_state::unmapped:
      b.status = block_status::unmapped;
      break;
  }
  return b;
}

/// With no lock held: is each token complete?
void resolve_tokens(pool_snapshot& out, std::vector<unresolved>& tokens_of) {
  for (unresolved& u : tokens_of) {
    std::vector<snapshot_token>& to = out.ranges[u.range].blocks[u.block].tokens;
    for (const token& t : u.tokens) {
      if (!t.line) continue;
      to.push_back({t.line->id(), t.at, t.ready_for(nullptr)});
    }
  }
}

/// Address order. A range given back and its address reused between two reads (a trim on another
/// thread, then a growth) is seen twice, overlapping: the later read (the higher index) is the
/// pool as it is now, so the earlier one is dropped.
void sort_dropping_stale(pool_snapshot& out) {
  std::vector<std::size_t> order(out.ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return out.ranges[a].base < out.ranges[b].base; });
  std::vector<std::size_t> kept;
  for (const std::size_t i : order) {
    const snapshot_range& r = out.ranges[i];
    bool stale = false;
    while (!kept.empty() && !stale) {
      const snapshot_range& before = out.ranges[kept.back()];
      if (before.base + before.bytes <= r.base) break;
      if (kept.back() > i)
        stale = true;  // r was read first
      else
        kept.pop_back();
    }
    if (!stale) kept.push_back(i);
  }
  std::vector<snapshot_range> ranges;
  ranges.reserve(kept.size());
  for (const std::size_t i : kept) ranges.push_back(std::move(out.ranges[i]));
  out.ranges = std::move(ranges);
}

}  // namespace

pool_snapshot pool_state::snapshot() const {
  pool_snapshot out;
  out.pool_id = id_;
  out.device_id = device_id_;
  out.backend = backend_->name();
  out.granularity = backend_->caps().granularity;
  out.virtual_memory = virtual_large_;
  out.vm_granularity = virtual_large_ ? vm_granule() : 0;
  out.taken_unix_ns =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  out.statistics = statistics();
  std::vector<unresolved> tokens_of;
  cached_chunks in_cache;
  snapshot_caches(out, in_cache);
  snapshot_slabs(out, in_cache, tokens_of);
  snapshot_large(out, tokens_of);
  resolve_tokens(out, tokens_of);
  sort_dropping_stale(out);
  return out;
}

void pool_state::snapshot_caches(pool_snapshot& out, cached_chunks& in_cache) const {
  // One hold of each cache's lock.
  for (const std::shared_ptr<stream_cache>& c : caches()) {
    const stream_cache::contents held = c->copy();
    snapshot_cache sc;
    sc.timeline = c->timeline_id();
    sc.shard = c->shard();
    sc.stream_gone = held.gone || held.line == nullptr;
    std::array<std::size_t, max_classes> count{};
    for (const auto& [cls, e] : held.entries) {
      ++count[cls];
      in_cache.emplace(e.p, snapshot_cached_chunk{sc.timeline, held.line, e.at});
    }
    for (std::size_t cls = 0; cls < max_classes; ++cls) {
      if (count[cls] == 0) continue;
      sc.bins.push_back({class_size(cls), count[cls]});
      sc.bytes += count[cls] * class_size(cls);
    }
    out.caches.push_back(std::move(sc));
  }
  std::sort(
      out.caches.begin(), out.caches.end(),
      [](const snapshot_cache& a, const snapshot_cache& b) { return a.timeline < b.timeline; });
}

void pool_state::snapshot_slabs(pool_snapshot& out, const cached_chunks& in_cache,
                                std::vector<unresolved>& tokens_of) const {
  // One size class at a time, under its lock and the segment registry's.
  for (std::size_t cls = 0; cls < max_classes; ++cls) {
    const std::lock_guard class_lock(shared_[cls].mu);
    const std::lock_guard segments(segments_mu_);
    std::unordered_map<const void*, const token_set*> in_shared;
    for (const free_chunk& c : shared_[cls].chunks) in_shared.emplace(c.p, &c.tokens);
    for (const auto& [base, sl] : slabs_) {
      if (sl->size_class != cls) continue;
      out.ranges.push_back(slab_range(*sl, out.ranges.size(), in_shared, in_cache, tokens_of));
    }
  }
}

void pool_state::snapshot_large(pool_snapshot& out, std::vector<unresolved>& tokens_of) const {
  // One shard at a time, under its lock.
  for (const auto& sh : shards_) {
    const auto shard_lock = borrow_lock(sh->mu);
    for (const auto& ar : sh->arena.ranges()) {
      const auto* lr = static_cast<const large_range*>(ar->owner);
      snapshot_range r;
      r.base = ar->base;
      r.bytes = ar->size;
      r.kind = lr->virtual_range ? range_kind::virtual_range : range_kind::segment;
      r.shard = sh->index;
      r.reserved_bytes = ar->size;
      if (lr->virtual_range) {
        r.reserved_bytes = vm_granule() * static_cast<std::size_t>(std::count_if(
                                              lr->handles.begin(), lr->handles.end(),
                                              [](native_physical h) { return h != nullptr; }));
      }
      const std::size_t range_index = out.ranges.size();
      for (const arena_block* a = ar->first; a != nullptr; a = a->next) {
        if (!a->tokens.empty()) tokens_of.push_back({range_index, r.blocks.size(), a->tokens});
        r.blocks.push_back(large_block(*a, ar->base));
      }
      out.ranges.push_back(std::move(r));
    }
  }
}

}  // namespace streampool::detail
