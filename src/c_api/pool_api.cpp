// streampool C ABI: pools, allocation and free.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "allocation_registry.hpp"
#include "handles.hpp"
#include "streampool/error.hpp"
#include "struct_size.hpp"

using streampool::c_api::add_device;
using streampool::c_api::add_pool;
using streampool::c_api::allocation;
using streampool::c_api::allocation_registry;
using streampool::c_api::destroy_handle;
using streampool::c_api::device_of;
using streampool::c_api::device_payload;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::handle_kind;
using streampool::c_api::optional_pool_of;
using streampool::c_api::optional_stream_of;
using streampool::c_api::pinned;
using streampool::c_api::pool_of;
using streampool::c_api::pool_options_abi;
using streampool::c_api::pool_payload;
using streampool::c_api::pool_statistics_abi;
using streampool::c_api::printf_arg;
using streampool::c_api::require;
using streampool::c_api::stream_of;
using streampool::c_api::stream_payload;
using streampool::c_api::this_thread;
using streampool::c_api::thread_state;
using streampool::c_api::version_to_read;
using streampool::c_api::version_to_write;
using streampool::detail::format;

namespace {

void check_pool(const allocation& a, const pinned<pool_payload>& pool, const char* entry) {
  if (pool && !(a.owner == pool->p)) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: pointer %p (%zu bytes) was allocated from another pool "
                       "(pool %llu), not from this one (pool %llu)",
                       entry, printf_arg(a.ptr), a.size, printf_arg(a.owner.id()),
                       printf_arg(pool->p.id()))};
  }
}

void check_stream(const allocation& a, const pinned<stream_payload>& stream, const char* entry) {
  if (!stream) return;
  // The pool keeps its device id: this works after the device was destroyed.
  const std::uint64_t want = a.owner.device_id();
  const std::uint64_t got = stream->s.get_device().id();
  if (want != got) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: pointer %p (%zu bytes) is memory of device %llu, but the "
                       "stream belongs to device %llu",
                       entry, printf_arg(a.ptr), a.size, printf_arg(want), printf_arg(got))};
  }
}

/// The teardown of a pool handle: the hooks added through it go. Their user data usually dies
/// with the handle; the pool itself may live on through its live allocations and must not call
/// them any more.
void remove_hooks(pool_payload& p) {
  std::vector<std::uint64_t> hooks;
  {
    std::lock_guard lock(p.mu);
    hooks.swap(p.hooks);
  }
  for (std::uint64_t id : hooks) {
    try {
      p.p.remove_reclaim_hook(id);
    } catch (const streampool::logic_error&) {
      // already removed through sp_pool_remove_reclaim_hook
    }
  }
}

}  // namespace

extern "C" {

sp_status_t sp_pool_options_set_defaults(sp_pool_options_t* options) {
  return guarded(__func__, [&](const char* entry) {
    require(options, entry, "options");
    const unsigned version = version_to_write(pool_options_abi, options, entry);
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
    if (version >= 5) options->keep_memory = o.keep_memory ? 1 : 0;
  });
}

sp_status_t sp_device_default_pool(sp_device_t device, sp_pool_t* pool) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(pool, entry, "pool (the output)");
    *pool = add_pool(d->dev.default_pool());
  });
}

sp_status_t sp_pool_create(sp_device_t device, const sp_pool_options_t* options, sp_pool_t* pool) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(pool, entry, "pool (the output)");
    streampool::pool_options o;
    if (options != nullptr) {
      const unsigned version = version_to_read(pool_options_abi, options, entry);
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
      if (version >= 5) o.keep_memory = options->keep_memory != 0;
    }
    *pool = add_pool(streampool::pool(d->dev, o));
  });
}

sp_status_t sp_pool_destroy(sp_pool_t pool) {
  return guarded(__func__, [&](const char* entry) {
    destroy_handle<pool_payload>(handle_kind::pool, pool, entry, "pool", remove_hooks);
  });
}

