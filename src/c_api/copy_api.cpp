// streampool C ABI: copy and fill helpers (what a language binding needs for its arrays).
//
// Each helper orders its stream after earlier work, on other streams, that used the same
// allocation (through the allocation registry), then submits. So memory can be handed between
// streams and threads through these helpers without the caller tracking streams, just like the
// C++ array layer does.
//
// Each device range must lie inside memory the registry knows: a live allocation of
// sp_pool_allocate or a range registered with sp_memory_register (issue 9). Freed memory that the
// pool has not handed out again is still mapped, so without this check a stale pointer would be
// written silently, into memory that a later allocation receives. The check is one lookup under
// the registry's mutex per device pointer, on the helpers only: allocate and free do not pay it.
// Host pointers (the source of sp_memcpy_to_device, the destination of sp_memcpy_to_host) are the
// caller's and are not checked.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocation_registry.hpp"
#include "handles.hpp"
#include "streampool/backend.hpp"
#include "streampool/error.hpp"

using streampool::c_api::allocation_registry;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::known_range;
using streampool::c_api::pinned;
using streampool::c_api::require;
using streampool::c_api::stream_of;
using streampool::c_api::stream_payload;
using streampool::detail::format;
using streampool::detail::format_ptr;

namespace {

// The known range holding all of [p, p + bytes) (bytes > 0), usable from `stream`; throws
// error{INVALID_ARGUMENT} naming the function, the pointer and the byte count otherwise.
std::shared_ptr<known_range> checked(const stream_payload& stream, const void* p, std::size_t bytes,
                                     const char* function) {
  std::shared_ptr<known_range> r = allocation_registry::instance().known_containing(p);
  if (r == nullptr) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %zu bytes at %s: the pointer is not inside a live "
                       "allocation of sp_pool_allocate nor in memory registered with "
                       "sp_memory_register (freed memory, or foreign memory not registered)",
                       function, bytes, format_ptr(p).c_str())};
  }
  const char* what = r->is_allocation ? "the allocation" : "the registered range";
  const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(p) -
                                               static_cast<const std::byte*>(r->ptr));
  if (bytes > r->size - offset) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %zu bytes at offset %zu overrun %s %s of %zu bytes",
                       function, bytes, offset, what, format_ptr(r->ptr).c_str(), r->size)};
  }
  const std::uint64_t got = stream.s.get_device().id();
  if (r->device_id != got) {
    throw error{
        STREAMPOOL_STATUS_INVALID_ARGUMENT,
        format("streampool: %s: memory %s is on device %llu, the stream on device %llu", function,
               format_ptr(r->ptr).c_str(), static_cast<unsigned long long>(r->device_id),
               static_cast<unsigned long long>(got))};
  }
  return r;
}

// Makes `stream` ordered after every other stream's helper work on `r`, and records `stream` as a
// user of it (so that a later free, or the next helper elsewhere, waits for this work).
void acquire(const stream_payload& stream, known_range& r) { r.acquire(stream.s.ref()); }

// The stream, pinned; with bytes > 0, dst and src must not be NULL. (0 bytes is a no-op that
// checks no pointer, as the header says; the stream is a handle, checked always.)
pinned<stream_payload> check_args(sp_stream_t stream, const void* dst, const void* src,
                                  std::size_t bytes, const char* function) {
  pinned<stream_payload> s = stream_of(stream, function);
  if (bytes != 0) {
    require(dst, function, "dst");
    require(src, function, "src");
  }
  return s;
}

}  // namespace

extern "C" {

sp_status_t sp_memcpy_to_device(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    const auto s = check_args(stream, dst, src, bytes, "sp_memcpy_to_device");
    if (bytes == 0) return;
    acquire(*s, *checked(*s, dst, bytes, "sp_memcpy_to_device"));
    // src_is_host: the backend stages the source before submit returns.
    s->s.ref().submit(
        streampool::command::make(streampool::copy_command{dst, src, bytes, true, false}));
  });
}

sp_status_t sp_memcpy_to_host(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    const auto s = check_args(stream, dst, src, bytes, "sp_memcpy_to_host");
    if (bytes == 0) return;
    acquire(*s, *checked(*s, src, bytes, "sp_memcpy_to_host"));
    s->s.ref().submit(
        streampool::command::make(streampool::copy_command{dst, src, bytes, false, true}));
    s->s.synchronize();
  });
}

sp_status_t sp_memcpy_device(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    const auto s = check_args(stream, dst, src, bytes, "sp_memcpy_device");
    if (bytes == 0) return;
    // Both checked before either is acquired: a refused call changes nothing.
    const std::shared_ptr<known_range> from = checked(*s, src, bytes, "sp_memcpy_device");
    const std::shared_ptr<known_range> to = checked(*s, dst, bytes, "sp_memcpy_device");
    const auto s0 = reinterpret_cast<std::uintptr_t>(src);
    const auto d0 = reinterpret_cast<std::uintptr_t>(dst);
    // Both ranges lie inside known memory, so the sums cannot wrap. An overlapping copy is
    // undefined for every backend's copy (memcpy, cuMemcpyAsync).
    if (s0 < d0 + bytes && d0 < s0 + bytes) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_memcpy_device: %zu bytes from %s to %s: the source and "
                         "destination overlap",
                         bytes, format_ptr(src).c_str(), format_ptr(dst).c_str())};
    }
    acquire(*s, *from);
    acquire(*s, *to);
    s->s.ref().submit(
        streampool::command::make(streampool::copy_command{dst, src, bytes, false, false}));
  });
}

sp_status_t sp_fill(sp_stream_t stream, void* dst, uint64_t pattern, size_t element_size,
                    size_t count) {
  return guarded([&] {
    const auto s = stream_of(stream, "sp_fill");
    if (element_size != 1 && element_size != 2 && element_size != 4 && element_size != 8) {
      throw error{
          STREAMPOOL_STATUS_INVALID_ARGUMENT,
          format("streampool: sp_fill: element_size %zu is not 1, 2, 4 or 8", element_size)};
    }
    if (count == 0) return;  // checks no pointer (the header's promise)
    require(dst, "sp_fill", "dst");
    if (count > SIZE_MAX / element_size) {
      throw error{
          STREAMPOOL_STATUS_INVALID_ARGUMENT,
          format("streampool: sp_fill: %zu elements of %zu bytes overflow", count, element_size)};
    }
    acquire(*s, *checked(*s, dst, count * element_size, "sp_fill"));
    s->s.ref().submit(
        streampool::command::make(streampool::fill_command{dst, pattern, element_size, count}));
  });
}

}  // extern "C"
