// streampool: the pool's large blocks (requests above small_max): the policy over the block arena.
// docs/large-blocks.md is the note behind it: rationale, rules, evidence, limits.
//
// Virtual-memory path (a backend with caps().virtual_memory):
//   1. a free block with memory behind it and no wait needed: best fit, the stream's own first.
//      No driver call.
//   2. else a window: the place in a run of free blocks, some mapped, some not, that needs the
//      fewest granules mapped (the frontier of what was mapped so far, or a hole). Its granules
//      are new physical memory while reserved stays within 2% of peak live; beyond that, they
//      are taken from free blocks whose work is complete (a remap) first.
//   3. but when new memory would be needed and a mapped free block fits behind a device-side
//      wait, the wait is taken instead: it saves real growth, nothing less does.
//   Memory goes back only on trim(), past release_threshold, or under pressure (the out-of-memory
//   ladder trims). So steady-state reuse makes no driver call and no host wait.
//
// Segment path (no virtual memory): blocks of whole upstream allocations; three rules keep
// reserved memory close to live memory (allocate_large, take_free_large, grow_segment).
//
// Shards (large_shard.hpp): each stream allocates from its own shard, each free goes to the shard
// of its block. The rules above run on the stream's shard first; a free block of another shard
// is taken before any growth (its lock only tried: a busy shard belongs to a running thread), and
// a growth remaps from every shard. One stream: one shard, exactly the policy above. Per stream
// (pool_options::share_between_streams false, the default), "another shard" and "every shard" mean
// only shards no live stream uses, until a growth would be refused (large_reach).
//
// This file: reuse of free blocks (both paths), frees, recorded uses, markers, trim and the end of
// the pool. Growth is elsewhere: pool_large_growth.cpp (virtual memory), pool_segments.cpp
// (segments).
#include <algorithm>

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

/// Freed on `on` and not yet known complete there: the stream's own recently freed memory.
bool owned_by(const token_set& tokens, const timeline* on) {
  return std::any_of(tokens.begin(), tokens.end(),
                     [&](const token& t) { return t.line.get() == on; });
}

/// How often a stream records a marker for the large blocks it frees into the arena: every 32nd
/// block, after 256 MiB, and at once for 64 MiB or more at a time. Often enough that memory freed
/// a little earlier is seen complete (by other streams, and for remapping), rarely enough that
/// markers cost nothing next to a training step (a few dozen per step of ~1,000 large frees).
/// Blocks that stay on the stream's shelf are not counted: the stream takes them back with no
/// wait, a stream sharing the shard takes one only once it is known complete (a marker it waits
/// for anyway), and they are counted when they go into the arena. A marker on CUDA is an event
/// recorded and queried, many times a free's cost (docs/large-blocks.md, "Markers";
/// docs/performance.md, "Markers").
constexpr std::uint32_t mark_every = 32;
constexpr std::size_t mark_bytes = std::size_t{256} << 20;

/// Counts large blocks that go into an arena on a stream's free (or its shelf's emptying), for
/// mark_now_and_then after the shard's lock.
struct into_arena {
  std::uint32_t blocks = 0;
  std::size_t bytes = 0;
  void add(const arena_block& b) noexcept {
    ++blocks;
    bytes += b.size;
  }
  void mark_on(timeline& line) const {
    if (blocks != 0) access::mark_now_and_then(line, blocks, bytes, mark_every, mark_bytes);
  }
};

}  // namespace

// ---- both paths -------------------------------------------------------------------------------

