#include "pool_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "access.hpp"
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

// Set while reclaim hooks run on this thread, so that an allocation failing inside a hook (a
// garbage collector that allocates) does not run the hooks again, recursively.
thread_local bool in_reclaim = false;

constexpr std::size_t max_request = std::size_t{1} << 48;  // beyond any device's memory

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

std::size_t env_limit(const backend& b) {
  const char* text = std::getenv("STREAMPOOL_MEMORY_LIMIT");
  return text != nullptr && *text != '\0' ? parse_memory_limit(text, b.caps().total_memory) : 0;
}

}  // namespace

pool_state::pool_state(const device& d, pool_options options)
    : id_(next_pool_id.fetch_add(1)),
      device_(access::state(d)),
      device_id_(d.id()),
      backend_(d.backend_ptr()),
      options_(options),
      limit_(options.memory_limit != 0 ? options.memory_limit : env_limit(*backend_)),
      virtual_large_(options.virtual_memory && backend_->caps().virtual_memory),
      slab_pages_(backend_->caps().granularity) {
  for (std::size_t i = 0; i < shard_count; ++i) {
    shards_[i] = std::make_unique<large_shard>(
        i, virtual_large_ ? backend_->caps().vm_granularity : backend_->caps().granularity,
        /*keep_streams_apart=*/virtual_large_);
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

pool_state::~pool_state() {
  {
    std::lock_guard lock(registry_mu());
    std::erase(registry(), this);
  }
  // Work queued on freed memory may still run; the upstream must not get it back before that.
  flush_caches();
  wait_all_pending();
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

// ---- allocation -------------------------------------------------------------------------------

void pool_state::check_request(stream_ref s, std::size_t bytes) const {
  STREAMPOOL_EXPECTS(bytes <= max_request,
                     format("allocate: %zu bytes is beyond any device (at most %zu); a size "
                            "computation overflowed?",
                            bytes, max_request));
  STREAMPOOL_EXPECTS(
      s.get_device().id() == device_id_,
      format("allocate: stream (timeline %llu) belongs to device %llu, but pool %llu "
             "allocates on device %llu",
             static_cast<unsigned long long>(s.get_timeline().id()),
             static_cast<unsigned long long>(s.get_device().id()),
             static_cast<unsigned long long>(id_), static_cast<unsigned long long>(device_id_)));
}

void* pool_state::allocate(stream_ref s, std::size_t bytes) {
  check_request(s, bytes);
  // Size 0 gets a unique smallest block, like malloc(0): a caller (a framework's empty tensor)
  // may free it like any other pointer.
  if (bytes == 0) bytes = 1;
  if (bytes > options_.small_max) return allocate_large(s, bytes);
  const std::size_t cls = class_of(bytes);
  timeline& line = s.get_timeline();
  stream_cache& c = access::cache_for(line, *this, id_);
  c.mu.lock();
  auto& bin = c.bins[cls];
  if (!bin.empty()) [[likely]] {
    // Fast path: freed on this very stream, so no wait is ever needed (in-order queue).
    const stream_cache::entry e = bin.back();
    bin.pop_back();
    const std::size_t size = class_size(cls);
    c.bin_bytes[cls] -= size;
    c.allocations.store(c.allocations.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
    e.owner->state(e.owner->index_of(e.p)).store(chunk_live, std::memory_order_release);
    const stream_cache::counted n = c.count_live(static_cast<std::int64_t>(size));
    c.mu.unlock();
    if (n.flush) {
      add_live(n.delta);
    } else {
      note_peak(n.delta);
    }
    return e.p;
  }
  c.mu.unlock();
  return allocate_small(s, cls, c);
}

stream_cache& pool_state::cache_of(stream_ref s) {
  timeline& line = s.get_timeline();
  return access::cache_for(line, *this, id_);
}

void pool_state::count_live(stream_cache& c, std::int64_t bytes) {
  stream_cache::counted n{};
  {
    std::lock_guard lock(c.mu);
    n = c.count_live(bytes);
  }
  if (n.flush) {
    add_live(n.delta);
  } else if (bytes > 0) {
    note_peak(n.delta);
  }
}

void* pool_state::allocate_small(stream_ref s, std::size_t cls, stream_cache& cache) {
  return with_reclaim(class_size(cls), [&]() -> void* {
    if (void* p = try_shared_small(s, cls)) return p;
    if (void* p = try_steal(s, cls)) return p;
    return new_slab_chunk(s, cls, cache);
  });
}

void* pool_state::try_shared_small(stream_ref s, std::size_t cls) {
  const timeline* me = &s.get_timeline();
  class_list& l = shared_[cls];
  free_chunk taken{nullptr, nullptr, {}};
  bool fresh = false;
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
      taken = {sl->chunk_at(sl->carve_index(sl->carved)), sl, {}};
      if (++sl->carved == sl->chunks) l.carving.pop_back();
      fresh = true;
    }
    // 3. A freed chunk whose work may still run: reuse it behind a device-side wait rather than
    //    growing the pool. The oldest is the likeliest to be done by the time the wait runs.
    if (taken.p == nullptr && !v.empty()) {
      taken = std::move(v.front());
      v.front() = std::move(v.back());
      v.pop_back();
    }
  }
  if (taken.p == nullptr) return nullptr;
  const bool waited = order_after(s, taken.tokens);
  (fresh ? fresh_allocations_ : waited ? waited_reuses_ : ready_reuses_).fetch_add(1);
  allocations_.fetch_add(1, std::memory_order_relaxed);
  count_allocation(class_size(cls));
  taken.owner->state(taken.owner->index_of(taken.p)).store(chunk_live, std::memory_order_release);
  return taken.p;
}

void* pool_state::try_steal(stream_ref s, std::size_t cls) {
  // Before growing: a chunk another stream freed and keeps in its own cache. Its work may still
  // run, so s waits for it on the device; that is the cross-stream reuse the pool prefers to new
  // memory. Other caches are only try-locked: a busy one is skipped, never waited for.
  const timeline* me = &s.get_timeline();
  std::vector<std::shared_ptr<stream_cache>> caches;
  {
    std::lock_guard lock(caches_mu_);
    caches = caches_;
  }
  for (auto& c : caches) {
    if (c->timeline_id() == me->id()) continue;
    std::unique_lock lock(c->mu, std::try_to_lock);
    if (!lock.owns_lock() || c->detached || c->orphaned || c->bins[cls].empty()) continue;
    auto& bin = c->bins[cls];
    const stream_cache::entry e = bin.front();  // the oldest: the likeliest to be complete
    bin.erase(bin.begin());
    c->bin_bytes[cls] -= class_size(cls);
    auto line = c->line.lock();
    lock.unlock();
    token_set tokens;
    if (line) merge_token(tokens, token{line, e.at});
    const bool waited = order_after(s, tokens);
    (waited ? waited_reuses_ : ready_reuses_).fetch_add(1, std::memory_order_relaxed);
    allocations_.fetch_add(1, std::memory_order_relaxed);
    count_allocation(class_size(cls));
    e.owner->state(e.owner->index_of(e.p)).store(chunk_live, std::memory_order_release);
    return e.p;
  }
  return nullptr;
}

void* pool_state::new_slab_chunk(stream_ref /*s*/, std::size_t cls, stream_cache& /*cache*/) {
  const std::size_t chunk = class_size(cls);
  const growing_scope growing(growing_);
  // A slab smaller than the granularity shares a slab page with other classes' slabs: at least
  // four chunks and 64 KiB (a 64 KiB slab holds 256 chunks of the smallest class). One that is
  // not is an upstream allocation of its own, of at least eight chunks and 2 MiB, so that the
  // upstream call is amortised and a large class does not strand much in a half-used slab.
  const std::size_t g = backend_->caps().granularity;
  std::size_t bytes = round_up(std::max(chunk * 4, slab_pages::slot_bytes), slab_pages::slot_bytes);
  if (!slab_pages_.shares(bytes)) bytes = round_up(std::max(chunk * 8, std::size_t{2} << 20), g);
  void* base = slab_memory(bytes);
  // Under a memory limit the full slab may not fit even in an empty pool (eight 1 MiB chunks are
  // 8 MiB, over a 4 MiB limit), which failed requests the limit allows with "reserved 0 bytes".
  // A slab of just what one chunk needs beats failing.
  std::size_t smallest = round_up(chunk, slab_pages::slot_bytes);
  if (!slab_pages_.shares(smallest)) smallest = round_up(chunk, g);
  if (base == nullptr && bytes > smallest) {
    bytes = smallest;
    base = slab_memory(bytes);
  }
  if (base == nullptr) return nullptr;
  auto owned = std::make_unique<slab>(base, bytes, cls, chunk);
  slab* sl = owned.get();
  sl->carved = 1;  // not yet visible to anyone: no lock needed
  sl->state(sl->carve_index(0)).store(chunk_live, std::memory_order_release);
  {
    std::lock_guard lock(segments_mu_);
    map_.insert(base, bytes, sl);
    slabs_.emplace(base, std::move(owned));
  }
  if (sl->chunks > 1) {
    std::lock_guard lock(shared_[cls].mu);
    shared_[cls].carving.push_back(sl);
  }
  fresh_allocations_.fetch_add(1, std::memory_order_relaxed);
  allocations_.fetch_add(1, std::memory_order_relaxed);
  count_allocation(chunk);
  return base;
}

bool pool_state::order_after(stream_ref s, const token_set& tokens) {
  bool waited = false;
  const timeline* me = &s.get_timeline();
  for (const token& t : tokens) {
    if (t.ready_for(me)) continue;
    if (backend_->caps().device_wait) {
      if (t.line->wait_device(s.native(), t.at)) {
        device_waits_.fetch_add(1, std::memory_order_relaxed);
        waited = true;
      }
    } else {
      t.line->wait_host(t.at);
      host_waits_.fetch_add(1, std::memory_order_relaxed);
      waited = true;
    }
  }
  return waited;
}

// ---- out of memory ----------------------------------------------------------------------------

bool pool_state::reserve_bytes(std::size_t bytes) {
  // Counted before the (slow, unlocked) upstream call, so that concurrent growths cannot both
  // pass the limit; reserved_now_ and the peak follow the count, which makes the peak exact.
  std::lock_guard lock(segments_mu_);
  const std::size_t limit = limit_.load();
  if (limit != 0 && reserved_ + bytes > limit) return false;
  reserved_ += bytes;
  reserved_now_.store(reserved_);
  if (reserved_ > peak_reserved_.load()) peak_reserved_.store(reserved_);
  return true;
}

void pool_state::unreserve_bytes(std::size_t bytes) {
  std::lock_guard lock(segments_mu_);
  reserved_ -= bytes;
  reserved_now_.store(reserved_);
}

void* pool_state::grow(std::size_t bytes) {
  if (!reserve_bytes(bytes)) return nullptr;
  void* p = nullptr;
  try {
    p = backend_->allocate(bytes);
  } catch (...) {
    unreserve_bytes(bytes);
    throw;
  }
  if (p == nullptr) {
    unreserve_bytes(bytes);
    return nullptr;
  }
  upstream_allocations_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void* pool_state::slab_memory(std::size_t bytes) {
  if (!slab_pages_.shares(bytes)) return grow(bytes);
  {
    std::lock_guard lock(segments_mu_);
    if (void* p = slab_pages_.take(bytes)) return p;
  }
  void* page = grow(slab_pages_.page_bytes());
  if (page == nullptr) return nullptr;
  std::lock_guard lock(segments_mu_);
  slab_pages_.add(page);
  return slab_pages_.take(bytes);  // the new page has room, if no older one does by now
}

void pool_state::count_allocation(std::size_t bytes) noexcept {
  const std::size_t live = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = peak_live_.load(std::memory_order_relaxed);
  while (live > peak && !peak_live_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void pool_state::count_deallocation(std::size_t bytes) noexcept {
  live_.fetch_sub(bytes, std::memory_order_relaxed);
}

void pool_state::note_peak(std::int64_t pending) noexcept {
  // Two loads of lines that are rarely written (the counters change at flushes, the peak at new
  // peaks), so the fast path shares no written cache line; a store only at a new peak.
  const auto live = static_cast<std::int64_t>(live_.load(std::memory_order_relaxed)) + pending;
  if (live <= 0) return;
  std::size_t peak = peak_live_.load(std::memory_order_relaxed);
  while (static_cast<std::size_t>(live) > peak &&
         !peak_live_.compare_exchange_weak(peak, static_cast<std::size_t>(live),
                                           std::memory_order_relaxed)) {
  }
}

void pool_state::add_live(std::int64_t delta) noexcept {
  if (delta > 0) count_allocation(static_cast<std::size_t>(delta));
  if (delta < 0) count_deallocation(static_cast<std::size_t>(-delta));
}

void* pool_state::with_reclaim(std::size_t bytes, const std::function<void*()>& attempt) {
  if (void* p = attempt()) return p;
  // The ladder: memory cached by other streams and fully free segments first, then the
  // language runtime's hooks (a GC that frees arrays), then give up with the numbers.
  trim();
  if (void* p = attempt()) return p;
  if (!in_reclaim) {
    std::vector<std::function<void(std::size_t)>> hooks;
    {
      std::lock_guard lock(hooks_mu_);
      for (auto& [id, h] : hooks_) hooks.push_back(h);
    }
    if (!hooks.empty()) {
      in_reclaim = true;
      struct reset {
        ~reset() { in_reclaim = false; }
      } guard;
      for (auto& h : hooks) {
        reclaim_calls_.fetch_add(1, std::memory_order_relaxed);
        h(bytes);
      }
    }
    if (void* p = attempt()) return p;
    trim();
    if (void* p = attempt()) return p;
  }
  // Another thread's growth counts against the limit from its reservation on, before its segment
  // is visible to us. Wait until it is published, then look once more: a new slab has room for
  // many chunks. Without this, threads that grow at once under a limit failed spuriously, with
  // "reserved 0 bytes" in the message (found by the Python binding's many-thread upload test).
  while (growing_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  if (void* p = attempt()) return p;
  // Last resort: cached memory whose work is still pending (or only not yet known complete: an
  // idle stream's last point is learnt only from a marker) cannot go back to the upstream without
  // waiting, and a request of another size class cannot reuse it. An allocation may block (a free
  // never does): wait for that work on the host, trim, and try once more.
  if (wait_cached_work()) {
    trim();
    if (void* p = attempt()) return p;
  }
  throw_out_of_memory(bytes);
}

bool pool_state::wait_cached_work() {
  flush_caches();
  token_set pending;
  for (auto& l : shared_) {
    std::lock_guard lock(l.mu);
    for (auto& c : l.chunks)
      for (auto& t : c.tokens) merge_token(pending, t);
  }
  for (const auto& sh : shards_) {
    std::lock_guard lock(sh->mu);
    for (arena_block* b : sh->arena.mapped_free())
      for (auto& t : b->tokens) merge_token(pending, t);
  }
  // No pool lock is held while waiting, so frees on other threads go on.
  for (auto& t : pending) t.line->wait_host(t.at);
  return !pending.empty();
}

void pool_state::throw_out_of_memory(std::size_t bytes) const {
  const std::size_t reserved = reserved_now_.load();
  const std::size_t live = live_bytes();
  const std::size_t limit = limit_.load();
  const std::size_t cached = reserved > live ? reserved - live : 0;
  std::size_t hooks = 0;
  {
    std::lock_guard lock(hooks_mu_);
    hooks = hooks_.size();
  }
  throw out_of_memory(
      format("streampool: out of memory on device %llu (%s): requested %zu bytes; limit %s; "
             "live %zu bytes, cached %zu bytes, reserved %zu bytes (after trimming the cache and "
             "running %zu reclaim hook(s))",
             static_cast<unsigned long long>(device_id_), backend_->name().c_str(), bytes,
             limit != 0 ? format("%zu bytes", limit).c_str() : "none (the device refused)", live,
             cached, reserved, hooks),
      bytes, limit, live, cached);
}

std::uint64_t pool_state::add_reclaim_hook(std::function<void(std::size_t)> hook) {
  STREAMPOOL_EXPECTS(static_cast<bool>(hook), "add_reclaim_hook: empty hook");
  std::lock_guard lock(hooks_mu_);
  hooks_.emplace(next_hook_, std::move(hook));
  return next_hook_++;
}

void pool_state::remove_reclaim_hook(std::uint64_t id) {
  std::lock_guard lock(hooks_mu_);
  STREAMPOOL_EXPECTS(hooks_.erase(id) == 1, format("remove_reclaim_hook: no hook with id %llu",
                                                   static_cast<unsigned long long>(id)));
}

// ---- deallocation -----------------------------------------------------------------------------

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

void pool_state::deallocate(stream_ref s, void* p) {
  segment* seg = map_.find(p);
  if (seg == nullptr) bad_pointer(p, "deallocate");
  if (seg->kind == segment_kind::large) {
    deallocate_large(static_cast<large_range&>(*seg), p, {}, &s);
    return;
  }
  deallocate_chunk(static_cast<slab&>(*seg), p, &s, {});
}

void pool_state::deallocate(void* p, std::span<const token> uses) {
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
  if (sl.chunk_at(i) != p) {
    STREAMPOOL_FAIL(
        format("deallocate: %s is inside the block %s of %zu bytes (offset %zu), not "
               "at its start",
               format_ptr(p).c_str(), format_ptr(sl.chunk_at(i)).c_str(), sl.chunk_size,
               static_cast<std::size_t>(static_cast<std::byte*>(p) -
                                        static_cast<std::byte*>(sl.chunk_at(i)))));
  }
  // The exchange makes a double free (even a racing one) fail for exactly one caller, before
  // anything else changes.
  const std::uint8_t old = sl.state(i).exchange(chunk_free, std::memory_order_acq_rel);
  if (old == chunk_free) {
    STREAMPOOL_FAIL(
        format("deallocate: %s (block of %zu bytes in pool %llu) is not allocated: "
               "double free",
               format_ptr(p).c_str(), sl.chunk_size, static_cast<unsigned long long>(id_)));
  }
  const std::size_t cls = sl.size_class;
  token_set tokens;
  if (old == chunk_live_with_uses) {
    tokens = take_uses(p);
    resolve_at_free(tokens);
  }
  // Poison only behind every recorded use: a fill on s while another stream's declared use may
  // still run would itself be the unordered write the checking mode exists to catch.
  if (s != nullptr && options_.poison_on_free && all_ready_for(tokens, &s->get_timeline())) {
    s->submit(command::make(fill_command{p, 0xDB, 1, sl.chunk_size}));
  }
  if (s == nullptr || old == chunk_live_with_uses) {
    if (s != nullptr) merge_token(tokens, s->now());
    for (const token& t : uses) merge_token(tokens, t);
    deallocations_.fetch_add(1, std::memory_order_relaxed);
    count_deallocation(sl.chunk_size);
    push_shared(cls, free_chunk{p, &sl, std::move(tokens)});
    return;
  }
  timeline& line = s->get_timeline();
  stream_cache& c = access::cache_for(line, *this, id_);
  stream_cache::counted n{};
  {
    std::lock_guard lock(c.mu);
    c.deallocations.store(c.deallocations.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
    c.bins[cls].push_back({p, &sl, line.current()});
    c.bin_bytes[cls] += sl.chunk_size;
    n = c.count_live(-static_cast<std::int64_t>(sl.chunk_size));
    if (c.bin_bytes[cls] > options_.stream_cache_bytes) spill(c, cls);
  }
  if (n.flush) add_live(n.delta);
}

void pool_state::spill(stream_cache& c, std::size_t cls) {
  // Keep the most recently freed half (warm, and the likeliest to be reused here); the rest goes
  // where other streams can use it, with its token.
  auto& bin = c.bins[cls];
  const std::size_t n = bin.size() / 2;
  auto line = c.line.lock();
  for (std::size_t i = 0; i < n; ++i) {
    token_set tokens;
    if (line) merge_token(tokens, token{line, bin[i].at});
    push_shared(cls, free_chunk{bin[i].p, bin[i].owner, std::move(tokens)});
  }
  bin.erase(bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(n));
  c.bin_bytes[cls] = bin.size() * class_size(cls);
}

void pool_state::push_shared(std::size_t cls, free_chunk c) {
  std::lock_guard lock(shared_[cls].mu);
  shared_[cls].chunks.push_back(std::move(c));
}

token_set pool_state::take_uses(void* p) {
  std::lock_guard lock(uses_mu_);
  auto it = uses_.find(p);
  if (it == uses_.end()) return {};
  token_set t = std::move(it->second);
  uses_.erase(it);
  return t;
}

void pool_state::record_use(void* p, const token& use) {
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

// ---- queries, trim, statistics ----------------------------------------------------------------

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
  std::lock_guard lock(sh.mu);
  const arena_block* b = sh.arena.find_live(to_addr(p));
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
  std::lock_guard lock(sh.mu);
  return sh.arena.find_live(to_addr(p)) != nullptr;
}

std::shared_ptr<stream_cache> pool_state::make_stream_cache(timeline& line) {
  auto c =
      std::make_shared<stream_cache>(*this, weak_from_this(), line.weak_from_this(), line.id());
  std::lock_guard lock(caches_mu_);
  // The shard with the fewest live streams, the lowest first: a new stream gets the memory of
  // one that is gone (a program that replaces its streams, or a benchmark's next round), not an
  // empty shard next to a full one that nobody uses.
  std::size_t best = 0;
  for (std::size_t i = 1; i < shard_count; ++i)
    if (shards_[i]->streams.load() < shards_[best]->streams.load()) best = i;
  shards_[best]->streams.fetch_add(1);
  c->shard = best;
  caches_.push_back(c);
  return c;
}

void pool_state::stream_gone(std::size_t shard) { shards_[shard]->streams.fetch_sub(1); }

void pool_state::take_orphans(std::vector<stream_cache::entry>& entries) {
  for (auto& e : entries) push_shared(e.owner->size_class, free_chunk{e.p, e.owner, {}});
}

void pool_state::flush_caches() {
  std::vector<std::shared_ptr<stream_cache>> caches;
  {
    std::lock_guard lock(caches_mu_);
    caches = caches_;
  }
  for (auto& c : caches) {
    std::lock_guard lock(c->mu);
    if (c->detached) continue;
    auto line = c->line.lock();
    for (std::size_t cls = 0; cls < max_classes; ++cls) {
      for (auto& e : c->bins[cls]) {
        token_set tokens;
        if (line) merge_token(tokens, token{line, e.at});
        push_shared(cls, free_chunk{e.p, e.owner, std::move(tokens)});
      }
      c->bins[cls].clear();
      c->bin_bytes[cls] = 0;
    }
  }
}

std::size_t pool_state::trim() {
  flush_caches();
  std::vector<segment*> release;
  for (std::size_t cls = 0; cls < max_classes; ++cls) {
    class_list& l = shared_[cls];
    std::lock_guard lock(l.mu);
    if (l.chunks.empty() && l.carving.empty()) continue;
    // A slab goes back when every chunk ever carved from it is here, with its work complete.
    std::unordered_map<slab*, std::size_t> free_count;
    for (auto& c : l.chunks)
      if (all_complete(c.tokens)) ++free_count[c.owner];
    for (slab* sl : l.carving) free_count.try_emplace(sl, 0);
    std::unordered_map<slab*, bool> empty;
    for (auto& [sl, n] : free_count) {
      if (n == sl->carved) empty[sl] = true;
    }
    if (empty.empty()) continue;
    std::erase_if(l.chunks, [&](const free_chunk& c) { return empty.count(c.owner) != 0; });
    std::erase_if(l.carving, [&](slab* sl) { return empty.count(sl) != 0; });
    for (auto& [sl, yes] : empty) release.push_back(sl);
  }
  std::size_t released = trim_large();
  for (segment* seg : release) released += release_segment(seg);
  // Caches of destroyed streams are empty for good: fold their counters in and forget them.
  std::lock_guard lock(caches_mu_);
  std::erase_if(caches_, [&](const std::shared_ptr<stream_cache>& c) {
    std::lock_guard cl(c->mu);
    if (!c->orphaned) return false;
    allocations_ += c->allocations.load();
    deallocations_ += c->deallocations.load();
    same_stream_reuses_folded_ += c->allocations.load();
    cache_contention_folded_ += c->mu.contended();
    return true;
  });
  return released;
}

std::size_t pool_state::release_segment(segment* seg) {
  // Owned by its own type: segment has no virtual destructor, so deleting a slab through a
  // segment pointer would skip ~slab (leaking its state array; undefined behaviour).
  std::unique_ptr<slab> owned_slab;
  std::unique_ptr<large_range> owned_large;
  void* base = seg->base;
  std::size_t bytes = seg->bytes;
  {
    std::lock_guard lock(segments_mu_);
    map_.erase(seg->base, seg->bytes);
    if (seg->kind == segment_kind::slab) {
      auto it = slabs_.find(seg->base);
      owned_slab = std::move(it->second);
      slabs_.erase(it);
      if (slab_pages_.shares(seg->bytes)) {
        // Its slots go back to the page; the page goes upstream with its last slab.
        base = slab_pages_.give(seg->base, seg->bytes);
        bytes = slab_pages_.page_bytes();
      }
    } else {
      auto it = large_ranges_.find(seg->base);
      owned_large = std::move(it->second);
      large_ranges_.erase(it);
    }
  }
  if (base == nullptr) return 0;
  backend_->deallocate(base, bytes);
  unreserve_bytes(bytes);
  upstream_deallocations_.fetch_add(1, std::memory_order_relaxed);
  return bytes;
}

void pool_state::wait_all_pending() {
  for (auto& l : shared_) {
    std::lock_guard lock(l.mu);
    for (auto& c : l.chunks)
      for (auto& t : c.tokens) t.line->wait_host(t.at);
  }
  for (const auto& sh : shards_) {
    std::lock_guard lock(sh->mu);
    for (arena_block* b : sh->arena.mapped_free())
      for (auto& t : b->tokens) t.line->wait_host(t.at);
  }
}

std::size_t pool_state::live_bytes() const {
  // The exact counter plus what the stream caches have not added to it yet.
  auto live = static_cast<std::int64_t>(live_.load());
  std::lock_guard lock(caches_mu_);
  for (const auto& c : caches_) live += c->live_delta.load(std::memory_order_relaxed);
  return live > 0 ? static_cast<std::size_t>(live) : 0;
}

pool_statistics pool_state::statistics() const {
  pool_statistics st;
  st.live_bytes = live_bytes();
  st.reserved_bytes = reserved_now_.load();
  st.cached_bytes = st.reserved_bytes > st.live_bytes ? st.reserved_bytes - st.live_bytes : 0;
  st.peak_live_bytes = peak_live_.load();
  st.peak_reserved_bytes = peak_reserved_.load();
  st.allocations = allocations_.load();
  st.deallocations = deallocations_.load();
  st.fresh_allocations = fresh_allocations_.load();
  st.same_stream_reuses = same_stream_reuses_folded_.load();
  st.ready_reuses = ready_reuses_.load();
  st.waited_reuses = waited_reuses_.load();
  st.device_waits = device_waits_.load();
  st.host_waits = host_waits_.load();
  st.upstream_allocations = upstream_allocations_.load();
  st.upstream_deallocations = upstream_deallocations_.load();
  st.upstream_reserves = upstream_reserves_.load();
  st.upstream_creates = upstream_creates_.load();
  st.upstream_releases = upstream_releases_.load();
  st.upstream_maps = upstream_maps_.load();
  st.upstream_unmaps = upstream_unmaps_.load();
  st.reclaim_calls = reclaim_calls_.load();
  st.memory_limit = limit_.load();
  for (const auto& sh : shards_) {
    st.allocations += sh->allocations.load(std::memory_order_relaxed);
    st.deallocations += sh->deallocations.load(std::memory_order_relaxed);
    st.fresh_allocations += sh->fresh_allocations.load(std::memory_order_relaxed);
    st.ready_reuses += sh->ready_reuses.load(std::memory_order_relaxed);
    st.waited_reuses += sh->waited_reuses.load(std::memory_order_relaxed);
    st.contention.large_shards += sh->mu.contended();
  }
  for (const class_list& l : shared_) st.contention.class_lists += l.mu.contended();
  st.contention.growth = growth_mu_.contended();
  st.contention.segments = segments_mu_.contended();
  st.contention.stream_caches = cache_contention_folded_.load();
  st.contention.other = caches_mu_.contended() + hooks_mu_.contended() + uses_mu_.contended();
  std::lock_guard lock(caches_mu_);
  for (auto& c : caches_) {
    stream_statistics ss;
    ss.timeline_id = c->timeline_id();
    ss.allocations = c->allocations.load();
    ss.deallocations = c->deallocations.load();
    {
      std::lock_guard cl(c->mu);
      for (std::size_t b : c->bin_bytes) ss.cached_bytes += b;
    }
    st.allocations += ss.allocations;
    st.deallocations += ss.deallocations;
    st.same_stream_reuses += ss.allocations;
    st.contention.stream_caches += c->mu.contended();
    st.streams.push_back(ss);
  }
  return st;
}

}  // namespace streampool::detail
