// streampool: the backend contract's checks (include/streampool/backend.hpp). Every backend gets
// the same argument checks and messages here, once, before its virtual is called.
#include "streampool/backend.hpp"

#include <cstdint>

namespace streampool {
namespace {

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

}  // namespace

void* backend::allocate(std::size_t bytes) {
  STREAMPOOL_EXPECTS(bytes > 0 && bytes % caps_.granularity == 0,
                     detail::format("%s: upstream allocation of %zu bytes is not a positive "
                                    "multiple of the granularity %zu",
                                    name_.c_str(), bytes, caps_.granularity));
  return do_allocate(bytes);
}

void* backend::reserve(std::size_t bytes) {
  STREAMPOOL_EXPECTS(
      caps_.virtual_memory,
      detail::format("%s: reserve: this backend has no virtual memory", name_.c_str()));
  STREAMPOOL_EXPECTS(bytes > 0 && bytes % caps_.vm_granularity == 0,
                     detail::format("%s: reserve of %zu bytes is not a positive multiple of the "
                                    "granule %zu",
                                    name_.c_str(), bytes, caps_.vm_granularity));
  return do_reserve(bytes);
}

native_physical backend::create_physical() {
  STREAMPOOL_EXPECTS(
      caps_.virtual_memory,
      detail::format("%s: create_physical: this backend has no virtual memory", name_.c_str()));
  return do_create_physical();
}

bool backend::map(void* p, std::span<const native_physical> handles) {
  STREAMPOOL_EXPECTS(caps_.virtual_memory,
                     detail::format("%s: map: this backend has no virtual memory", name_.c_str()));
  STREAMPOOL_EXPECTS(p != nullptr && aligned(p, caps_.vm_granularity) && !handles.empty(),
                     detail::format("%s: map of %zu granules at %s: the address must be non-null "
                                    "and aligned to the granule %zu",
                                    name_.c_str(), handles.size(), detail::format_ptr(p).c_str(),
                                    caps_.vm_granularity));
  return do_map(p, handles);
}

// Never called: the wrappers above refuse before reaching them on a backend without the
// capability, and a backend that sets it overrides all six.
void* backend::do_reserve(std::size_t) { return nullptr; }
void backend::do_unreserve(void*, std::size_t) noexcept {}
native_physical backend::do_create_physical() { return nullptr; }
void backend::do_release_physical(native_physical) noexcept {}
bool backend::do_map(void*, std::span<const native_physical>) { return false; }
void backend::do_unmap(void*, std::size_t) noexcept {}

}  // namespace streampool
