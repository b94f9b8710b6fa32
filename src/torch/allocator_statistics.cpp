// streampool: what PyTorch reads of the native allocator's memory (allocator.hpp): its statistics,
// their resets, the memory fraction and snapshots.
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <mutex>

#include "allocator.hpp"
#include "check.hpp"
#include "torch_snapshot.hpp"

namespace streampool::torch_native {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

std::array<std::array<Stat, 3>*, 9> stat_arrays(DeviceStats& s) {
  return {&s.allocation,      &s.segment,        &s.active,       &s.inactive_split,
          &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
          &s.requested_bytes};
}

/// What the snapshot says of the allocator's settings: PyTorch's defaults where a setting has no
/// counterpart (every field, so that nothing reads an indeterminate value).
cca::AllocatorConfigInfo config_info() {
  cca::AllocatorConfigInfo c;
  c.garbage_collection_threshold = 0;
  c.max_split_size = std::numeric_limits<std::size_t>::max();
  c.pinned_num_register_threads = 1;
  c.expandable_segments = false;
  c.release_lock_on_malloc = false;
  c.pinned_use_host_register = false;
  c.graph_capture_record_stream_reuse = false;
  c.last_allocator_settings = "streampool";
  return c;
}

}  // namespace

allocator::accumulated allocator::accumulated_of(const sp_pool_statistics_t& ps) {
  return {ps.upstream_allocations + ps.upstream_creates,
          ps.upstream_deallocations + ps.upstream_releases, ps.alloc_retries};
}

DeviceStats allocator::getDeviceStats(c10::DeviceIndex device) {
  state& st = state_of(device);
  graph_arena::counts segments;
  const sp_pool_statistics_t ps = pool_statistics(device, &segments);
  const std::lock_guard lock(st.mu);
  DeviceStats out = st.stats;
  Stat& reserved = out.reserved_bytes[static_cast<std::size_t>(StatType::AGGREGATE)];
  // The pool's reserved count and its peak are exact; resetPeakStats resets the pool's peak.
  reserved.current = static_cast<std::int64_t>(ps.reserved_bytes);
  reserved.peak = static_cast<std::int64_t>(ps.peak_reserved_bytes);
  // The pools' counters from the last resetAccumulatedStats on (private pools that are gone
  // take theirs with them: never below 0).
  const accumulated now = accumulated_of(ps);
  const auto since = [](std::uint64_t n, std::uint64_t base) {
    return static_cast<std::int64_t>(n > base ? n - base : 0);
  };
  out.num_device_alloc = since(now.device_allocs, st.base.device_allocs);
  out.num_device_free = since(now.device_frees, st.base.device_frees);
  out.num_alloc_retries = since(now.alloc_retries, st.base.alloc_retries);
  // Segments: the private pools' exactly, by kind; the default pool's whole driver allocations
  // and mapped granules (PyTorch's expandable segments' unit) in the aggregate only, since its
  // statistics do not split them by kind. Inactive split blocks: the private pools' (the
  // default pool's free space is its own business: docs/torch.md).
  const auto all = static_cast<std::size_t>(StatType::AGGREGATE);
  const std::array<std::size_t, 2> kinds{static_cast<std::size_t>(StatType::SMALL_POOL),
                                         static_cast<std::size_t>(StatType::LARGE_POOL)};
  out.segment[all].current =
      static_cast<std::int64_t>((ps.upstream_allocations - ps.upstream_deallocations) +
                                (ps.upstream_creates - ps.upstream_releases));
  for (std::size_t k = 0; k < 2; ++k) {
    out.segment[kinds[k]].current = segments.segments[k];
    out.segment[all].current += segments.segments[k];
    out.inactive_split[kinds[k]].current = segments.inactive_split[k];
    out.inactive_split[all].current += segments.inactive_split[k];
    out.inactive_split_bytes[kinds[k]].current = segments.inactive_split_bytes[k];
    out.inactive_split_bytes[all].current += segments.inactive_split_bytes[k];
  }
  for (auto* a : {&out.segment, &out.inactive_split, &out.inactive_split_bytes}) {
    for (Stat& x : *a) x.peak = std::max(x.peak, x.current);
  }
  return out;
}

void allocator::resetAccumulatedStats(c10::DeviceIndex device) {
  state& st = state_of(device);
  const accumulated now = accumulated_of(pool_statistics(device, nullptr));
  const std::lock_guard lock(st.mu);
  for (auto* a : stat_arrays(st.stats)) {
    for (Stat& s : *a) s.reset_accumulated();
  }
  st.base = now;
  st.stats.num_ooms = 0;
}

