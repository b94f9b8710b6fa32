// streampool: large blocks on virtual memory, growth (docs/large-blocks.md, rules 2-4). A growth
// plans a window in a shard's arena, finds the granules to map under it (new physical memory
// within the slack, else granules remapped from free blocks whose work is complete, else a wait
// for a pending block, else new memory after all), commits the plan in the arenas, then calls
// the driver under growth_mu_ only. Also here: reserving address ranges, creating and releasing
// physical granules, and giving free granules back (trim, release_threshold). Reuse without
// growth, and frees, are pool_large.cpp's.
#include <algorithm>
#include <numeric>
#include <optional>

#include "core/pool/pool_state.hpp"
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
  // twice it cannot wrap (a limit of SIZE_MAX would make `want` 0 and refuse every large
  // request).
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
  // would wrap for trim()'s SIZE_MAX and release none of them.)
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

/// One growth across its passes (grow_virtual): the request, the reach it may take memory from,
/// the physical granules created for it or left spare, and whether the free blocks in reach were
/// marked yet.
struct pool_state::growth {
  stream_ref s;
  stream_cache& cache;
  std::size_t size;
  large_reach reach;
  large_shard& own;
  const timeline* me;
  std::vector<native_physical>& fresh;
  bool marked = false;     // mark_free_large() ran for this reach
  bool capturing = false;  // this pass runs while a stream capture may be under way
  [[nodiscard]] bool ready(const arena_block& b) const { return all_ready_for(b.tokens, me); }
};

/// One pass's plan, under the locks of the shards it touches until it is committed: the window,
/// its shard (target) and the granules remapped into it (sources, from the donors).
struct pool_state::growth_plan {
  explicit growth_plan(large_shard& own) : own_lock(own.mu), target(&own) {}
  std::unique_lock<biased_lock> own_lock;
  std::unique_lock<biased_lock> target_lock;  // target's, when it is not own
  // Other shards whose granules the plan remaps, locked until it is committed (only a growth
  // holds two shard locks; large_shard.hpp).
  std::vector<std::pair<large_shard*, std::unique_lock<biased_lock>>> donors;
  large_shard* target;
  std::optional<block_arena::window> window;
  std::vector<granule_run> sources;
  void unlock_all() {
    donors.clear();
    if (target_lock.owns_lock()) target_lock.unlock();
    if (own_lock.owns_lock()) own_lock.unlock();
  }
};

/// A committed plan, for the driver calls made with no shard lock held: the live block b covers
/// [extent_lo, extent_hi), of which the request gets [window, window + size).
struct pool_state::growth_commit {
  large_shard* target = nullptr;
  std::vector<granule_run> sources, targets;
  std::vector<native_physical> moved;  // the sources' handles, then the fresh ones
  arena_block* b = nullptr;
  std::uintptr_t window = 0, extent_lo = 0, extent_hi = 0;
  token_set waits;
  bool fresh_memory = false;
};

bool pool_state::plan_window(growth& gr, growth_plan& plan) {
  const auto ready = [&gr](const arena_block& b) { return gr.ready(b); };
  // Neighbours kept apart while their streams' work was pending merge once it is known complete:
  // whole granules under them become remappable, and windows larger.
  gr.own.arena.coalesce(/*force=*/false);
  std::optional<block_arena::window>& w = plan.window;
  w = gr.own.arena.best_window(gr.size, ready);
  if (!w || w->pending || w->map_granules > 0) {
    // A window in another stream's shard that needs less mapping (or no wait) wins: memory next
    // to free memory there is cheaper than a fresh frontier here. The block then lives in that
    // shard; growth is rare, so few blocks do.
    const auto better = [](const block_arena::window& a, const block_arena::window& b) {
      return a.pending != b.pending ? !a.pending : a.map_granules < b.map_granules;
    };
    for (std::size_t i = 1; i < shard_count; ++i) {
      large_shard& other = *shards_[(gr.own.index + i) % shard_count];
      if (!within_reach(gr.own, other, gr.reach)) continue;
      auto other_lock = borrow_lock(other.mu);  // an idle shard: its bias stays unclaimed
      other.arena.coalesce(/*force=*/false);
      std::optional<block_arena::window> ow = other.arena.best_window(gr.size, ready);
      if (ow && (!w || better(*ow, *w))) {
        w = std::move(ow);
        plan.target = &other;
        plan.target_lock = std::move(other_lock);  // and the previous target's lock goes
      }
    }
  }
  // During a stream capture nothing may wait (backend.hpp): a window behind a wait is no window.
  if (w && w->pending && gr.capturing) w.reset();
  return w.has_value();
}