void* pool_state::allocate_large(stream_ref s, std::size_t bytes) {
  // Looked up once: every path below counts live bytes through it.
  stream_cache& cache = cache_of(s.get_timeline());
  if (virtual_large_) {
    // A request the shelf may serve is placed with its class's size, so that the block fits every
    // request of the class when it comes back to the shelf.
    large_shard& own = *shards_[cache.shard()];
    const bool shelvable = own.shelf.on() && bytes <= large_shelf::max_block;
    const std::size_t size =
        shelvable ? large_shelf::class_size_of(bytes) : round_up(bytes, min_block);
    if (shelvable) {
      if (void* p = take_shelved(s, cache, own, size)) return p;
    }
    const large_reach first =
        options_.share_between_streams ? large_reach::every_shard : large_reach::own_and_idle;
    void* p = with_reclaim(size, [&]() -> void* {
      if (void* q = take_free_any(s, cache, size, /*pending_ok=*/false, /*split_big=*/true,
                                  /*try_only=*/true, first)) {
        return q;
      }
      // The stream's own shelf into its arena before a growth, which would empty it too but
      // under growth_mu_: a miss often fits once the shelf is merged, and threads would queue on
      // growth_mu_ for that (docs/performance.md, "The shelf").
      if (own.shelf.on() && empty_own_shelf(own, s.get_timeline())) {
        if (void* q = take_free_large(s, cache, own, size, /*pending_ok=*/false,
                                      /*split_big=*/true)) {
          return q;
        }
      }
      // Per stream, a growth that would be refused (the limit, the release threshold, the
      // device) widens its reach to other live streams' free memory itself.
      return grow_virtual(s, cache, size, first);
    });
    if (reserved_now_.load(std::memory_order_relaxed) > options_.release_threshold &&
        !options_.keep_memory) {
      // Nothing goes back during a stream capture (backend.hpp, begin_capture).
      const backend::outside_capture_scope no_capture = backend_->outside_capture();
      if (no_capture) {
        const std::lock_guard growth(growth_mu_);
        const std::size_t reserved = reserved_now_.load();
        if (reserved > options_.release_threshold)
          release_free_granules(reserved - options_.release_threshold);
      }
    }
    return p;
  }
  const std::size_t size = round_up(bytes, min_block);
  return with_reclaim(size, [&]() -> void* {
    if (void* p = take_free_any(s, cache, size, /*pending_ok=*/true, /*split_big=*/false,
                                /*try_only=*/false, large_reach::every_shard)) {
      return p;
    }
    // Rule 1: before growing, give back every wholly free large segment. A growth happens only
    // when no free block fits (or rule 2 refused one), so these segments are stranded memory:
    // returning them first keeps peak reserved near peak live instead of stacking the new segment
    // on top of them. Growing may block anyway (the upstream call is slow; cuMemFree
    // synchronises), so host-waiting for their work here is allowed.
    give_back_free_segments();
    if (void* p = grow_segment(s, cache, size)) return p;
    // Rule 2 yields when the upstream (or the memory limit) refuses: splitting a big block beats
    // failing.
    return take_free_any(s, cache, size, /*pending_ok=*/true, /*split_big=*/true,
                         /*try_only=*/false, large_reach::every_shard);
  });
}

void* pool_state::take_shelved(stream_ref s, stream_cache& cache, large_shard& sh,
                               std::size_t size) {
  std::uintptr_t start = 0;
  std::size_t taken = 0;  // size, or a larger class's (large_shelf::pop)
  {
    const biased_guard lock(sh.mu);
    // Only blocks that need no wait: freed on this stream (in-order queue), or complete.
    const timeline* me = &s.get_timeline();
    arena_block* b = sh.shelf.pop(large_shelf::class_of(size), [me](const arena_block& x) {
      return all_ready_for(x.tokens, me);
    });
    if (b == nullptr) return nullptr;
    // Freed here last (the usual case): its one token's timeline reference is kept for the next
    // free on this stream (arena_block::kept_line).
    if (b->tokens.size() == 1 && b->tokens.front().line.get() == me)
      b->kept_line = std::move(b->tokens.front().line);
    b->tokens.clear();
    b->stream = cache.timeline_id();
    ++sh.allocations;  // a same-stream reuse: the shelf counts it (statistics)
    start = b->start;
    taken = b->size;
  }
  count_large_here<live_way::out>(taken, &cache);
  return to_ptr(start);
}