sp_status_t sp_pool_allocate(sp_pool_t pool, size_t size, sp_stream_t stream, void** ptr) {
  return guarded(__func__, [&](const char* entry) {
    thread_state& t = this_thread();
    const auto p = pool_of(pool, entry, "pool", t);
    const auto s = stream_of(stream, entry, "stream", t);
    require(ptr, entry, "ptr (the output)");
    // No C-layer lock is held here: a reclaim hook may free memory (sp_pool_deallocate) on this
    // very thread, from inside this allocation. It may destroy these handles too: the pins defer
    // that until this call returns (pins.hpp).
    const streampool::stream_ref ref = s->s.ref();
    void* mem = p->p.allocate(ref, size);
    try {
      allocation_registry::instance().insert(
          std::make_shared<allocation>(p->p, mem, size, s->s.get_timeline(), p->registry_live));
    } catch (...) {
      p->p.deallocate(ref, mem);
      throw;
    }
    *ptr = mem;
  });
}

sp_status_t sp_pool_deallocate(sp_pool_t pool, void* ptr, sp_stream_t stream) {
  return guarded(__func__, [&](const char* entry) {
    if (ptr == nullptr) return;  // like free(NULL)
    thread_state& t = this_thread();
    const auto p = optional_pool_of(pool, entry, t);
    const auto s = optional_stream_of(stream, entry, t);
    std::shared_ptr<allocation> a =
        allocation_registry::instance().take_if(ptr, [&](const allocation& x) {
          check_pool(x, p, entry);
          check_stream(x, s, entry);
        });
    if (a == nullptr) {
      // Not a live allocation of sp_pool_allocate. Memory of the other free path is refused, not
      // freed: each free path refuses the other's memory, since a pool has no record of which
      // path made a block. The pool is asked, without freeing anything, which of the two it is,
      // and otherwise what is wrong.
      std::string why = "double free, a pointer into a block, or a foreign pointer";
      if (p) {
        bool live = true;
        try {
          (void)p->p.block_size(ptr);
        } catch (const streampool::logic_error& e) {
          live = false;
          why += std::string("; the pool says: ") + e.what();
        }
        if (live) {
          throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                      format("streampool: %s: pointer %p is a live block of pool %llu that "
                             "sp_pool_allocate did not make (sp_pool_allocate_native, the PyTorch "
                             "plug-in or the C++ API did): free it with "
                             "sp_pool_deallocate_native; nothing was freed",
                             entry, printf_arg(ptr), printf_arg(p->p.id()))};
        }
      }
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: pointer %p is not a live allocation of "
                         "sp_pool_allocate (%s; memory of sp_pool_allocate_native is freed by "
                         "sp_pool_deallocate_native)",
                         entry, printf_arg(ptr), why.c_str())};
    }
    const streampool::timeline* on = s ? s->s.get_timeline().get() : nullptr;
    std::vector<streampool::token> tokens;
    {
      std::lock_guard lock(a->mu);
      tokens = a->pending_locked(on);
    }
    try {
      if (s && tokens.empty()) {
        // Only this stream (or finished ones) used it: the stream-ordered fast path.
        a->owner.deallocate(s->s.ref(), ptr);
      } else {
        // Other streams may still use it: free behind their tokens. Tokens, never streams, so the
        // streams may be destroyed before the memory is reused.
        if (s) tokens.push_back(s->s.ref().now());
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
  return guarded(__func__, [&](const char* entry) {
    const auto p = optional_pool_of(pool, entry);
    require(ptr, entry, "ptr");
    const auto s = stream_of(stream, entry);
    auto a = allocation_registry::instance().containing(ptr);
    if (a == nullptr) {
      if (p) {
        // Memory the C layer has no record of (sp_pool_allocate_native, the PyTorch plug-in):
        // the pool checks the pointer; the stream's device is checked here, since the pool would
        // take another device's stream.
        const std::uint64_t want = p->p.device_id();
        const std::uint64_t got = s->s.get_device().id();
        if (want != got) {
          throw error{
              STREAMPOOL_STATUS_INVALID_ARGUMENT,
              format("streampool: %s: pointer %p is memory of pool %llu on device %llu, but the "
                     "stream belongs to device %llu",
                     entry, printf_arg(ptr), printf_arg(p->p.id()), printf_arg(want),
                     printf_arg(got))};
        }
        p->p.record_use(ptr, s->s.ref());  // names the problem, or memory of the native path
        return;
      }
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: pointer %p is not in a live allocation of "
                         "sp_pool_allocate",
                         entry, printf_arg(ptr))};
    }
    check_pool(*a, p, entry);
    check_stream(*a, s, entry);
    std::lock_guard lock(a->mu);
    a->add_user_locked(s->s.get_timeline());
  });
}

