// streampool: large blocks on virtual memory, growth (docs/large-blocks.md, rules 2-4). A growth
// plans a window in a shard's arena, finds the granules to map under it (new physical memory
// within the slack, else granules remapped from free blocks whose work is complete, else a wait
// for a pending block, else new memory after all), commits the plan in the arenas, then calls
// the driver under growth_mu_ only. Also here: reserving address ranges, creating and releasing
// physical granules, and giving free granules back (trim, release_threshold). Reuse without
// growth, and frees, are pool_large.cpp's.
#include <algorithm>
#include <numeric>

#include "pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

/// Physical memory up to peak live + 1/50 (2%) is created when needed; beyond it, memory under
/// free blocks whose work is complete is remapped first (see grow_virtual). Remapping up to 1/5 of
/// peak live is free; every byte remapped beyond that raises the 2% by one byte.
constexpr std::size_t remap_slack_divisor = 50;
constexpr std::size_t remap_budget_divisor = 5;

}  // namespace

bool pool_state::reserve_range(large_shard& own, std::size_t bytes) {
  // Address space is cheap and physical memory is what counts, so ranges are large: twice the
  // device (or the limit), so that fragmentation of addresses never forces a second range in
  // practice. Growth is serialised (growth_mu_), so no two threads reserve at once.
  const std::size_t g = vm_granule();
  // A limit (or a device) beyond any address space says nothing about the range: capped, so that
  // twice it cannot wrap (a limit of SIZE_MAX made `want` 0 and refused every large request).
  constexpr std::size_t cap = std::size_t{1} << 47;
  const std::size_t device = std::min(std::max(backend_->caps().total_memory, limit_.load()), cap);
  std::size_t want = round_up(std::max({bytes, 2 * device, std::size_t{1} << 30}), g);
  void* base = nullptr;
  while (base == nullptr && want >= round_up(bytes, g)) {
    base = backend_->reserve(want);
    if (base == nullptr) want = want / 2 / g * g;
  }
  if (base == nullptr) return false;
  upstream_reserves_.fetch_add(1, std::memory_order_relaxed);
  auto owned = std::make_unique<large_range>(base, want, /*is_virtual=*/true);
  large_range* r = owned.get();
  r->shard = &own;
  {
    std::lock_guard lock(segments_mu_);
    large_ranges_.emplace(base, std::move(owned));  // pages enter the map as they are mapped
  }
  std::lock_guard lock(own.mu);
  r->arena = own.arena.add_range(to_addr(base), want, block_state::unmapped, r);
  return true;
}

std::vector<pool_state::granule_run> pool_state::complete_free_granules(large_shard& sh,
                                                                        std::size_t granules,
                                                                        std::uintptr_t avoid_from,
                                                                        std::uintptr_t avoid_to) {
  const std::size_t g = vm_granule();
  std::vector<granule_run> runs;
  // Smallest first: a small free block is the least likely to fit a later request, so taking its
  // memory costs the least; the big free blocks stay whole.
  const auto& free = sh.arena.mapped_free();
  for (auto it = free.lower_bound(g); it != free.end() && granules > 0; ++it) {
    arena_block* b = *it;
    if (b->end() > avoid_from && b->start < avoid_to) continue;
    const std::uintptr_t from = round_up(b->start, g), to = b->end() / g * g;
    if (to <= from || !all_complete(b->tokens)) continue;
    const std::size_t take = std::min(granules, (to - from) / g);
    runs.push_back({static_cast<large_range*>(b->range->owner), from, from + take * g});
    granules -= take;
  }
  return runs;
}

std::vector<native_physical> pool_state::detach_granules(large_shard& sh,
                                                         const std::vector<granule_run>& runs) {
  const std::size_t g = vm_granule();
  std::vector<native_physical> handles;
  for (const granule_run& run : runs) {
    // The run lies inside one mapped free block.
    arena_block* holder = block_arena::block_at(*run.range->arena, run.from);
    STREAMPOOL_ASSERT(holder != nullptr && holder->state == block_state::mapped &&
                      run.to <= holder->end() && run.range->shard == &sh);
    sh.arena.change_state(holder, run.from, run.to, block_state::unmapped);
    for (std::uintptr_t a = run.from; a < run.to; a += g) {
      native_physical& h = run.range->handles[(a - to_addr(run.range->base)) / g];
      handles.push_back(h);
      h = nullptr;
    }
  }
  return handles;
}

