// streampool: the pool's upstream memory. The reservation count (every upstream byte is counted
// against the memory limit before the upstream call, which makes the peak exact), growth by
// upstream allocation (slabs, slab pages, segments), the release of a wholly free segment, the
// device waits that order a stream after a block's tokens, and the out-of-memory ladder that runs
// around every attempt to find memory. (Physical granules of the virtual-memory path are in
// pool_large_growth.cpp; they use the same count.)
#include <thread>

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

// Set while reclaim hooks run on this thread, so that an allocation failing inside a hook (a
// garbage collector that allocates) does not run the hooks again, recursively.
thread_local bool in_reclaim = false;

}  // namespace

// ---- device waits -----------------------------------------------------------------------------

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

// ---- the reservation count, growth and release ------------------------------------------------

bool pool_state::reserve_bytes(std::size_t bytes, bool unpublished) {
  // Counted before the (slow, unlocked) upstream call, so that concurrent growths cannot both
  // pass the limit; reserved_now_ and the peak follow the count, which makes the peak exact.
  std::lock_guard lock(segments_mu_);
  const std::size_t limit = limit_.load();
  if (limit != 0 && reserved_ + bytes > limit) return false;
  reserved_ += bytes;
  if (unpublished) unpublished_ += bytes;
  reserved_now_.store(reserved_);
  if (reserved_ > peak_reserved_.load()) peak_reserved_.store(reserved_);
  return true;
}

void pool_state::unreserve_bytes(std::size_t bytes, bool unpublished) {
  std::lock_guard lock(segments_mu_);
  STREAMPOOL_ASSERT_INTERNAL(reserved_ >= bytes && (!unpublished || unpublished_ >= bytes));
  reserved_ -= bytes;
  if (unpublished) unpublished_ -= bytes;
  reserved_now_.store(reserved_);
}

void* pool_state::grow(std::size_t bytes) {
  if (!reserve_bytes(bytes, /*unpublished=*/true)) return nullptr;
  void* p = nullptr;
  try {
    p = backend_->allocate(bytes);
  } catch (...) {
    unreserve_bytes(bytes, /*unpublished=*/true);
    throw;
  }
  if (p == nullptr) {
    unreserve_bytes(bytes, /*unpublished=*/true);
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
  unpublished_ -= slab_pages_.page_bytes();  // registered now, as a page
  return slab_pages_.take(bytes);            // the new page has room, if no older one does by now
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
      STREAMPOOL_ASSERT_INTERNAL(it != slabs_.end() && it->second.get() == seg);
      owned_slab = std::move(it->second);
      slabs_.erase(it);
      if (slab_pages_.shares(seg->bytes)) {
        // Its slots go back to the page; the page goes upstream with its last slab.
        base = slab_pages_.give(seg->base, seg->bytes);
        bytes = slab_pages_.page_bytes();
      }
    } else {
      auto it = large_ranges_.find(seg->base);
      STREAMPOOL_ASSERT_INTERNAL(it != large_ranges_.end() && it->second.get() == seg);
      owned_large = std::move(it->second);
      large_ranges_.erase(it);
    }
    if (base != nullptr) unpublished_ += bytes;  // unregistered, reserved until given back below
  }
  if (base == nullptr) return 0;
  backend_->deallocate(base, bytes);
  unreserve_bytes(bytes, /*unpublished=*/true);
  upstream_deallocations_.fetch_add(1, std::memory_order_relaxed);
  return bytes;
}

// ---- out of memory ----------------------------------------------------------------------------

void* pool_state::reclaim_and_retry(std::size_t bytes, const std::function<void*()>& attempt) {
  // The ladder: memory cached by other streams and fully free segments first, then the
  // language runtime's hooks (a GC that frees arrays), then give up with the numbers. A pool that
  // keeps its memory (pool_options::keep_memory) gives nothing back: only the hooks may help.
  alloc_retries_.fetch_add(1, std::memory_order_relaxed);
  const bool give_back = !options_.keep_memory;
  if (give_back) trim();
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
    if (give_back) trim();
    if (void* p = attempt()) return p;
  }
  // Another thread's growth counts against the limit from its reservation on, before its segment
  // is visible to us. Wait until it is published, then look once more: a new slab has room for
  // many chunks. Without this, threads that grow at once under a limit would fail spuriously,
  // with "reserved 0 bytes" in the message.
  while (growing_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  if (void* p = attempt()) return p;
  // Last resort: cached memory whose work is still pending (or only not yet known complete: an
  // idle stream's last point is learnt only from a marker) cannot go back to the upstream without
  // waiting, and a request of another size class cannot reuse it. An allocation may block (a free
  // never does): wait for that work on the host, trim, and try once more.
  if (give_back && wait_cached_work()) {
    trim();
    if (void* p = attempt()) return p;
  }
  throw_out_of_memory(bytes);
}

bool pool_state::wait_cached_work() {
  // No waiting during a stream capture (backend.hpp, begin_capture); none begins meanwhile.
  const backend::outside_capture_scope no_capture = backend_->outside_capture();
  if (!no_capture) return false;
  flush_caches();
  token_set pending;
  for (auto& l : shared_) {
    std::lock_guard lock(l.mu);
    for (auto& c : l.chunks)
      for (auto& t : c.tokens) merge_token(pending, t);
  }
  for (const auto& sh : shards_) {
    std::lock_guard lock(sh->mu);
    sh->arena.for_each_mapped_free([&](const arena_block* b) {
      for (const auto& t : b->tokens) merge_token(pending, t);
    });
  }
  // No pool lock is held while waiting, so frees on other threads go on.
  for (auto& t : pending) t.line->wait_host(t.at);
  return !pending.empty();
}

void pool_state::throw_out_of_memory(std::size_t bytes, std::size_t requested) const {
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
      format("streampool: out of memory on device %llu (%s): requested %zu bytes (a block of "
             "%zu bytes as the pool rounds it); limit %s; live %zu bytes, cached %zu bytes, "
             "reserved %zu bytes (after trimming the cache and running %zu reclaim hook(s))",
             static_cast<unsigned long long>(device_id_), backend_->name().c_str(),
             requested != 0 ? requested : bytes, bytes,
             limit != 0 ? format("%zu bytes", limit).c_str() : "none (the device refused)", live,
             cached, reserved, hooks),
      requested != 0 ? requested : bytes, limit, live, cached);
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

}  // namespace streampool::detail
