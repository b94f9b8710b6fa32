// streampool: validate(), the invariants of pool_state.hpp checked, with those of the structures
// under the pool (stream_cache.hpp, block_arena.hpp, slab_pages.hpp). A test calls it to show
// that the pool is consistent after what it did; STREAMPOOL_ASSERT_EXPENSIVE calls it after every
// trim and after large frees (STREAMPOOL_DEBUG_LEVEL 3: the debug preset runs the whole test
// suite so). It looks at the pool in two parts, each under the locks that make it a consistent
// view: the small blocks (every stream cache's lock, then each size class's with the segment
// lock), then the large blocks and the reservation (growth_mu_, each shard's lock in turn, the
// segment lock). Other threads wait meanwhile, and each structure is seen between two of their
// operations, never in the middle of one. What a thread does between two lock sections (a
// growth between its reservation and its registration, a release in the opposite order) is
// accounted for by unpublished_ and growing_, so that the equations hold exactly under
// concurrency too.
#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

/// Throws the broken invariant of `pool`, named, with the numbers.
[[noreturn]] void broken(std::uint64_t pool, const std::string& what) {
  STREAMPOOL_FAIL(format("pool %llu: invariant broken: %s", static_cast<unsigned long long>(pool),
                         what.c_str()));
}

/// What one large free may pay for validation, in the units validate() counts (one per slab,
/// chunk, block or granule it looks at): at -O0 a unit costs tens of nanoseconds, a large free
/// a few microseconds, so validation costs a debug build's large free a few times over.
constexpr std::size_t validate_budget = 256;

}  // namespace

void pool_state::validate() const {
  std::size_t work = 0;  // what this costs, in units of validate_budget
  {
    // live cells (live_cell.hpp): every change that reaches its step goes into the counter.
    std::lock_guard lock(cells_mu_);
    for (const auto& c : cells_) {
      const std::int64_t d = c->delta.load(std::memory_order_relaxed);
      const std::int64_t step =
          std::max(live_cell::flush_bytes, c->bound.load(std::memory_order_relaxed));
      if (d >= step || d <= -step) {
        broken(id_, format("live delta %lld of a thread's cell is not below its step %lld",
                           static_cast<long long>(d), static_cast<long long>(step)));
      }
    }
    work += cells_.size();
  }
  validate_small(work);
  validate_large(work);
  // How many large frees pass before the next validation (pool_large.cpp).
  validate_interval_.store(std::max<std::size_t>(1, work / validate_budget),
                           std::memory_order_relaxed);
}

void pool_state::validate_small(std::size_t& work) const {
  // Every stream cache's lock at once, then one class at a time: a chunk of class c moves only
  // between the caches' bins c and the shared list c (a spill holds both locks), so with all of
  // them held the lists of c are a consistent view. (Holding all the class mutexes at once would
  // be more than ThreadSanitizer's deadlock detector tracks per thread.)
  // The registry is copied, not held: a class lock must not be taken under caches_mu_, which
  // timeline::cache_for takes under the timeline's lock (and the pool's destructor host-waits
  // under class locks). A cache made meanwhile is not looked at; one dropped stays alive here.
  const std::vector<std::shared_ptr<stream_cache>> all = caches();
  std::vector<visit_guard> cache_locks;
  cache_locks.reserve(all.size());
  for (const auto& c : all) cache_locks.push_back(c->hold());
  for (const auto& c : all) {
    if (std::string why = c->find_broken_locked(); !why.empty()) broken(id_, why);
    if (c->shard() >= shard_count) {
      broken(id_,
             format("caches: stream cache of timeline %llu has shard %zu of %zu",
                    static_cast<unsigned long long>(c->timeline_id()), c->shard(), shard_count));
    }
  }
  for (std::size_t cls = 0; cls < max_classes; ++cls) {
    const std::lock_guard class_lock(shared_[cls].mu);
    const std::lock_guard segments(segments_mu_);
    validate_slabs(cls, work);
    validate_free_chunks(cls, all, work);
  }
}

bool pool_state::registered(const slab* sl) const {
  auto it = slabs_.find(sl->base);
  return it != slabs_.end() && it->second.get() == sl;
}

void pool_state::validate_slabs(std::size_t cls, std::size_t& work) const {
  // Carved counts (guarded by this class's lock), chunks never carved.
  for (const auto& [base, sl] : slabs_) {
    if (sl->size_class != cls) continue;
    work += 1 + sl->chunks - std::min(sl->carved, sl->chunks);
    if (sl->chunks == 0 || sl->carved == 0 || sl->carved > sl->chunks) {
      broken(id_, format("slabs: slab %p (class %zu) has carved %zu of %zu chunks", base,
                         std::size_t{sl->size_class}, sl->carved, sl->chunks));
    }
    for (std::size_t k = sl->carved; k < sl->chunks; ++k) {
      if (sl->state(k).load(std::memory_order_acquire) != chunk_free) {
        broken(id_, format("slabs: slab %p (class %zu) chunk %zu was never carved (carved "
                           "%zu), yet is not free",
                           base, std::size_t{sl->size_class}, k, sl->carved));
      }
    }
  }
  for (const slab* sl : shared_[cls].carving) {
    if (!registered(sl) || sl->size_class != cls || sl->carved >= sl->chunks) {
      broken(id_, format("slabs: slab %p in class %zu's carving list: registered %d, class "
                         "%zu, carved %zu of %zu",
                         sl->base, cls, registered(sl) ? 1 : 0, std::size_t{sl->size_class},
                         sl->carved, sl->chunks));
    }
  }
}

