// streampool C ABI: streams.
//
// A wrapper (sp_stream_wrap) may wrap the queue of a stream made here (sp_stream_create; a binding
// hands streams around by their native value). When that stream is destroyed its queue goes, so
// its wrappers are released first (their work has finished: the destroy waits for the queue) and
// become orphans (handles.hpp): sp_stream_synchronize on one returns at once, since a marker
// recorded on the destroyed queue would never complete.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "handles.hpp"
#include "native_streams.hpp"
#include "streampool/error.hpp"
#include "streampool/timeline.hpp"

using streampool::c_api::add_stream;
using streampool::c_api::destroy_handle;
using streampool::c_api::device_of;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::handle_kind;
using streampool::c_api::handle_value;
using streampool::c_api::pins_here;
using streampool::c_api::printf_arg;
using streampool::c_api::require;
using streampool::c_api::stream_of;
using streampool::c_api::stream_or_orphan_of;
using streampool::c_api::stream_payload;
using streampool::detail::format;

namespace {

// The live wrapper handles of each queue, so that destroying the stream that owns a queue finds
// them. Written on sp_stream_wrap and on a wrapper's destroy; read on an owner's destroy.
struct wrapper_index {
  std::mutex mu;
  std::map<void*, std::vector<std::uint64_t>> by_queue;
};
wrapper_index& wrappers() {
  static auto* w = new wrapper_index;  // leaked: handles are destroyed from static destructors
  return *w;
}

void forget_wrapper(void* queue, std::uint64_t handle) {
  wrapper_index& w = wrappers();
  std::lock_guard lock(w.mu);
  auto it = w.by_queue.find(queue);
  if (it == w.by_queue.end()) return;
  std::erase(it->second, handle);
  if (it->second.empty()) w.by_queue.erase(it);
}

/// Releases the wrapper handles of `queue` (owned by stream handle `owner`, about to be
/// destroyed by entry point `entry`) and makes them orphans.
void orphan_wrappers_of(void* queue, std::uint64_t owner, const char* entry) {
  std::vector<std::uint64_t> handles;
  {
    wrapper_index& w = wrappers();
    std::lock_guard lock(w.mu);
    auto it = w.by_queue.find(queue);
    if (it == w.by_queue.end()) return;
    handles.swap(it->second);
    w.by_queue.erase(it);
  }
  for (std::uint64_t h : handles) {
    streampool::c_api::pinned<stream_payload> s;
    try {
      s = stream_or_orphan_of(streampool::c_api::as_handle<sp_stream_t>(h), entry);
    } catch (const error&) {
      continue;  // destroyed meanwhile: its destroy tears it down
    }
    // Refused from now on (stream_of reads this after pinning), then the calls in flight on it
    // finish while the queue is still alive, then it lets go of the queue.
    s->orphaned_by.store(owner, std::memory_order_seq_cst);
    streampool::c_api::wait_unpinned(s.pinned_as());
    s->s.release();
  }
}

/// What goes with a stream handle (sp_stream_destroy, and sp_stream_release of a stream made
/// here), before its payload is deleted (which waits for the stream's work and retires it).
void tear_down(stream_payload& s, std::uint64_t handle, const char* entry) {
  if (!s.owns_queue) forget_wrapper(s.queue, handle);
  // An orphan's queue is gone, and its value may name a new queue by now: nothing to release.
  if (s.orphaned_by.load(std::memory_order_relaxed) != 0) return;
  // The registry's wrappers of this queue first (a DLPack export may have made one): they
  // record their last marker while the queue lives.
  (void)streampool::c_api::release_wrappers_of(s.queue);
  if (s.owns_queue) {
    orphan_wrappers_of(s.queue, handle, entry);
    streampool::c_api::forget_owned_queue(s.queue);
  }
}

}  // namespace

extern "C" {

sp_status_t sp_stream_create(sp_device_t device, sp_stream_t* stream) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(stream, entry, "stream (the output)");
    streampool::stream s(d->dev);
    void* queue = s.ref().native();
    streampool::c_api::note_owned_queue(queue, d->dev.id());
    try {
      *stream = add_stream(std::make_unique<stream_payload>(std::move(s), queue, true));
    } catch (...) {
      streampool::c_api::forget_owned_queue(queue);
      throw;
    }
  });
}

