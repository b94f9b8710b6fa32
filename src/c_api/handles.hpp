// streampool C ABI: what the opaque handles stand for, and how an entry point reaches them.
//
// Glossary
//   handle      an sp_device_t, sp_stream_t or sp_pool_t: a number from a handle table
//               (handle_table.hpp), never an address. Every entry point turns each handle it
//               takes into its payload with device_of / stream_of / pool_of, which refuse a
//               destroyed handle, one of another kind, or a value that is no handle, naming it.
//   payload     the C++ object behind a handle. Each holds shared ownership of the C++ object
//               (device, stream, pool), so that dropping handles in any order is safe.
//   pinned      a payload with its handle pinned (pins.hpp) for as long as the call holds it: a
//               destroy on another thread waits for the call instead of freeing the payload under
//               it.
//   orphan      a wrapper (sp_stream_wrap) of a queue whose owning stream handle was destroyed:
//               the queue is gone, so the wrapper was released (its work had finished: the owner's
//               destroy waited for it). Only synchronize (which returns at once), destroy and
//               release accept it; other calls are refused, naming both handles.
//   allocation  the C layer's record of one live pointer made through sp_pool_allocate
//               (allocation_registry.hpp): it owns its pool, so memory outlives pool handles.
// Entry points, their names in messages and the exception firewall: errors.hpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "handle_table.hpp"
#include "pins.hpp"
#include "streampool.h"
#include "streampool/device.hpp"
#include "streampool/export.hpp"
#include "streampool/pool.hpp"
#include "streampool/stream.hpp"

namespace streampool::c_api {

struct device_payload {
  device dev;
};

struct stream_payload {
  stream_payload(stream st, void* q, bool owns) : s(std::move(st)), queue(q), owns_queue(owns) {}
  stream s;
  void* const queue;      // the native queue: s forgets it once released, the wrapper index not
  const bool owns_queue;  // sp_stream_create; false for sp_stream_wrap
  // An orphan (see glossary): the handle of the destroyed stream that owned the queue; 0: none.
  std::atomic<std::uint64_t> orphaned_by{0};
};

struct pool_payload {
  pool_payload(pool q, std::shared_ptr<std::atomic<std::size_t>> registered)
      : p(std::move(q)), registry_live(std::move(registered)) {}
  pool p;                            // shared ownership of the pool state
  std::mutex mu;                     // guards hooks
  std::vector<std::uint64_t> hooks;  // added through this handle; removed when it is destroyed
  // Live allocations of sp_pool_allocate in this pool (all its handles share the count): while 0,
  // sp_pool_deallocate_native needs no registry lookup to refuse such memory.
  std::shared_ptr<std::atomic<std::size_t>> registry_live;
};

/// A payload with its handle pinned (see glossary). Empty (payload nullptr) for an optional
/// handle given as NULL.
template <class Payload>
class pinned {
 public:
  pinned() = default;
  /// Live handle `h` of `table`, resolved and pinned (handle_table::resolve).
  pinned(const handle_table& table, std::uint64_t h, thread_state& t, const char* function,
         const char* what)
      : payload_(static_cast<Payload*>(table.resolve(h, pin_, t, function, what))) {}
  Payload* operator->() const noexcept { return payload_; }
  Payload& operator*() const noexcept { return *payload_; }
  [[nodiscard]] Payload* get() const noexcept { return payload_; }
  explicit operator bool() const noexcept { return payload_ != nullptr; }
  /// What calls on this handle pin (for wait_unpinned and pins_here).
  [[nodiscard]] const void* pinned_as() const noexcept { return pin_.object(); }

 private:
  pin pin_;
  Payload* payload_ = nullptr;
};

/// The handle's number (handle_table.hpp).
template <class Handle>
std::uint64_t handle_value(Handle h) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h));
}

/// The handle of a number (handle_table.hpp).
template <class Handle>
Handle as_handle(std::uint64_t value) noexcept {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): a handle is a number in a pointer's clothing
  return reinterpret_cast<Handle>(static_cast<std::uintptr_t>(value));
}

[[noreturn]] void refuse_orphan(sp_stream_t h, std::uint64_t owner, const char* function,
                                const char* what);

