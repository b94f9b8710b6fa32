// streampool C ABI: allocation on native stream handles (sp_pool_*_native), the path for
// frameworks that hand over a CUstream per call. No C-layer record and no lock on the way: the
// pool itself checks pointers (double free, foreign pointer), and the stream wrapper comes from a
// per-thread cache (native_streams.hpp).
//
// The one thing the pool cannot check is which free path a block belongs to: memory of
// sp_pool_allocate has a record in the C layer (allocation_registry.hpp) that a native free
// would leave behind, stale, for the helpers and sp_pool_deallocate to use on whatever the pool
// hands out next at that address. So the native free refuses such memory.
// The cost: one load of the pool's count of registered allocations, and only while it is not 0
// a lookup in the registry (one mutex), which a program that uses only this path never pays.
#include "allocation_registry.hpp"
#include "handles.hpp"
#include "native_streams.hpp"
#include "streampool/error.hpp"

using streampool::c_api::allocation_registry;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::pinned_stream;
using streampool::c_api::pool_of;
using streampool::c_api::pool_payload;
using streampool::c_api::printf_arg;
using streampool::c_api::require;
using streampool::c_api::this_thread;
using streampool::c_api::thread_state;
using streampool::detail::format;

namespace {

pinned_stream stream_of(thread_state& t, const pool_payload& pool, void* native_stream,
                        const char* entry) {
  const streampool::pool& p = pool.p;
  return streampool::c_api::native_stream_of(
      t, p.device_id(), native_stream, [&] { return p.get_device(); }, entry);
}

/// Refuses memory of sp_pool_allocate (see the file comment).
void refuse_registered(const pool_payload& pool, const void* ptr, const char* entry) {
  if (pool.registry_live->load(std::memory_order_acquire) == 0) [[likely]]
    return;
  if (allocation_registry::instance().find(ptr) != nullptr) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: pointer %p was allocated by sp_pool_allocate: free it "
                       "with sp_pool_deallocate (which also drops the C layer's record of it); "
                       "nothing was freed",
                       entry, printf_arg(ptr))};
  }
}

}  // namespace

extern "C" {

sp_status_t sp_pool_allocate_native(sp_pool_t pool, size_t size, void* native_stream, void** ptr) {
  return guarded(__func__, [&](const char* entry) {
    thread_state& t = this_thread();
    const auto p = pool_of(pool, entry, "pool", t);
    require(ptr, entry, "ptr (the output)");
    *ptr = p->p.allocate(stream_of(t, *p, native_stream, entry), size);
  });
}

sp_status_t sp_pool_deallocate_native(sp_pool_t pool, void* ptr, void* native_stream) {
  return guarded(__func__, [&](const char* entry) {
    thread_state& t = this_thread();
    const auto p = pool_of(pool, entry, "pool", t);
    if (ptr == nullptr) return;  // like free(NULL)
    refuse_registered(*p, ptr, entry);
    p->p.deallocate(stream_of(t, *p, native_stream, entry), ptr);
  });
}

sp_status_t sp_pool_record_use_native(sp_pool_t pool, void* ptr, void* native_stream) {
  return guarded(__func__, [&](const char* entry) {
    thread_state& t = this_thread();
    const auto p = pool_of(pool, entry, "pool", t);
    require(ptr, entry, "ptr");
    // Until the free, like sp_pool_record_use.
    p->p.record_use(ptr, stream_of(t, *p, native_stream, entry));
  });
}

sp_status_t sp_native_stream_release(void* native_stream, size_t* released) {
  return guarded(__func__, [&] {
    const std::size_t n = streampool::c_api::release_native_stream(native_stream);
    if (released != nullptr) *released = n;
  });
}

}  // extern "C"
