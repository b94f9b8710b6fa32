// streampool C ABI: pools, allocation and free.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "allocation_registry.hpp"
#include "handles.hpp"
#include "streampool/error.hpp"
#include "struct_size.hpp"

using streampool::c_api::allocation;
using streampool::c_api::allocation_registry;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::pool_options_abi;
using streampool::c_api::pool_statistics_abi;
using streampool::c_api::require;
using streampool::c_api::version_to_read;
using streampool::c_api::version_to_write;
using streampool::detail::format;
using streampool::detail::format_ptr;

namespace {

// The pool's id for a %llu in a message.
unsigned long long pool_id(const streampool::pool& p) {
  return static_cast<unsigned long long>(p.id());
}

void check_pool(const allocation& a, sp_pool_t pool, const char* function) {
  if (pool != nullptr && !(a.owner == pool->p)) {
    throw error{
        STREAMPOOL_STATUS_INVALID_ARGUMENT,
        format("streampool: %s: pointer %s (%zu bytes) was allocated from another pool "
               "(pool %llu), not from this one (pool %llu)",
               function, format_ptr(a.ptr).c_str(), a.size, pool_id(a.owner), pool_id(pool->p))};
  }
}

void check_stream(const allocation& a, sp_stream_t stream, const char* function) {
  if (stream == nullptr) return;
  // The pool keeps its device id: this works after the device was destroyed.
  const std::uint64_t want = a.owner.device_id();
  const std::uint64_t got = stream->s.get_device().id();
  if (want != got) {
    throw error{
        STREAMPOOL_STATUS_INVALID_ARGUMENT,
        format("streampool: %s: pointer %s (%zu bytes) is memory of device %llu, but the "
               "stream belongs to device %llu",
               function, format_ptr(a.ptr).c_str(), a.size, static_cast<unsigned long long>(want),
               static_cast<unsigned long long>(got))};
  }
}

}  // namespace