void pool_state::validate_free_chunks(std::size_t cls,
                                      const std::vector<std::shared_ptr<stream_cache>>& all,
                                      std::size_t& work) const {
  // The shared list and every cache's bin of this class.
  std::unordered_map<const slab*, std::size_t> free_of;
  std::unordered_set<const void*> seen;
  const auto free_chunk_ok = [&](const void* p, const slab* sl, const char* where) {
    const bool ok = sl != nullptr && registered(sl) && sl->size_class == cls &&
                    sl->index_of(p) < sl->chunks && sl->chunk_at(sl->index_of(p)) == p;
    if (!ok) {
      broken(id_, format("free chunks: %p in %s of class %zu is not a chunk start of a "
                         "registered slab of that class",
                         p, where, cls));
    }
    const std::uint8_t state = sl->state(sl->index_of(p)).load(std::memory_order_acquire);
    if (state != chunk_free) {
      broken(id_, format("free chunks: %p in %s of class %zu is in state %d, not free", p, where,
                         cls, static_cast<int>(state)));
    }
    if (!seen.insert(p).second) {
      broken(id_,
             format("free chunks: %p (class %zu) is listed twice; again in %s", p, cls, where));
    }
    ++free_of[sl];
  };
  for (const free_chunk& c : shared_[cls].chunks) {
    free_chunk_ok(c.p, c.owner, "a shared list");
    if (!one_token_per_timeline(c.tokens)) {
      broken(id_, format("free chunks: %p in the shared list of class %zu holds two tokens of "
                         "one timeline",
                         c.p, cls));
    }
  }
  for (const auto& c : all) {
    c->for_each_entry_locked(
        cls, [&](const stream_cache::entry& e) { free_chunk_ok(e.p, e.owner, "a stream cache"); });
  }
  work += seen.size();
  for (const auto& [sl, n] : free_of) {
    if (n > sl->carved) {
      broken(id_, format("free chunks: slab %p (class %zu) has %zu free chunks listed, but "
                         "only %zu carved",
                         sl->base, std::size_t{sl->size_class}, n, sl->carved));
    }
  }
}

void pool_state::validate_large(std::size_t& work) const {
  // growth_mu_ for all of it: physical granules, virtual ranges and their handles change only
  // under it (growths, give-backs), so the shards can be looked at one at a time (a growth takes
  // shard locks in an order of its own: no order of all of them is safe) and still add up.
  const std::lock_guard growth(growth_mu_);
  const std::size_t g = virtual_large_ ? vm_granule() : backend_->caps().granularity;
  std::size_t mapped_granules = 0;
  for (const auto& sh : shards_) {
    const auto shard_lock = borrow_lock(sh->mu);
    mapped_granules += validate_shard(*sh, g, work);
  }
  const std::lock_guard segments(segments_mu_);
  validate_reserved(mapped_granules, g, work);
  validate_page_map(g);
  // Slab pages: exact when no slab is between taking its slots and its registration.
  const bool no_slab_in_flight = growing_.load(std::memory_order_acquire) == 0;
  std::vector<std::pair<std::uintptr_t, std::size_t>> in_pages;
  for (const auto& [base, sl] : slabs_)
    if (slab_pages_.shares(sl->bytes)) in_pages.emplace_back(to_addr(base), sl->bytes);
  if (std::string why = slab_pages_.find_broken(in_pages, no_slab_in_flight); !why.empty())
    broken(id_, why);
}

std::size_t pool_state::validate_shard(const large_shard& sh, std::size_t g,
                                       std::size_t& work) const {
  work += sh.arena.live_count() + sh.arena.mapped_count() + sh.arena.unmapped_free().size();
  if (std::string why = sh.arena.find_broken(); !why.empty())
    broken(id_, format("shard %zu: %s", sh.index, why.c_str()));
  if (std::string why = sh.shelf.find_broken(); !why.empty())
    broken(id_, format("shard %zu: %s", sh.index, why.c_str()));
  std::size_t shelved = 0;  // live blocks marked shelved: exactly the shelf's (large_shelf.hpp)
  for (const auto& r : sh.arena.ranges())
    for (const arena_block* b = r->first; b != nullptr; b = b->next)
      shelved += static_cast<std::size_t>(b->state == block_state::live && b->shelved);
  if (shelved != sh.shelf.count()) {
    broken(id_, format("shard %zu: %zu live blocks are marked shelved, its shelf lists %zu",
                       sh.index, shelved, sh.shelf.count()));
  }
  std::size_t mapped_granules = 0;
  for (const auto& r : sh.arena.ranges()) {
    const auto* lr = static_cast<const large_range*>(r->owner);
    if (lr == nullptr || lr->shard != &sh || lr->arena != r.get() || to_addr(lr->base) != r->base ||
        lr->bytes != r->size) {
      broken(id_, format("large: range [%#zx, +%zu) of shard %zu is not its large range's",
                         static_cast<std::size_t>(r->base), r->size, sh.index));
    }
    if (lr->virtual_range) mapped_granules += validate_granules(sh, *r, *lr, g, work);
  }
  return mapped_granules;
}

