// streampool: the pool's state (pool.hpp is the handle and states the contract).
//
// Glossary: see pool.hpp. The pool's code is split by concept, one file each:
//   pool_state.cpp         lifetime, the registry of pools, pointer queries, recorded uses
//   pool_small.cpp         small blocks: the fast path (the stream's own cache) and its slow path
//                          (shared lists, fresh chunks, new slabs); frees; live accounting
//   pool_caches.cpp        the registry of stream caches; stealing from them; flushing them
//   pool_memory.cpp        upstream memory: the reservation count, growth, release, and the
//                          out-of-memory ladder
//   pool_trim.cpp          trim and statistics
//   pool_validate.cpp      validate(): the invariants below, checked
//   pool_snapshot.cpp      snapshot(): every range and block, one lock at a time
//   pool_large.cpp         large blocks: reuse, frees, trim (both paths)
//   pool_large_growth.cpp  large blocks on virtual memory: growth, remapping, give-back
//   pool_segments.cpp      large blocks without virtual memory: segment growth and give-back
//   pool_recording.cpp     the allocation log (trace_recorder.hpp): start, stop, phases. Its hooks
//                          are in allocate() and the two deallocate()s (pool_small.cpp)
//
// Locks, and what each guards:
//   stream_cache::mu   one stream's cached chunks (the fast path takes only this; biased to the
//                      stream's thread, which takes it with no atomic read-modify-write)
//   class_list::mu     one size class's shared list, and the `carved` count of its slabs
//   growth_mu_         virtual memory: serialises the large-block growths and give-backs that call
//                      the driver (map, unmap, create, release), held across those calls. Never
//                      taken by a free, nor by a reuse.
//   large_shard::mu    one shard of the large blocks: its arena (free sets, live blocks, block
//                      links) and its ranges' physical handles. Never held across a driver call.
//   segments_mu_       the segment registry, reserved bytes, page map writes, slab pages
//   caches_mu_         the registry of stream caches
//   hooks_mu_          reclaim hooks
//   cells_mu_          the threads' live cells (live_cell.hpp); a leaf
//   uses_mu_           recorded uses of live chunks
//   trace_recorder::mu_  the allocation log while it records; taken with no pool lock held (a
//                      leaf), by allocate() after the block is out and deallocate() before it
//                      goes back
// Order: growth_mu_ -> caches_mu_ -> stream_cache::mu -> class_list::mu -> large_shard::mu ->
// segments_mu_ (a growth hands its block out, and counts it on the stream's cache, under
// growth_mu_). A timeline's lock comes before caches_mu_ (timeline::cache_for); under a class or
// shard lock a timeline is only polled (try_lock), except by the pool's destructor. Only a growth
// (under growth_mu_) holds two shard locks at once (large_shard.hpp). Every mutex counts its
// contended acquisitions (counted_mutex.hpp; statistics().contention). Reclaim hooks run with no
// lock held.
//
// Invariants. validate() checks each under the locks of what it relates; g is the large granularity
// (vm_granule() on the virtual-memory path), "registered" means in slabs_, slab_pages_ or
// large_ranges_.
//   reserved    reserved_ == sum(s.bytes : slab s not in a shared page)
//                            + slab_pages_.pages() * slab_pages_.page_bytes()
//                            + sum(r.bytes : large range r without virtual memory)
//                            + g * #{non-null r.handles[i] : virtual range r}
//                            + g * spare_physical_.size()
//                            + unpublished_
//               reserved_now_ == reserved_ <= peak_reserved_.
//   page map    map_.find(a) == the segment, at the first and last byte of every registered slab
//               and segment range, and at every mapped granule of a virtual range.
//   slabs       1 <= s.carved <= s.chunks; chunks never carved are chunk_free; a slab in a
//               class's `carving` list is registered, of that class, with s.carved < s.chunks.
//   free chunks every chunk in a shared list or a stream cache is at a chunk start of a
//               registered slab of its list's class, in state chunk_free, and in one list once;
//               #{free chunks of s} <= s.carved; a shared entry holds one token per timeline.
//   caches      each stream cache's own invariants (stream_cache.hpp); its shard < shard_count.
//   large       each shard's arena keeps block_arena.hpp's invariants (tiling, indexes, merged,
//               unmapped, tokens); every range of a shard's arena belongs to that shard
//               (large_range::shard, large_range::arena); in a virtual range, granule i has a
//               handle exactly when a live or mapped block overlaps it.
// What they cost to check: linear in slabs, free chunks, blocks and granules. STREAMPOOL_ASSERT_
// EXPENSIVE runs validate() after every trim, and after large frees: every one while the pool is
// small, every n-th as it grows, so that each free pays a bounded share (pool_large.cpp).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/pool/block_arena.hpp"
#include "core/pool/large_shard.hpp"
#include "core/pool/live_cell.hpp"
#include "core/pool/segment.hpp"
#include "core/pool/slab_pages.hpp"
#include "core/pool/stream_cache.hpp"
#include "core/pool/trace_recorder.hpp"
#include "core/stream/access.hpp"
#include "core/support/counted_mutex.hpp"
#include "core/support/page_map.hpp"
#include "core/support/size_classes.hpp"
#include "streampool/error.hpp"
#include "streampool/pool.hpp"

