#include "native_streams.hpp"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

namespace streampool::c_api {
namespace {

constexpr std::uintptr_t cuda_legacy = 0x1;      // CU_STREAM_LEGACY
constexpr std::uintptr_t cuda_per_thread = 0x2;  // CU_STREAM_PER_THREAD

struct registry {
  std::mutex mu;
  std::map<std::pair<std::uint64_t, void*>, std::unique_ptr<stream>> wrapped;
};
// Bumped (under the registry's mutex) by every release; per-thread cache entries of an older
// generation are ignored.
std::atomic<std::uint64_t> generation{0};
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

struct cache_entry {
  std::uint64_t device_id = 0;
  void* handle = nullptr;
  std::uint64_t generation = 0;   // of the registry when the wrapper was found
  std::optional<stream_ref> ref;  // empty: an unused entry
};
thread_local std::array<cache_entry, 8> cache{};
thread_local unsigned cache_next = 0;

void remember(std::uint64_t device_id, void* handle, std::uint64_t gen, stream_ref s) noexcept {
  cache[cache_next++ % cache.size()] = {device_id, handle, gen, s};
}

bool is_cuda(const device& d) { return d.get_backend().name() == "cuda"; }

}  // namespace

namespace detail {
std::optional<stream_ref> lookup_cached(std::uint64_t device_id, void* handle) noexcept {
  const std::uint64_t now = generation.load(std::memory_order_acquire);
  for (const cache_entry& e : cache) {
    if (e.ref && e.device_id == device_id && e.handle == handle && e.generation == now)
      return e.ref;
  }
  return std::nullopt;
}
}  // namespace detail

void* wrappable_queue(const device& d, void* handle) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): CU_STREAM_LEGACY is a handle value, not an address
  return handle == nullptr && is_cuda(d) ? reinterpret_cast<void*>(cuda_legacy) : handle;
}

stream_ref native_stream(const device& d, void* handle) {
  if (std::optional<stream_ref> cached = detail::lookup_cached(d.id(), handle)) return *cached;
  // Read before the lookup: a release between the two leaves the entry stale, never wrong.
  const std::uint64_t gen = generation.load(std::memory_order_acquire);
  std::optional<stream_ref> s;
  const auto h = reinterpret_cast<std::uintptr_t>(handle);
  if (is_cuda(d) && h == cuda_per_thread) {
    // The legacy wrapper too, so that all_native_stream_points covers this thread's work.
    (void)native_stream(d, nullptr);
    for (auto& [id, w] : this_thread_defaults.wrapped) {
      if (id == d.id()) s = w->ref();
    }
    if (!s) {
      this_thread_defaults.wrapped.emplace_back(
          d.id(),
          // NOLINTNEXTLINE(performance-no-int-to-ptr): CU_STREAM_LEGACY is a handle, not an address
          std::make_unique<stream>(stream::wrap(d, reinterpret_cast<void*>(cuda_legacy))));
      s = this_thread_defaults.wrapped.back().second->ref();
    }
  } else {
    // The legacy default stream has two names (0 and CU_STREAM_LEGACY): one wrapper for both.
    void* key = wrappable_queue(d, handle);
    STREAMPOOL_EXPECTS(key != nullptr, "native stream: a null handle on a non-CUDA device");
    registry& r = the_registry();
    std::lock_guard lock(r.mu);
    auto& w = r.wrapped[{d.id(), key}];
    if (!w) w = std::make_unique<stream>(stream::wrap(d, key));
    s = w->ref();
  }
  remember(d.id(), handle, gen, *s);
  return *s;
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

}  // namespace streampool::c_api

namespace streampool::c_api {

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
  if (h == 0 || h == cuda_legacy || h == cuda_per_thread) {
    throw logic_error(streampool::detail::format(
        "native stream %s is CUDA's %s default stream, which is never destroyed: there is nothing "
        "to release",
        streampool::detail::format_ptr(handle).c_str(),
        h == cuda_per_thread ? "per-thread" : "legacy"));
  }
  return release_wrappers_of(handle);
}

std::size_t release_wrappers_of(void* handle) {
  const auto h = reinterpret_cast<std::uintptr_t>(handle);
  if (h == 0 || h == cuda_legacy || h == cuda_per_thread) return 0;  // never destroyed
  // Every device's wrapper of the handle: a native stream may reach streampool through more than
  // one device handle of its GPU.
  std::vector<std::unique_ptr<stream>> gone;
  {
    registry& r = the_registry();
    std::lock_guard lock(r.mu);
    for (auto it = r.wrapped.begin(); it != r.wrapped.end();) {
      if (it->first.second == handle) {
        gone.push_back(std::move(it->second));
        it = r.wrapped.erase(it);
      } else {
        ++it;
      }
    }
    if (!gone.empty()) generation.fetch_add(1, std::memory_order_acq_rel);
  }
  // Outside the lock: each records its last marker on the queue, which is still alive.
  for (auto& w : gone) w->release();
  return gone.size();
}

}  // namespace streampool::c_api
