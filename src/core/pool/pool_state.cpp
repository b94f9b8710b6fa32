// streampool: the pool's lifetime, the registry of live pools, and the queries on a pointer
// (block_size, owns, record_use). Here because each of them is about the pool as a whole or
// dispatches to the small or large half (pool_small.cpp, pool_large.cpp); pool_state.hpp maps
// the rest.
#include "core/pool/pool_state.hpp"

#include <cstdio>
#include <cstdlib>

#include "core/support/environment.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

std::atomic<std::uint64_t> next_pool_id{1};

// Every live pool, so that a pointer freed into the wrong pool gets a message naming the right
// one. Deliberately leaked: pools may be destroyed during static destruction.
std::mutex& registry_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<pool_state*>& registry() {
  static auto* r = new std::vector<pool_state*>;
  return *r;
}

}  // namespace

pool_state::pool_state(const device& d, pool_options options)
    : id_(next_pool_id.fetch_add(1)),
      device_(access::state(d)),
      device_id_(d.id()),
      backend_(d.backend_ptr()),
      options_(options),
      limit_(options.memory_limit != 0 ? options.memory_limit
                                       : environment::memory_limit(backend_->caps().total_memory)),
      virtual_large_(options.virtual_memory && backend_->caps().virtual_memory),
      slab_pages_(backend_->caps().granularity) {
  // The arenas leave free blocks smaller than any large request out of their size index, and
  // smaller than a granule, so that no search (best fit, granules to remap) is changed by it
  // (block_arena.hpp, index_min).
  const std::size_t arena_granularity =
      virtual_large_ ? backend_->caps().vm_granularity : backend_->caps().granularity;
  // allocate_large()'s size for the smallest request it gets: small_max + 1 rounded up to
  // min_block.
  const std::size_t smallest_large = (options_.small_max + min_block) / min_block * min_block;
  for (std::size_t i = 0; i < shard_count; ++i) {
    shards_[i] =
        std::make_unique<large_shard>(i, arena_granularity,
                                      /*keep_streams_apart=*/virtual_large_,
                                      std::min(smallest_large, arena_granularity), shelf_limit());
  }
  const std::size_t g = backend_->caps().granularity;
  STREAMPOOL_EXPECTS(g >= page_map::page_size && (g & (g - 1)) == 0,
                     format("pool: backend '%s' granularity %zu must be a power of two >= %zu",
                            backend_->name().c_str(), g, page_map::page_size));
  STREAMPOOL_EXPECTS(options_.small_max <= class_size(max_classes - 1),
                     format("pool: small_max %zu exceeds the largest size class %zu",
                            options_.small_max, class_size(max_classes - 1)));
  std::lock_guard lock(registry_mu());
  registry().push_back(this);
}

std::size_t pool_state::shelf_limit() const noexcept {
  // A memory limit or a release threshold asks for the tightest memory: a shelf holds blocks out
  // of the arena while other streams place theirs, and two streams sharing memory under a
  // threshold would then remap every few steps instead of settling (LargeBlocksPerStream.
  // TheReleaseThresholdIsALimitNotAChurn).
  const bool tight = limit_.load() != 0 || options_.release_threshold != SIZE_MAX;
  return virtual_large_ && !tight ? options_.large_cache_bytes : 0;
}

pool_state::~pool_state() {
  {
    std::lock_guard lock(registry_mu());
    std::erase(registry(), this);
  }
  // Work queued on freed memory may still run; the upstream must not get it back before that.
  flush_caches();
  empty_shelves();
  // A forked child leaves the parent's work alone (backend::usable_in_this_process).
  if (backend_->usable_in_this_process()) wait_all_pending();
  const std::size_t live = live_bytes();  // before the caches (and their counters) go
  std::vector<std::shared_ptr<stream_cache>> caches;
  {
    std::lock_guard lock(caches_mu_);
    caches.swap(caches_);
  }
  for (auto& c : caches) c->detach();
  if (live != 0 && STREAMPOOL_DEBUG_LEVEL >= 2) {
    std::fprintf(stderr, "streampool: pool %llu destroyed with %zu bytes still allocated\n",
                 static_cast<unsigned long long>(id_), live);
  }
  // A slab that shares a page goes back with its page (slab_pages::shares is fixed per pool).
  for (auto& [base, sl] : slabs_)
    if (!slab_pages_.shares(sl->bytes)) backend_->deallocate(base, sl->bytes);
  for (void* page : slab_pages_.bases()) backend_->deallocate(page, slab_pages_.page_bytes());
  destroy_large();
}