namespace streampool::detail {

struct device_state;
struct test_access;
struct snapshot_unresolved;    // pool_snapshot.cpp
struct snapshot_cached_chunk;  // pool_snapshot.cpp
/// The free chunks of every stream cache, by address (snapshot()).
using snapshot_cached_chunks = std::unordered_map<const void*, snapshot_cached_chunk>;

class pool_state : public std::enable_shared_from_this<pool_state> {
 public:
  pool_state(const device& d, pool_options options);
  pool_state(const pool_state&) = delete;
  pool_state& operator=(const pool_state&) = delete;
  ~pool_state();

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// The pool's device. Throws logic_error once the device itself is gone (the pool holds its
  /// backend, not its device: the device owns its default pool, so the other way round would be
  /// a cycle).
  [[nodiscard]] device get_device() const;
  [[nodiscard]] std::uint64_t device_id() const noexcept { return device_id_; }

  void* allocate(stream_ref s, std::size_t bytes);
  void deallocate(stream_ref s, void* p);
  void deallocate(void* p, std::span<const token> uses);
  void record_use(void* p, const token& use);
  [[nodiscard]] std::size_t block_size(const void* p) const;
  [[nodiscard]] bool owns(const void* p) const noexcept;
  std::size_t trim();
  void set_memory_limit(std::size_t bytes) { limit_.store(bytes); }
  [[nodiscard]] std::size_t memory_limit() const noexcept { return limit_.load(); }
  std::uint64_t add_reclaim_hook(std::function<void(std::size_t)> hook);
  void remove_reclaim_hook(std::uint64_t id);
  [[nodiscard]] pool_statistics statistics() const;
  /// pool::reset_peak_statistics(): pool_trim.cpp.
  void reset_peaks();
  /// pool::snapshot(): pool_snapshot.cpp.
  [[nodiscard]] pool_snapshot snapshot() const;

  /// Checks every invariant written above (and those of the stream caches, block arenas and slab
  /// pages under it), each under the locks that guard what it relates (pool_validate.cpp); other
  /// threads may go on using the pool meanwhile. Throws logic_error naming the first broken
  /// invariant, with its numbers. Exported for tests (detail::access::state reaches it). Never call
  /// it holding a pool lock.
  STREAMPOOL_EXPORT void validate() const;

  /// Called by timeline::cache_for (through access::cache_for) under the timeline's lock.
  std::shared_ptr<stream_cache> make_stream_cache(timeline& line);
  /// Drops the caches of streams that are gone, folding their counters into the pool's; under
  /// caches_mu_.
  void forget_orphaned_caches_locked();
  /// Called by stream_cache::orphan: its stream no longer uses its large shard.
  void stream_gone(std::size_t shard);
  /// Called by stream_cache::orphan: chunks freed on a stream that is gone, each with a token on
  /// `line` when it is closing (stream::release), with none when it retired (line null).
  void take_orphans(std::vector<stream_cache::entry>& entries,
                    const std::shared_ptr<timeline>& line);
  /// Called by stream_cache::orphan once it is empty for good: the registry forgets it now (its
  /// counters folded into the pool's), not at the next trim or new stream.
  void forget_cache(const stream_cache& c);
  /// Called by a thread's first count on this pool (live_cell.hpp): the cell joins the registry
  /// that statistics() sums. Takes cells_mu_ only.
  void register_cell(std::shared_ptr<live_cell> cell);
  /// Called when the cell's thread exits: its delta goes into the counter (cells_mu_ only).
  void fold_thread_cell(live_cell& cell) noexcept;

  // ---- the allocation log (pool_recording.cpp; pool::start_recording says what it writes) ----
  /// `zero`: the stream numbered 0 (nullptr: streams count from 0 in order of appearance).
  void start_recording(const std::string& path, const timeline* zero);
  std::uint64_t stop_recording() { return recorder_.stop(); }
  void record_phase(std::string_view name) { recorder_.phase(name); }

