// streampool: PyTorch's CUDA allocator interface on streampool's pools (native_allocator.hpp).
//
// The pools are the plug-in's (src/c_api/torch_plugin.cpp: one per device, large blocks per
// stream, never destroyed), reached through the C ABI only (sp_torch_*), so that this library
// depends on streampool's public interface and on PyTorch's headers, nothing else.
#include "native_allocator.hpp"

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "graph_pools.hpp"
#include "history.hpp"
#include "ipc.hpp"
#include "streampool.h"
#include "torch_snapshot.hpp"

namespace streampool::torch_native {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr int max_devices = 64;
/// PyTorch's own split between its small and large pools: blocks of at most 1 MiB are small.
constexpr std::size_t small_max = std::size_t{1} << 20;

struct block {
  std::size_t requested = 0;
  std::size_t size = 0;  // the block's usable size (sp_torch_malloc_sized)
  int device = 0;
  cudaStream_t stream = nullptr;
  private_pool* pool = nullptr;  // a PyTorch memory pool's (graph_pools.hpp); null: the default
};

/// pointer -> block, in shards by pointer (blocks are at least 256-byte aligned). Each shard is
/// an open-addressing table (linear probing, deletion by backward shift): a block costs no node
/// allocation and no division, on the path of every allocation and free.
class block_map {
 public:
  void insert(void* p, const block& b) {
    shard& s = shard_of(p);
    const std::lock_guard lock(s.mu);
    if ((s.used + 1) * 4 > s.slots.size() * 3) grow(s);
    std::size_t i = home(s, p);
    while (s.slots[i].key != nullptr && s.slots[i].key != p) i = (i + 1) & (s.slots.size() - 1);
    s.used += static_cast<std::size_t>(s.slots[i].key == nullptr);
    s.slots[i] = {p, b};
  }
  /// Removes p's entry into `out`; false if p is not a block of this allocator.
  bool take(void* p, block& out) {
    shard& s = shard_of(p);
    const std::lock_guard lock(s.mu);
    const std::size_t i = index_of(s, p);
    if (i == npos) return false;
    out = s.slots[i].value;
    erase(s, i);
    return true;
  }
  /// Calls f(pointer, block) for every block, one shard locked at a time.
  template <class F>
  void for_each(F&& f) {
    for (shard& s : shards_) {
      const std::lock_guard lock(s.mu);
      for (const slot& e : s.slots) {
        if (e.key != nullptr) f(e.key, e.value);
      }
    }
  }
  bool find(const void* p, block& out) {
    shard& s = shard_of(p);
    const std::lock_guard lock(s.mu);
    const std::size_t i = index_of(s, p);
    if (i == npos) return false;
    out = s.slots[i].value;
    return true;
  }

 private:
  static constexpr std::size_t shard_count = 64;
  static constexpr std::size_t npos = ~std::size_t{0};
  struct slot {
    void* key = nullptr;  // nullptr: empty
    block value;
  };
  struct alignas(64) shard {
    std::mutex mu;
    std::vector<slot> slots;  // empty, or a power of two in size and at most 3/4 used
    std::size_t used = 0;
  };
  shard& shard_of(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return shards_[((a >> 8) ^ (a >> 20)) % shard_count];
  }
  /// p's first slot: a multiplicative hash of the address above its 256-byte alignment.
  static std::size_t home(const shard& s, const void* p) {
    const std::uint64_t h = (reinterpret_cast<std::uintptr_t>(p) >> 8) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> 32) & (s.slots.size() - 1);
  }
  static std::size_t index_of(const shard& s, const void* p) {
    if (s.slots.empty()) return npos;
    for (std::size_t i = home(s, p);; i = (i + 1) & (s.slots.size() - 1)) {
      if (s.slots[i].key == p) return i;
      if (s.slots[i].key == nullptr) return npos;
    }
  }
  /// Empties slot i, then moves back each later entry of its run whose home allows it, so that
  /// no search stops early at the hole.
  static void erase(shard& s, std::size_t i) {
    const std::size_t mask = s.slots.size() - 1;
    for (std::size_t j = i;;) {
      s.slots[i].key = nullptr;
      for (;;) {
        j = (j + 1) & mask;
        if (s.slots[j].key == nullptr) {
          --s.used;
          return;
        }
        // The entry at j stays where its home lies cyclically in (i, j].
        const std::size_t k = home(s, s.slots[j].key);
        const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) break;
      }
      s.slots[i] = s.slots[j];
      i = j;
    }
  }
  static void grow(shard& s) {
    std::vector<slot> old(std::max<std::size_t>(64, s.slots.size() * 2));
    old.swap(s.slots);
    for (const slot& e : old) {
      if (e.key == nullptr) continue;
      std::size_t i = home(s, e.key);
      while (s.slots[i].key != nullptr) i = (i + 1) & (s.slots.size() - 1);
      s.slots[i] = e;
    }
  }
  std::array<shard, shard_count> shards_;
};

