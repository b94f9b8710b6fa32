// streampool C ABI: native stream handles, each wrapped once (for sp_pool_*_native and the
// PyTorch plug-in, which are handed a CUstream on every call).
//
// Glossary
//   native handle  what a framework passes: a CUstream (or a host backend queue). On CUDA two
//                  values are not streams: 0, the legacy default stream, and CU_STREAM_PER_THREAD
//                  (2), the calling thread's per-thread default stream.
//   wrapper        a streampool::stream made by stream::wrap around the handle: its timeline is
//                  what tokens refer to. A wrapper lives until its handle is released
//                  (sp_native_stream_release: the framework is about to destroy the stream), or
//                  for good (PyTorch's streams live as long as the process; a wrapper costs a few
//                  hundred bytes); those of per-thread default streams go with their thread.
//   release        the wrapper records a last marker and drops the queue without waiting
//                  (stream::release), and leaves the registry: the handle may be destroyed at
//                  once, and its value may come back naming a new stream, which gets a new
//                  wrapper. Memory the old stream used waits for that marker, never the handle.
//
// Lookup: a small per-thread cache of the last handles used (no lock), then one registry under a
// mutex (first use of a handle on a thread). Each release bumps a generation counter; a cache
// entry from an older generation is not used (it may name a released wrapper), so a thread never
// reaches a wrapper after its release. What stays uncovered: a native stream destroyed without a
// release while streampool still knows it; its handle must not be used again.
#pragma once

#include <optional>
#include <vector>

#include "streampool/device.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"

namespace streampool::c_api {

/// What stream::wrap takes for `handle` on `d`: the handle itself, except that on CUDA the legacy
/// default stream's first name, 0, becomes its other one, CU_STREAM_LEGACY (the backends take no
/// null queue). nullptr for a null handle on a backend without such a stream.
[[nodiscard]] void* wrappable_queue(const device& d, void* handle);
/// The wrapper of `handle` on device `d` (created on first use).
[[nodiscard]] stream_ref native_stream(const device& d, void* handle);
/// The same, when only the device's id is at hand: the cache hit needs no device; a miss calls
/// `get_device()` (which may throw when the device is gone).
template <class GetDevice>
[[nodiscard]] stream_ref native_stream_of(std::uint64_t device_id, void* handle,
                                          GetDevice&& get_device);

/// A token for every wrapped stream of device `device_id` except `except`: what a free must wait
/// for when the streams that used the memory are unknown (the PyTorch plug-in without its
/// record_stream hook).
[[nodiscard]] std::vector<token> all_native_stream_points(std::uint64_t device_id,
                                                          const timeline* except);

/// Waits on the host for the work submitted so far to every wrapped stream of `device_id`.
void synchronize_native_streams(std::uint64_t device_id);

/// Releases every device's wrapper of `handle` (see glossary); returns how many there were.
/// Throws logic_error for 0, 1 and 2, CUDA's legacy and per-thread default streams, which are
/// never destroyed.
std::size_t release_native_stream(void* handle);
/// The same without the refusal: 0 for CUDA's default streams. For a streampool stream about to
/// go (sp_stream_destroy, sp_stream_release): DLPack may have handed its queue to the registry.
std::size_t release_wrappers_of(void* handle);

namespace detail {
/// The stream this thread last found for (device, handle), if it is in the thread's small cache.
std::optional<stream_ref> lookup_cached(std::uint64_t device_id, void* handle) noexcept;
}  // namespace detail

template <class GetDevice>
stream_ref native_stream_of(std::uint64_t device_id, void* handle, GetDevice&& get_device) {
  if (std::optional<stream_ref> s = detail::lookup_cached(device_id, handle)) return *s;
  return native_stream(get_device(), handle);
}

}  // namespace streampool::c_api