 private:
  friend struct test_access;  // tests that break an invariant on purpose (tests/unit)

  struct free_chunk {
    void* p;
    slab* owner;
    token_set tokens;
  };
  struct class_list {
    mutable counted_mutex mu;
    std::vector<free_chunk> chunks;  // freed chunks with their tokens
    std::vector<slab*> carving;      // slabs with chunks never handed out
  };
  // Segment-path policy (backends without virtual memory; pool_segments.cpp says why).
  static constexpr std::size_t big_block = std::size_t{128} << 20;   // rule 2
  static constexpr std::size_t mid_max = std::size_t{16} << 20;      // rule 3
  static constexpr std::size_t mid_segment = std::size_t{64} << 20;  // rule 3

  // ---- small blocks (pool_small.cpp) ----
  /// allocate()'s argument checks failed: throws logic_error naming the values.
  [[noreturn, gnu::cold, gnu::noinline]] void bad_request(stream_ref s, std::size_t bytes) const;
  /// A free on a stream of another device: throws logic_error naming both devices.
  [[noreturn, gnu::cold, gnu::noinline]] void foreign_stream(stream_ref s, const void* p,
                                                             const char* what) const;
  /// Throws logic_error when `t` is on a timeline of another backend (device) than the pool's.
  void check_token(const token& t, const void* p, const char* what) const;
  /// s's stream cache for this pool, made on first use: one atomic load when it exists.
  stream_cache& cache_of(timeline& line) { return access::cache_for(line, *this, id_); }
  /// allocate() beyond its fast path for a request of at most small_max bytes, from the start:
  /// the device check, size 0, the allocation log, and a stream cache's locked pop.
  [[gnu::noinline]] void* allocate_general(stream_ref s, std::size_t bytes);
  /// allocate() for a request above small_max (or of 0 bytes when small_max is 0): argument
  /// checks, a large block, the allocation log.
  [[gnu::noinline]] void* allocate_large_request(stream_ref s, std::size_t bytes);
  /// The slow path of allocate(): the stream's own cache had nothing of class `cls`.
  [[gnu::noinline]] void* allocate_small(stream_ref s, std::size_t cls);
  /// A chunk of the shared list of `cls`: a freed one that needs no wait, else one never handed
  /// out, else (pending_ok) a freed one behind a device-side wait.
  void* try_shared_small(stream_ref s, std::size_t cls, bool pending_ok);
  void* new_slab_chunk(std::size_t cls);
  /// deallocate(s, p) beyond its fast path, from the start.
  [[gnu::noinline]] void deallocate_general(stream_ref s, void* p);
  /// deallocate(s, p)'s fast path found a large block: deallocate_large with the segment it found.
  [[gnu::noinline]] void deallocate_large_on(stream_ref s, large_range& r, void* p);
  void deallocate_chunk(slab& sl, void* p, stream_ref* s, std::span<const token> uses);
  /// deallocate(s, p)'s fast path found the chunk not plainly live (recorded uses, a double free).
  [[gnu::noinline]] void deallocate_chunk_rest(slab& sl, void* p, std::uint8_t old, stream_ref s);
  /// The slow path of deallocate_chunk(): no stream, recorded uses, poisoning, or a double free.
  /// Returns true when the chunk goes on to s's stream cache after all (poisoned, on a stream
  /// with no use recorded elsewhere).
  [[gnu::noinline]] bool deallocate_chunk_slow(slab& sl, void* p, std::uint8_t old, stream_ref* s,
                                               std::span<const token> uses);
  /// Keeps a chunk freed on s, with no recorded use, in s's stream cache (the fast path's end).
  void cache_chunk(slab& sl, void* p, stream_ref s);
  [[noreturn]] void not_a_chunk_start(const slab& sl, const void* p) const;
  void push_shared(std::size_t cls, free_chunk c);
  /// A stream cache's entry to its class's shared list, with a token on the stream it was freed
  /// on (`line`; none once that stream is gone): a spill, a drain, an orphan.
  void push_shared(const stream_cache::entry& e, const std::shared_ptr<timeline>& line);
  /// A stream cache's spill (push, try_steal): entries of one class to their shared list, with a
  /// token on `line`, under one hold of its lock; all or none (built before the list changes).
  void spill_to_shared(std::span<const stream_cache::entry> entries,
                       const std::shared_ptr<timeline>& line);
  /// A stream cache's entry as a shared list's chunk: its token on `line` (none when null).
  static free_chunk shared_chunk(const stream_cache::entry& e,
                                 const std::shared_ptr<timeline>& line);
  /// The free path's tokens, small and large alike: uses declared ahead resolved, the poison
  /// fill behind them (pool_options::poison_on_free), then the freeing stream's point now and
  /// `uses`. `kept`: see merge_free_point.
  void tokens_at_free(token_set& tokens, void* p, std::size_t bytes, stream_ref* s,
                      std::span<const token> uses, std::shared_ptr<timeline>* kept = nullptr);
  /// spill_to_shared as the callable that stream_cache's push and try_steal take.
  [[nodiscard]] auto spiller() noexcept {
    return [this](std::span<const stream_cache::entry> entries,
                  const std::shared_ptr<timeline>& line) { spill_to_shared(entries, line); };
  }
  /// Counts a chunk handed out by a slow path: never handed out before (fresh), or a reuse that
  /// made the stream wait or not.
  void count_chunk_out(std::size_t bytes, bool fresh, bool waited) noexcept;