/// "streampool: <what> is not supported yet by the native allocator (issue 44)": a clear error
/// where PyTorch's allocator would do something that this one does not do yet.
[[noreturn]] void not_yet(const char* what) {
  TORCH_CHECK(false, "streampool: ", what,
              " is not supported yet by streampool's native PyTorch allocator; use PyTorch's own "
              "allocator for it");
}

/// The last streampool C ABI error, for messages.
std::string last_error() {
  const char* m = sp_last_error_message();
  return m != nullptr ? std::string(m) : std::string("(no message)");
}

/// The plug-in pool's C handle for `device`: sp_torch_pool adds a handle at each call, so it is
/// asked once per device and kept (handles[d]; a race makes two, one of which stays unused).
sp_pool_t pool_of(int device) {
  static std::array<std::atomic<sp_pool_t>, max_devices> handles{};
  std::atomic<sp_pool_t>& slot = handles.at(static_cast<std::size_t>(device));
  if (sp_pool_t h = slot.load(std::memory_order_acquire)) return h;
  sp_pool_t pool = nullptr;
  const sp_status_t st = sp_torch_pool(device, &pool);
  TORCH_CHECK(st == STREAMPOOL_STATUS_SUCCESS, "streampool: device ", device, ": ", last_error());
  sp_pool_t expected = nullptr;
  if (!slot.compare_exchange_strong(expected, pool, std::memory_order_acq_rel)) {
    (void)sp_pool_destroy(pool);
    return expected;
  }
  return pool;
}

/// The streampool device of CUDA device `device`'s pools (the plug-in pool's), asked once.
sp_device_t device_handle(c10::DeviceIndex device) {
  static std::array<std::atomic<sp_device_t>, max_devices> handles{};
  std::atomic<sp_device_t>& slot = handles.at(static_cast<std::size_t>(device));
  if (sp_device_t h = slot.load(std::memory_order_acquire)) return h;
  sp_device_t dev = nullptr;
  TORCH_CHECK(sp_pool_get_device(pool_of(device), &dev) == STREAMPOOL_STATUS_SUCCESS,
              "streampool: device ", static_cast<int>(device), ": ", last_error());
  sp_device_t expected = nullptr;
  if (!slot.compare_exchange_strong(expected, dev, std::memory_order_acq_rel)) {
    (void)sp_device_destroy(dev);
    return expected;
  }
  return dev;
}