void pool_state::empty_shelf(large_shard& sh) {
  sh.shelf.empty([&](arena_block* b) { sh.arena.release(b, std::move(b->tokens)); });
}

bool pool_state::empty_own_shelf(large_shard& own, timeline& line) {
  into_arena moved;
  {
    const std::lock_guard lock(own.mu);
    if (own.shelf.count() == 0) return false;
    moved = {static_cast<std::uint32_t>(own.shelf.count()), own.shelf.bytes()};
    empty_shelf(own);
  }
  moved.mark_on(line);
  return true;
}

void pool_state::empty_shelves(const large_shard* own, large_reach reach) {
  // Every shard's shelf has the same bound: off, no shard's lock is worth taking (a growth's
  // passes in the PyTorch plug-in).
  if (!shards_[0]->shelf.on()) return;
  for (const auto& sh : shards_) {
    if (own != nullptr && !within_reach(*own, *sh, reach)) continue;
    const auto lock = borrow_lock(sh->mu);
    empty_shelf(*sh);
  }
}

void* pool_state::take_free_large(stream_ref s, stream_cache& cache, large_shard& sh,
                                  std::size_t size, bool pending_ok, bool split_big,
                                  bool try_only) {
  const timeline* me = &s.get_timeline();
  token_set waits;
  std::uintptr_t start = 0;
  bool wait = false;  // picked behind pending work: hand_out_large counts the reuse
  backend::outside_capture_scope no_capture;  // held from a decision to wait to the wait
  {
    // Another stream's idle shard is borrowed: its bias stays for the stream it is given to.
    std::unique_lock lock(sh.mu, std::defer_lock);
    if (&sh == shards_[cache.shard()].get()) {
      lock.lock();
    } else if (!try_only) {
      lock = borrow_lock(sh.mu);
    } else if (sh.mu.try_borrow()) {
      lock = std::unique_lock(sh.mu, std::adopt_lock);
    } else {
      return nullptr;
    }
    const auto& free = sh.arena.mapped_free();
    if (free.empty()) return nullptr;
    arena_block* pick = nullptr;
    arena_block* fallback = nullptr;
    int scanned = 0;
    // Best fit among blocks that need no wait, the stream's own first (freed on it last): streams
    // that keep to their own blocks leave the others' where those expect them, which is what
    // lets a multi-stream program settle into a layout that needs no more mapping. Else the best
    // fit, behind a device-side wait.
    arena_block* ready = nullptr;
    for (auto it = free.lower_bound(size); it != free.end() && scanned < 16; ++it, ++scanned) {
      // Rule 2 (segment path): do not split a big free block (>= big_block) for a request under
      // half of it; grow instead. Cutting a small request out of a big block leaves a remainder
      // just too small for the next big request of the same size, which then grows anyway
      // (docs/performance.md, "The segment path"). The set is ordered by size, so every later
      // block is big too.
      if (!split_big && (*it)->size >= big_block && size < (*it)->size / 2) break;
      if (all_ready_for((*it)->tokens, me)) {
        if (owned_by((*it)->tokens, me)) {
          pick = *it;
          break;
        }
        if (ready == nullptr) ready = *it;
        continue;
      }
      if (fallback == nullptr) fallback = *it;
    }
    if (pick == nullptr) pick = ready;
    // Never behind a wait during a stream capture (backend.hpp, begin_capture).
    wait = pick == nullptr && pending_ok && fallback != nullptr &&
           (no_capture = backend_->outside_capture());
    if (wait) pick = fallback;
    if (pick == nullptr) return nullptr;
    // Only a block behind a wait needs its tokens past take(): copying them for every reuse would
    // be a malloc and a free per large allocation.
    if (wait) waits = pick->tokens;
    start = sh.arena.take(pick, pick->start, size, cache.timeline_id())->start;
    if (!wait) count_large_out(sh, /*fresh=*/false, /*waits=*/false);
  }
  return hand_out_large(s, cache, start, size, waits, wait ? &sh : nullptr);
}

