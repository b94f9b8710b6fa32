// streampool C ABI: native stream handles wrapped once, and the queues the C layer made
// (native_streams.hpp).
#include "native_streams.hpp"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "handles.hpp"
#include "streampool/backend.hpp"
#include "streampool/error.hpp"

namespace streampool::c_api {
namespace {

using streampool::detail::format;

struct registry {
  std::mutex mu;
  std::map<std::pair<std::uint64_t, void*>, std::unique_ptr<stream>> wrapped;
};
registry& the_registry() {
  static auto* r = new registry;  // leaked: frees may come from static destructors
  return *r;
}

// Per-thread default streams: a timeline per thread (work on it is ordered only on that thread),
// but markers and waits go through the legacy default stream, which is ordered after and before
// every blocking stream (a per-thread default stream is one): a marker recorded on it covers the
// thread's work from any thread, which recording on CU_STREAM_PER_THREAD would not.
struct per_thread_defaults {
  std::vector<std::pair<std::uint64_t, std::unique_ptr<stream>>> wrapped;
};
thread_local per_thread_defaults this_thread_defaults;

void remember(std::uint64_t device_id, void* handle, std::uint64_t gen,
              const stream* wrapper) noexcept {
  thread_state& t = this_thread();
  t.native_cache[t.native_cache_next++ % t.native_cache.size()] = {device_id, handle, gen, wrapper};
}

bool is_cuda(const device& d) { return d.get_backend().kind() == backend_kind::cuda; }

struct owned_queues {
  std::mutex mu;
  std::unordered_map<void*, std::uint64_t> device_of;  // queue -> device id
};
owned_queues& the_owned_queues() {
  static auto* q = new owned_queues;  // leaked, like the registry
  return *q;
}

std::optional<std::uint64_t> owner_device(void* queue) {
  owned_queues& o = the_owned_queues();
  std::lock_guard lock(o.mu);
  auto it = o.device_of.find(queue);
  return it == o.device_of.end() ? std::nullopt : std::optional(it->second);
}

/// Removes every wrapper of `handle` from the registry and returns them; refuses (changing
/// nothing) when a call of this thread pins one of them.
std::vector<std::unique_ptr<stream>> take_wrappers(void* handle) {
  std::vector<std::unique_ptr<stream>> gone;
  registry& r = the_registry();
  std::lock_guard lock(r.mu);
  for (auto& [key, w] : r.wrapped) {
    if (key.second == handle && pins_here(w.get()) > 0) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: native stream %p is in use by a call in flight on this "
                         "thread (a reclaim hook runs inside a call on it): release it after "
                         "that call returns; nothing was released",
                         printf_arg(handle))};
    }
  }
  for (auto it = r.wrapped.begin(); it != r.wrapped.end();) {
    if (it->first.second == handle) {
      gone.push_back(std::move(it->second));
      it = r.wrapped.erase(it);
    } else {
      ++it;
    }
  }
  if (!gone.empty()) wrapper_generation.fetch_add(1, std::memory_order_seq_cst);
  return gone;
}

}  // namespace

// Bumped (under the registry's mutex) by every release; per-thread cache entries of an older
// generation are ignored.
std::atomic<std::uint64_t> wrapper_generation{0};

void* wrappable_queue(const device& d, void* handle) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): CU_STREAM_LEGACY is a handle value, not an address
  return handle == nullptr && is_cuda(d) ? reinterpret_cast<void*>(cuda_legacy_stream) : handle;
}

void check_native_queue(const device& d, void* queue, const char* function) {
  backend& b = d.get_backend();
  // Only the host backend can tell its queues from other values: it keeps a set of them and
  // refuses to record a marker on anything else. A marker recorded and released at once is
  // harmless (it orders nothing), and this runs once per wrapper, not per call.
  if (b.kind() != backend_kind::host) return;
  try {
    b.release_marker(b.record(queue));
  } catch (const logic_error&) {
    const std::optional<std::uint64_t> owner = owner_device(queue);
    throw error{
        STREAMPOOL_STATUS_INVALID_ARGUMENT,
        format("streampool: %s: native stream %p is not a queue of device %llu (host backend)%s",
               function, printf_arg(queue), printf_arg(d.id()),
               owner ? format(": it is a queue of device %llu", printf_arg(*owner)).c_str()
                     : " (a destroyed queue, or not a queue)")};
  }
}