/// While PyTorch routes allocations to a private pool (a capture may be under way, in CUDA's
/// global mode), this thread's driver calls run in relaxed capture mode: a growth's cuMemAlloc
/// is allowed then, as PyTorch's allocator allows its cudaMalloc ("never freed before replay":
/// graph pools keep their memory).
class relaxed_capture_mode {
 public:
  explicit relaxed_capture_mode(bool on) : on_(on) {
    if (on_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  ~relaxed_capture_mode() {
    if (on_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;

 private:
  bool on_;
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

/// Whether the plug-in's pools run on the host backend (STREAMPOOL_TORCH_BACKEND=host: the tests
/// without a GPU, tests/torch_native/). Asked once, and only where CUDA names no device: asking
/// makes the plug-in's pool of device 0.
bool plugin_on_host() {
  static const bool on_host = [] {
    try {
      sp_device_t dev = nullptr;
      if (sp_pool_get_device(pool_of(0), &dev) != STREAMPOOL_STATUS_SUCCESS) return false;
      const char* name = nullptr;
      const bool host = sp_device_backend_name(dev, &name) == STREAMPOOL_STATUS_SUCCESS &&
                        std::strcmp(name, "host") == 0;
      (void)sp_device_destroy(dev);
      return host;
    } catch (const c10::Error&) {
      return false;  // no plug-in pool either: CUDA's error is the one to report
    }
  }();
  return on_host;
}

/// The device of a call that names only a stream (raw_alloc_with_stream): CUDA's current device.
/// Where CUDA names none (no driver or no GPU) and the plug-in runs on the host backend, its
/// device 0: the allocator's bookkeeping is tested there, through this call, without a GPU.
c10::DeviceIndex stream_call_device() {
  c10::DeviceIndex device = -1;
  const cudaError_t e = c10::cuda::GetDevice(&device);
  if (e == cudaSuccess) return device;
  (void)cudaGetLastError();  // reported below, or not an error on the host backend
  if (plugin_on_host()) return 0;
  C10_CUDA_CHECK(e);
  return device;  // not reached: C10_CUDA_CHECK threw
}

void count(DeviceStats& s, const block& b, bool out) {
  const auto type =
      static_cast<std::size_t>(b.size <= small_max ? StatType::SMALL_POOL : StatType::LARGE_POOL);
  const auto all = static_cast<std::size_t>(StatType::AGGREGATE);
  for (const std::size_t t : {all, type}) {
    if (out) {
      s.allocation[t].increase(1);
      s.active[t].increase(1);
      s.allocated_bytes[t].increase(b.size);
      s.active_bytes[t].increase(b.size);
      s.requested_bytes[t].increase(b.requested);
    } else {
      s.allocation[t].decrease(1);
      s.active[t].decrease(1);
      s.allocated_bytes[t].decrease(b.size);
      s.active_bytes[t].decrease(b.size);
      s.requested_bytes[t].decrease(b.requested);
    }
  }
}

void delete_block(void* p);

class allocator final : public cca::CUDAAllocator {
 public:
  // ---- c10::Allocator ----
  c10::DataPtr allocate(size_t n) override {
    const c10::DeviceIndex d = c10::cuda::current_device();
    void* p = n == 0 ? nullptr : alloc(n, d, c10::cuda::getCurrentCUDAStream(d).stream());
    return {p, p, &delete_block, c10::Device(c10::DeviceType::CUDA, d)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  // ---- c10::DeviceAllocator ----
  bool initialized() override { return device_count_.load() > 0; }
  void emptyCache(c10::MempoolId_t id) override {
    // A private pool's memory goes back only once its graphs are gone (graph_pools.hpp).
    if (id == c10::MempoolId_t{0, 0}) sp_torch_empty_cache();
    graphs_.empty_cache(id);
  }
  using cca::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    // Not ours (a tensor shared over IPC keeps PyTorch's deleter), or empty: nothing to record.
    if (ptr.get() == nullptr || ptr.get_deleter() != &delete_block) return;
    block b;
    if (blocks_.find(ptr.get(), b) && b.pool != nullptr) {
      b.pool->arena->record_use(ptr.get(), stream.stream());
      return;
    }
    sp_torch_record_stream(ptr.get(), stream.stream());
  }
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
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
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    state& st = state_of(device);
    const accumulated now = accumulated_of(pool_statistics(device, nullptr));
    const std::lock_guard lock(st.mu);
    for (auto* a : stat_arrays(st.stats)) {
      for (Stat& s : *a) s.reset_accumulated();
    }
    st.base = now;
    st.stats.num_ooms = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    state& st = state_of(device);
    const std::lock_guard lock(st.mu);
    for (auto* a : stat_arrays(st.stats)) {
      for (Stat& s : *a) s.reset_peak();
    }
    // Reserved bytes are the pool's: its peak starts again from now too.
    if (pool_made(device)) {
      TORCH_CHECK(sp_pool_reset_peak_statistics(pool_of(device)) == STREAMPOOL_STATUS_SUCCESS,
                  "streampool: resetting the peaks of device ", static_cast<int>(device), ": ",
                  last_error());
    }
  }

  // ---- CUDAAllocator ----
  void* raw_alloc(size_t nbytes) override {
    const c10::DeviceIndex d = c10::cuda::current_device();
    return raw_alloc_with_stream(nbytes, c10::cuda::getCurrentCUDAStream(d).stream());
  }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    if (nbytes == 0) return nullptr;
    return alloc(nbytes, stream_call_device(), stream);
  }
  void raw_delete(void* ptr) override { delete_block(ptr); }
  void init(int device_count) override {
    TORCH_CHECK(device_count >= 0 && device_count <= max_devices, "streampool: ", device_count,
                " CUDA devices, at most ", max_devices, " supported");
    device_count_.store(device_count);
  }
  double getMemoryFraction(c10::DeviceIndex device) override {
    const state& st = state_of(device);
    return st.fraction.load();
  }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK(fraction >= 0 && fraction <= 1, "streampool: memory fraction ", fraction,
                " of device ", static_cast<int>(device), " is outside [0, 1]");
    std::size_t free = 0, total = 0;
    {
      const c10::cuda::CUDAGuard guard(device);
      C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    }
    const auto limit = static_cast<std::size_t>(fraction * static_cast<double>(total));
    // A fraction of 0 allows nothing: the pool's limit 0 would mean "none", so 1 byte.
    TORCH_CHECK(sp_pool_set_memory_limit(pool_of(device), limit == 0 ? 1 : limit) ==
                    STREAMPOOL_STATUS_SUCCESS,
                "streampool: memory fraction ", fraction, " of device ", static_cast<int>(device),
                ": ", last_error());
    state_of(device).fraction.store(fraction);
  }
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override {
    return {};
  }
  void enable(bool value) override {
    if (!value) not_yet("caching_allocator_enable(False)");
  }
  bool isEnabled() const override { return true; }
  void cacheInfo(c10::DeviceIndex device, size_t* largest) override {
    // What cuDNN may ask for as workspace: the device's free memory, as PyTorch's allocator
    // starts from, plus what the pool caches (a lower bound of its largest free block's reach).
    std::size_t free = 0, total = 0;
    {
      const c10::cuda::CUDAGuard guard(device);
      C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    }
    if (*largest == 0) *largest = free;
  }
  void* getBaseAllocation(void*, size_t*) override { not_yet("getBaseAllocation"); }
  cca::SnapshotInfo snapshot(c10::MempoolId_t id, bool include_traces) override {
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
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    (void)state_of(device);  // the range check
    graphs_.begin(device, id, std::move(filter));
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) override {
    graphs_.end(device, id);
  }
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) override {
    graphs_.release(device, id);
  }
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) override {
    return graphs_.use_count(device, id);
  }
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override {
    if (allocator != nullptr) not_yet("a MemPool with an allocator of its own");
    (void)state_of(device);
    graphs_.create_or_incref(device, id);
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t id, bool use) override {
    (void)state_of(device);  // the range check
    graphs_.set_use_on_oom(device, id, use);
  }
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    private_pool* pool = graphs_.find(device, id);
    TORCH_CHECK(pool != nullptr, "streampool: checkPoolLiveAllocations: no memory pool (", id.first,
                ", ", id.second, ") on device ", static_cast<int>(device));
    std::size_t live = 0;
    bool all_expected = true;
    blocks_.for_each([&](void* p, const block& b) {
      if (b.pool != pool) return;
      ++live;
      if (expected.count(p) == 0) all_expected = false;
    });
    return all_expected && live == expected.size();
  }
  cca::ShareableHandle shareIpcHandle(void* ptr) override {
    block b;
    TORCH_CHECK(blocks_.find(ptr, b), "streampool: shareIpcHandle of ", ptr,
                ", which is not the start of a block streampool's allocator handed out");
    return ipc_.share(b.pool != nullptr ? b.pool->pool : pool_of(b.device), b.device, ptr, b.size);
  }
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override { return ipc_.open(handle); }
  bool isHistoryEnabled() override { return history_.on(); }
  void recordHistory(bool enabled, c10::CachingDeviceAllocator::CreateContextFn recorder,
                     size_t max_entries, c10::CachingDeviceAllocator::RecordContext when,
                     bool clear, const std::vector<std::string>& skip_actions) override {
    history_.configure(enabled, recorder, max_entries, when, clear, skip_actions);
  }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    const std::lock_guard lock(observers_mu_);
    oom_observers_.push_back(std::move(observer));
  }
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker) override {
    not_yet("allocator trace trackers");
  }
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    const c10::cuda::CUDAGuard guard(dev);
    const cudaError_t e = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      return;
    }
    C10_CUDA_CHECK(e);
  }
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override {
    if (!p2p_enabled && dst_device != src_device) {
      return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
    }
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::MempoolId_t id) override {
    private_pool* pool = graphs_.find(device, id);
    TORCH_CHECK(pool != nullptr, "streampool: getCheckpointState: could not find pool of id (",
                id.first, ", ", id.second, ") on device ", static_cast<int>(device));
    TORCH_CHECK(pool->use_count > 0, "streampool: getCheckpointState: pool (", id.first, ", ",
                id.second, ") is freeable (no graph holds it); not expected to checkpoint it");
    auto out = std::make_shared<checkpoint>();
    out->device = device;
    out->id = id;
    out->segments = pool->arena->save();
    return out;
  }
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> saved) override {
    const auto cp = std::dynamic_pointer_cast<checkpoint>(saved);
    TORCH_CHECK(cp != nullptr,
                "streampool: setCheckpointPoolState: expected a state that "
                "streampool's getCheckpointState made");
    TORCH_CHECK(cp->device == device, "streampool: setCheckpointPoolState: a checkpoint of device ",
                static_cast<int>(cp->device), " given for device ", static_cast<int>(device));
    private_pool* pool = graphs_.find(device, cp->id);
    TORCH_CHECK(pool != nullptr, "streampool: setCheckpointPoolState: pool (", cp->id.first, ", ",
                cp->id.second, ") of device ", static_cast<int>(device), " is gone");
    graph_arena::restored r = pool->arena->restore(cp->segments);
    // The pool's blocks are now the checkpoint's: the allocator's map and statistics follow (no
    // deleter runs for the freed ones; PyTorch swaps the deleters of the tensors concerned).
    state& st = state_of(device);
    for (void* p : r.freed) {
      block b;
      if (!blocks_.take(p, b)) continue;
      const std::lock_guard lock(st.mu);
      count(st.stats, b, /*out=*/false);
    }
    cca::CheckpointDelta delta;
    delta.ptrs_freed = std::move(r.freed);
    for (const auto& e : r.allocated) {
      void* p = reinterpret_cast<void*>(e.block.address);  // NOLINT(performance-no-int-to-ptr)
      const block b{e.block.requested, e.block.size, device, e.stream, pool};
      blocks_.insert(p, b);
      {
        const std::lock_guard lock(st.mu);
        count(st.stats, b, /*out=*/true);
      }
      delta.dataptrs_allocd.emplace_back(p, p, &delete_block,
                                         c10::Device(c10::DeviceType::CUDA, device));
    }
    graphs_.set_live(pool, r.allocated.size());
    return delta;
  }
  std::string name() override { return "streampool"; }

  /// Frees p (raw_delete, the DataPtr deleter). Never throws: it runs in tensor destructors.
  void free(void* p) noexcept {
    if (p == nullptr) return;
    block b;
    if (!blocks_.take(p, b)) {
      // LCOV_EXCL_START: a pointer that is not ours is reported, never freed.
      std::fprintf(stderr, "streampool: native allocator: free of %p, which it did not hand out\n",
                   p);
      return;
      // LCOV_EXCL_STOP
    }
    {
      state& st = state_of(static_cast<c10::DeviceIndex>(b.device));
      const std::lock_guard lock(st.mu);
      count(st.stats, b, /*out=*/false);
    }
    if (history_.on()) [[unlikely]] {
      try {
        const c10::MempoolId_t id = b.pool != nullptr ? b.pool->id : c10::MempoolId_t{0, 0};
        history::context ctx = history_.context_for(history::entry::FREE_REQUESTED);
        for (const auto action : {history::entry::FREE_REQUESTED, history::entry::FREE_COMPLETED})
          history_.record(action, static_cast<c10::DeviceIndex>(b.device),
                          reinterpret_cast<std::uintptr_t>(p), b.size, b.stream, id, ctx);
      } catch (...) {  // LCOV_EXCL_LINE: a free never throws; its history entry is lost
      }
    }
    ipc_.freed(p);  // descriptors exported for it (ipc.hpp)
    if (b.pool != nullptr) {
      try {
        b.pool->arena->free(p, graphs_.routing());
      } catch (const c10::Error& e) {  // LCOV_EXCL_START: reported; a free never throws
        std::fprintf(stderr, "streampool: native allocator: %s\n", e.what_without_backtrace());
      }  // LCOV_EXCL_STOP
      graphs_.freed(b.pool);
      return;
    }
    sp_torch_free(p, b.requested, b.device, b.stream);
  }

 private:
  /// A private pool's layout, as getCheckpointState saved it.
  struct checkpoint final : cca::AllocatorState {
    c10::DeviceIndex device = 0;
    c10::MempoolId_t id{0, 0};
    std::vector<graph_arena::saved_segment> segments;
  };

  /// The pools' own counters that PyTorch reports as accumulated statistics.
  struct accumulated {
    std::uint64_t device_allocs = 0;  // driver allocations and granules created
    std::uint64_t device_frees = 0;   // driver frees and granules released
    std::uint64_t alloc_retries = 0;  // allocations retried after trimming (num_alloc_retries)
  };
  static accumulated accumulated_of(const sp_pool_statistics_t& ps) {
    return {ps.upstream_allocations + ps.upstream_creates,
            ps.upstream_deallocations + ps.upstream_releases, ps.alloc_retries};
  }

  struct state {
    std::mutex mu;
    DeviceStats stats;
    accumulated base;  // the pools' counters at the last resetAccumulatedStats; guarded by mu
    std::atomic<double> fraction{1.0};
    std::atomic<bool> pool_made{false};
  };

  /// The statistics of device `device`'s pools: the default pool's, with its private pools'
  /// reserved memory and counters added (PyTorch counts its graph pools' segments in
  /// reserved_bytes), and, where `segments` is given, the private pools' segment counts.
  sp_pool_statistics_t pool_statistics(c10::DeviceIndex device, graph_arena::counts* segments) {
    sp_pool_statistics_t ps;
    sp_pool_statistics_init(&ps);
    if (pool_made(device)) {
      TORCH_CHECK(sp_pool_get_statistics(pool_of(device), &ps) == STREAMPOOL_STATUS_SUCCESS,
                  "streampool: statistics of device ", static_cast<int>(device), ": ",
                  last_error());
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

  /// What the snapshot says of the allocator's settings: PyTorch's defaults where a setting
  /// has no counterpart (every field, so that nothing reads an indeterminate value).
  static cca::AllocatorConfigInfo config_info() {
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

  static std::array<std::array<Stat, 3>*, 9> stat_arrays(DeviceStats& s) {
    return {&s.allocation,      &s.segment,        &s.active,       &s.inactive_split,
            &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
            &s.requested_bytes};
  }

  state& state_of(c10::DeviceIndex device) {
    TORCH_CHECK(device >= 0 && device < max_devices, "streampool: CUDA device ",
                static_cast<int>(device), " is out of range [0, ", max_devices, ")");
    // DeviceIndex is a signed char, checked non-negative above.
    return states_[static_cast<std::size_t>(static_cast<unsigned char>(device))];
  }
  bool pool_made(c10::DeviceIndex device) { return state_of(device).pool_made.load(); }

  void* alloc(std::size_t n, c10::DeviceIndex device, cudaStream_t stream) {
    state& st = state_of(device);
    void* p = nullptr;
    private_pool* pp = nullptr;
    std::size_t private_size = 0;
    if (graphs_.routing()) [[unlikely]] {
      const relaxed_capture_mode relaxed(true);
      pp = graphs_.route(device, stream);
      if (pp != nullptr) {
        p = pp->arena->allocate(n, stream, /*capturing=*/true, private_size);
        if (p == nullptr) {
          graphs_.freed(pp);
          out_of_memory(st, n, device, last_error().c_str());
        }
      } else {
        p = default_alloc(st, n, device, stream, pp, private_size);
      }
    } else {
      p = default_alloc(st, n, device, stream, pp, private_size);
    }
    // Written once, not at every allocation: the line is read by every thread's allocations.
    if (!st.pool_made.load(std::memory_order_relaxed)) [[unlikely]]
      st.pool_made.store(true, std::memory_order_relaxed);
    const block b{n, private_size, device, stream, pp};
    blocks_.insert(p, b);
    {
      const std::lock_guard lock(st.mu);
      count(st.stats, b, /*out=*/true);
    }
    if (history_.on()) [[unlikely]] {
      history_.record(history::entry::ALLOC, device, reinterpret_cast<std::uintptr_t>(p), b.size,
                      stream, pp != nullptr ? pp->id : c10::MempoolId_t{0, 0},
                      history_.context_for(history::entry::ALLOC));
    }
    return p;
  }

  /// A block of the default pool; where it has no memory left, a free block of a MemPool made
  /// with use_on_oom (then `pp` and `size` say whose and how large), else torch.OutOfMemoryError.
  void* default_alloc(state& st, std::size_t n, c10::DeviceIndex device, cudaStream_t stream,
                      private_pool*& pp, std::size_t& size) {
    try {
      return sp_torch_malloc_sized(n, device, stream, &size);
    } catch (const std::bad_alloc& e) {
      const auto [pool, p] = graphs_.borrow(device, n, stream, size);
      if (p == nullptr) out_of_memory(st, n, device, e.what());
      pp = pool;
      return p;
    }
  }

  [[noreturn]] void out_of_memory(state& st, std::size_t n, c10::DeviceIndex device,
                                  const char* what) {
    {
      const std::lock_guard lock(st.mu);
      ++st.stats.num_ooms;
    }
    std::size_t free = 0, total = 0;
    (void)cudaMemGetInfo(&free, &total);
    std::vector<cca::OutOfMemoryObserver> observers;
    {
      const std::lock_guard lock(observers_mu_);
      observers = oom_observers_;
    }
    for (const auto& o : observers) o(device, n, total, free);
    if (history_.on()) {
      history_.record(history::entry::OOM, device, free, n, nullptr, {0, 0}, nullptr);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (streampool). Tried to allocate ",
                     n, " bytes on device ", static_cast<int>(device), ": ", what);
  }

  std::atomic<int> device_count_{0};
  std::array<state, max_devices> states_;
  history history_;
  ipc ipc_;
  graph_pools graphs_{[](c10::DeviceIndex d) { return device_handle(d); }};
  block_map blocks_;
  std::mutex observers_mu_;
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
};

allocator* the_allocator = nullptr;

void delete_block(void* p) { the_allocator->free(p); }

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    cca::CUDAAllocator* current = cca::allocator.load();
    if (current != nullptr && current->initialized()) {
      // Every device, not only the current one: a tensor of device 1 would be freed here. An
      // initialised allocator has device 0 at least (PyTorch initialises it only where CUDA
      // counts a device; the tests' stand-in without a GPU is initialised with none counted).
      const int devices = std::max<int>(c10::cuda::device_count(), 1);
      for (int d = 0; d < devices; ++d) {
        const DeviceStats s = current->getDeviceStats(static_cast<c10::DeviceIndex>(d));
        const std::int64_t live =
            s.allocation[static_cast<std::size_t>(StatType::AGGREGATE)].current;
        TORCH_CHECK(live == 0, "streampool: PyTorch's CUDA allocator (", current->name(),
                    ") already holds ", live, " allocations on device ", d,
                    "; enable streampool before the first CUDA tensor");
      }
    }
    the_allocator = new allocator();  // never deleted: tensors die in static destructors
    if (current != nullptr && current->initialized()) {
      the_allocator->init(c10::cuda::device_count());
    }
    c10::SetAllocator(c10::DeviceType::CUDA, the_allocator, /*priority=*/1);
    cca::allocator.store(the_allocator);
  });
}

}  // namespace streampool::torch_native

int sp_torch_native_install(char* message, size_t capacity) {
  const auto tell = [&](const char* text) {
    if (message != nullptr && capacity > 0) std::snprintf(message, capacity, "%s", text);
    return 1;
  };
  try {
    streampool::torch_native::install();
    return 0;
  } catch (const c10::Error& e) {
    return tell(e.what_without_backtrace());  // what() adds C++ frames to the message
  } catch (const std::exception& e) {
    return tell(e.what());
  }
}