  // ---- stream caches (pool_caches.cpp) ----
  /// A chunk of class `cls` from another stream's cache, behind a device-side wait; the rest of
  /// that bin's older half goes to the shared list in the same visit (stream_cache::try_steal).
  void* try_steal(stream_ref s, std::size_t cls);
  /// Per stream, before a new slab: once the pool has made idle_check_bytes of slabs since the
  /// last look, every other stream cache that neither allocated nor freed since then is drained
  /// into the shared lists, with a marker on its stream so that its chunks are seen complete.
  /// True when something was drained. One thread looks at a time; the others go on.
  bool drain_idle_caches(const timeline& me);
  void flush_caches();
  [[nodiscard]] std::vector<std::shared_ptr<stream_cache>> caches() const;

  // ---- live accounting (pool_small.cpp, next to the fast path that inlines it) ----
  /// Which way a count goes: out (an allocation: live bytes grow) or back (a free). The two ways
  /// are separate code, so that each of their branches always goes the same way: one function
  /// for both would take turns on every allocation and free, its tests of the sign going both
  /// ways.
  enum class live_way : bool { back, out };
  /// Adds `bytes` (taken away for `back`) to `cell`, the calling thread's (live_cell.hpp), and
  /// adds the cell's delta to the counter once it reaches `step` (live_cell::flush_bytes; for a
  /// large block twice its size, when that is more, so that a block as large as the flush size
  /// does not flush at every allocation and free onto the counter every thread writes:
  /// docs/performance.md, "Live counts per thread"). A null cell (the thread is exiting) counts
  /// on the counter directly.
  template <live_way Way>
  void count_live(live_cell* cell, std::size_t bytes, std::int64_t step) noexcept;
  /// count_live on the calling thread's cell: a small block's change.
  template <live_way Way>
  void count_small_here(std::size_t bytes) noexcept;
  /// The same for a large block (its step is at least twice its size); `c`: the stream's cache,
  /// whose owner cell is the caller's when it is biased to it (else, or null, a lookup).
  template <live_way Way>
  void count_large_here(std::size_t bytes, const stream_cache* c) noexcept;
  /// count_large_here without the cache's cell: the thread's looked up (out of line, so that the
  /// usual way makes no call and saves no registers).
  template <live_way Way>
  [[gnu::noinline]] void count_large_looked_up(std::size_t bytes) noexcept;
  /// Adds `delta` to the counter, and raises the peak to it (an allocation).
  void add_live(std::int64_t delta) noexcept;
  /// add_live(delta), then p: the fast path's tail call when a cell flushes.
  [[gnu::noinline]] void* add_live_then(std::int64_t delta, void* p) noexcept;
  /// note_peak(pending), then p: the fast path's tail call at a new peak.
  [[gnu::noinline]] void* note_peak_then(std::int64_t pending, void* p) noexcept;
  /// Raises the peak to the counter plus `pending` (the calling thread's cell): never above the
  /// bytes reserved, which every live byte lies in (another thread's negative delta, not yet
  /// added, would otherwise lift it there).
  void note_peak(std::int64_t pending) noexcept;
  /// note_peak's first test, inline where a count is taken: whether the counter plus `pending`
  /// is above the peak (rare). Two loads of lines that are rarely written (the counter changes at
  /// flushes, the peak at new peaks), so the fast path shares no written cache line.
  [[nodiscard]] bool above_peak(std::int64_t pending) const noexcept {
    return live_.load(std::memory_order_relaxed) + pending >
           static_cast<std::int64_t>(peak_live_.load(std::memory_order_relaxed));
  }
  /// Raises the peak to at least `live`; returns the peak after (note_peak, statistics()).
  std::size_t raise_peak(std::size_t live) const noexcept;
  /// Adds a forgotten stream cache's counters to the pool's (under caches_mu_).
  void fold_cache_counters_locked(const stream_cache& c) noexcept;