void pool_state::unmap_runs(const std::vector<granule_run>& runs) {
  const std::size_t g = vm_granule();
  for (const granule_run& run : runs) {
    {
      std::lock_guard lock(segments_mu_);
      map_.erase(to_ptr(run.from), run.to - run.from);
    }
    backend_->unmap(to_ptr(run.from), run.to - run.from);
    upstream_unmaps_.fetch_add((run.to - run.from) / g, std::memory_order_relaxed);
  }
}

std::vector<native_physical> pool_state::create_physical(std::size_t granules) {
  const std::size_t g = vm_granule();
  std::vector<native_physical> handles;
  handles.reserve(granules);
  while (handles.size() < granules) {
    if (!reserve_bytes(g)) break;
    native_physical h = nullptr;
    try {
      h = backend_->create_physical();
    } catch (...) {
      unreserve_bytes(g);
      release_physical(handles);
      throw;
    }
    if (h == nullptr) {
      unreserve_bytes(g);
      break;
    }
    upstream_creates_.fetch_add(1, std::memory_order_relaxed);
    handles.push_back(h);
  }
  return handles;
}

void pool_state::release_physical(std::vector<native_physical>& handles) {
  for (native_physical h : handles) {
    backend_->release_physical(h);
    upstream_releases_.fetch_add(1, std::memory_order_relaxed);
    unreserve_bytes(vm_granule());
  }
  handles.clear();
}

std::size_t pool_state::release_free_granules(std::size_t bytes) {
  const std::size_t g = vm_granule();
  // Spare granules first: they are mapped nowhere. (Rounded up without bytes + g - 1, which
  // wrapped for trim()'s SIZE_MAX and released none of them.)
  const std::size_t n = std::min(spare_physical_.size(), bytes / g + (bytes % g != 0 ? 1 : 0));
  std::vector<native_physical> spares(spare_physical_.end() - static_cast<std::ptrdiff_t>(n),
                                      spare_physical_.end());
  spare_physical_.resize(spare_physical_.size() - n);
  release_physical(spares);
  std::size_t released = n * g;
  for (const auto& sh : shards_) {
    if (released >= bytes) break;
    std::vector<granule_run> runs;
    std::vector<native_physical> handles;
    {
      const auto lock = borrow_lock(sh->mu);
      empty_shelf(*sh);  // shelved blocks are free memory too
      // Pieces kept apart while different streams' work on them was pending: what has completed
      // merges first, so that whole granules across their boundaries go back too.
      sh->arena.for_each_mapped_free(
          [](const arena_block* b) { (void)all_complete(b->tokens); });  // polls
      sh->arena.coalesce(/*force=*/false);
      const std::size_t want = (bytes - released) / g;
      runs = complete_free_granules(*sh, want == 0 ? 1 : want, 0, 0);
      handles = detach_granules(*sh, runs);
    }
    unmap_runs(runs);
    released += handles.size() * g;
    release_physical(handles);
  }
  return released;
}