bool pool_state::within_reach(const large_shard& own, const large_shard& other,
                              large_reach reach) const noexcept {
  return reach == large_reach::every_shard || &other == &own ||
         other.streams.load(std::memory_order_relaxed) == 0;
}

void* pool_state::take_free_any(stream_ref s, stream_cache& cache, std::size_t size,
                                bool pending_ok, bool split_big, bool try_only, large_reach reach) {
  const std::size_t own = cache.shard();
  if (void* p = take_free_large(s, cache, *shards_[own], size, pending_ok, split_big)) return p;
  for (std::size_t i = 1; i < shard_count; ++i) {
    large_shard& other = *shards_[(own + i) % shard_count];
    if (!within_reach(*shards_[own], other, reach)) continue;
    if (void* p = take_free_large(s, cache, other, size, pending_ok, split_big, try_only)) return p;
  }
  return nullptr;
}

void pool_state::count_large_out(large_shard& sh, bool fresh, bool waits) noexcept {
  ++(fresh ? sh.fresh_allocations : waits ? sh.waited_reuses : sh.ready_reuses);
  ++sh.allocations;
}

void* pool_state::hand_out_large(stream_ref s, const stream_cache& cache, std::uintptr_t start,
                                 std::size_t bytes, const token_set& waits,
                                 large_shard* reused_from) {
  const bool waited = order_after(s, waits);
  if (reused_from != nullptr) {
    const auto lock = borrow_lock(reused_from->mu);
    count_large_out(*reused_from, /*fresh=*/false, waited);
  }
  count_large_here<live_way::out>(bytes, &cache);
  return to_ptr(start);
}

void pool_state::deallocate_large(large_range& r, void* p, std::span<const token> uses,
                                  stream_ref* s) {
  large_shard& sh = *r.shard;
  // Looked up before the shard's lock: a stream's first call makes its cache.
  stream_cache* cache = s != nullptr ? &cache_of(s->get_timeline()) : nullptr;
  // Only onto the freeing stream's own shelf (its shard's): a shelf empties when its stream goes.
  const bool shelve = cache != nullptr && &sh == shards_[cache->shard()].get() && sh.shelf.on();
  std::size_t size = 0;
  // The block's kept timeline reference (arena_block::kept_line), if the free point does not take
  // it over: dropped after the shard's lock, as it may be the timeline's last.
  std::shared_ptr<timeline> kept;
  into_arena moved;  // this free's block, or the shelf's oldest past its bound
  {
    const biased_guard lock(sh.mu);
    arena_block* b = sh.find_handed_out(to_addr(p));
    if (b == nullptr) {
      STREAMPOOL_FAIL(
          format("deallocate: %s is not the start of a live block of pool %llu "
                 "(double free, or a pointer into a block)",
                 format_ptr(p).c_str(), static_cast<unsigned long long>(id_)));
    }
    size = b->size;
    kept = std::move(b->kept_line);
    const bool onto_shelf = shelve && large_shelf::fits(size);
    if (onto_shelf && b->tokens.empty() && uses.empty() && !options_.poison_on_free) [[likely]] {
      // The usual free: no recorded use, onto this stream's shelf. The free point goes straight
      // into the block's (empty) set, with none of the general way's moves of the set.
      merge_free_point(b->tokens, access::state(*s)->line, &kept);
    } else {
      token_set tokens = std::move(b->tokens);  // recorded uses, if any
      tokens_at_free(tokens, p, b->size, s, uses, &kept);
      b->tokens = std::move(tokens);
    }
    if (onto_shelf) {
      // Onto the shelf, for the next request of its class; the oldest go into the arena past
      // the bound.
      sh.shelf.push(b, [&](arena_block* old) {
        moved.add(*old);
        sh.arena.release(old, std::move(old->tokens));
      });
    } else {
      moved.add(*b);
      sh.arena.release(b, std::move(b->tokens));
    }
    ++sh.deallocations;
  }
  count_large_here<live_way::back>(size, cache);
  // A marker now and then on the freeing stream for what went into the arena: without one, the
  // free point is never known complete (markers are lazy), so other streams would have to wait
  // for this block and the remapping could never use it. Two relaxed counters when no marker is
  // due.
  if (s != nullptr) moved.mark_on(s->get_timeline());
#if STREAMPOOL_DEBUG_LEVEL >= 3
  // validate() is linear in the pool: after every large free while the pool is small, after every
  // n-th as it grows (validate_interval_, from validate()'s last cost), so that the debug preset
  // runs tests that free 150,000 large blocks from a pool of thousands (large_blocks_test) in
  // seconds, not hours, and still validates every free of the small pools most tests use.
  if (frees_since_validate_.fetch_add(1, std::memory_order_relaxed) + 1 >=
      validate_interval_.load(std::memory_order_relaxed)) {
    frees_since_validate_.store(0, std::memory_order_relaxed);
    STREAMPOOL_ASSERT_EXPENSIVE(valid());
  }
#endif
}