  // ---- large blocks (pool_large.cpp) ----
  /// Which shards a large request may take memory from, by reuse or by remapping. Per stream
  /// (pool_options::share_between_streams false): its own shard and shards no live stream uses,
  /// until growth is refused; else, and then, every shard.
  enum class large_reach : bool { own_and_idle, every_shard };
  [[nodiscard]] bool within_reach(const large_shard& own, const large_shard& other,
                                  large_reach reach) const noexcept;
  void* allocate_large(stream_ref s, std::size_t bytes);
  /// The shelves' bound (large_shelf.hpp): pool_options::large_cache_bytes on virtual memory,
  /// without a memory limit or release threshold; else 0 (off).
  [[nodiscard]] std::size_t shelf_limit() const noexcept;
  /// A block of `size`'s class (or a little larger, large_shelf::pop) on the shelf of `sh` that
  /// needs no wait for the cache's stream, handed out; nullptr when there is none
  /// (large_shelf.hpp).
  void* take_shelved(stream_ref s, stream_cache& cache, large_shard& sh, std::size_t size);
  /// Every block on the shelf of `sh` goes into its arena (under sh.mu).
  static void empty_shelf(large_shard& sh);
  /// empty_shelf, taking own.mu, for a request on `line` (the shard's stream, whose marker count
  /// the blocks join: pool_large.cpp, mark_every); false when the shelf held nothing.
  static bool empty_own_shelf(large_shard& own, timeline& line);
  /// The same for every shard, or with `own` for the shards within `reach` of it (each under its
  /// lock): before anything that must see all the free memory (growth, trim, the pool's end).
  void empty_shelves(const large_shard* own = nullptr,
                     large_reach reach = large_reach::every_shard);
  /// Best fit among the free blocks of `sh` with memory behind them: one that needs no wait, else
  /// (when `pending_ok`) the best fit behind a device-side wait. `split_big`: segment path, rule 2.
  /// `try_only`: skip the shard if its lock is held (a probe of another stream's shard).
  void* take_free_large(stream_ref s, stream_cache& cache, large_shard& sh, std::size_t size,
                        bool pending_ok, bool split_big, bool try_only = false);
  /// The same over the shards within reach: the cache's own first, then the others in turn.
  void* take_free_any(stream_ref s, stream_cache& cache, std::size_t size, bool pending_ok,
                      bool split_big, bool try_only, large_reach reach);
  /// Counts the block of `sh` just taken live (under sh.mu).
  static void count_large_out(large_shard& sh, bool fresh, bool waits) noexcept;
  /// Orders s after `waits` and counts `bytes` live on the calling thread's cell (no lock held).
  /// `reused_from`: a reuse picked behind pending work, counted here rather than under the pick's
  /// lock, as waited or ready by what order_after did: the work may complete between the pick and
  /// the wait, and then no wait is issued (waited_reuses counts reuses that waited, no more).
  void* hand_out_large(stream_ref s, const stream_cache& cache, std::uintptr_t start,
                       std::size_t bytes, const token_set& waits,
                       large_shard* reused_from = nullptr);
  void deallocate_large(large_range& r, void* p, std::span<const token> uses, stream_ref* s);
  void record_use_large(large_range& r, void* p, const token& use);
  /// Records a marker behind the last use of every free large block not known complete, where no
  /// marker covers it yet (never waits), so that completion becomes visible. Not on `skip`; with
  /// `own`, only in the shards within `reach` of it.
  void mark_free_large(const timeline* skip, const large_shard* own = nullptr,
                       large_reach reach = large_reach::every_shard);
  std::size_t trim_large();
  void destroy_large() noexcept;

  // ---- large blocks without virtual memory (pool_segments.cpp) ----
  void* grow_segment(stream_ref s, stream_cache& cache, std::size_t size);
  /// Returns every wholly free large segment to the upstream, host-waiting for its work first.
  /// Only before a growth, which may block (rule 1).
  void give_back_free_segments();