extern "C" {

sp_status_t sp_pool_options_set_defaults(sp_pool_options_t* options) {
  return guarded([&] {
    require(options, "sp_pool_options_set_defaults", "options");
    const unsigned version =
        version_to_write(pool_options_abi, options, "sp_pool_options_set_defaults");
    const streampool::pool_options o;
    options->memory_limit = o.memory_limit;
    options->small_max = o.small_max;
    options->stream_cache_bytes = o.stream_cache_bytes;
    options->poison_on_free = o.poison_on_free ? 1 : 0;
    if (version >= 2) {
      options->virtual_memory = o.virtual_memory ? 1 : 0;
      options->release_threshold = o.release_threshold;
    }
    if (version >= 3) options->share_between_streams = o.share_between_streams ? 1 : 0;
    if (version >= 4) options->large_cache_bytes = o.large_cache_bytes;
  });
}

sp_status_t sp_device_default_pool(sp_device_t device, sp_pool_t* pool) {
  return guarded([&] {
    require(device, "sp_device_default_pool", "device");
    require(pool, "sp_device_default_pool", "pool (the output)");
    *pool = new sp_pool_s(device->dev.default_pool());
  });
}

sp_status_t sp_pool_create(sp_device_t device, const sp_pool_options_t* options, sp_pool_t* pool) {
  return guarded([&] {
    require(device, "sp_pool_create", "device");
    require(pool, "sp_pool_create", "pool (the output)");
    streampool::pool_options o;
    if (options != nullptr) {
      const unsigned version = version_to_read(pool_options_abi, options, "sp_pool_create");
      o.memory_limit = options->memory_limit;
      o.small_max = options->small_max;
      o.stream_cache_bytes = options->stream_cache_bytes;
      o.poison_on_free = options->poison_on_free != 0;
      // An older caller's struct ends before these: they keep their defaults.
      if (version >= 2) {
        o.virtual_memory = options->virtual_memory != 0;
        o.release_threshold = options->release_threshold;
      }
      if (version >= 3) o.share_between_streams = options->share_between_streams != 0;
      if (version >= 4) o.large_cache_bytes = options->large_cache_bytes;
    }
    *pool = new sp_pool_s(streampool::pool(device->dev, o));
  });
}

sp_status_t sp_pool_destroy(sp_pool_t pool) {
  return guarded([&] {
    require(pool, "sp_pool_destroy", "pool");
    std::vector<std::uint64_t> hooks;
    {
      std::lock_guard lock(pool->mu);
      hooks.swap(pool->hooks);
    }
    // The hooks' user data usually dies with the handle; the pool itself may live on through its
    // live allocations and must not call them any more.
    for (std::uint64_t id : hooks) {
      try {
        pool->p.remove_reclaim_hook(id);
      } catch (const streampool::logic_error&) {
        // already removed through sp_pool_remove_reclaim_hook
      }
    }
    delete pool;
  });
}

sp_status_t sp_pool_allocate(sp_pool_t pool, size_t size, sp_stream_t stream, void** ptr) {
  return guarded([&] {
    require(pool, "sp_pool_allocate", "pool");
    require(stream, "sp_pool_allocate", "stream");
    require(ptr, "sp_pool_allocate", "ptr (the output)");
    // A copy of the pool handle: reclaim hooks run inside allocate() and may destroy handles.
    streampool::pool p = pool->p;
    streampool::stream_ref s = stream->s.ref();
    // No C-layer lock is held here: a reclaim hook may free memory (sp_pool_deallocate) on this
    // very thread, from inside this allocation.
    void* mem = p.allocate(s, size);
    try {
      allocation_registry::instance().insert(
          std::make_shared<allocation>(p, mem, size, stream->s.get_timeline()));
    } catch (...) {
      p.deallocate(s, mem);
      throw;
    }
    *ptr = mem;
  });
}

sp_status_t sp_pool_deallocate(sp_pool_t pool, void* ptr, sp_stream_t stream) {
  return guarded([&] {
    if (ptr == nullptr) return;  // like free(NULL)
    std::shared_ptr<allocation> a =
        allocation_registry::instance().take_if(ptr, [&](const allocation& x) {
          check_pool(x, pool, "sp_pool_deallocate");
          check_stream(x, stream, "sp_pool_deallocate");
        });
    if (a == nullptr) {
      if (pool != nullptr) {
        // Not a live allocation of the C layer: the pool names the problem (double free, a
        // pointer into a block, another pool's pointer), or frees memory the C++ API allocated.
        if (stream != nullptr) {
          pool->p.deallocate(stream->s.ref(), ptr);
        } else {
          pool->p.deallocate(ptr, std::span<const streampool::token>{});
        }
        return;
      }
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_pool_deallocate: pointer %s is not a live allocation of "
                         "sp_pool_allocate (double free, a pointer into a block, or a foreign "
                         "pointer)",
                         format_ptr(ptr).c_str())};
    }
    const streampool::timeline* on = stream != nullptr ? stream->s.get_timeline().get() : nullptr;
    std::vector<streampool::token> tokens;
    {
      std::lock_guard lock(a->mu);
      tokens = a->pending_locked(on);
    }
    try {
      if (stream != nullptr && tokens.empty()) {
        // Only this stream (or finished ones) used it: the stream-ordered fast path.
        a->owner.deallocate(stream->s.ref(), ptr);
      } else {
        // Other streams may still use it: free behind their tokens. Tokens, never streams, so the
        // streams may be destroyed before the memory is reused.
        if (stream != nullptr) tokens.push_back(stream->s.ref().now());
        // Record a marker for each point (never waits): without one, a later trim() could not
        // learn that an idle stream's point completed, and memory freed here would stay cached
        // through the out-of-memory ladder even though it is free to go back.
        for (const streampool::token& t : tokens) {
          try {
            (void)t.line->marker_for(t.at);
          } catch (...) {
            // Only an optimisation for trim(); reuse still waits for the token.
          }
        }
        streampool::pool owner = a->owner;
        owner.deallocate(ptr, tokens);
      }
    } catch (...) {
      allocation_registry::instance().insert(a);
      throw;
    }
    // `a` goes here; when it held the pool's last reference the pool goes back to the upstream.
  });
}

sp_status_t sp_pool_record_use(sp_pool_t pool, void* ptr, sp_stream_t stream) {
  return guarded([&] {
    require(ptr, "sp_pool_record_use", "ptr");
    require(stream, "sp_pool_record_use", "stream");
    auto a = allocation_registry::instance().containing(ptr);
    if (a == nullptr) {
      if (pool != nullptr) {
        pool->p.record_use(ptr, stream->s.ref());  // names the problem, or C++ memory
        return;
      }
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_pool_record_use: pointer %s is not in a live allocation "
                         "of sp_pool_allocate",
                         format_ptr(ptr).c_str())};
    }
    check_pool(*a, pool, "sp_pool_record_use");
    check_stream(*a, stream, "sp_pool_record_use");
    std::lock_guard lock(a->mu);
    a->add_user_locked(stream->s.get_timeline());
  });
}

sp_status_t sp_pool_block_size(sp_pool_t pool, const void* ptr, size_t* size) {
  return guarded([&] {
    require(ptr, "sp_pool_block_size", "ptr");
    require(size, "sp_pool_block_size", "size");
    if (pool != nullptr) {
      *size = pool->p.block_size(ptr);
      return;
    }
    auto a = allocation_registry::instance().find(ptr);
    if (a == nullptr) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_pool_block_size: pointer %s is not a live allocation of "
                         "sp_pool_allocate",
                         format_ptr(ptr).c_str())};
    }
    *size = a->owner.block_size(ptr);
  });
}