void* pool_state::grow_virtual(stream_ref s, stream_cache& cache, std::size_t size,
                               large_reach reach) {
  large_shard& own = *shards_[cache.shard()];
  const std::size_t g = vm_granule();
  const timeline* me = &s.get_timeline();
  const auto ready = [me](const arena_block& b) { return all_ready_for(b.tokens, me); };
  // One growth at a time: the arena may say "unmapped" ahead of the device only while this is
  // held, and the driver calls below run under it (never under a shard's lock, which frees
  // take).
  const std::lock_guard growth(growth_mu_);
  // Created before the plan is committed (or left over from an earlier growth); what this growth
  // does not map stays spare for the next one.
  std::vector<native_physical> fresh = std::move(spare_physical_);
  spare_physical_.clear();
  struct keep_unused {
    std::vector<native_physical>& spare;
    std::vector<native_physical>& handles;
    ~keep_unused() { spare = std::move(handles); }
  } unused{spare_physical_, fresh};
  bool marked = false;  // mark_free_large() ran for this growth

  for (;;) {
    // During a stream capture nothing may wait or be unmapped (backend.hpp, begin_capture): a
    // window behind a wait is no window, and nothing is remapped below. Decided once per pass,
    // under a scope that keeps a capture from beginning until the pass's driver calls are done.
    const backend::outside_capture_scope no_capture = backend_->outside_capture();
    const bool capturing = !no_capture;
    std::vector<granule_run> sources, targets;
    std::vector<native_physical> moved;
    arena_block* b = nullptr;
    std::uintptr_t window = 0, extent_lo = 0, extent_hi = 0;
    token_set waits;
    bool fresh_memory = false;
    // Shelved blocks within reach go into their arenas first: growth plans over all the free
    // memory it may use (large_shelf.hpp). Once per pass: the reach may have widened.
    empty_shelves(&own, reach);
    // Another thread may have freed a fitting block while this one waited for growth_mu_.
    if (void* p = take_free_any(s, cache, size, /*pending_ok=*/false, /*split_big=*/true,
                                /*try_only=*/false, reach)) {
      return p;
    }
    large_shard* target = &own;  // the shard whose range the window is in
    {
      std::unique_lock lock(own.mu);
      std::unique_lock<biased_lock> target_lock;  // target's, when it is not own
      // Other shards whose complete free granules this plan remaps: locked until it is committed
      // (only a growth holds two shard locks; large_shard.hpp).
      std::vector<std::pair<large_shard*, std::unique_lock<biased_lock>>> donors;
      const auto unlock_all = [&] {
        donors.clear();
        if (target_lock.owns_lock()) target_lock.unlock();
        lock.unlock();
      };
      // Neighbours kept apart while their streams' work was pending merge once it is known
      // complete: whole granules under them become remappable, and windows larger.
      own.arena.coalesce(/*force=*/false);
      std::optional<block_arena::window> w = own.arena.best_window(size, ready);
      if (!w || w->pending || w->map_granules > 0) {
        // A window in another stream's shard that needs less mapping (or no wait) wins: memory
        // next to free memory there is cheaper than a fresh frontier here. The block then lives
        // in that shard; growth is rare, so few blocks do.
        const auto better = [](const block_arena::window& a, const block_arena::window& b) {
          return a.pending != b.pending ? !a.pending : a.map_granules < b.map_granules;
        };
        for (std::size_t i = 1; i < shard_count; ++i) {
          large_shard& other = *shards_[(own.index + i) % shard_count];
          if (!within_reach(own, other, reach)) continue;
          auto other_lock = borrow_lock(other.mu);  // an idle shard: its bias stays unclaimed
          other.arena.coalesce(/*force=*/false);
          std::optional<block_arena::window> ow = other.arena.best_window(size, ready);
          if (ow && (!w || better(*ow, *w))) {
            w = std::move(ow);
            target = &other;
            target_lock = std::move(other_lock);  // and the previous target's lock goes
          }
        }
      }
      if (w && w->pending && capturing) w.reset();
      if (!w) {
        unlock_all();
        if (!reserve_range(own, size)) return nullptr;
        continue;
      }
      const std::size_t need = w->map_granules;
      if (need > fresh.size()) {
        // Remap only beyond the slack: below it, new memory is cheaper in the long run. A remap
        // moves memory from where a later request of the same step will want it back, so a
        // program that needs one remap per step would remap every step, forever (the GPT-2
        // trace did: 27 granules a step); a little memory created once ends that. A program
        // whose layout never repeats (random sizes, or threads that interleave differently every
        // time) would remap forever beyond any fixed slack, so once the remaps add up to a fifth
        // of peak live, each further remapped granule raises the slack by one: a granule is moved
        // once, and what is needed again is created. Reserved memory then settles where the
        // program's fragmentation does (the mixed pattern: 31,000 driver calls per 200,000 steps
        // with the fixed slack; converging to none, at 1.3x peak live). A layout that repeats
        // settles within the budget: raising the slack from the first remap let the GPT-2
        // training trace create 760 MiB (10% of peak live) rather than remap 155 more granules.
        const std::size_t reserved = reserved_now_.load(std::memory_order_relaxed);
        const std::size_t live_peak = std::max(peak_live_.load(std::memory_order_relaxed),
                                               policy_peak_floor_.load(std::memory_order_relaxed));
        const std::size_t free_remaps = live_peak / remap_budget_divisor;
        const std::size_t slack = live_peak / remap_slack_divisor +
                                  (remapped_ > free_remaps ? remapped_ - free_remaps : 0);
        std::size_t have = fresh.size();
        if (reserved + need * g > live_peak + slack && !capturing && !options_.keep_memory) {
          // The stream's own shard first, then the others': memory is the pool's, not a shard's.
          // Never from under the window's own chain.
          for (std::size_t i = 0; i < shard_count && have < need; ++i) {
            large_shard& sh = *shards_[(own.index + i) % shard_count];
            if (!within_reach(own, sh, reach)) continue;
            std::unique_lock<biased_lock> sh_lock;
            if (&sh != &own && &sh != target) sh_lock = borrow_lock(sh.mu);
            const bool window_here = &sh == target;
            std::vector<granule_run> more = complete_free_granules(
                sh, need - have, window_here ? w->chain_start : 0, window_here ? w->chain_end : 0);
            if (more.empty()) continue;
            for (const granule_run& r : more) have += (r.to - r.from) / g;
            sources.insert(sources.end(), more.begin(), more.end());
            if (sh_lock.owns_lock()) donors.emplace_back(&sh, std::move(sh_lock));
          }
        }
        if (have < need && !marked) {
          // Other streams' free memory may be complete without a marker that says so (markers
          // are lazy, and a program that synchronises its streams itself records none). Mark it
          // and plan again: what has finished is remappable, and needs no wait, by this growth or
          // the next. Not this stream's own: it reuses that with no wait anyway, and remapping
          // it moves memory away from where its next request of the same size wants it back
          // (on the GPT-2 trace: 4 granules more at the peak, and remaps in step 2).
          unlock_all();
          mark_free_large(me, &own, reach);
          marked = true;
          continue;
        }
        if (have < need) {
          // New memory would be needed. A free block that fits behind a device-side wait saves
          // that growth; a wait couples the two streams, so it is taken only here.
          unlock_all();
          if (void* p = take_free_any(s, cache, size, /*pending_ok=*/true, /*split_big=*/true,
                                      /*try_only=*/false, reach)) {
            return p;
          }
          // Neighbours kept apart because different streams' work on them is pending may fit
          // together; merged, the block waits for both. Worth it only against real growth.
          bool merged = false;
          for (const auto& sh : shards_) {
            if (!within_reach(own, *sh, reach)) continue;
            const auto relock = borrow_lock(sh->mu);
            merged = sh->arena.coalesce(/*force=*/true) > 0 || merged;
          }
          if (merged) {
            if (void* p = take_free_any(s, cache, size, /*pending_ok=*/true, /*split_big=*/true,
                                        /*try_only=*/false, reach)) {
              return p;
            }
          }
          // More than the device holds or the limit allows, with what is reserved now, cannot be
          // created: fail before creating any (the reclaim ladder trims and retries), instead of
          // taking the whole device until the driver refuses, or creating granules only to
          // release them. Per stream, the release threshold counts as a limit too (memory past
          // it would go back at once, and the other streams would create theirs again), and a
          // refusal first widens the reach to every stream's free memory, keeping this growth's
          // spares (and marking the shards that come into reach).
          const std::size_t reserved_now = reserved_now_.load(std::memory_order_relaxed);
          const std::size_t total = backend_->caps().total_memory;
          const std::size_t limit = limit_.load(std::memory_order_relaxed);
          const std::size_t cap = reach == large_reach::every_shard ? limit
                                  : limit == 0                      ? options_.release_threshold
                                               : std::min(limit, options_.release_threshold);
          const std::size_t to_create = (need - have) * g;
          bool refused = (total != 0 && to_create > total - std::min(total, reserved_now)) ||
                         (cap != 0 && to_create > cap - std::min(cap, reserved_now));
          if (!refused) {
            std::vector<native_physical> more = create_physical(need - have);
            refused = more.size() != need - have;  // the upstream refused part of it
            fresh.insert(fresh.end(), more.begin(), more.end());
          }
          if (refused && reach == large_reach::own_and_idle) {
            reach = large_reach::every_shard;  // what was created stays for the wider plan
            marked = false;                    // the shards now in reach were not marked
            continue;
          }
          if (refused) {
            // What was created goes back now, not kept spare, so that memory is free for the
            // reclaim ladder's retry and for whoever catches the out-of-memory error.
            release_physical(fresh);
            return nullptr;
          }
          continue;  // plan again: the arena may have changed meanwhile
        }
      }
      // What the block waits for: the work on the mapped pieces under the window. Not the
      // joined holder's tokens below: mapping a hole merges it with its free mapped neighbours,
      // whose work (another stream's, pending) does not touch the extent. Waiting for it was
      // needless, and during a stream capture it is not allowed at all (backend.hpp).
      token_set window_waits;
      for (const arena_block* p : w->pieces)
        if (p->state == block_state::mapped)
          for (const token& t : p->tokens) merge_token(window_waits, t);
      // Commit the plan in the arenas: the sources become unmapped, the window mapped and live.
      const std::uintptr_t window_start = w->start;
      window = window_start;
      block_arena& arena = target->arena;
      const auto runs = arena.granules_to_map(*w, size);
      for (const auto& sh : shards_) {  // each shard's lock is held if it gives any
        std::vector<granule_run> theirs;
        for (const granule_run& r : sources)
          if (r.range->shard == sh.get()) theirs.push_back(r);
        if (theirs.empty()) continue;
        std::vector<native_physical> h = detach_granules(*sh, theirs);
        moved.insert(moved.end(), h.begin(), h.end());
      }
      donors.clear();
      remapped_ += moved.size() * g;  // raises the slack once past the budget: see remapped_
      // Only the unmapped pieces: mapping one merges it with its mapped neighbours, which may
      // delete them, but never another unmapped piece (a mapped one lies between).
      std::vector<arena_block*> holes;
      for (arena_block* p : w->pieces)
        if (p->state == block_state::unmapped) holes.push_back(p);
      const arena_range* range = w->pieces.front()->range;
      for (std::size_t i = 0; i < runs.size(); ++i) {
        arena_block* mapped =
            arena.change_state(holes[i], runs[i].first, runs[i].second, block_state::mapped);
        targets.push_back(
            {static_cast<large_range*>(mapped->range->owner), runs[i].first, runs[i].second});
      }
      // Until the device has mapped them, the new granules must be out of everyone's reach, also
      // their parts outside the window (the arena already calls them mapped): the whole extent
      // is taken live now, and what lies around the window is freed once it is mapped. Its
      // pieces may have stayed apart (pending work of different streams): joined, the block
      // waits for all of them.
      extent_lo = targets.empty() ? window_start : std::min(window_start, targets.front().from);
      extent_hi =
          targets.empty() ? window_start + size : std::max(window_start + size, targets.back().to);
      arena_block* holder = arena.join(block_arena::block_at(*range, extent_lo), extent_hi);
      STREAMPOOL_ASSERT(holder->start <= extent_lo && extent_hi <= holder->end());
      waits = std::move(window_waits);
      b = arena.take(holder, extent_lo, extent_hi - extent_lo, cache.timeline_id());
      fresh_memory = !targets.empty();
    }
    // Device work, under growth_mu_ only: unmap the sources, map everything into the window.
    unmap_runs(sources);
    moved.insert(moved.end(), fresh.begin(), fresh.end());
    fresh.clear();
    std::size_t used = 0, mapped_runs = 0;
    STREAMPOOL_ASSERT(std::accumulate(targets.begin(), targets.end(), std::size_t{0},
                                      [g](std::size_t n, const granule_run& t) {
                                        return n + (t.to - t.from) / g;
                                      }) <= moved.size());
    for (const granule_run& t : targets) {
      const std::size_t n = (t.to - t.from) / g;
      if (!backend_->map(to_ptr(t.from),
                         std::span<const native_physical>(moved).subspan(used, n))) {
        break;
      }
      ++mapped_runs;
      upstream_maps_.fetch_add(n, std::memory_order_relaxed);
      const auto lock = borrow_lock(target->mu);
      large_range* r = t.range;
      const std::size_t first = (t.from - to_addr(r->base)) / g;
      if (r->handles.size() < first + n) r->handles.resize(first + n, nullptr);
      std::copy_n(moved.begin() + static_cast<std::ptrdiff_t>(used), n,
                  r->handles.begin() + static_cast<std::ptrdiff_t>(first));
      used += n;
      std::lock_guard seg(segments_mu_);
      map_.insert(to_ptr(t.from), t.to - t.from, r);
    }
    // What was not mapped: spares beyond this growth's need stay spare; after a failed map, all
    // of it goes back.
    fresh.assign(moved.begin() + static_cast<std::ptrdiff_t>(used), moved.end());
    if (mapped_runs < targets.size()) {
      release_physical(fresh);
      // The device refused a mapping (out of memory for its page tables): free the window and
      // mark what has no memory behind it unmapped again; the reclaim ladder goes on from there.
      const auto lock = borrow_lock(target->mu);
      target->arena.release(b, waits);
      for (std::size_t i = mapped_runs; i < targets.size(); ++i) {
        const granule_run& t = targets[i];
        arena_block* holder = block_arena::block_at(*t.range->arena, t.from);
        STREAMPOOL_ASSERT(holder != nullptr && holder->state == block_state::mapped);
        target->arena.change_state(holder, t.from, t.to, block_state::unmapped);
      }
      return nullptr;
    }
    bool deferred = false;  // a reuse behind pending work: hand_out_large counts it
    {
      const auto lock = borrow_lock(target->mu);
      if (extent_lo != window || extent_hi != window + size) {
        // Mapped now: the parts around the window become free (behind the same waits).
        arena_block* f = target->arena.release(b, waits);
        b = target->arena.take(f, window, size, cache.timeline_id());
      }
      deferred = !fresh_memory && !all_ready_for(waits, me);
      if (!deferred) count_large_out(*target, fresh_memory, /*waits=*/false);
    }
    return hand_out_large(s, cache, window, size, waits, deferred ? target : nullptr);
  }
}

}  // namespace streampool::detail