  // ---- large blocks on virtual memory (pool_large_growth.cpp) ----
  /// A growth in named steps, pass after pass until one hands a block out or fails: plan a window
  /// (plan_window), find granules to remap into it (plan_remaps), and when they are short, the
  /// fallback chain (when_short: mark, wait, merge, create within the cap, widen, fail); then
  /// commit the plan in the arenas (commit_growth) and call the driver (map_growth).
  void* grow_virtual(stream_ref s, stream_cache& cache, std::size_t size, large_reach reach);
  struct growth;
  struct growth_plan;
  struct growth_commit;
  /// when_short's outcome: a block handed out, a refusal, or neither (plan again).
  struct growth_step {
    void* block = nullptr;
    bool refused = false;
  };
  /// The window for gr's request, in its own shard or a better one within reach, under the
  /// plan's locks; false when there is none (a new range is needed).
  bool plan_window(growth& gr, growth_plan& plan);
  /// Granules to remap into the plan's window, beyond the slack; returns the granules the plan
  /// has (gr.fresh's and the remapped ones).
  std::size_t plan_remaps(growth& gr, growth_plan& plan, std::size_t need);
  /// The fallback chain when a plan is `missing` granules short (no shard lock held).
  growth_step when_short(growth& gr, std::size_t missing);
  /// Whether `bytes` more may be created for a growth of `reach` (device size, limit, threshold).
  [[nodiscard]] bool growth_allowed(large_reach reach, std::size_t bytes) const;
  /// Commits the plan in the arenas and releases its locks.
  growth_commit commit_growth(growth& gr, growth_plan& plan);
  /// The driver calls of a committed plan (under growth_mu_ only), and the block handed out;
  /// nullptr when the device refused a mapping (unmap_failed has undone the plan).
  void* map_growth(growth& gr, growth_commit& c);
  void unmap_failed(growth& gr, growth_commit& c, std::size_t mapped_runs);
  [[nodiscard]] std::size_t vm_granule() const noexcept { return backend_->caps().vm_granularity; }
  /// Reserves another virtual range of at least `bytes` for `own`; false when the address space
  /// is refused.
  bool reserve_range(large_shard& own, std::size_t bytes);
  struct granule_run {
    large_range* range;
    std::uintptr_t from, to;  // granule-aligned
  };
  /// Free granules of `sh` whose work is complete, outside [avoid_from, avoid_to), up to
  /// `granules` of them, smallest free blocks first. Under sh.mu.
  std::vector<granule_run> complete_free_granules(large_shard& sh, std::size_t granules,
                                                  std::uintptr_t avoid_from,
                                                  std::uintptr_t avoid_to);
  /// Marks `runs` (of one shard, whose mu is held) unmapped and moves their handles out.
  std::vector<native_physical> detach_granules(large_shard& sh,
                                               const std::vector<granule_run>& runs);
  /// Unmaps `runs` on the device and drops them from the page map (no lock held but growth_mu_).
  void unmap_runs(const std::vector<granule_run>& runs);
  /// Gives back free granules whose work is complete, at most `bytes` of them. Under growth_mu_.
  std::size_t release_free_granules(std::size_t bytes);
  void release_physical(std::vector<native_physical>& handles);
  /// New physical granules within the memory limit; fewer than asked when refused.
  std::vector<native_physical> create_physical(std::size_t granules);

  // ---- upstream memory and the out-of-memory ladder (pool_memory.cpp) ----
  /// Makes `s` wait for every token not ready for it. Returns true if any wait was needed.
  bool order_after(stream_ref s, const token_set& tokens);
  /// Counts `bytes` against the memory limit; false when it would be exceeded. `unpublished`:
  /// they are for an upstream allocation that no registry holds yet (see unpublished_).
  bool reserve_bytes(std::size_t bytes, bool unpublished = false);
  /// Gives `bytes` back to the count (they were released, or never obtained). `unpublished`:
  /// they were counted in unpublished_ (see reserve_bytes).
  void unreserve_bytes(std::size_t bytes, bool unpublished = false);
  /// Upstream allocation within the limit; nullptr when refused. Its bytes stay in unpublished_
  /// until the caller registers the memory (under segments_mu_).
  void* grow(std::size_t bytes);
  /// Memory for a slab of `bytes`: slots of a shared slab page when it is smaller than a page,
  /// else an upstream allocation of its own (unpublished until registered). nullptr when
  /// refused (the memory limit).
  void* slab_memory(std::size_t bytes);
  /// Unregisters a wholly free segment and gives its memory back; returns the bytes that went
  /// upstream (0 for a slab whose shared page still holds other slabs).
  std::size_t release_segment(segment* seg);
  /// Runs `attempt`; when it fails, the out-of-memory ladder around it (trim, hooks, retry), and
  /// throws when it still fails. The first try is a plain call, and the ladder gets the attempt
  /// by reference: a large request's lambda does not fit std::function's small buffer, which
  /// would cost a malloc and a free per allocation.
  template <class Attempt>
  void* with_reclaim(std::size_t bytes, Attempt&& attempt) {
    if (void* p = attempt()) return p;
    return reclaim_and_retry(bytes, std::function<void*()>(std::ref(attempt)));
  }
  /// The ladder of with_reclaim, after a first attempt failed.
  void* reclaim_and_retry(std::size_t bytes, const std::function<void*()>& attempt);
  /// `bytes`: the block the pool looked for; `requested`: the caller's size (0: not known here,
  /// allocate_general() and allocate_large_request() say it again with it).
  [[noreturn]] void throw_out_of_memory(std::size_t bytes, std::size_t requested = 0) const;
  /// Host-waits for the pending work of all cached memory (no lock held while waiting). Returns
  /// false when there was none.
  bool wait_cached_work();