pinned_stream native_stream(const device& d, void* handle, const char* function) {
  if (pinned_stream cached; lookup_cached(this_thread(), d.id(), handle, cached)) return cached;
  const auto h = reinterpret_cast<std::uintptr_t>(handle);
  if (is_cuda(d) && h == cuda_per_thread_stream) {
    // The legacy wrapper too, so that all_native_stream_points covers this thread's work.
    (void)native_stream(d, nullptr, function);
    const stream* w = nullptr;
    for (auto& [id, s] : this_thread_defaults.wrapped) {
      if (id == d.id()) w = s.get();
    }
    if (w == nullptr) {
      this_thread_defaults.wrapped.emplace_back(
          d.id(),
          // NOLINTNEXTLINE(performance-no-int-to-ptr): CU_STREAM_LEGACY is a handle, not an address
          std::make_unique<stream>(stream::wrap(d, reinterpret_cast<void*>(cuda_legacy_stream))));
      w = this_thread_defaults.wrapped.back().second.get();
    }
    // This thread's own: no release reaches it. Pinned all the same, like every wrapper.
    pin p(w);
    remember(d.id(), handle, wrapper_generation.load(std::memory_order_seq_cst), w);
    return {std::move(p), w};
  }
  // The legacy default stream has two names (0 and CU_STREAM_LEGACY): one wrapper for both.
  void* key = wrappable_queue(d, handle);
  STREAMPOOL_EXPECTS(key != nullptr, "native stream: a null handle on a non-CUDA device");
  registry& r = the_registry();
  {
    std::unique_lock lock(r.mu);
    if (r.wrapped.find({d.id(), key}) == r.wrapped.end()) {
      // A new wrapper: its queue is checked first, outside the lock (a backend call).
      lock.unlock();
      check_native_queue(d, key, function);
    }
  }
  std::lock_guard lock(r.mu);
  auto& w = r.wrapped[{d.id(), key}];
  if (!w) w = std::make_unique<stream>(stream::wrap(d, key));
  // Pinned under the registry's lock: a release removes it under the same lock, so it either
  // comes after this (and sees the pin) or before (and this found no wrapper).
  pin p(w.get());
  remember(d.id(), handle, wrapper_generation.load(std::memory_order_seq_cst), w.get());
  return {std::move(p), w.get()};
}

std::vector<token> all_native_stream_points(std::uint64_t device_id, const timeline* except) {
  std::vector<token> out;
  registry& r = the_registry();
  std::lock_guard lock(r.mu);
  for (auto& [key, w] : r.wrapped) {
    if (key.first != device_id || w->get_timeline().get() == except) continue;
    out.push_back(w->ref().now());
  }
  return out;
}

void synchronize_native_streams(std::uint64_t device_id) {
  // Timelines, not stream_refs: a wrapper may be released meanwhile; its timeline then waits
  // for its last marker.
  std::vector<token> all;
  {
    registry& r = the_registry();
    std::lock_guard lock(r.mu);
    for (auto& [key, w] : r.wrapped)
      if (key.first == device_id) all.push_back(w->ref().now());
  }
  for (const token& t : all) t.line->wait_host(t.at);
}

std::size_t release_native_stream(void* handle) {
  const auto h = reinterpret_cast<std::uintptr_t>(handle);
  if (h == 0 || h == cuda_legacy_stream || h == cuda_per_thread_stream) {
    throw logic_error(format(
        "native stream %p is CUDA's %s default stream, which is never destroyed: there is nothing "
        "to release",
        printf_arg(handle), h == cuda_per_thread_stream ? "per-thread" : "legacy"));
  }
  return release_wrappers_of(handle);
}

std::size_t release_wrappers_of(void* handle) {
  const auto h = reinterpret_cast<std::uintptr_t>(handle);
  if (h == 0 || h == cuda_legacy_stream || h == cuda_per_thread_stream)
    return 0;  // never destroyed
  // Every device's wrapper of the handle: a native stream may reach streampool through more than
  // one device handle of its GPU.
  std::vector<std::unique_ptr<stream>> gone = take_wrappers(handle);
  // Out of reach now; calls in flight on other threads finish on them first (they may record on
  // the queue, which is still alive).
  for (auto& w : gone) wait_unpinned(w.get());
  // Each records its last marker on the queue and lets go of it. (If recording fails, the ones
  // left are destroyed instead, which waits for their work: the queue is still alive.)
  for (auto& w : gone) w->release();
  return gone.size();
}

void note_owned_queue(void* queue, std::uint64_t device_id) {
  owned_queues& o = the_owned_queues();
  std::lock_guard lock(o.mu);
  o.device_of[queue] = device_id;
}

void forget_owned_queue(void* queue) {
  owned_queues& o = the_owned_queues();
  std::lock_guard lock(o.mu);
  o.device_of.erase(queue);
}

}  // namespace streampool::c_api