/// The payloads of live handles, pinned; each throws error{INVALID_ARGUMENT} naming `function`,
/// `what` and the handle otherwise (NULL included). Inline: every entry point's way in. `t`: the
/// calling thread's state, for entry points that take it once for several handles.
inline pinned<device_payload> device_of(sp_device_t h, const char* function,
                                        const char* what = "device",
                                        thread_state& t = this_thread()) {
  return {handle_table::of(handle_kind::device), handle_value(h), t, function, what};
}
inline pinned<pool_payload> pool_of(sp_pool_t h, const char* function, const char* what = "pool",
                                    thread_state& t = this_thread()) {
  return {handle_table::of(handle_kind::pool), handle_value(h), t, function, what};
}
/// Accepts an orphaned wrapper (see glossary).
inline pinned<stream_payload> stream_or_orphan_of(sp_stream_t h, const char* function,
                                                  const char* what = "stream",
                                                  thread_state& t = this_thread()) {
  return {handle_table::of(handle_kind::stream), handle_value(h), t, function, what};
}
/// Refuses an orphaned wrapper, naming it and the destroyed stream that owned its queue.
inline pinned<stream_payload> stream_of(sp_stream_t h, const char* function,
                                        const char* what = "stream",
                                        thread_state& t = this_thread()) {
  pinned<stream_payload> s = stream_or_orphan_of(h, function, what, t);
  // Pinned first, then read: the orphaning thread stores this before it waits for pins.
  if (const std::uint64_t owner = s->orphaned_by.load(std::memory_order_seq_cst); owner != 0)
      [[unlikely]] {
    refuse_orphan(h, owner, function, what);
  }
  return s;
}
/// pool_of, or an empty pinned for NULL (the calls where the pool is optional).
inline pinned<pool_payload> optional_pool_of(sp_pool_t h, const char* function,
                                             thread_state& t = this_thread()) {
  return h == nullptr ? pinned<pool_payload>{} : pool_of(h, function, "pool", t);
}
/// stream_of, or an empty pinned for NULL (the calls where the stream is optional).
inline pinned<stream_payload> optional_stream_of(sp_stream_t h, const char* function,
                                                 thread_state& t = this_thread()) {
  return h == nullptr ? pinned<stream_payload>{} : stream_of(h, function, "stream", t);
}

/// The pool behind live handle `h` (a copy of the shared handle), for the library's own C++ tests
/// that reach behind the C ABI (tests/torch_plugin_test.cpp): exported for them alone, since the
/// rest of this header is hidden in the library. Not part of any API.
STREAMPOOL_EXPORT pool pool_behind(sp_pool_t h);

/// A new handle for `payload`.
sp_device_t add_device(std::unique_ptr<device_payload> payload);
sp_stream_t add_stream(std::unique_ptr<stream_payload> payload);
sp_pool_t add_pool(pool q);

/// Destroys handle `h` of kind `k`. It is refused from now on (of destroys racing on one handle,
/// one wins and the others are told it was destroyed); then, once no other thread is inside a
/// call on it, `teardown` runs on its payload and the payload is deleted. That second part is
/// deferred while the calling thread is itself inside a call (a reclaim hook: pins.hpp), unless
/// `may_defer` is false; then the caller must have refused the case where a call of this thread
/// uses the handle (pins_here).
template <class Payload, class Handle, class Teardown>
void destroy_handle(handle_kind k, Handle h, const char* function, const char* what,
                    Teardown teardown, bool may_defer = true) {
  handle_table& table = handle_table::of(k);
  const handle_table::retired r = table.invalidate(handle_value(h), function, what);
  auto finish = [&table, r, teardown]() mutable {
    auto* payload = static_cast<Payload*>(r.payload);
    // The payload goes and the cell is recycled even when the teardown throws: the handle is
    // gone either way, as the header promises.
    try {
      wait_unpinned(r.pinned_as);
      teardown(*payload);
    } catch (...) {
      delete payload;
      table.recycle(r);
      throw;
    }
    delete payload;
    table.recycle(r);
  };
  if (may_defer) {
    run_or_defer(std::move(finish));
  } else {
    finish();
  }
}

}  // namespace streampool::c_api