  // ---- trim and statistics (pool_trim.cpp) ----
  void wait_all_pending();
  [[nodiscard]] std::size_t live_bytes() const;

  // ---- pool_state.cpp ----
  token_set take_uses(void* p);
  [[noreturn]] void bad_pointer(const void* p, const char* what) const;

  // ---- pool_snapshot.cpp: snapshot() in three reads, one lock at a time ----
  void snapshot_caches(pool_snapshot& out, snapshot_cached_chunks& in_cache) const;
  void snapshot_slabs(pool_snapshot& out, const snapshot_cached_chunks& in_cache,
                      std::vector<snapshot_unresolved>& tokens_of) const;
  void snapshot_large(pool_snapshot& out, std::vector<snapshot_unresolved>& tokens_of) const;

  // ---- pool_validate.cpp ----
  /// validate() for STREAMPOOL_ASSERT_EXPENSIVE: prints the broken invariant to stderr and returns
  /// false (the assertion then aborts).
  [[nodiscard]] bool valid() const noexcept;
  /// validate()'s two halves; each adds what it looked at to `work`.
  void validate_small(std::size_t& work) const;
  void validate_large(std::size_t& work) const;
  // Their parts, each under the locks validate_small or validate_large holds for it.
  [[nodiscard]] bool registered(const slab* sl) const;
  void validate_slabs(std::size_t cls, std::size_t& work) const;
  void validate_free_chunks(std::size_t cls, const std::vector<std::shared_ptr<stream_cache>>& all,
                            std::size_t& work) const;
  /// Returns the shard's mapped granules.
  std::size_t validate_shard(const large_shard& sh, std::size_t g, std::size_t& work) const;
  std::size_t validate_granules(const large_shard& sh, const arena_range& r, const large_range& lr,
                                std::size_t g, std::size_t& work) const;
  void validate_reserved(std::size_t mapped_granules, std::size_t g, std::size_t& work) const;
  void validate_page_map(std::size_t g) const;

  const std::uint64_t id_;
  const std::weak_ptr<device_state> device_;
  const std::uint64_t device_id_;
  const std::shared_ptr<backend> backend_;
  const pool_options options_;
  std::atomic<std::size_t> limit_;

  page_map map_;

  std::array<class_list, max_classes> shared_;

  const bool virtual_large_;  // large blocks on virtual memory (backend has it, option allows)
  mutable counted_mutex growth_mu_;
  // Physical granules created for a growth that found memory elsewhere meanwhile (another thread
  // freed a fitting block while the driver created them). Kept for the next growth instead of
  // released: reserved either way, and giving them back would be a driver call now and another
  // one then. Guarded by growth_mu_; released by trim and the give-backs.
  std::vector<native_physical> spare_physical_;
  // Bytes remapped so far (guarded by growth_mu_): beyond a budget of a fifth of peak live, added
  // to the slack within which growths create new memory instead of remapping, so that remapping
  // cannot go on forever (grow_virtual).
  std::size_t remapped_ = 0;
  // Enough that the threads of a machine's cores each get their own; a program with more streams
  // than this shares shards round robin (correct either way: only contention changes).
  static constexpr std::size_t shard_count = 16;
  std::array<std::unique_ptr<large_shard>, shard_count> shards_;

