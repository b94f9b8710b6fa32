// streampool: the class behind the native allocator, PyTorch's CUDAAllocator on streampool's pools
// (native_allocator.hpp says what it does). Its members are defined by concept: allocation and
// free (allocator.cpp), statistics and snapshots (allocator_statistics.cpp), private pools and
// checkpoints (allocator_pools.cpp), devices and processes (allocator_devices.cpp).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "block_map.hpp"
#include "graph_arena.hpp"
#include "graph_pools.hpp"
#include "history.hpp"
#include "ipc.hpp"
#include "plugin_pools.hpp"
#include "streampool.h"

namespace streampool::torch_native {

namespace cca = c10::cuda::CUDACachingAllocator;

/// "streampool: <what> is not supported yet ...": a clear error where PyTorch's allocator would do
/// something that this one does not do.
[[noreturn]] inline void not_yet(const char* what) {
  TORCH_CHECK(false, "streampool: ", what,
              " is not supported yet by streampool's native PyTorch allocator; use PyTorch's own "
              "allocator for it");
}

/// The DataPtr deleter of every block: frees it through the installed allocator.
void delete_block(void* p);

class allocator final : public cca::CUDAAllocator {
 public:
  // ---- c10::Allocator ----
  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // ---- c10::DeviceAllocator ----
  bool initialized() override { return device_count_.load() > 0; }
  void emptyCache(c10::MempoolId_t id) override;
  using cca::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // ---- CUDAAllocator ----
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override { delete_block(ptr); }
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override {
    return state_of(device).fraction.load();
  }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override {
    return {};
  }
  void enable(bool value) override {
    if (!value) not_yet("caching_allocator_enable(False)");
  }
  bool isEnabled() const override { return true; }
  void cacheInfo(c10::DeviceIndex device, size_t* largest) override;
  void* getBaseAllocation(void*, size_t*) override { not_yet("getBaseAllocation"); }
  cca::SnapshotInfo snapshot(c10::MempoolId_t id, bool include_traces) override;
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t id, bool use) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override;
  cca::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override { return history_.on(); }
  void recordHistory(bool enabled, c10::CachingDeviceAllocator::CreateContextFn recorder,
                     size_t max_entries, c10::CachingDeviceAllocator::RecordContext when,
                     bool clear, const std::vector<std::string>& skip_actions) override {
    history_.configure(enabled, recorder, max_entries, when, clear, skip_actions);
  }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override;
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker) override {
    not_yet("allocator trace trackers");
  }
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override;
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::MempoolId_t id) override;
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> saved) override;
  std::string name() override { return "streampool"; }

  /// Frees p (raw_delete, the DataPtr deleter). Never throws: it runs in tensor destructors.
  void free(void* p) noexcept;

 private:
  /// The pools' own counters that PyTorch reports as accumulated statistics.
  struct accumulated {
    std::uint64_t device_allocs = 0;  // driver allocations and granules created
    std::uint64_t device_frees = 0;   // driver frees and granules released
    std::uint64_t alloc_retries = 0;  // allocations retried after trimming (num_alloc_retries)
  };
  static accumulated accumulated_of(const sp_pool_statistics_t& ps);

  /// One CUDA device's: PyTorch's statistics of its blocks, and its settings.
  struct state {
    std::mutex mu;
    c10::CachingDeviceAllocator::DeviceStats stats;
    accumulated base;  // the pools' counters at the last resetAccumulatedStats; guarded by mu
    std::atomic<double> fraction{1.0};
    std::atomic<bool> pool_made{false};
  };

  /// Counts b into (`out`: a block handed out) or out of s: allocations, active blocks and their
  /// bytes, in the aggregate and in PyTorch's pool kind of b's size. Caller holds the state's mu.
  static void count(c10::CachingDeviceAllocator::DeviceStats& s, const block& b, bool out);

  /// The statistics of device `device`'s pools: the default pool's, with its private pools'
  /// reserved memory and counters added (PyTorch counts its graph pools' segments in
  /// reserved_bytes), and, where `segments` is given, the private pools' segment counts.
  sp_pool_statistics_t pool_statistics(c10::DeviceIndex device, graph_arena::counts* segments);

  state& state_of(c10::DeviceIndex device) {
    TORCH_CHECK(device >= 0 && device < max_devices, "streampool: CUDA device ",
                static_cast<int>(device), " is out of range [0, ", max_devices, ")");
    // DeviceIndex is a signed char, checked non-negative above.
    return states_[static_cast<std::size_t>(static_cast<unsigned char>(device))];
  }
  bool pool_made(c10::DeviceIndex device) { return state_of(device).pool_made.load(); }

  /// A block of n bytes on `stream` of `device`, from the private pool a routing sends it to,
  /// else the default pool; counted, mapped and recorded in the history.
  void* alloc(std::size_t n, c10::DeviceIndex device, cudaStream_t stream);
  /// A block of the default pool; where it has no memory left, a free block of a MemPool made
  /// with use_on_oom (then `pp` and `size` say whose and how large), else torch.OutOfMemoryError.
  void* default_alloc(state& st, std::size_t n, c10::DeviceIndex device, cudaStream_t stream,
                      private_pool*& pp, std::size_t& size);
  [[noreturn]] void out_of_memory(state& st, std::size_t n, c10::DeviceIndex device,
                                  const char* what);

  std::atomic<int> device_count_{0};
  std::array<state, max_devices> states_;
  history history_;
  ipc ipc_;
  graph_pools graphs_{[](c10::DeviceIndex d) { return device_handle(d); }};
  block_map blocks_;
  std::mutex observers_mu_;
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
};

/// The allocator install() made (never destroyed: tensors die in static destructors); null
/// before.
extern allocator* the_allocator;

}  // namespace streampool::torch_native