std::size_t pool_state::plan_remaps(growth& gr, growth_plan& plan, std::size_t need) {
  const std::size_t g = vm_granule();
  std::size_t have = gr.fresh.size();
  // Remap only beyond the slack; past a budget of remaps, each remapped granule raises the
  // slack, so that remapping settles (docs/large-blocks.md, "Remapping").
  const std::size_t reserved = reserved_now_.load(std::memory_order_relaxed);
  const std::size_t live_peak = std::max(peak_live_.load(std::memory_order_relaxed),
                                         policy_peak_floor_.load(std::memory_order_relaxed));
  const std::size_t free_remaps = live_peak / remap_budget_divisor;
  const std::size_t slack =
      live_peak / remap_slack_divisor + (remapped_ > free_remaps ? remapped_ - free_remaps : 0);
  if (reserved + need * g <= live_peak + slack || gr.capturing || options_.keep_memory) {
    return have;
  }
  // The stream's own shard first, then the others': memory is the pool's, not a shard's. Never
  // from under the window's own chain.
  for (std::size_t i = 0; i < shard_count && have < need; ++i) {
    large_shard& sh = *shards_[(gr.own.index + i) % shard_count];
    if (!within_reach(gr.own, sh, gr.reach)) continue;
    std::unique_lock<biased_lock> sh_lock;
    if (&sh != &gr.own && &sh != plan.target) sh_lock = borrow_lock(sh.mu);
    const bool window_here = &sh == plan.target;
    std::vector<granule_run> more =
        complete_free_granules(sh, need - have, window_here ? plan.window->chain_start : 0,
                               window_here ? plan.window->chain_end : 0);
    if (more.empty()) continue;
    for (const granule_run& r : more) have += (r.to - r.from) / g;
    plan.sources.insert(plan.sources.end(), more.begin(), more.end());
    if (sh_lock.owns_lock()) plan.donors.emplace_back(&sh, std::move(sh_lock));
  }
  return have;
}

pool_state::growth_step pool_state::when_short(growth& gr, std::size_t missing) {
  // 1. Other streams' free memory may be complete without a marker that says so (markers are
  //    lazy). Mark it and plan again. Not this stream's own: it reuses that with no wait anyway.
  if (!gr.marked) {
    mark_free_large(gr.me, &gr.own, gr.reach);
    gr.marked = true;
    return {};
  }
  // 2. A free block that fits behind a device-side wait saves the growth; a wait couples the two
  //    streams, so it is taken only here.
  if (void* p = take_free_any(gr.s, gr.cache, gr.size, /*pending_ok=*/true, /*split_big=*/true,
                              /*try_only=*/false, gr.reach)) {
    return {p, false};
  }
  // 3. Neighbours kept apart because different streams' work on them is pending may fit
  //    together; merged, the block waits for both.
  bool merged = false;
  for (const auto& sh : shards_) {
    if (!within_reach(gr.own, *sh, gr.reach)) continue;
    const auto relock = borrow_lock(sh->mu);
    merged = sh->arena.coalesce(/*force=*/true) > 0 || merged;
  }
  if (merged) {
    if (void* p = take_free_any(gr.s, gr.cache, gr.size, /*pending_ok=*/true, /*split_big=*/true,
                                /*try_only=*/false, gr.reach)) {
      return {p, false};
    }
  }
  // 4. New memory within the cap (growth_cap), then plan again.
  bool refused = !growth_allowed(gr.reach, missing * vm_granule());
  if (!refused) {
    std::vector<native_physical> more = create_physical(missing);
    refused = more.size() != missing;  // the upstream refused part of it
    gr.fresh.insert(gr.fresh.end(), more.begin(), more.end());
  }
  if (!refused) return {};
  // 5. Refused per stream: the reach widens to every stream's free memory, keeping what was
  //    created, and the shards now in reach are marked.
  if (gr.reach == large_reach::own_and_idle) {
    gr.reach = large_reach::every_shard;
    gr.marked = false;
    return {};
  }
  // 6. Refused: what was created goes back now, for the reclaim ladder's retry and for whoever
  //    catches the out-of-memory error.
  release_physical(gr.fresh);
  return {nullptr, true};
}

