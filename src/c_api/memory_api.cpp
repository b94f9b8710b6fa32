// streampool C ABI: foreign memory registered for the copy and fill helpers, and memory handed
// to other runtimes' streams (DLPack and the CUDA array interface).
//
// The helpers refuse device pointers they do not know (copy_api.cpp says why). Memory made
// elsewhere (a framework's tensor, cuMemAlloc, memory of sp_pool_allocate_native) becomes known
// here, and then gets the same cross-stream ordering in the helpers as a pool allocation. The
// registry keeps no ownership: the caller frees the memory, after sp_memory_unregister.
#include <cstdint>
#include <memory>
#include <optional>

#include "allocation_registry.hpp"
#include "handles.hpp"
#include "native_streams.hpp"
#include "streampool/error.hpp"
#include "streampool/timeline.hpp"

using streampool::c_api::allocation_registry;
using streampool::c_api::device_of;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::known_range;
using streampool::c_api::printf_arg;
using streampool::c_api::require;
using streampool::c_api::stream_of;
using streampool::detail::format;

extern "C" {

sp_status_t sp_memory_register(sp_device_t device, void* ptr, size_t bytes) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(ptr, entry, "ptr");
    if (bytes == 0) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: 0 bytes at %p (register at least one byte)", entry,
                         printf_arg(ptr))};
    }
    if (bytes > UINTPTR_MAX - reinterpret_cast<std::uintptr_t>(ptr)) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: %zu bytes at %p wraps around the address space", entry,
                         bytes, printf_arg(ptr))};
    }
    allocation_registry::instance().add_registration(
        std::make_shared<known_range>(ptr, bytes, d->dev.id(), nullptr, false), entry);
  });
}

sp_status_t sp_memory_unregister(void* ptr) {
  return guarded(__func__, [&](const char* entry) {
    require(ptr, entry, "ptr");
    // Helper work on the range may still be queued: wait for it, so that the caller may free the
    // memory as soon as this returns (streams that used it may be destroyed: tokens, not streams).
    allocation_registry::instance().remove_registration(ptr, entry)->synchronize();
  });
}

sp_status_t sp_memory_acquire(sp_stream_t stream, void* ptr) {
  return guarded(__func__, [&](const char* entry) {
    const auto s = stream_of(stream, entry);
    require(ptr, entry, "ptr");
    allocation_registry::instance()
        .known_for(ptr, 0, s->s.get_device().id(), entry)
        ->acquire(s->s.ref());
  });
}

sp_status_t sp_memory_acquire_native(sp_device_t device, void* ptr, void* native_stream) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(ptr, entry, "ptr");
    const std::shared_ptr<known_range> r =
        allocation_registry::instance().known_for(ptr, 0, d->dev.id(), entry);
    r->acquire(streampool::c_api::native_stream(d->dev, native_stream, entry));
  });
}

sp_status_t sp_memory_synchronize(void* ptr) {
  return guarded(__func__, [&](const char* entry) {
    require(ptr, entry, "ptr");
    allocation_registry::instance().known_for(ptr, 0, std::nullopt, entry)->synchronize();
  });
}

}  // extern "C"