sp_status_t sp_pool_block_size(sp_pool_t pool, const void* ptr, size_t* size) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = optional_pool_of(pool, entry);
    require(ptr, entry, "ptr");
    require(size, entry, "size");
    if (p) {
      *size = p->p.block_size(ptr);
      return;
    }
    auto a = allocation_registry::instance().find(ptr);
    if (a == nullptr) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: pointer %p is not a live allocation of sp_pool_allocate",
                         entry, printf_arg(ptr))};
    }
    *size = a->owner.block_size(ptr);
  });
}

sp_status_t sp_pool_get_device(sp_pool_t pool, sp_device_t* device) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    require(device, entry, "device (the output)");
    // get_device() throws logic_error (INVALID_ARGUMENT) when the device's state is gone.
    *device = add_device(std::make_unique<device_payload>(device_payload{p->p.get_device()}));
  });
}

sp_status_t sp_pool_statistics_set_defaults(sp_pool_statistics_t* statistics) {
  return guarded(__func__, [&](const char* entry) {
    require(statistics, entry, "statistics");
    const unsigned version = version_to_write(pool_statistics_abi, statistics, entry);
    // Every field is a count: zero the bytes of the covered versions after struct_size.
    const std::size_t covered = pool_statistics_abi.version_sizes[version - 1];
    std::memset(reinterpret_cast<char*>(statistics) + sizeof statistics->struct_size, 0,
                covered - sizeof statistics->struct_size);
  });
}

sp_status_t sp_pool_get_statistics(sp_pool_t pool, sp_pool_statistics_t* statistics) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    require(statistics, entry, "statistics");
    const unsigned version = version_to_write(pool_statistics_abi, statistics, entry);
    const streampool::pool_statistics st = p->p.statistics();
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
    if (version < 3) return;
    o.alloc_retries = st.alloc_retries;
  });
}

sp_status_t sp_pool_set_memory_limit(sp_pool_t pool, size_t bytes) {
  return guarded(__func__,
                 [&](const char* entry) { pool_of(pool, entry)->p.set_memory_limit(bytes); });
}

sp_status_t sp_pool_get_memory_limit(sp_pool_t pool, size_t* bytes) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    require(bytes, entry, "bytes");
    *bytes = p->p.memory_limit();
  });
}

sp_status_t sp_pool_trim(sp_pool_t pool, size_t* released_bytes) {
  return guarded(__func__, [&](const char* entry) {
    const std::size_t n = pool_of(pool, entry)->p.trim();
    if (released_bytes != nullptr) *released_bytes = n;
  });
}

sp_status_t sp_pool_reset_peak_statistics(sp_pool_t pool) {
  return guarded(__func__,
                 [&](const char* entry) { pool_of(pool, entry)->p.reset_peak_statistics(); });
}

sp_status_t sp_pool_add_reclaim_hook(sp_pool_t pool, sp_reclaim_fn fn, void* user_data,
                                     uint64_t* id) {
  return guarded(__func__, [&](const char* entry) {
    const auto handle = pool_of(pool, entry);
    if (fn == nullptr) require(nullptr, entry, "fn");  // require() takes object pointers
    streampool::pool& p = handle->p;
    // The core calls hooks with no pool lock held, so the hook may free memory of this pool.
    const std::uint64_t hid =
        p.add_reclaim_hook([fn, user_data](std::size_t bytes) { fn(user_data, bytes); });
    try {
      std::lock_guard lock(handle->mu);
      handle->hooks.push_back(hid);
    } catch (...) {
      p.remove_reclaim_hook(hid);
      throw;
    }
    if (id != nullptr) *id = hid;
  });
}

sp_status_t sp_pool_remove_reclaim_hook(sp_pool_t pool, uint64_t id) {
  return guarded(__func__, [&](const char* entry) {
    const auto handle = pool_of(pool, entry);
    handle->p.remove_reclaim_hook(id);
    std::lock_guard lock(handle->mu);
    std::erase(handle->hooks, id);
  });
}

}  // extern "C"