bool pool_state::growth_allowed(large_reach reach, std::size_t bytes) const {
  // More than the device holds or the limit allows, with what is reserved now, cannot be created:
  // refused before creating any. Per stream the release threshold counts as a limit too (memory
  // past it would go back at once, and the other streams would create theirs again).
  const std::size_t reserved_now = reserved_now_.load(std::memory_order_relaxed);
  const std::size_t total = backend_->caps().total_memory;
  const std::size_t limit = limit_.load(std::memory_order_relaxed);
  const std::size_t cap = reach == large_reach::every_shard ? limit
                          : limit == 0                      ? options_.release_threshold
                                       : std::min(limit, options_.release_threshold);
  return !(total != 0 && bytes > total - std::min(total, reserved_now)) &&
         !(cap != 0 && bytes > cap - std::min(cap, reserved_now));
}

pool_state::growth_commit pool_state::commit_growth(growth& gr, growth_plan& plan) {
  const std::size_t g = vm_granule();
  const block_arena::window& w = *plan.window;
  growth_commit c;
  c.target = plan.target;
  c.sources = std::move(plan.sources);
  // What the block waits for: the work on the mapped pieces under the window. Not the joined
  // holder's tokens: mapping a hole merges it with free mapped neighbours whose work does not
  // touch the extent (and a capture allows no needless wait: backend.hpp).
  token_set window_waits;
  for (const arena_block* p : w.pieces)
    if (p->state == block_state::mapped)
      for (const token& t : p->tokens) merge_token(window_waits, t);
  // The sources become unmapped, the window mapped and live.
  c.window = w.start;
  block_arena& arena = c.target->arena;
  const auto runs = arena.granules_to_map(w, gr.size);
  for (const auto& sh : shards_) {  // each shard's lock is held if it gives any
    std::vector<granule_run> theirs;
    for (const granule_run& r : c.sources)
      if (r.range->shard == sh.get()) theirs.push_back(r);
    if (theirs.empty()) continue;
    std::vector<native_physical> h = detach_granules(*sh, theirs);
    c.moved.insert(c.moved.end(), h.begin(), h.end());
  }
  plan.donors.clear();
  remapped_ += c.moved.size() * g;  // raises the slack once past the budget: see remapped_
  // Only the unmapped pieces: mapping one merges it with its mapped neighbours, which may delete
  // them, but never another unmapped piece (a mapped one lies between).
  std::vector<arena_block*> holes;
  for (arena_block* p : w.pieces)
    if (p->state == block_state::unmapped) holes.push_back(p);
  const arena_range* range = w.pieces.front()->range;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    arena_block* mapped =
        arena.change_state(holes[i], runs[i].first, runs[i].second, block_state::mapped);
    c.targets.push_back(
        {static_cast<large_range*>(mapped->range->owner), runs[i].first, runs[i].second});
  }
  // Until the device has mapped them, the new granules are out of everyone's reach, also their
  // parts outside the window: the whole extent is taken live now, and what lies around the window
  // is freed once it is mapped. Joined, the block waits for all its pieces.
  c.extent_lo = c.targets.empty() ? c.window : std::min(c.window, c.targets.front().from);
  c.extent_hi =
      c.targets.empty() ? c.window + gr.size : std::max(c.window + gr.size, c.targets.back().to);
  arena_block* holder = arena.join(block_arena::block_at(*range, c.extent_lo), c.extent_hi);
  STREAMPOOL_ASSERT(holder->start <= c.extent_lo && c.extent_hi <= holder->end());
  c.waits = std::move(window_waits);
  c.b = arena.take(holder, c.extent_lo, c.extent_hi - c.extent_lo, gr.cache.timeline_id());
  c.fresh_memory = !c.targets.empty();
  plan.unlock_all();
  return c;
}

