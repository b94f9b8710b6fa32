// streampool C ABI: native stream handles, each wrapped once (for sp_pool_*_native and the
// PyTorch plug-in, which are handed a CUstream on every call), and the queues the C layer made.
//
// Glossary
//   native handle  what a framework passes: a CUstream (or a host backend queue). On CUDA two
//                  values are not streams: 0 (or CU_STREAM_LEGACY), the legacy default stream, and
//                  CU_STREAM_PER_THREAD, the calling thread's per-thread default stream.
//   wrapper        a streampool::stream made by stream::wrap around the handle: its timeline is
//                  what tokens refer to. A wrapper lives until its handle is released
//                  (sp_native_stream_release: the framework is about to destroy the stream), or
//                  for good (PyTorch's streams live as long as the process; a wrapper costs a few
//                  hundred bytes); those of per-thread default streams go with their thread.
//   release        the wrapper leaves the registry (no call finds it any more), then, once no
//                  call in flight on another thread uses it, records a last marker and drops the
//                  queue without waiting for its work (stream::release): the handle may be
//                  destroyed as soon as the release returns, and its value may come back naming
//                  a new stream, which gets a new wrapper. Memory the old stream used waits for
//                  that marker, never the handle.
//   pinned stream  a wrapper with a pin (pins.hpp) held for the duration of one call: what makes a
//                  release on another thread wait for the call instead of freeing the wrapper
//                  under it. A call either finishes on the old wrapper or finds the handle
//                  released and wraps it anew.
//   owned queue    a queue of a stream made by sp_stream_create, with its device: what lets a
//                  refusal name the device a foreign queue belongs to.
//
// Lookup: a small per-thread cache of the last handles used (no lock), then one registry under a
// mutex (first use of a handle on a thread). Each release bumps a generation counter; a cache
// entry from an older generation is not used. A cache hit pins the wrapper, then checks the
// generation (pins.hpp says why that order is enough). What stays uncovered: a native stream
// destroyed without a release while streampool still knows it; its handle must not be used again.
// The host backend can tell its queues from anything else: a handle that is not one of the
// device's queues is refused when it is first wrapped. CUDA cannot (a destroyed or garbage
// CUstream is undefined behaviour in the driver itself); nor can OpenCL or Level Zero.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "pins.hpp"
#include "streampool/device.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"

namespace streampool::c_api {

/// CUDA's handles of its default streams (cuda.h's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD),
/// which no CUDA header is needed for: they are fixed values of the driver's ABI.
inline constexpr std::uintptr_t cuda_legacy_stream = 0x1;
inline constexpr std::uintptr_t cuda_per_thread_stream = 0x2;

/// A wrapper pinned for the caller's call (see glossary).
class pinned_stream {
 public:
  pinned_stream() = default;  // empty, until set
  pinned_stream(pin p, const stream* wrapper) : pin_(std::move(p)), wrapper_(wrapper) {}
  [[nodiscard]] stream_ref ref() const { return wrapper_->ref(); }
  operator stream_ref() const { return ref(); }  // NOLINT(google-explicit-constructor): a view

 private:
  friend bool lookup_cached(thread_state& t, std::uint64_t device_id, void* handle,
                            pinned_stream& out);
  pin pin_;
  const stream* wrapper_ = nullptr;
};

/// The generation of the wrapper registry: bumped by every release (native_streams.cpp).
extern std::atomic<std::uint64_t> wrapper_generation;

/// The wrapper this thread last found for (device, handle), pinned into `out` (empty), if it is in
/// the thread's small cache and still current. Inline: the per-call path of the *_native calls
/// and the PyTorch plug-in.
inline bool lookup_cached(thread_state& t, std::uint64_t device_id, void* handle,
                          pinned_stream& out) {
  for (native_cache_entry& e : t.native_cache) {
    if (e.wrapper == nullptr || e.device_id != device_id || e.handle != handle) continue;
    out.pin_.set(t, e.wrapper);
    // After the pin: a release either bumped the generation before this load (the entry is
    // stale, the wrapper maybe gone: not touched) or sees the pin and waits for this call.
    if (wrapper_generation.load(std::memory_order_seq_cst) == e.generation) [[likely]] {
      out.wrapper_ = e.wrapper;
      return true;
    }
    out.pin_.reset();
    e.wrapper = nullptr;  // stale: the lookup that follows remembers the current one
  }
  return false;
}

/// What stream::wrap takes for `handle` on `d`: the handle itself, except that on CUDA the legacy
/// default stream's first name, 0, becomes its other one, CU_STREAM_LEGACY (the backends take no
/// null queue). nullptr for a null handle on a backend without such a stream.
[[nodiscard]] void* wrappable_queue(const device& d, void* handle);
/// Refuses, with error{INVALID_ARGUMENT} naming `function`, the queue and the device (and the
/// device whose queue it is, when the C layer made it), a queue the backend of `d` says is not
/// one of its own. Only the host backend can tell; for the others this checks nothing.
void check_native_queue(const device& d, void* queue, const char* function);

/// The wrapper of `handle` on device `d` (created on first use), pinned.
[[nodiscard]] pinned_stream native_stream(const device& d, void* handle,
                                          const char* function = "native stream");
/// The same, when only the device's id is at hand: the cache hit needs no device; a miss calls
/// `get_device()` (which may throw when the device is gone). `t`: the calling thread's state.
template <class GetDevice>
[[nodiscard]] pinned_stream native_stream_of(thread_state& t, std::uint64_t device_id, void* handle,
                                             GetDevice&& get_device, const char* function);

/// A token for every wrapped stream of device `device_id` except `except`: what a free must wait
/// for when the streams that used the memory are unknown (the PyTorch plug-in without its
/// record_stream hook).
[[nodiscard]] std::vector<token> all_native_stream_points(std::uint64_t device_id,
                                                          const timeline* except);

/// Waits on the host for the work submitted so far to every wrapped stream of `device_id`.
void synchronize_native_streams(std::uint64_t device_id);

/// Releases every device's wrapper of `handle` (see glossary); returns how many there were.
/// Throws logic_error for 0, 1 and 2, CUDA's legacy and per-thread default streams, which are
/// never destroyed, and error{INVALID_ARGUMENT} when a call in flight on this thread uses one of
/// the wrappers (a reclaim hook inside a call on the handle): that call would have to finish
/// first. Nothing changes then.
std::size_t release_native_stream(void* handle);
/// The same without the refusal of CUDA's default streams (0 for them). For a streampool stream
/// about to go (sp_stream_destroy, sp_stream_release): DLPack may have handed its queue to the
/// registry.
std::size_t release_wrappers_of(void* handle);

/// The owned queues (see glossary): noted by sp_stream_create, forgotten before the queue is
/// destroyed.
void note_owned_queue(void* queue, std::uint64_t device_id);
void forget_owned_queue(void* queue);

template <class GetDevice>
pinned_stream native_stream_of(thread_state& t, std::uint64_t device_id, void* handle,
                               GetDevice&& get_device, const char* function) {
  pinned_stream s;  // the one object returned (no move on the way out)
  if (!lookup_cached(t, device_id, handle, s)) [[unlikely]]
    s = native_stream(get_device(), handle, function);
  return s;
}

}  // namespace streampool::c_api
