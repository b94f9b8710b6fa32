// streampool C ABI: foreign memory registered for the copy and fill helpers.
//
// The helpers refuse device pointers they do not know (copy_api.cpp says why). Memory made
// elsewhere (a framework's tensor, cuMemAlloc, memory of sp_pool_allocate_native) becomes known
// here, and then gets the same cross-stream ordering in the helpers as a pool allocation. The
// registry keeps no ownership: the caller frees the memory, after sp_memory_unregister.
#include <cstdint>
#include <memory>
#include <vector>

#include "allocation_registry.hpp"
#include "handles.hpp"
#include "streampool/error.hpp"
#include "streampool/timeline.hpp"

using streampool::c_api::allocation_registry;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::known_range;
using streampool::c_api::require;
using streampool::detail::format;
using streampool::detail::format_ptr;

extern "C" {

sp_status_t sp_memory_register(sp_device_t device, void* ptr, size_t bytes) {
  return guarded([&] {
    require(device, "sp_memory_register", "device");
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
        std::make_shared<known_range>(ptr, bytes, device->dev.id(), nullptr, false));
  });
}

sp_status_t sp_memory_unregister(void* ptr) {
  return guarded([&] {
    require(ptr, "sp_memory_unregister", "ptr");
    const std::shared_ptr<known_range> r = allocation_registry::instance().remove_registration(ptr);
    // Helper work on the range may still be queued: wait for it, so that the caller may free the
    // memory as soon as this returns (streams that used it may be destroyed: tokens, not streams).
    std::vector<streampool::token> pending;
    {
      std::lock_guard lock(r->mu);
      pending = r->pending_locked(nullptr);
    }
    for (const streampool::token& t : pending) t.line->wait_host(t.at);
  });
}

}  // extern "C"