void* pool_state::map_growth(growth& gr, growth_commit& c) {
  const std::size_t g = vm_granule();
  unmap_runs(c.sources);
  c.moved.insert(c.moved.end(), gr.fresh.begin(), gr.fresh.end());
  gr.fresh.clear();
  std::size_t used = 0, mapped_runs = 0;
  STREAMPOOL_ASSERT(std::accumulate(c.targets.begin(), c.targets.end(), std::size_t{0},
                                    [g](std::size_t n, const granule_run& t) {
                                      return n + (t.to - t.from) / g;
                                    }) <= c.moved.size());
  for (const granule_run& t : c.targets) {
    const std::size_t n = (t.to - t.from) / g;
    if (!backend_->map(to_ptr(t.from),
                       std::span<const native_physical>(c.moved).subspan(used, n))) {
      break;
    }
    ++mapped_runs;
    upstream_maps_.fetch_add(n, std::memory_order_relaxed);
    const auto lock = borrow_lock(c.target->mu);
    large_range* r = t.range;
    const std::size_t first = (t.from - to_addr(r->base)) / g;
    if (r->handles.size() < first + n) r->handles.resize(first + n, nullptr);
    std::copy_n(c.moved.begin() + static_cast<std::ptrdiff_t>(used), n,
                r->handles.begin() + static_cast<std::ptrdiff_t>(first));
    used += n;
    std::lock_guard seg(segments_mu_);
    map_.insert(to_ptr(t.from), t.to - t.from, r);
  }
  // What was not mapped: spares beyond this growth's need stay spare; after a failed map, all of
  // it goes back.
  gr.fresh.assign(c.moved.begin() + static_cast<std::ptrdiff_t>(used), c.moved.end());
  if (mapped_runs < c.targets.size()) {
    unmap_failed(gr, c, mapped_runs);
    return nullptr;
  }
  bool deferred = false;  // a reuse behind pending work: hand_out_large counts it
  {
    const auto lock = borrow_lock(c.target->mu);
    if (c.extent_lo != c.window || c.extent_hi != c.window + gr.size) {
      // Mapped now: the parts around the window become free (behind the same waits).
      arena_block* f = c.target->arena.release(c.b, c.waits);
      c.b = c.target->arena.take(f, c.window, gr.size, gr.cache.timeline_id());
    }
    deferred = !c.fresh_memory && !all_ready_for(c.waits, gr.me);
    if (!deferred) count_large_out(*c.target, c.fresh_memory, /*waits=*/false);
  }
  return hand_out_large(gr.s, gr.cache, c.window, gr.size, c.waits, deferred ? c.target : nullptr);
}

void pool_state::unmap_failed(growth& gr, growth_commit& c, std::size_t mapped_runs) {
  release_physical(gr.fresh);
  // The device refused a mapping (out of memory for its page tables): free the window and mark
  // what has no memory behind it unmapped again; the reclaim ladder goes on from there.
  const auto lock = borrow_lock(c.target->mu);
  c.target->arena.release(c.b, c.waits);
  for (std::size_t i = mapped_runs; i < c.targets.size(); ++i) {
    const granule_run& t = c.targets[i];
    arena_block* holder = block_arena::block_at(*t.range->arena, t.from);
    STREAMPOOL_ASSERT(holder != nullptr && holder->state == block_state::mapped);
    c.target->arena.change_state(holder, t.from, t.to, block_state::unmapped);
  }
}

void* pool_state::grow_virtual(stream_ref s, stream_cache& cache, std::size_t size,
                               large_reach reach) {
  // One growth at a time: the arena may say "unmapped" ahead of the device only while this is
  // held, and the driver calls run under it (never under a shard's lock, which frees take).
  const std::lock_guard growth_lock(growth_mu_);
  // Created before a plan is committed (or left over from an earlier growth); what this growth
  // does not map stays spare for the next one.
  std::vector<native_physical> fresh = std::move(spare_physical_);
  spare_physical_.clear();
  struct keep_unused {
    std::vector<native_physical>& spare;
    std::vector<native_physical>& handles;
    ~keep_unused() { spare = std::move(handles); }
  } unused{spare_physical_, fresh};
  growth gr{s, cache, size, reach, *shards_[cache.shard()], &s.get_timeline(), fresh};
  for (;;) {
    // Nothing may wait or be unmapped during a capture (backend.hpp, begin_capture). Decided
    // once per pass, under a scope that keeps a capture from beginning until the pass's driver
    // calls are done.
    const backend::outside_capture_scope no_capture = backend_->outside_capture();
    gr.capturing = !no_capture;
    // Shelved blocks within reach go into their arenas first: growth plans over all the free
    // memory it may use (large_shelf.hpp). Once per pass: the reach may have widened.
    empty_shelves(&gr.own, gr.reach);
    // Another thread may have freed a fitting block while this one waited for growth_mu_.
    if (void* p = take_free_any(s, cache, size, /*pending_ok=*/false, /*split_big=*/true,
                                /*try_only=*/false, gr.reach)) {
      return p;
    }
    growth_plan plan(gr.own);
    if (!plan_window(gr, plan)) {
      plan.unlock_all();
      if (!reserve_range(gr.own, size)) return nullptr;
      continue;
    }
    const std::size_t need = plan.window->map_granules;
    if (need > gr.fresh.size()) {
      const std::size_t have = plan_remaps(gr, plan, need);
      if (have < need) {
        plan.unlock_all();
        const growth_step step = when_short(gr, need - have);
        if (step.block != nullptr || step.refused) return step.block;
        continue;  // plan again: the arena may have changed meanwhile
      }
    }
    growth_commit c = commit_growth(gr, plan);
    return map_growth(gr, c);
  }
}

}  // namespace streampool::detail