sp_status_t sp_pool_statistics_set_defaults(sp_pool_statistics_t* statistics) {
  return guarded([&] {
    require(statistics, "sp_pool_statistics_set_defaults", "statistics");
    const unsigned version =
        version_to_write(pool_statistics_abi, statistics, "sp_pool_statistics_set_defaults");
    // Every field is a count: zero the bytes of the covered versions after struct_size.
    const std::size_t covered = pool_statistics_abi.version_sizes[version - 1];
    std::memset(reinterpret_cast<char*>(statistics) + sizeof statistics->struct_size, 0,
                covered - sizeof statistics->struct_size);
  });
}

sp_status_t sp_pool_get_statistics(sp_pool_t pool, sp_pool_statistics_t* statistics) {
  return guarded([&] {
    require(pool, "sp_pool_get_statistics", "pool");
    require(statistics, "sp_pool_get_statistics", "statistics");
    const unsigned version =
        version_to_write(pool_statistics_abi, statistics, "sp_pool_get_statistics");
    const streampool::pool_statistics st = pool->p.statistics();
    sp_pool_statistics_t& o = *statistics;
    o.live_bytes = st.live_bytes;
    o.cached_bytes = st.cached_bytes;
    o.reserved_bytes = st.reserved_bytes;
    o.peak_live_bytes = st.peak_live_bytes;
    o.peak_reserved_bytes = st.peak_reserved_bytes;
    o.memory_limit = st.memory_limit;
    o.allocations = st.allocations;
    o.deallocations = st.deallocations;
    o.fresh_allocations = st.fresh_allocations;
    o.same_stream_reuses = st.same_stream_reuses;
    o.ready_reuses = st.ready_reuses;
    o.waited_reuses = st.waited_reuses;
    o.device_waits = st.device_waits;
    o.host_waits = st.host_waits;
    o.upstream_allocations = st.upstream_allocations;
    o.upstream_deallocations = st.upstream_deallocations;
    o.reclaim_calls = st.reclaim_calls;
    o.stream_caches = st.streams.size();
    if (version < 2) return;  // an older caller's struct ends here
    o.upstream_reserves = st.upstream_reserves;
    o.upstream_creates = st.upstream_creates;
    o.upstream_releases = st.upstream_releases;
    o.upstream_maps = st.upstream_maps;
    o.upstream_unmaps = st.upstream_unmaps;
    o.upstream_calls = st.upstream_calls();
  });
}

sp_status_t sp_pool_set_memory_limit(sp_pool_t pool, size_t bytes) {
  return guarded([&] {
    require(pool, "sp_pool_set_memory_limit", "pool");
    streampool::pool p = pool->p;
    p.set_memory_limit(bytes);
  });
}

sp_status_t sp_pool_get_memory_limit(sp_pool_t pool, size_t* bytes) {
  return guarded([&] {
    require(pool, "sp_pool_get_memory_limit", "pool");
    require(bytes, "sp_pool_get_memory_limit", "bytes");
    *bytes = pool->p.memory_limit();
  });
}

sp_status_t sp_pool_trim(sp_pool_t pool, size_t* released_bytes) {
  return guarded([&] {
    require(pool, "sp_pool_trim", "pool");
    streampool::pool p = pool->p;
    const std::size_t n = p.trim();
    if (released_bytes != nullptr) *released_bytes = n;
  });
}

sp_status_t sp_pool_add_reclaim_hook(sp_pool_t pool, sp_reclaim_fn fn, void* user_data,
                                     uint64_t* id) {
  return guarded([&] {
    require(pool, "sp_pool_add_reclaim_hook", "pool");
    if (fn == nullptr) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  "streampool: sp_pool_add_reclaim_hook: fn is NULL"};
    }
    streampool::pool p = pool->p;
    // The core calls hooks with no pool lock held, so the hook may free memory of this pool.
    const std::uint64_t hid =
        p.add_reclaim_hook([fn, user_data](std::size_t bytes) { fn(user_data, bytes); });
    try {
      std::lock_guard lock(pool->mu);
      pool->hooks.push_back(hid);
    } catch (...) {
      p.remove_reclaim_hook(hid);
      throw;
    }
    if (id != nullptr) *id = hid;
  });
}

sp_status_t sp_pool_remove_reclaim_hook(sp_pool_t pool, uint64_t id) {
  return guarded([&] {
    require(pool, "sp_pool_remove_reclaim_hook", "pool");
    streampool::pool p = pool->p;
    p.remove_reclaim_hook(id);
    std::lock_guard lock(pool->mu);
    std::erase(pool->hooks, id);
  });
}

}  // extern "C"