void pool_state::record_use_large(large_range& r, void* p, const token& use) {
  std::lock_guard lock(r.shard->mu);
  arena_block* b = r.shard->find_handed_out(to_addr(p));
  STREAMPOOL_EXPECTS(b != nullptr,
                     format("record_use: %s is not the start of a live block of pool %llu",
                            format_ptr(p).c_str(), static_cast<unsigned long long>(id_)));
  merge_token(b->tokens, use);
}

void pool_state::mark_free_large(const timeline* skip, const large_shard* own, large_reach reach) {
  // The latest point per timeline over every free block not known complete: one marker each.
  // None during a stream capture (backend.hpp, begin_capture).
  const backend::outside_capture_scope no_capture = backend_->outside_capture();
  if (!no_capture) return;
  token_set pending;
  for (const auto& sh : shards_) {
    if (own != nullptr && !within_reach(*own, *sh, reach)) continue;
    const auto lock = borrow_lock(sh->mu);
    sh->arena.for_each_mapped_free([&](const arena_block* b) {
      if (!all_complete(b->tokens))
        for (const token& t : b->tokens)
          if (t.line.get() != skip) merge_token(pending, t);
    });
  }
  for (const token& t : pending) (void)t.line->marker_for(t.at);
}

std::size_t pool_state::trim_large() {
  empty_shelves();
  // What has finished by now goes back, also where no marker says so yet.
  mark_free_large(nullptr);
  if (virtual_large_) {
    const std::lock_guard growth(growth_mu_);
    return release_free_granules(SIZE_MAX);
  }
  std::vector<large_range*> release;
  for (const auto& sh : shards_) {
    const auto lock = borrow_lock(sh->mu);
    const std::size_t first = release.size();
    for (const auto& r : sh->arena.ranges()) {
      arena_block* b = block_arena::sole_free_block(*r);
      if (b != nullptr && all_complete(b->tokens))
        release.push_back(static_cast<large_range*>(r->owner));
    }
    for (std::size_t i = first; i < release.size(); ++i) sh->arena.remove_range(release[i]->arena);
  }
  std::size_t released = 0;
  for (large_range* lr : release) released += release_segment(lr);
  return released;
}

void pool_state::destroy_large() noexcept {
  // Every pending use was waited for (wait_all_pending); nothing else runs on this pool.
  for (native_physical h : spare_physical_) backend_->release_physical(h);
  for (auto& [base, r] : large_ranges_) {
    if (!r->virtual_range) {
      backend_->deallocate(base, r->bytes);
      continue;
    }
    const std::size_t g = vm_granule();
    for (std::size_t i = 0; i < r->handles.size(); ++i) {
      if (r->handles[i] == nullptr) continue;
      backend_->unmap(static_cast<std::byte*>(base) + i * g, g);
      backend_->release_physical(r->handles[i]);
    }
    backend_->unreserve(base, r->bytes);
  }
}

}  // namespace streampool::detail