  mutable counted_mutex segments_mu_;
  std::unordered_map<void*, std::unique_ptr<slab>> slabs_;
  slab_pages slab_pages_;  // pages shared by slabs smaller than the granularity
  std::unordered_map<void*, std::unique_ptr<large_range>> large_ranges_;
  std::size_t reserved_ = 0;  // guarded by segments_mu_; also mirrored below for reads
  // Bytes in reserved_ that no registry holds (guarded by segments_mu_): grow() counts them
  // before its upstream call and the caller registers the memory later, and release_segment()
  // unregisters a segment before its upstream call and unreserves it after. Only the
  // "reserved" invariant reads it: without it, a growth or release on another thread would
  // make validate() see a gap.
  std::size_t unpublished_ = 0;
  std::atomic<std::size_t> reserved_now_{0};
  std::atomic<std::size_t> peak_reserved_{0};
  // Live bytes: the counter plus every thread's cell (cells_) is exact. Signed: a block freed on
  // one thread while its allocation is still pending in another's cell takes the counter below
  // the bytes it holds, and below zero in a moment when it is all there is.
  std::atomic<std::int64_t> live_{0};
  // Mutable: statistics() raises it to the sum it reads (pool_trim.cpp). reset_peaks() lowers it
  // to the live bytes of the moment.
  mutable std::atomic<std::size_t> peak_live_{0};
  // The highest peak_live_ that reset_peaks() took away: the growth policy sizes its slack by
  // the larger of the two (pool_large_growth.cpp), so that a program's reset of what it reports
  // does not change how the pool grows. Written under segments_mu_.
  std::atomic<std::size_t> policy_peak_floor_{0};
  // The threads' live cells (live_cell.hpp). A leaf lock: taken with nothing under it, and by
  // statistics() under caches_mu_.
  mutable std::mutex cells_mu_;
  std::vector<std::shared_ptr<live_cell>> cells_;

  mutable counted_mutex caches_mu_;
  std::vector<std::shared_ptr<stream_cache>> caches_;
  // drain_idle_caches: slab bytes made so far, their count at the last look, and who looks.
  static constexpr std::size_t idle_check_bytes = std::size_t{16} << 20;
  std::atomic<std::size_t> slab_bytes_made_{0};
  std::atomic<std::size_t> idle_checked_at_{0};
  spinlock idle_check_mu_;  // only ever try-locked

  mutable counted_mutex hooks_mu_;
  std::map<std::uint64_t, std::function<void(std::size_t)>> hooks_;
  std::uint64_t next_hook_ = 1;

  counted_mutex uses_mu_;
  std::unordered_map<const void*, token_set> uses_;

  // Slow-path statistics (fast-path ones live in the stream caches).
  std::atomic<std::uint64_t> allocations_{0}, deallocations_{0};
  // Streams gone (stream_cache::orphan) since make_stream_cache last forgot orphaned caches.
  std::atomic<std::size_t> gone_since_forget_{0};
  std::atomic<std::uint64_t> fresh_allocations_{0}, ready_reuses_{0}, waited_reuses_{0};
  std::atomic<std::uint64_t> device_waits_{0}, host_waits_{0};
  std::atomic<std::uint64_t> upstream_allocations_{0}, upstream_deallocations_{0};
  std::atomic<std::uint64_t> upstream_reserves_{0}, upstream_creates_{0}, upstream_releases_{0};
  std::atomic<std::uint64_t> upstream_maps_{0}, upstream_unmaps_{0};
  std::atomic<std::uint64_t> reclaim_calls_{0};
  std::atomic<std::uint64_t> alloc_retries_{0};

  // Threads between reserving upstream memory in grow() and publishing the new segment.
  std::atomic<int> growing_{0};
  struct growing_scope {
    explicit growing_scope(std::atomic<int>& n) : count(n) {
      count.fetch_add(1, std::memory_order_relaxed);
    }
    ~growing_scope() { count.fetch_sub(1, std::memory_order_release); }
    growing_scope(const growing_scope&) = delete;
    growing_scope& operator=(const growing_scope&) = delete;
    std::atomic<int>& count;
  };
  std::atomic<std::uint64_t> same_stream_reuses_folded_{0};  // from caches pruned by trim()
  std::atomic<std::uint64_t> cache_contention_folded_{0};    // likewise
  // STREAMPOOL_ASSERT_EXPENSIVE after large frees (pool_large.cpp): the frees since the last
  // validation, and how many pass between two (validate() sets it from what it cost).
  std::atomic<std::uint64_t> frees_since_validate_{0};
  mutable std::atomic<std::uint64_t> validate_interval_{1};

  // The allocation log. allocate() and the deallocate()s test recorder_.on() (a relaxed load of a
  // flag on its own cache line) before anything else of it.
  trace_recorder recorder_;
};

}  // namespace streampool::detail