std::size_t pool_state::validate_granules(const large_shard& sh, const arena_range& r,
                                          const large_range& lr, std::size_t g,
                                          std::size_t& work) const {
  // Granule i has memory exactly when a live or mapped block overlaps it.
  work += 3 * lr.handles.size();  // here, for the reserved bytes and in the page map
  std::vector<bool> covered(lr.handles.size(), false);
  for (const arena_block* b = r.first; b != nullptr; b = b->next) {
    if (b->state == block_state::unmapped) continue;
    for (std::uintptr_t i = (b->start - r.base) / g; i <= (b->end() - 1 - r.base) / g; ++i) {
      if (i >= covered.size() || lr.handles[i] == nullptr) {
        broken(id_, format("large: block [%#zx, %#zx) (state %d) of shard %zu lies on granule "
                           "%zu, which has no memory",
                           static_cast<std::size_t>(b->start), static_cast<std::size_t>(b->end()),
                           static_cast<int>(b->state), sh.index, static_cast<std::size_t>(i)));
      }
      covered[i] = true;
    }
  }
  std::size_t mapped = 0;
  for (std::size_t i = 0; i < covered.size(); ++i) {
    if (!covered[i] && lr.handles[i] != nullptr) {
      broken(id_, format("large: granule %zu of range [%#zx, +%zu) of shard %zu is mapped "
                         "under no live or mapped block",
                         i, static_cast<std::size_t>(r.base), r.size, sh.index));
    }
    if (lr.handles[i] != nullptr) ++mapped;
  }
  return mapped;
}

void pool_state::validate_reserved(std::size_t mapped_granules, std::size_t g,
                                   std::size_t& work) const {
  // The registries, the spares and unpublished_ add up to reserved_.
  std::size_t own_slabs = 0, segment_ranges = 0;
  for (const auto& [base, sl] : slabs_)
    if (!slab_pages_.shares(sl->bytes)) own_slabs += sl->bytes;
  for (const auto& [base, r] : large_ranges_)
    if (!r->virtual_range) segment_ranges += r->bytes;
  work += 2 * slabs_.size() + large_ranges_.size();
  const std::size_t pages = slab_pages_.pages() * slab_pages_.page_bytes();
  const std::size_t sum = own_slabs + pages + segment_ranges + mapped_granules * g +
                          spare_physical_.size() * g + unpublished_;
  if (sum != reserved_) {
    broken(id_, format("reserved: %zu bytes counted, but slabs %zu + slab pages %zu + segments "
                       "%zu + %zu mapped granules + %zu spare granules of %zu + unpublished %zu "
                       "= %zu",
                       reserved_, own_slabs, pages, segment_ranges, mapped_granules,
                       spare_physical_.size(), g, unpublished_, sum));
  }
  if (reserved_now_.load() != reserved_ || peak_reserved_.load() < reserved_) {
    broken(id_, format("reserved: %zu bytes counted, %zu mirrored, peak %zu", reserved_,
                       reserved_now_.load(), peak_reserved_.load()));
  }
}

void pool_state::validate_page_map(std::size_t g) const {
  // Every registered segment is found at its ends, every mapped granule too. (A virtual range's
  // handles change only under growth_mu_, held: read without its shard lock.)
  const auto mapped_at = [&](std::uintptr_t a, const segment* seg, const char* what) {
    if (map_.find(to_ptr(a)) != seg) {
      broken(id_, format("page map: %#zx of %s [%p, +%zu) maps to %p", static_cast<std::size_t>(a),
                         what, seg->base, seg->bytes, static_cast<void*>(map_.find(to_ptr(a)))));
    }
  };
  for (const auto& [base, sl] : slabs_) {
    mapped_at(to_addr(base), sl.get(), "slab");
    mapped_at(to_addr(base) + sl->bytes - 1, sl.get(), "slab");
  }
  for (const auto& [base, r] : large_ranges_) {
    if (!r->virtual_range) {
      mapped_at(to_addr(base), r.get(), "segment");
      mapped_at(to_addr(base) + r->bytes - 1, r.get(), "segment");
      continue;
    }
    for (std::size_t i = 0; i < r->handles.size(); ++i)
      if (r->handles[i] != nullptr) mapped_at(to_addr(base) + i * g, r.get(), "virtual range");
  }
}

bool pool_state::valid() const noexcept {
  try {
    validate();
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "streampool: pool %llu: validate() failed\n",
                 static_cast<unsigned long long>(id_));
  }
  return false;
}

}  // namespace streampool::detail
