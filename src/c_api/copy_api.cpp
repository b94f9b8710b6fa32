// streampool C ABI: copy and fill helpers (what a language binding needs for its arrays).
//
// Each helper orders its stream after earlier work, on other streams, that used the same
// allocation (through the allocation registry), then submits. So memory can be handed between
// streams and threads through these helpers without the caller tracking streams, just like the
// C++ array layer does.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocation_registry.hpp"
#include "core/pool_state.hpp"
#include "handles.hpp"
#include "streampool/backend.hpp"
#include "streampool/error.hpp"

using streampool::c_api::allocation;
using streampool::c_api::allocation_registry;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::require;
using streampool::detail::format;
using streampool::detail::format_ptr;

namespace {

// Makes `stream` ordered after every other stream's work on the allocation holding [p, p+bytes),
// and records `stream` as a user of it (so that a later free waits for this work). Memory that is
// not a live C allocation (wrapped foreign memory) is passed through unchecked.
void acquire(sp_stream_t stream, const void* p, std::size_t bytes, const char* function) {
  std::shared_ptr<allocation> a = allocation_registry::instance().containing(p);
  if (a == nullptr) return;
  const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(p) -
                                               static_cast<const std::byte*>(a->ptr));
  if (bytes > a->size - offset) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %zu bytes at offset %zu overrun the allocation %s of %zu "
                       "bytes",
                       function, bytes, offset, format_ptr(a->ptr).c_str(), a->size)};
  }
  const std::uint64_t want = a->owner.state()->device_id();
  const std::uint64_t got = stream->s.get_device().id();
  if (want != got) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: memory %s is on device %llu, the stream on device %llu",
                       function, format_ptr(a->ptr).c_str(), static_cast<unsigned long long>(want),
                       static_cast<unsigned long long>(got))};
  }
  const auto& line = stream->s.get_timeline();
  std::lock_guard lock(a->mu);
  for (const streampool::token& t : a->pending_locked(line.get())) stream->s.ref().wait(t);
  a->add_user_locked(line);
}

void check_args(sp_stream_t stream, const void* dst, const void* src, const char* function) {
  require(stream, function, "stream");
  require(dst, function, "dst");
  require(src, function, "src");
}

}  // namespace

extern "C" {

sp_status_t sp_memcpy_to_device(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    check_args(stream, dst, src, "sp_memcpy_to_device");
    if (bytes == 0) return;
    acquire(stream, dst, bytes, "sp_memcpy_to_device");
    // src_is_host: the backend stages the source before submit returns.
    stream->s.ref().submit(streampool::command::make(
        streampool::copy_command{dst, src, bytes, true, false}));
  });
}

sp_status_t sp_memcpy_to_host(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    check_args(stream, dst, src, "sp_memcpy_to_host");
    if (bytes == 0) return;
    acquire(stream, src, bytes, "sp_memcpy_to_host");
    stream->s.ref().submit(streampool::command::make(
        streampool::copy_command{dst, src, bytes, false, true}));
    stream->s.synchronize();
  });
}

sp_status_t sp_memcpy_device(sp_stream_t stream, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    check_args(stream, dst, src, "sp_memcpy_device");
    if (bytes == 0) return;
    acquire(stream, src, bytes, "sp_memcpy_device");
    acquire(stream, dst, bytes, "sp_memcpy_device");
    stream->s.ref().submit(streampool::command::make(
        streampool::copy_command{dst, src, bytes, false, false}));
  });
}

sp_status_t sp_fill(sp_stream_t stream, void* dst, uint64_t pattern, size_t element_size,
                    size_t count) {
  return guarded([&] {
    require(stream, "sp_fill", "stream");
    require(dst, "sp_fill", "dst");
    if (element_size != 1 && element_size != 2 && element_size != 4 && element_size != 8) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_fill: element_size %zu is not 1, 2, 4 or 8",
                         element_size)};
    }
    if (count == 0) return;
    if (count > SIZE_MAX / element_size) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_fill: %zu elements of %zu bytes overflow", count,
                         element_size)};
    }
    acquire(stream, dst, count * element_size, "sp_fill");
    stream->s.ref().submit(streampool::command::make(
        streampool::fill_command{dst, pattern, element_size, count}));
  });
}

}  // extern "C"
