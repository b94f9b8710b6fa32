// streampool C ABI: allocation on native stream handles (sp_pool_*_native), the path for
// frameworks that hand over a CUstream per call. No C-layer registry and no lock on the way: the
// pool itself checks pointers (double free, foreign pointer), and the stream wrapper comes from a
// per-thread cache (native_streams.hpp).
#include "handles.hpp"
#include "native_streams.hpp"

using streampool::c_api::guarded;
using streampool::c_api::require;

namespace {

streampool::stream_ref stream_of(sp_pool_t pool, void* native_stream) {
  const streampool::pool& p = pool->p;
  return streampool::c_api::native_stream_of(p.device_id(), native_stream,
                                             [&] { return p.get_device(); });
}

}  // namespace

extern "C" {

sp_status_t sp_pool_allocate_native(sp_pool_t pool, size_t size, void* native_stream, void** ptr) {
  return guarded([&] {
    require(pool, "sp_pool_allocate_native", "pool");
    require(ptr, "sp_pool_allocate_native", "ptr (the output)");
    streampool::pool p = pool->p;  // a copy: reclaim hooks may destroy handles
    *ptr = p.allocate(stream_of(pool, native_stream), size);
  });
}

sp_status_t sp_pool_deallocate_native(sp_pool_t pool, void* ptr, void* native_stream) {
  return guarded([&] {
    require(pool, "sp_pool_deallocate_native", "pool");
    if (ptr == nullptr) return;  // like free(NULL)
    pool->p.deallocate(stream_of(pool, native_stream), ptr);
  });
}

sp_status_t sp_pool_record_use_native(sp_pool_t pool, void* ptr, void* native_stream) {
  return guarded([&] {
    require(pool, "sp_pool_record_use_native", "pool");
    require(ptr, "sp_pool_record_use_native", "ptr");
    // Until the free, like sp_pool_record_use.
    pool->p.record_use(ptr, stream_of(pool, native_stream));
  });
}

sp_status_t sp_native_stream_release(void* native_stream, size_t* released) {
  return guarded([&] {
    const std::size_t n = streampool::c_api::release_native_stream(native_stream);
    if (released != nullptr) *released = n;
  });
}

}  // extern "C"
