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
#include <vector>

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
using streampool::c_api::require;
using streampool::c_api::stream_of;
using streampool::detail::format;
using streampool::detail::format_ptr;

namespace {

// The live allocation or registered range containing ptr, on device `device_id` when given;
// error{INVALID_ARGUMENT} naming the function and pointer otherwise.
std::shared_ptr<known_range> known(const void* ptr, std::optional<std::uint64_t> device_id,
                                   const char* function) {
  require(ptr, function, "ptr");
  std::shared_ptr<known_range> r = allocation_registry::instance().known_containing(ptr);
  if (r == nullptr) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %s is not inside a live allocation of sp_pool_allocate "
                       "nor in memory registered with sp_memory_register",
                       function, format_ptr(ptr).c_str())};
  }
  if (device_id && r->device_id != *device_id) {
    throw error{
        STREAMPOOL_STATUS_INVALID_ARGUMENT,
        format("streampool: %s: memory %s is on device %llu, the stream on device %llu", function,
               format_ptr(r->ptr).c_str(), static_cast<unsigned long long>(r->device_id),
               static_cast<unsigned long long>(*device_id))};
  }
  return r;
}

}  // namespace

extern "C" {

sp_status_t sp_memory_register(sp_device_t device, void* ptr, size_t bytes) {
  return guarded([&] {
    const auto d = device_of(device, "sp_memory_register");
    require(ptr, "sp_memory_register", "ptr");
    if (bytes == 0) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_memory_register: 0 bytes at %s (register at least one "
                         "byte)",
                         format_ptr(ptr).c_str())};
    }
    if (bytes > UINTPTR_MAX - reinterpret_cast<std::uintptr_t>(ptr)) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_memory_register: %zu bytes at %s wraps around the "
                         "address space",
                         bytes, format_ptr(ptr).c_str())};
    }
    allocation_registry::instance().add_registration(
        std::make_shared<known_range>(ptr, bytes, d->dev.id(), nullptr, false));
  });
}

sp_status_t sp_memory_unregister(void* ptr) {
  return guarded([&] {
    require(ptr, "sp_memory_unregister", "ptr");
    // Helper work on the range may still be queued: wait for it, so that the caller may free the
    // memory as soon as this returns (streams that used it may be destroyed: tokens, not streams).
    allocation_registry::instance().remove_registration(ptr)->synchronize();
  });
}

sp_status_t sp_memory_acquire(sp_stream_t stream, void* ptr) {
  return guarded([&] {
    const auto s = stream_of(stream, "sp_memory_acquire");
    known(ptr, s->s.get_device().id(), "sp_memory_acquire")->acquire(s->s.ref());
  });
}

sp_status_t sp_memory_acquire_native(sp_device_t device, void* ptr, void* native_stream) {
  return guarded([&] {
    const auto d = device_of(device, "sp_memory_acquire_native");
    const std::shared_ptr<known_range> r = known(ptr, d->dev.id(), "sp_memory_acquire_native");
    r->acquire(streampool::c_api::native_stream(d->dev, native_stream, "sp_memory_acquire_native"));
  });
}

sp_status_t sp_memory_synchronize(void* ptr) {
  return guarded([&] { known(ptr, std::nullopt, "sp_memory_synchronize")->synchronize(); });
}

}  // extern "C"