device pool_state::get_device() const {
  auto d = device_.lock();
  STREAMPOOL_EXPECTS(d != nullptr, format("pool %llu: its device %llu was destroyed",
                                          static_cast<unsigned long long>(id_),
                                          static_cast<unsigned long long>(device_id_)));
  return access::make_device(std::move(d));
}

void pool_state::bad_pointer(const void* p, const char* what) const {
  {
    std::lock_guard lock(registry_mu());
    for (pool_state* other : registry()) {
      if (other != this && other->map_.find(p) != nullptr) {
        STREAMPOOL_FAIL(format(
            "%s: pointer %s belongs to pool %llu on device %llu, not to pool "
            "%llu on device %llu (wrong pool or wrong device)",
            what, format_ptr(p).c_str(), static_cast<unsigned long long>(other->id_),
            static_cast<unsigned long long>(other->device_id_),
            static_cast<unsigned long long>(id_), static_cast<unsigned long long>(device_id_)));
      }
    }
  }
  STREAMPOOL_FAIL(
      format("%s: pointer %s was not allocated by pool %llu (or its memory was "
             "already released)",
             what, format_ptr(p).c_str(), static_cast<unsigned long long>(id_)));
}

// ---- queries and recorded uses ----------------------------------------------------------------

token_set pool_state::take_uses(void* p) {
  std::lock_guard lock(uses_mu_);
  auto it = uses_.find(p);
  if (it == uses_.end()) return {};
  token_set t = std::move(it->second);
  uses_.erase(it);
  return t;
}

void pool_state::record_use(void* p, const token& use) {
  check_token(use, p, "record_use");
  segment* seg = map_.find(p);
  if (seg == nullptr) bad_pointer(p, "record_use");
  if (seg->kind == segment_kind::large) {
    record_use_large(static_cast<large_range&>(*seg), p, use);
    return;
  }
  auto& sl = static_cast<slab&>(*seg);
  const std::size_t i = sl.index_of(p);
  std::uint8_t state = sl.state(i).load(std::memory_order_acquire);
  STREAMPOOL_EXPECTS(sl.chunk_at(i) == p && state != chunk_free,
                     format("record_use: %s is not the start of a live block of pool %llu",
                            format_ptr(p).c_str(), static_cast<unsigned long long>(id_)));
  {
    std::lock_guard lock(uses_mu_);
    merge_token(uses_[p], use);
  }
  // Flag it so the fast free path looks in the side table; a free racing with this is the
  // caller's bug (a use recorded on memory being freed), and at worst leaves a stale entry that
  // the next free of the same address takes.
  sl.state(i).compare_exchange_strong(state, chunk_live_with_uses, std::memory_order_acq_rel);
}

std::size_t pool_state::block_size(const void* p) const {
  segment* seg = map_.find(p);
  if (seg == nullptr) bad_pointer(p, "block_size");
  if (seg->kind == segment_kind::slab) {
    auto& sl = static_cast<slab&>(*seg);
    const std::size_t i = sl.index_of(p);
    STREAMPOOL_EXPECTS(sl.chunk_at(i) == p && sl.state(i).load() != chunk_free,
                       format("block_size: %s is not a live block", format_ptr(p).c_str()));
    return sl.chunk_size;
  }
  const large_shard& sh = *static_cast<large_range&>(*seg).shard;
  const auto lock = borrow_lock(sh.mu);
  const arena_block* b = sh.find_handed_out(to_addr(p));
  STREAMPOOL_EXPECTS(b != nullptr,
                     format("block_size: %s is not a live block", format_ptr(p).c_str()));
  return b->size;
}

bool pool_state::owns(const void* p) const noexcept {
  segment* seg = map_.find(p);
  if (seg == nullptr) return false;
  if (seg->kind == segment_kind::slab) {
    auto& sl = static_cast<slab&>(*seg);
    const std::size_t i = sl.index_of(p);
    return sl.chunk_at(i) == p && sl.state(i).load() != chunk_free;
  }
  const large_shard& sh = *static_cast<large_range&>(*seg).shard;
  const auto lock = borrow_lock(sh.mu);
  return sh.find_handed_out(to_addr(p)) != nullptr;
}

}  // namespace streampool::detail
