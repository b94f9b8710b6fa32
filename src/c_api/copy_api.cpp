// streampool C ABI: copy and fill helpers (what a language binding needs for its arrays).
//
// Each helper orders its stream after earlier work, on other streams, that used the same
// allocation (through the allocation registry), then submits. So memory can be handed between
// streams and threads through these helpers without the caller tracking streams, just like the
// C++ array layer does.
//
// Each device range must lie inside memory the registry knows: a live allocation of
// sp_pool_allocate or a range registered with sp_memory_register. Freed memory that the
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
using streampool::c_api::printf_arg;
using streampool::c_api::require;
using streampool::c_api::stream_of;
using streampool::c_api::stream_payload;
using streampool::detail::format;

namespace {

// The known range holding all of [p, p + bytes) (bytes > 0), on the stream's device; refused
// otherwise, naming the entry point (allocation_registry::known_for).
std::shared_ptr<known_range> checked(const stream_payload& stream, const void* p, std::size_t bytes,
                                     const char* entry) {
  return allocation_registry::instance().known_for(p, bytes, stream.s.get_device().id(), entry);
}

// Makes `stream` ordered after every other stream's helper work on `r`, and records `stream` as a
// user of it (so that a later free, or the next helper elsewhere, waits for this work).
void acquire(const stream_payload& stream, known_range& r) { r.acquire(stream.s.ref()); }

// The stream, pinned; with bytes > 0, dst and src must not be NULL. (0 bytes is a no-op that
// checks no pointer, as the header says; the stream is a handle, checked always.)
pinned<stream_payload> check_args(sp_stream_t stream, const void* dst, const void* src,
                                  std::size_t bytes, const char* entry) {
  pinned<stream_payload> s = stream_of(stream, entry);
  if (bytes != 0) {
    require(dst, entry, "dst");
    require(src, entry, "src");
  }
  return s;
}

}  // namespace

extern "C" {

sp_status_t sp_memcpy_to_device(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded(__func__, [&](const char* entry) {
    const auto s = check_args(stream, dst, src, bytes, entry);
    if (bytes == 0) return;
    acquire(*s, *checked(*s, dst, bytes, entry));
    // src_is_host: the backend stages the source before submit returns.
    s->s.ref().submit(
        streampool::command::make(streampool::copy_command{dst, src, bytes, true, false}));
  });
}

sp_status_t sp_memcpy_to_host(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded(__func__, [&](const char* entry) {
    const auto s = check_args(stream, dst, src, bytes, entry);
    if (bytes == 0) return;
    acquire(*s, *checked(*s, src, bytes, entry));
    s->s.ref().submit(
        streampool::command::make(streampool::copy_command{dst, src, bytes, false, true}));
    s->s.synchronize();
  });
}

sp_status_t sp_memcpy_device(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded(__func__, [&](const char* entry) {
    const auto s = check_args(stream, dst, src, bytes, entry);
    if (bytes == 0) return;
    // Both checked before either is acquired: a refused call changes nothing.
    const std::shared_ptr<known_range> from = checked(*s, src, bytes, entry);
    const std::shared_ptr<known_range> to = checked(*s, dst, bytes, entry);
    const auto s0 = reinterpret_cast<std::uintptr_t>(src);
    const auto d0 = reinterpret_cast<std::uintptr_t>(dst);
    // Both ranges lie inside known memory, so the sums cannot wrap. An overlapping copy is
    // undefined for every backend's copy (memcpy, cuMemcpyAsync).
    if (s0 < d0 + bytes && d0 < s0 + bytes) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: %zu bytes from %p to %p: the source and destination "
                         "overlap",
                         entry, bytes, printf_arg(src), printf_arg(dst))};
    }
    acquire(*s, *from);
    acquire(*s, *to);
    s->s.ref().submit(
        streampool::command::make(streampool::copy_command{dst, src, bytes, false, false}));
  });
}

sp_status_t sp_fill(sp_stream_t stream, void* dst, uint64_t pattern, size_t element_size,
                    size_t count) {
  return guarded(__func__, [&](const char* entry) {
    const auto s = stream_of(stream, entry);
    if (element_size != 1 && element_size != 2 && element_size != 4 && element_size != 8) {
      throw error{
          STREAMPOOL_STATUS_INVALID_ARGUMENT,
          format("streampool: %s: element_size %zu is not 1, 2, 4 or 8", entry, element_size)};
    }
    if (count == 0) return;  // checks no pointer (the header's promise)
    require(dst, entry, "dst");
    if (count > SIZE_MAX / element_size) {
      throw error{
          STREAMPOOL_STATUS_INVALID_ARGUMENT,
          format("streampool: %s: %zu elements of %zu bytes overflow", entry, count, element_size)};
    }
    acquire(*s, *checked(*s, dst, count * element_size, entry));
    s->s.ref().submit(
        streampool::command::make(streampool::fill_command{dst, pattern, element_size, count}));
  });
}

}  // extern "C"
