// streampool: small blocks (up to small_max), allocation and free.
//
// The fast path is a hit in the stream's own cache, both ways: allocate() pops the chunk freed
// last on this stream, deallocate(s, p) pushes onto it; each enters only the cache's lock, biased
// to this thread, and neither waits (the stream's queue is in order). Both are written with no
// call that returns (so they save no registers); what they cannot finish starts over on the full
// path, allocate_general() and deallocate_general(). Everything else is out of line, the way
// mimalloc splits _mi_page_malloc from _mi_malloc_generic: allocate_small() (shared lists, a
// fresh chunk, a steal, a new slab) and deallocate_chunk_slow() (no stream, recorded uses,
// poisoning, double frees). The live accounting both paths end in is here too, so that the fast
// path inlines it.
#include <algorithm>
#include <iterator>

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"
#include "streampool/limits.h"

namespace streampool::detail {
namespace {

constexpr std::size_t max_request = STREAMPOOL_MAX_ALLOCATION_BYTES;

/// A chunk's state byte turns free; returns what it was (already free: a double free).
[[gnu::always_inline]] inline std::uint8_t free_state(std::atomic<std::uint8_t>& state) noexcept {
  // A double free fails before anything else changes. A load and a store, not an exchange (a
  // locked instruction on every free: docs/performance.md, "The free path"): two frees of one
  // pointer racing on two threads are a data race of the caller's and may both pass; ordered ones
  // (the second starts after the first returned) are always caught. Builds with internal
  // assertions (the debug and sanitizer presets) exchange, and catch the racing ones too.
#if STREAMPOOL_DEBUG_LEVEL >= 2
  return state.exchange(chunk_free, std::memory_order_acq_rel);
#else
  const std::uint8_t old = state.load(std::memory_order_acquire);
  if (old != chunk_free) [[likely]]
    state.store(chunk_free, std::memory_order_release);
  return old;
#endif
}

/// A large block's step: twice its size, at least the flush size (pool_state::count_live).
std::int64_t large_step(std::size_t bytes) noexcept {
  return std::max(live_cell::flush_bytes, 2 * static_cast<std::int64_t>(bytes));
}

}  // namespace

void pool_state::bad_request(stream_ref s, std::size_t bytes) const {
  STREAMPOOL_EXPECTS(bytes <= max_request,
                     format("allocate: %zu bytes is beyond any device (at most %zu); a size "
                            "computation overflowed?",
                            bytes, max_request));
  STREAMPOOL_FAIL(
      format("allocate: stream (timeline %llu) belongs to device %llu, but pool %llu "
             "allocates on device %llu",
             static_cast<unsigned long long>(s.get_timeline().id()),
             static_cast<unsigned long long>(s.get_device().id()),
             static_cast<unsigned long long>(id_), static_cast<unsigned long long>(device_id_)));
}

void pool_state::foreign_stream(stream_ref s, const void* p, const char* what) const {
  STREAMPOOL_FAIL(
      format("%s: %s of pool %llu: stream (timeline %llu) belongs to device %llu, but the pool "
             "is on device %llu; nothing changed",
             what, format_ptr(p).c_str(), static_cast<unsigned long long>(id_),
             static_cast<unsigned long long>(s.get_timeline().id()),
             static_cast<unsigned long long>(s.get_device().id()),
             static_cast<unsigned long long>(device_id_)));
}

void pool_state::check_token(const token& t, const void* p, const char* what) const {
  // A token is waited for by this pool's streams (backend::wait_device, a queue of this backend):
  // one of another backend's timeline could never be. A token with no timeline is complete.
  if (t.line != nullptr && t.line->get_backend() != backend_) [[unlikely]] {
    STREAMPOOL_FAIL(
        format("%s: %s of pool %llu: a use on timeline %llu of backend '%s', but the pool is on "
               "device %llu (backend '%s'); nothing changed",
               what, format_ptr(p).c_str(), static_cast<unsigned long long>(id_),
               static_cast<unsigned long long>(t.line->id()), t.line->get_backend()->name().c_str(),
               static_cast<unsigned long long>(device_id_), backend_->name().c_str()));
  }
}

// ---- live accounting --------------------------------------------------------------------------

template <pool_state::live_way Way>
void pool_state::count_live(live_cell* cell, std::size_t bytes, std::int64_t step) noexcept {
  constexpr bool out = Way == live_way::out;
  const std::int64_t change =
      out ? static_cast<std::int64_t>(bytes) : -static_cast<std::int64_t>(bytes);
  // Every way out is a tail call, so that the usual one (no flush, no new peak) saves no
  // registers.
  if (cell == nullptr) [[unlikely]]
    return add_live(change);
  // The cell is the calling thread's: a plain load and store (live_cell.hpp).
  const std::int64_t d = cell->delta.load(std::memory_order_relaxed) + change;
  // Stored only when it grows: a steady pattern then writes nothing but its delta (for a small
  // block's step, flush_bytes, the test folds away).
  if (step > live_cell::flush_bytes && step > cell->bound.load(std::memory_order_relaxed))
      [[unlikely]]
    cell->bound.store(step, std::memory_order_relaxed);
  // Both sides in both ways: the step changes with the block (a small block after a large one
  // lowers it), so a free may find the delta above it too.
  if (d >= step || d <= -step) [[unlikely]] {
    cell->delta.store(0, std::memory_order_relaxed);
    return add_live(d);
  }
  cell->delta.store(d, std::memory_order_relaxed);
  // note_peak's first test, inline (as in allocate()).
  if constexpr (out) {
    if (above_peak(d)) [[unlikely]]
      return note_peak(d);
  }
}

template <pool_state::live_way Way>
void pool_state::count_small_here(std::size_t bytes) noexcept {
  count_live<Way>(thread_live_cell(*this), bytes, live_cell::flush_bytes);
}

template <pool_state::live_way Way>
void pool_state::count_large_here(std::size_t bytes, const stream_cache* c) noexcept {
  // The stream's cache, biased to this thread, has its cell at hand, which keeps the thread_local
  // lookup (__tls_get_addr in a shared library) off the usual path (docs/performance.md, "Live
  // counts per thread").
  live_cell* cell = c != nullptr ? c->cell_if_owner() : nullptr;
  if (cell == nullptr) [[unlikely]]
    return count_large_looked_up<Way>(bytes);
  count_live<Way>(cell, bytes, large_step(bytes));
}

template <pool_state::live_way Way>
void pool_state::count_large_looked_up(std::size_t bytes) noexcept {
  count_live<Way>(thread_live_cell(*this), bytes, large_step(bytes));
}

// pool_large.cpp counts large blocks.
template void pool_state::count_large_here<pool_state::live_way::out>(std::size_t,
                                                                      const stream_cache*) noexcept;
template void pool_state::count_large_here<pool_state::live_way::back>(
    std::size_t, const stream_cache*) noexcept;

void pool_state::add_live(std::int64_t delta) noexcept {
  live_.fetch_add(delta, std::memory_order_relaxed);
  if (delta > 0) note_peak(0);  // the calling thread's cell was just emptied into the counter
}

void pool_state::note_peak(std::int64_t pending) noexcept {
  // A store only at a new peak (above_peak() says why the test reads no written line).
  if (!above_peak(pending)) return;
  const std::int64_t live = std::min<std::int64_t>(live_.load(std::memory_order_relaxed) + pending,
                                                   static_cast<std::int64_t>(reserved_now_.load()));
  (void)raise_peak(static_cast<std::size_t>(live));
}

std::size_t pool_state::raise_peak(std::size_t live) const noexcept {
  std::size_t peak = peak_live_.load(std::memory_order_relaxed);
  while (live > peak && !peak_live_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return std::max(peak, live);
}

// ---- allocation -------------------------------------------------------------------------------

void* pool_state::allocate(stream_ref s, std::size_t bytes) {
  // The fast path: the chunk freed last on this stream, from its cache while the cache is biased
  // to this thread. Nothing in it is a call and every way out of it is a tail call, so it saves
  // no registers (docs/performance.md, "The small path"). Anything else starts over, nothing
  // having changed by then: a large request on allocate_large_request(), the rest (an empty bin,
  // a cache this thread does not own, the allocation log, size 0, a bad device) on
  // allocate_general().
  if (bytes - 1 < options_.small_max && s.get_device().id() == device_id_ && !recorder_.on())
      [[likely]] {
    timeline& line = s.get_timeline();
    stream_cache* c = access::first_cache(line, id_);
    stream_cache::entry e{};
    const std::size_t cls = class_of(bytes);
    if (c != nullptr && c->pop_biased(cls, e)) [[likely]] {
      // The cache is biased to this thread, so its owner's cell is this thread's (live_cell.hpp).
      // The count is taken before the chunk's state is written, with the size the slab has at
      // hand (its class's): the other way round, or with the class's size from the table, more
      // values are live across that store and the path saves registers on every call.
      live_cell& cell = c->owner_cell();
      const std::int64_t d = cell.delta.load(std::memory_order_relaxed) +
                             static_cast<std::int64_t>(e.owner->chunk_size);
      e.owner->state(e.owner->index_of(e.p)).store(chunk_live, std::memory_order_release);
      if (d >= live_cell::flush_bytes) [[unlikely]] {
        cell.delta.store(0, std::memory_order_relaxed);
        return add_live_then(d, e.p);
      }
      cell.delta.store(d, std::memory_order_relaxed);
      // note_peak's first test, inline: past it (a new peak, rare) a tail call, so that this
      // path still makes no call and saves no registers.
      if (above_peak(d)) [[unlikely]]
        return note_peak_then(d, e.p);
      return e.p;
    }
  }
  // A large request is told apart here, once, and sent straight on: left to allocate_general()'s
  // own test, the same size is tested twice, and the second test can be a branch miss per large
  // request (docs/performance.md, "The small path").
  if (bytes > options_.small_max) return allocate_large_request(s, bytes);
  return allocate_general(s, bytes);
}

void* pool_state::allocate_large_request(stream_ref s, std::size_t bytes) {
  // Two compares inline; the messages are built out of line.
  if (bytes > max_request || s.get_device().id() != device_id_) [[unlikely]]
    bad_request(s, bytes);
  // Size 0 comes here only from a pool with small_max 0 (allocate_general): taken as 1 byte.
  const std::size_t size = bytes + static_cast<std::size_t>(bytes == 0);
  void* p = nullptr;
  try {
    p = allocate_large(s, size);
  } catch (const out_of_memory& oom) {
    // The ladder knew only the block it looked for; the caller's size is said too.
    throw_out_of_memory(oom.requested(), bytes);
  }
  if (recorder_.on()) [[unlikely]] {
    recorder_.allocated(p, bytes, s.get_timeline());
  }
  return p;
}

void* pool_state::note_peak_then(std::int64_t pending, void* p) noexcept {
  note_peak(pending);
  return p;
}

void* pool_state::add_live_then(std::int64_t delta, void* p) noexcept {
  add_live(delta);
  return p;
}

void* pool_state::allocate_general(stream_ref s, std::size_t bytes) {
  // Only requests of at most small_max bytes come here (allocate() sends the others on), so
  // max_request cannot be passed: the device is the one check left.
  if (s.get_device().id() != device_id_) [[unlikely]]
    bad_request(s, bytes);
  // Size 0 gets a unique smallest block, like malloc(0): a caller (a framework's empty tensor)
  // may free it like any other pointer. Taken as 1 byte, so that a pool with small_max 0 makes
  // it a large block like every other request.
  const std::size_t size = bytes + static_cast<std::size_t>(bytes == 0);
  if (size > options_.small_max) [[unlikely]]
    return allocate_large_request(s, bytes);
  void* p = nullptr;
  const std::size_t cls = class_of(size);
  stream_cache::entry e{};
  if (!cache_of(s.get_timeline()).pop(cls, e)) [[unlikely]] {
    try {
      p = allocate_small(s, cls);  // the slow path, out of line
    } catch (const out_of_memory& oom) {
      throw_out_of_memory(oom.requested(), bytes);  // as in allocate_large_request
    }
  } else {
    // Fast path: freed on this very stream, so no wait is ever needed (in-order queue). Out of
    // the cache, the chunk is nobody else's: it turns live after the cache's lock is released.
    e.owner->state(e.owner->index_of(e.p)).store(chunk_live, std::memory_order_release);
    count_small_here<live_way::out>(class_size(cls));
    p = e.p;
  }
  // The allocation log (trace_recorder.hpp), once the block is out: off, one relaxed load.
  if (recorder_.on()) [[unlikely]] {
    recorder_.allocated(p, bytes, s.get_timeline());
  }
  return p;
}

void* pool_state::allocate_small(stream_ref s, std::size_t cls) {
  if (options_.share_between_streams) {
    // Shared: another stream's freed chunk, behind a device-side wait, before new memory.
    return with_reclaim(class_size(cls), [&]() -> void* {
      if (void* p = try_shared_small(s, cls, /*pending_ok=*/true)) return p;
      if (void* p = try_steal(s, cls)) return p;
      return new_slab_chunk(cls);
    });
  }
  // Per stream: a chunk another live stream may still use (spilled to the shared list, or in its
  // cache) only when no new slab can be had. Taken first, such chunks make threads on their own
  // streams wait for each other's streams again and again (a marker and a device-side wait each,
  // and every steal reads every stream's cache), while a few megabytes of new slabs per stream
  // end it: each thread's classes then settle at its own peak, as its large blocks do
  // (docs/performance.md, "Small blocks per stream").
  return with_reclaim(class_size(cls), [&]() -> void* {
    if (void* p = try_shared_small(s, cls, /*pending_ok=*/false)) return p;
    // A stream that stopped (a worker waiting for input) keeps its cache; once the pool has grown
    // by 16 MiB of slabs without it, its chunks go where this stream can take them.
    if (drain_idle_caches(s.get_timeline())) {
      if (void* p = try_shared_small(s, cls, /*pending_ok=*/false)) return p;
    }
    if (void* p = new_slab_chunk(cls)) return p;
    if (void* p = try_shared_small(s, cls, /*pending_ok=*/true)) return p;
    return try_steal(s, cls);
  });
}

void* pool_state::try_shared_small(stream_ref s, std::size_t cls, bool pending_ok) {
  const timeline* me = &s.get_timeline();
  class_list& l = shared_[cls];
  free_chunk taken{nullptr, nullptr, {}};
  bool fresh = false;
  backend::outside_capture_scope no_capture;  // held from a decision to wait to the wait
  {
    std::lock_guard lock(l.mu);
    auto& v = l.chunks;
    // 1. A freed chunk that needs no wait: the most recently freed first, a bounded scan.
    const std::size_t n = v.size();
    for (std::size_t i = n, scanned = 0; i-- > 0 && scanned < 32; ++scanned) {
      if (all_ready_for(v[i].tokens, me)) {
        taken = std::move(v[i]);
        v[i] = std::move(v.back());
        v.pop_back();
        break;
      }
    }
    // 2. A chunk never handed out, from a slab already reserved.
    if (taken.p == nullptr && !l.carving.empty()) {
      slab* sl = l.carving.back();
      STREAMPOOL_ASSERT_INTERNAL(sl->carved < sl->chunks);  // full slabs leave `carving`
      taken = {sl->chunk_at(sl->carved), sl, {}};
      if (++sl->carved == sl->chunks) l.carving.pop_back();
      fresh = true;
    }
    // 3. A freed chunk whose work may still run: reuse it behind a device-side wait rather than
    //    growing the pool. The oldest is the likeliest to be done by the time the wait runs.
    //    Never during a stream capture: nothing may wait then (backend.hpp, begin_capture).
    if (taken.p == nullptr && pending_ok && !v.empty() &&
        (no_capture = backend_->outside_capture())) {
      taken = std::move(v.front());
      v.front() = std::move(v.back());
      v.pop_back();
    }
  }
  if (taken.p == nullptr) return nullptr;
  const bool waited = order_after(s, taken.tokens);
  count_chunk_out(class_size(cls), fresh, waited);
  taken.owner->state(taken.owner->index_of(taken.p)).store(chunk_live, std::memory_order_release);
  return taken.p;
}

void* pool_state::new_slab_chunk(std::size_t cls) {
  const std::size_t chunk = class_size(cls);
  const growing_scope growing(growing_);
  // A class's first slab is the smallest that holds a chunk, and each slab made of the class
  // doubles the next, up to the full slab (slab_pages.hpp, "ramp"): a class used by a few blocks
  // holds little, a busy one soon has the full slab's amortisation. A slab smaller than the
  // granularity takes slots of a page shared with other classes' slabs (slab_memory).
  std::size_t bytes = slab_pages_.next_slab_bytes(cls, chunk);
  void* base = slab_memory(bytes);
  // Under a memory limit the slab may not fit even in an empty pool (eight 1 MiB chunks are
  // 8 MiB, over a 4 MiB limit): then a slab of just what one chunk needs, rather than failing a
  // request the limit allows.
  const std::size_t smallest = slab_pages_.smallest_slab_bytes(chunk);
  if (base == nullptr && bytes > smallest) {
    bytes = smallest;
    base = slab_memory(bytes);
  }
  if (base == nullptr) return nullptr;
  slab_pages_.count_slab(cls);
  slab_bytes_made_.fetch_add(bytes, std::memory_order_relaxed);
  auto owned = std::make_unique<slab>(base, bytes, cls, chunk);
  slab* sl = owned.get();
  sl->carved = 1;  // not yet visible to anyone: no lock needed
  sl->state(0).store(chunk_live, std::memory_order_release);
  {
    std::lock_guard lock(segments_mu_);
    map_.insert(base, bytes, sl);
    slabs_.emplace(base, std::move(owned));
    if (!slab_pages_.shares(bytes)) unpublished_ -= bytes;  // registered now (grow())
  }
  if (sl->chunks > 1) {
    std::lock_guard lock(shared_[cls].mu);
    shared_[cls].carving.push_back(sl);
  }
  count_chunk_out(chunk, /*fresh=*/true, /*waited=*/false);
  return base;
}

void pool_state::count_chunk_out(std::size_t bytes, bool fresh, bool waited) noexcept {
  (fresh    ? fresh_allocations_
   : waited ? waited_reuses_
            : ready_reuses_)
      .fetch_add(1, std::memory_order_relaxed);
  allocations_.fetch_add(1, std::memory_order_relaxed);
  count_small_here<live_way::out>(bytes);
}

// ---- deallocation -----------------------------------------------------------------------------

void pool_state::deallocate(stream_ref s, void* p) {
  // The fast path, like allocate()'s: a small block freed live on s goes to s's cache while the
  // cache is biased to this thread, with no call but tail calls. Anything else before the state
  // byte changes (the allocation log, a bad pointer, poisoning) starts over on the full path,
  // deallocate_general(); after it, deallocate_chunk()'s own ways are taken. A large block goes to
  // deallocate_large_on(), a tail call too.
  //   Another device's stream never gets past the cache lookup: a timeline holds a cache of this
  // pool only once a call with its stream passed the device check (allocate, deallocate_general,
  // deallocate_large_on), so a stream without one starts over on the full path, which checks
  // before anything changes. That keeps the check's loads off this path.
  if (!recorder_.on()) [[likely]] {
    segment* seg = map_.find(p);
    if (seg != nullptr && seg->kind == segment_kind::slab && !options_.poison_on_free) [[likely]] {
      auto& sl = static_cast<slab&>(*seg);
      const std::size_t i = sl.index_of(p);
      timeline& line = s.get_timeline();
      stream_cache* c = access::first_cache(line, id_);
      if (sl.chunk_at(i) == p && c != nullptr) [[likely]] {
        const std::uint8_t old = free_state(sl.state(i));
        if (old != chunk_live) [[unlikely]]
          return deallocate_chunk_rest(sl, p, old, s);
        // Read before the push: once the chunk is in the cache, a trim on another thread may
        // take it and give its slab back.
        const std::size_t bytes = sl.chunk_size;
        if (c->push_biased(sl.size_class, bytes, {p, &sl, line.current()})) [[likely]] {
          // Biased to this thread: the owner's cell is this thread's (live_cell.hpp).
          live_cell& cell = c->owner_cell();
          const std::int64_t d =
              cell.delta.load(std::memory_order_relaxed) - static_cast<std::int64_t>(bytes);
          if (d <= -live_cell::flush_bytes) [[unlikely]] {
            cell.delta.store(0, std::memory_order_relaxed);
            return add_live(d);
          }
          cell.delta.store(d, std::memory_order_relaxed);
          return;
        }
        return cache_chunk(sl, p, s);
      }
    }
    // A large block: straight to its shard, without deallocate_general's second page-map walk.
    if (seg != nullptr && seg->kind == segment_kind::large)
      return deallocate_large_on(s, static_cast<large_range&>(*seg), p);
  }
  deallocate_general(s, p);
}

void pool_state::deallocate_large_on(stream_ref s, large_range& r, void* p) {
  if (s.get_device().id() != device_id_) [[unlikely]]
    foreign_stream(s, p, "deallocate");
  deallocate_large(r, p, {}, &s);
}

void pool_state::deallocate_chunk_rest(slab& sl, void* p, std::uint8_t old, stream_ref s) {
  if (deallocate_chunk_slow(sl, p, old, &s, {})) cache_chunk(sl, p, s);
}

void pool_state::deallocate_general(stream_ref s, void* p) {
  // Before anything changes, the log included: the free's point would be a token on another
  // device's timeline, which no stream of this device can wait for.
  if (s.get_device().id() != device_id_) [[unlikely]]
    foreign_stream(s, p, "deallocate");
  // The allocation log, before the block can go to another thread (trace_recorder.hpp). A bad
  // pointer or a double free is not a live block of the log: nothing is written for it.
  if (recorder_.on()) [[unlikely]] {
    recorder_.freed(p);
  }
  segment* seg = map_.find(p);
  if (seg == nullptr) bad_pointer(p, "deallocate");
  if (seg->kind == segment_kind::large) {
    deallocate_large(static_cast<large_range&>(*seg), p, {}, &s);
    return;
  }
  deallocate_chunk(static_cast<slab&>(*seg), p, &s, {});
}

void pool_state::deallocate(void* p, std::span<const token> uses) {
  for (const token& t : uses) check_token(t, p, "deallocate");
  if (recorder_.on()) [[unlikely]] {
    recorder_.freed(p);  // as above
  }
  segment* seg = map_.find(p);
  if (seg == nullptr) bad_pointer(p, "deallocate");
  if (seg->kind == segment_kind::large) {
    deallocate_large(static_cast<large_range&>(*seg), p, uses, nullptr);
    return;
  }
  deallocate_chunk(static_cast<slab&>(*seg), p, nullptr, uses);
}

void pool_state::deallocate_chunk(slab& sl, void* p, stream_ref* s, std::span<const token> uses) {
  const std::size_t i = sl.index_of(p);
  if (sl.chunk_at(i) != p) [[unlikely]] {
    not_a_chunk_start(sl, p);
  }
  const std::uint8_t old = free_state(sl.state(i));
  if (old != chunk_live || s == nullptr || options_.poison_on_free) [[unlikely]] {
    if (!deallocate_chunk_slow(sl, p, old, s, uses)) return;
  }
  // Freed on s with no use recorded on another stream: s's own cache.
  cache_chunk(sl, p, *s);
}

void pool_state::cache_chunk(slab& sl, void* p, stream_ref s) {
  timeline& line = s.get_timeline();
  const std::size_t cls = sl.size_class;
  // What a bin spills goes where other streams can use it, with its token: to its own class's
  // list (the spilling bin may be another class's, the fullest).
  const std::size_t bytes = sl.chunk_size;  // before the push, as in deallocate()
  cache_of(line).push(cls, bytes, {p, &sl, line.current()}, spiller());
  count_small_here<live_way::back>(bytes);
}

bool pool_state::deallocate_chunk_slow(slab& sl, void* p, std::uint8_t old, stream_ref* s,
                                       std::span<const token> uses) {
  if (old == chunk_free) {
    STREAMPOOL_FAIL(
        format("deallocate: %s (block of %zu bytes in pool %llu) is not allocated: "
               "double free",
               format_ptr(p).c_str(), sl.chunk_size, static_cast<unsigned long long>(id_)));
  }
  token_set tokens;
  if (old == chunk_live_with_uses) tokens = take_uses(p);
  tokens_at_free(tokens, p, sl.chunk_size, s, uses);
  if (s != nullptr && old == chunk_live) return true;  // poisoned: on to s's cache
  // No live stream, or uses recorded on other streams: the shared list, with every token.
  deallocations_.fetch_add(1, std::memory_order_relaxed);
  count_small_here<live_way::back>(sl.chunk_size);
  push_shared(sl.size_class, free_chunk{p, &sl, std::move(tokens)});
  return false;
}

void pool_state::not_a_chunk_start(const slab& sl, const void* p) const {
  const std::size_t i = sl.index_of(p);
  STREAMPOOL_FAIL(
      format("deallocate: %s is inside the block %s of %zu bytes (offset %zu), not "
             "at its start",
             format_ptr(p).c_str(), format_ptr(sl.chunk_at(i)).c_str(), sl.chunk_size,
             static_cast<std::size_t>(static_cast<const std::byte*>(p) -
                                      static_cast<const std::byte*>(sl.chunk_at(i)))));
}

void pool_state::push_shared(std::size_t cls, free_chunk c) {
  STREAMPOOL_ASSERT_INTERNAL(c.owner->size_class == cls);
  std::lock_guard lock(shared_[cls].mu);
  shared_[cls].chunks.push_back(std::move(c));
}

void pool_state::spill_to_shared(std::span<const stream_cache::entry> entries,
                                 const std::shared_ptr<timeline>& line) {
  if (entries.empty()) return;
  std::vector<free_chunk> chunks;
  chunks.reserve(entries.size());
  for (const stream_cache::entry& e : entries) chunks.push_back(shared_chunk(e, line));
  const std::size_t cls = entries.front().owner->size_class;
  class_list& l = shared_[cls];
  std::lock_guard lock(l.mu);
  auto& v = l.chunks;
  STREAMPOOL_ASSERT_INTERNAL(std::all_of(
      entries.begin(), entries.end(), [&](const auto& e) { return e.owner->size_class == cls; }));
  // Grown geometrically (an exact reserve would reallocate at every spill); then the moves
  // cannot throw.
  if (v.capacity() < v.size() + chunks.size())
    v.reserve(std::max(v.size() + chunks.size(), 2 * v.capacity()));
  v.insert(v.end(), std::make_move_iterator(chunks.begin()), std::make_move_iterator(chunks.end()));
}

void pool_state::push_shared(const stream_cache::entry& e, const std::shared_ptr<timeline>& line) {
  push_shared(e.owner->size_class, shared_chunk(e, line));
}

pool_state::free_chunk pool_state::shared_chunk(const stream_cache::entry& e,
                                                const std::shared_ptr<timeline>& line) {
  token_set tokens;
  merge_point(tokens, line, e.at);  // none when line is null (the stream is gone)
  return free_chunk{e.p, e.owner, std::move(tokens)};
}

void pool_state::tokens_at_free(token_set& tokens, void* p, std::size_t bytes, stream_ref* s,
                                std::span<const token> uses, std::shared_ptr<timeline>* kept) {
  resolve_at_free(tokens);
  // Poison only behind every recorded use: a fill on s while another stream's declared use may
  // still run would itself be the unordered write the checking mode exists to catch.
  if (s != nullptr && options_.poison_on_free && all_ready_for(tokens, &s->get_timeline())) {
    s->submit(command::make(fill_command{p, 0xDB, 1, bytes}));
  }
  if (s != nullptr) merge_free_point(tokens, access::state(*s)->line, kept);
  for (const token& t : uses) merge_token(tokens, t);
}

}  // namespace streampool::detail