sp_status_t sp_stream_wrap(sp_device_t device, void* native_stream, sp_stream_t* stream) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(stream, entry, "stream (the output)");
    // A framework's "current stream" is often 0, CUDA's legacy default stream, wrapped by its
    // other name as the native-handle path does. Other backends have no such stream: refuse
    // rather than guess one, which could order work differently from what the caller means.
    void* queue = streampool::c_api::wrappable_queue(d->dev, native_stream);
    if (queue == nullptr) {
      const std::string& backend = d->dev.get_backend().name();
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  std::string("streampool: ") + entry +
                      ": native_stream NULL means the legacy default stream, which the " + backend +
                      " backend (device " + std::to_string(d->dev.id()) +
                      ") does not have; use sp_stream_create"};
    }
    streampool::c_api::check_native_queue(d->dev, queue, entry);
    const sp_stream_t h = add_stream(
        std::make_unique<stream_payload>(streampool::stream::wrap(d->dev, queue), queue, false));
    try {
      wrapper_index& w = wrappers();
      std::lock_guard lock(w.mu);
      w.by_queue[queue].push_back(handle_value(h));
    } catch (...) {
      (void)sp_stream_destroy(h);
      throw;
    }
    *stream = h;
  });
}

sp_status_t sp_stream_destroy(sp_stream_t stream) {
  return guarded(__func__, [&](const char* entry) {
    const std::uint64_t h = handle_value(stream);
    // Then the payload goes: the stream waits for its work and retires its timeline. Memory it
    // used carries tokens, never the stream, so it may be freed (with stream NULL) and reused
    // later in any order.
    destroy_handle<stream_payload>(handle_kind::stream, stream, entry, "stream",
                                   [h, entry](stream_payload& s) { tear_down(s, h, entry); });
  });
}

sp_status_t sp_stream_release(sp_stream_t stream) {
  return guarded(__func__, [&](const char* entry) {
    const std::uint64_t h = handle_value(stream);
    bool owns = false;
    void* queue = nullptr;
    {
      const auto s = stream_or_orphan_of(stream, entry);
      owns = s->owns_queue;
      // Pinned twice on this thread: once here, once by a call in flight on it.
      if (!owns && pins_here(s.pinned_as()) > 1) {
        throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                    format("streampool: %s: stream handle %p is in use by a call in flight on "
                           "this thread (a reclaim hook runs inside a call on it): release it "
                           "after that call returns; nothing was released",
                           entry, printf_arg(stream))};
      }
      if (!owns && s->orphaned_by.load(std::memory_order_relaxed) == 0) queue = s->queue;
    }
    if (owns) {
      // An owned queue can only be destroyed idle: this is sp_stream_destroy.
      destroy_handle<stream_payload>(handle_kind::stream, stream, entry, "stream",
                                     [h, entry](stream_payload& p) { tear_down(p, h, entry); });
      return;
    }
    // A wrapper: the registry's wrappers of its queue (which refuses, changing nothing, when a
    // call of this thread uses one), then the handle, without deferring: the owner destroys the
    // queue as soon as this returns.
    if (queue != nullptr) (void)streampool::c_api::release_wrappers_of(queue);
    destroy_handle<stream_payload>(
        handle_kind::stream, stream, entry, "stream",
        [h](stream_payload& p) {
          forget_wrapper(p.queue, h);
          // A last marker, and the queue is dropped without waiting; memory it used waits for
          // the marker. (An orphan was released when its queue went: nothing happens.)
          p.s.release();
        },
        /*may_defer=*/false);
  });
}

sp_status_t sp_stream_synchronize(sp_stream_t stream) {
  return guarded(__func__, [&](const char* entry) {
    const auto s = stream_or_orphan_of(stream, entry);
    // An orphan's work finished before its queue was destroyed: nothing is left to wait for.
    if (s->orphaned_by.load(std::memory_order_seq_cst) != 0) return;
    s->s.synchronize();
  });
}

sp_status_t sp_stream_wait_stream(sp_stream_t waiter, sp_stream_t other) {
  return guarded(__func__, [&](const char* entry) {
    const auto w = stream_of(waiter, entry, "waiter");
    const auto o = stream_of(other, entry, "other");
    if (!(w->s.get_device() == o->s.get_device())) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  std::string("streampool: ") + entry +
                      ": the streams belong to different devices (" +
                      std::to_string(w->s.get_device().id()) + " and " +
                      std::to_string(o->s.get_device().id()) + ")"};
    }
    w->s.ref().wait(o->s.ref().now());
  });
}

sp_status_t sp_stream_native(sp_stream_t stream, void** native_stream) {
  return guarded(__func__, [&](const char* entry) {
    const auto s = stream_of(stream, entry);
    require(native_stream, entry, "native_stream");
    *native_stream = s->s.ref().native();
  });
}

}  // extern "C"