void allocator::resetPeakStats(c10::DeviceIndex device) {
  state& st = state_of(device);
  const std::lock_guard lock(st.mu);
  for (auto* a : stat_arrays(st.stats)) {
    for (Stat& s : *a) s.reset_peak();
  }
  // Reserved bytes are the pool's: its peak starts again from now too.
  if (pool_made(device)) {
    check(sp_pool_reset_peak_statistics(pool_of(device)),
          "streampool: resetting the peaks of device ", static_cast<int>(device));
  }
}

sp_pool_statistics_t allocator::pool_statistics(c10::DeviceIndex device,
                                                graph_arena::counts* segments) {
  sp_pool_statistics_t ps;
  sp_pool_statistics_init(&ps);
  if (pool_made(device)) {
    check(sp_pool_get_statistics(pool_of(device), &ps), "streampool: statistics of device ",
          static_cast<int>(device));
  }
  for (private_pool* pp : graphs_.pools(device, {0, 0})) {
    if (segments != nullptr) {
      const graph_arena::counts c = pp->arena->count();
      for (std::size_t k = 0; k < 2; ++k) {
        segments->segments[k] += c.segments[k];
        segments->inactive_split[k] += c.inactive_split[k];
        segments->inactive_split_bytes[k] += c.inactive_split_bytes[k];
      }
    }
    sp_pool_statistics_t gs;
    sp_pool_statistics_init(&gs);
    if (sp_pool_get_statistics(pp->pool, &gs) != STREAMPOOL_STATUS_SUCCESS) continue;
    ps.reserved_bytes += gs.reserved_bytes;
    ps.peak_reserved_bytes += gs.peak_reserved_bytes;  // an upper bound of the joint peak
    ps.upstream_allocations += gs.upstream_allocations;
    ps.upstream_deallocations += gs.upstream_deallocations;
    ps.upstream_creates += gs.upstream_creates;
    ps.upstream_releases += gs.upstream_releases;
    ps.alloc_retries += gs.alloc_retries;
  }
  return ps;
}

void allocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK(fraction >= 0 && fraction <= 1, "streampool: memory fraction ", fraction,
              " of device ", static_cast<int>(device), " is outside [0, 1]");
  std::size_t free = 0, total = 0;
  {
    const c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  }
  const auto limit = static_cast<std::size_t>(fraction * static_cast<double>(total));
  // A fraction of 0 allows nothing: the pool's limit 0 would mean "none", so 1 byte.
  check(sp_pool_set_memory_limit(pool_of(device), limit == 0 ? 1 : limit),
        "streampool: memory fraction ", fraction, " of device ", static_cast<int>(device));
  state_of(device).fraction.store(fraction);
}

void allocator::cacheInfo(c10::DeviceIndex device, size_t* largest) {
  // What cuDNN may ask for as workspace: the device's free memory, as PyTorch's allocator starts
  // from, plus what the pool caches (a lower bound of its largest free block's reach).
  std::size_t free = 0, total = 0;
  {
    const c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  }
  if (*largest == 0) *largest = free;
}

cca::SnapshotInfo allocator::snapshot(c10::MempoolId_t id, bool include_traces) {
  cca::SnapshotInfo info;
  const int devices = std::max(device_count_.load(), 1);
  const live_block_lookup lookup = [this](const void* p, live_block_info& out) {
    block b;
    if (!blocks_.find(p, b)) return false;
    out.requested = b.requested;
    out.stream = b.stream;
    return true;
  };
  for (int d = 0; d < devices; ++d) {
    const auto device = static_cast<c10::DeviceIndex>(d);
    // {0, 0}: every pool, the default one and the private ones; else that private pool only.
    if (id == c10::MempoolId_t{0, 0} && pool_made(device)) {
      append_segments(pool_of(d), device, id, lookup, info.segments);
    }
    for (private_pool* pp : graphs_.pools(device, id))
      pp->arena->append_segments(pp->id, info.segments);
  }
  if (history_.on()) {
    history_.record(history::entry::SNAPSHOT, 0, 0, 0, nullptr, id, nullptr);
  }
  if (include_traces) info.device_traces = history_.traces(devices);
  info.config_metadata = config_info();
  return info;
}

}  // namespace streampool::torch_native
