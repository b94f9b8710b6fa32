// The native PyTorch allocator (src/torch/native_allocator.hpp) without a GPU: installed as
// PyTorch's CUDA allocator, then called through PyTorch's allocator interface as torch.cuda's
// bindings call it (memory_stats is getDeviceStats, caching_allocator_alloc is
// raw_alloc_with_stream, ...). STREAMPOOL_TORCH_BACKEND=host puts the plug-in's pools on a
// checking host backend; queues of its device stand in for CUDA streams. allocate() and
// raw_alloc() ask CUDA for the current stream, so memory comes from raw_alloc_with_stream here.
//
// Glossary
//   plug-in pool   the pool of "CUDA device" 0 that the allocator allocates from
//                  (src/c_api/torch_plugin.cpp); sp_torch_pool gives a handle to it, so that the
//                  tests read its numbers and set its limit beside the allocator.
#include "torch/native_allocator.hpp"

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "streampool.h"

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr auto all = static_cast<std::size_t>(StatType::AGGREGATE);
constexpr auto small = static_cast<std::size_t>(StatType::SMALL_POOL);
constexpr auto large = static_cast<std::size_t>(StatType::LARGE_POOL);
constexpr std::size_t mib = std::size_t{1} << 20;

const bool host_plugin = [] {
  setenv("STREAMPOOL_TORCH_BACKEND", "host", 1);
  return true;
}();

/// PyTorch's CUDA allocator as the process started (libc10_cuda's static initialisers ran first).
cca::CUDAAllocator* const pytorch_allocator = cca::allocator.load();

/// Streampool's allocator, installed once for the process by the first test that asks.
cca::CUDAAllocator& installed() {
  static cca::CUDAAllocator* const a = [] {
    char message[512] = "";
    EXPECT_EQ(sp_torch_native_install(message, sizeof message), 0) << message;
    return cca::allocator.load();
  }();
  return *a;
}

/// The plug-in's device 0 and two of its queues. Like PyTorch's streams, the queues live as long
/// as the process: the plug-in wraps each handle once and keeps it.
struct plugin_device {
  sp_pool_t pool = nullptr;
  sp_device_t device = nullptr;
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
};

plugin_device& plugin() {
  static plugin_device* const d = [] {
    EXPECT_TRUE(host_plugin);
    auto* p = new plugin_device;
    EXPECT_EQ(sp_torch_pool(0, &p->pool), STREAMPOOL_STATUS_SUCCESS) << sp_last_error_message();
    EXPECT_EQ(sp_pool_get_device(p->pool, &p->device), STREAMPOOL_STATUS_SUCCESS)
        << sp_last_error_message();
    for (cudaStream_t* queue : {&p->a, &p->b}) {
      sp_stream_t s = nullptr;  // never destroyed: its queue is the "CUDA stream"
      void* native = nullptr;
      EXPECT_EQ(sp_stream_create(p->device, &s), STREAMPOOL_STATUS_SUCCESS);
      EXPECT_EQ(sp_stream_native(s, &native), STREAMPOOL_STATUS_SUCCESS);
      *queue = static_cast<cudaStream_t>(native);
    }
    return p;
  }();
  return *d;
}

DeviceStats stats(c10::DeviceIndex device = 0) { return installed().getDeviceStats(device); }

sp_pool_statistics_t pool_statistics() {
  sp_pool_statistics_t s;
  sp_pool_statistics_init(&s);
  EXPECT_EQ(sp_pool_get_statistics(plugin().pool, &s), STREAMPOOL_STATUS_SUCCESS);
  return s;
}

std::size_t block_size(const void* p) {
  std::size_t n = 0;
  EXPECT_EQ(sp_pool_block_size(plugin().pool, p, &n), STREAMPOOL_STATUS_SUCCESS)
      << sp_last_error_message();
  return n;
}

void* alloc(std::size_t n, cudaStream_t stream = nullptr) {
  return installed().raw_alloc_with_stream(n, stream != nullptr ? stream : plugin().a);
}

/// The text of the exception that `call` throws (a c10::Error's without C++ frames); "" when it
/// throws none. PyTorch's bindings raise either kind as a Python exception with that text.
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::int64_t i64(std::size_t n) { return static_cast<std::int64_t>(n); }

/// Every Stat of `s`, named, for checks that cover them all.
std::vector<std::pair<std::string, Stat>> every_stat(const DeviceStats& s) {
  std::vector<std::pair<std::string, Stat>> out;
  const std::pair<const char*, const c10::CachingAllocator::StatArray*> arrays[] = {
      {"allocation", &s.allocation},
      {"segment", &s.segment},
      {"active", &s.active},
      {"inactive_split", &s.inactive_split},
      {"allocated_bytes", &s.allocated_bytes},
      {"reserved_bytes", &s.reserved_bytes},
      {"active_bytes", &s.active_bytes},
      {"inactive_split_bytes", &s.inactive_split_bytes},
      {"requested_bytes", &s.requested_bytes}};
  const char* const types[] = {"all", "small_pool", "large_pool"};
  for (const auto& [name, array] : arrays) {
    for (std::size_t t = 0; t < 3; ++t) {
      out.emplace_back(std::string(name) + "." + types[t], (*array)[t]);
    }
  }
  out.emplace_back("oversize_allocations", s.oversize_allocations);
  out.emplace_back("oversize_segments", s.oversize_segments);
  return out;
}

/// Every test ends with the host backend's race detector quiet: it saw every command, and none
/// reused memory before the work that used it was done.
class NativeAllocator : public ::testing::Test {
 protected:
  void TearDown() override {
    std::size_t violations = 0;
    ASSERT_EQ(sp_device_violation_count(plugin().device, &violations), STREAMPOOL_STATUS_SUCCESS);
    EXPECT_EQ(violations, 0u);
  }
};

}  // namespace

TEST_F(NativeAllocator, InstallsItselfAsPyTorchsCudaAllocator) {
  ASSERT_NE(pytorch_allocator, nullptr);
  EXPECT_NE(pytorch_allocator->name(), "streampool");
  cca::CUDAAllocator& a = installed();
  EXPECT_NE(&a, pytorch_allocator);
  EXPECT_EQ(a.name(), "streampool");  // torch.cuda.get_allocator_backend()
  EXPECT_EQ(cca::get(), &a);
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::CUDA), &a) << "torch.empty(device='cuda')";
  // Installed again: nothing changes.
  char message[256] = "";
  EXPECT_EQ(sp_torch_native_install(message, sizeof message), 0) << message;
  EXPECT_EQ(cca::allocator.load(), &a);
  // PyTorch's allocator had not been initialised (no CUDA device here), so neither is this one:
  // PyTorch's lazy CUDA init calls init() later.
  EXPECT_FALSE(a.initialized());
  EXPECT_TRUE(a.isEnabled());
  EXPECT_FALSE(a.isHistoryEnabled()) << "PyTorch's default throws; memory tools ask first";
  EXPECT_EQ(a.raw_deleter(), c10::GetAllocator(c10::DeviceType::CUDA)->raw_deleter());
}

// torch.cuda.memory_stats() of a device that never allocated: every key PyTorch fills, zero.
TEST_F(NativeAllocator, StatisticsOfAnUntouchedDeviceAreZero) {
  const DeviceStats s = stats(1);  // device 1: no allocation in this process, no plug-in pool
  for (const auto& [name, stat] : every_stat(s)) {
    EXPECT_EQ(stat.current, 0) << name;
    EXPECT_EQ(stat.peak, 0) << name;
    EXPECT_EQ(stat.allocated, 0) << name;
    EXPECT_EQ(stat.freed, 0) << name;
  }
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_device_free, 0);
}

// The statistics behind memory_allocated(), max_memory_allocated(), memory_reserved() and
// reset_peak_memory_stats(): exact block sizes, requested sizes, PyTorch's 1 MiB split between
// small and large, peaks, and reserved bytes and device allocations from the plug-in's pool.
TEST_F(NativeAllocator, RawAllocAndDeleteAreCountedExactly) {
  cca::CUDAAllocator& a = installed();
  a.resetAccumulatedStats(0);
  a.resetPeakStats(0);
  ASSERT_EQ(stats().allocation[all].current, 0) << "every test frees what it allocates";
  const sp_pool_statistics_t at_reset = pool_statistics();

  void* s = alloc(1000);
  void* l = alloc(3 * mib);
  ASSERT_NE(s, nullptr);
  ASSERT_NE(l, nullptr);
  const std::size_t sb = block_size(s);
  const std::size_t lb = block_size(l);
  EXPECT_GE(sb, 1000u);
  EXPECT_LE(sb, mib);
  EXPECT_GE(lb, 3 * mib);

  DeviceStats st = stats();
  EXPECT_EQ(st.allocation[all].current, 2);
  EXPECT_EQ(st.allocation[small].current, 1);
  EXPECT_EQ(st.allocation[large].current, 1);
  EXPECT_EQ(st.active[all].current, 2);
  EXPECT_EQ(st.allocated_bytes[all].current, i64(sb + lb));
  EXPECT_EQ(st.allocated_bytes[small].current, i64(sb));
  EXPECT_EQ(st.allocated_bytes[large].current, i64(lb));
  EXPECT_EQ(st.active_bytes[all].current, i64(sb + lb));
  EXPECT_EQ(st.requested_bytes[all].current, i64(1000 + 3 * mib));
  EXPECT_EQ(st.requested_bytes[small].current, 1000);
  EXPECT_EQ(st.requested_bytes[large].current, i64(3 * mib));
  EXPECT_EQ(st.allocated_bytes[all].peak, i64(sb + lb));
  EXPECT_EQ(st.allocation[all].allocated, 2);
  const sp_pool_statistics_t ps = pool_statistics();
  EXPECT_EQ(st.reserved_bytes[all].current, i64(ps.reserved_bytes));
  EXPECT_GE(ps.reserved_bytes, sb + lb);
  EXPECT_EQ(st.num_device_alloc, i64(ps.upstream_allocations + ps.upstream_creates -
                                     at_reset.upstream_allocations - at_reset.upstream_creates))
      << "the pool's driver allocations since resetAccumulatedStats";

  a.raw_delete(l);
  st = stats();
  EXPECT_EQ(st.allocation[all].current, 1);
  EXPECT_EQ(st.allocation[large].current, 0);
  EXPECT_EQ(st.allocated_bytes[all].current, i64(sb));
  EXPECT_EQ(st.allocated_bytes[all].peak, i64(sb + lb)) << "a free keeps the peak";
  EXPECT_EQ(st.allocated_bytes[all].allocated, i64(sb + lb));
  EXPECT_EQ(st.allocated_bytes[all].freed, i64(lb));
  EXPECT_EQ(st.requested_bytes[large].freed, i64(3 * mib));
  EXPECT_EQ(pool_statistics().live_bytes, sb) << "the block went back to the plug-in's pool";

  a.resetPeakStats(0);
  EXPECT_EQ(stats().allocated_bytes[all].peak, i64(sb));
  a.raw_delete(s);
  st = stats();
  for (const auto& [name, stat] : every_stat(st)) {
    // Reserved memory and its segments stay until empty_cache.
    if (name.rfind("reserved_bytes", 0) != 0 && name.rfind("segment.", 0) != 0) {
      EXPECT_EQ(stat.current, 0) << name;
    }
  }
  const sp_pool_statistics_t held = pool_statistics();
  EXPECT_EQ(st.segment[all].current, i64(held.upstream_allocations - held.upstream_deallocations +
                                         held.upstream_creates - held.upstream_releases))
      << "the default pool's segments: its driver allocations and mapped granules";
  EXPECT_GT(st.segment[all].current, 0);
  EXPECT_EQ(st.allocation[all].allocated, 2);
  EXPECT_EQ(st.allocation[all].freed, 2);

  a.resetAccumulatedStats(0);
  st = stats();
  EXPECT_EQ(st.allocation[all].allocated, 0);
  EXPECT_EQ(st.allocation[all].freed, 0);
  EXPECT_EQ(st.allocated_bytes[all].peak, i64(sb)) << "resetAccumulatedStats keeps the peak";
  EXPECT_EQ(st.num_device_alloc, 0);
  EXPECT_EQ(st.num_device_free, 0);
  EXPECT_EQ(st.num_alloc_retries, 0);
  EXPECT_EQ(pool_statistics().live_bytes, 0u);
}

// num_alloc_retries: an allocation whose first attempt finds no memory under the pool's limit,
// so that the pool gives its cached memory back and tries again, as PyTorch's allocator frees
// its cache and retries cudaMalloc. Counted from the last resetAccumulatedStats.
TEST_F(NativeAllocator, AllocationsRetriedAfterFreeingTheCacheAreCounted) {
  cca::CUDAAllocator& a = installed();
  installed().emptyCache({0, 0});
  a.resetAccumulatedStats(0);
  ASSERT_EQ(stats().num_alloc_retries, 0);
  const std::size_t reserved = pool_statistics().reserved_bytes;
  ASSERT_EQ(sp_pool_set_memory_limit(plugin().pool, reserved + 8 * mib), STREAMPOOL_STATUS_SUCCESS);
  // 6 MiB of small blocks, freed: slabs that only blocks of their size class can use.
  std::vector<void*> small_blocks;
  for (int i = 0; i < 96; ++i) small_blocks.push_back(alloc(64 * 1024));
  for (void* p : small_blocks) a.raw_delete(p);
  EXPECT_EQ(stats().num_alloc_retries, 0) << "they fitted at once";
  void* p = alloc(6 * mib);  // 6 MiB of slabs + 6 MiB > 8 MiB: only after the slabs go back
  EXPECT_EQ(stats().num_alloc_retries, 1);
  a.raw_delete(p);
  EXPECT_EQ(sp_pool_set_memory_limit(plugin().pool, 0), STREAMPOOL_STATUS_SUCCESS);
  a.resetAccumulatedStats(0);
  EXPECT_EQ(stats().num_alloc_retries, 0);
}

TEST_F(NativeAllocator, FreedBlocksAreReusedOnTheirStream) {
  void* first = alloc(1000);
  installed().raw_delete(first);
  void* again = alloc(1000);
  EXPECT_EQ(again, first) << "the free reached the plug-in's pool, which reuses on one stream";
  installed().raw_delete(again);
}

TEST_F(NativeAllocator, ZeroBytesAndNullChangeNothing) {
  const std::int64_t allocated = stats().allocation[all].allocated;
  EXPECT_EQ(alloc(0), nullptr);  // as PyTorch's allocators: no block for 0 bytes
  installed().raw_delete(nullptr);
  EXPECT_EQ(stats().allocation[all].allocated, allocated);
}

TEST_F(NativeAllocator, AFreeOfMemoryItDidNotHandOutIsReportedAndIgnored) {
  void* mine = alloc(4096);
  const DeviceStats before = stats();
  static int not_ours = 0;
  testing::internal::CaptureStderr();
  installed().raw_delete(&not_ours);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("which it did not hand out"), std::string::npos) << said;
  const DeviceStats after = stats();
  EXPECT_EQ(after.allocation[all].current, before.allocation[all].current);
  EXPECT_EQ(after.allocated_bytes[all].freed, before.allocated_bytes[all].freed);
  installed().raw_delete(mine);
}

TEST_F(NativeAllocator, EmptyCacheGivesTheCachedMemoryBack) {
  installed().raw_delete(alloc(8 * mib));
  const std::int64_t reserved = stats().reserved_bytes[all].current;
  ASSERT_GE(pool_statistics().cached_bytes, 8 * mib);
  installed().emptyCache();  // torch.cuda.empty_cache()
  const std::int64_t after = stats().reserved_bytes[all].current;
  EXPECT_LE(after, reserved - i64(8 * mib));
  EXPECT_EQ(after, i64(pool_statistics().reserved_bytes));
}

// max_memory_reserved() after reset_peak_memory_stats(): the pool's peak starts again at the
// reset (pool::reset_peak_statistics), so a growth that stays below the pool's earlier peak is
// the new peak exactly, even when no read saw it.
TEST_F(NativeAllocator, ReservedPeakRestartsAtAReset) {
  cca::CUDAAllocator& a = installed();
  a.raw_delete(alloc(32 * mib));  // an earlier peak well above what follows
  a.emptyCache();
  const std::size_t old_peak = pool_statistics().peak_reserved_bytes;
  a.resetPeakStats(0);
  const std::int64_t at_reset = stats().reserved_bytes[all].current;
  EXPECT_EQ(stats().reserved_bytes[all].peak, at_reset) << "a reset takes the current value";
  void* p = alloc(8 * mib);
  const std::size_t grown = pool_statistics().reserved_bytes;
  a.raw_delete(p);
  a.emptyCache();
  ASSERT_GT(i64(grown), at_reset);
  ASSERT_LT(grown, old_peak);
  EXPECT_LT(stats().reserved_bytes[all].current, i64(grown));
  EXPECT_EQ(stats().reserved_bytes[all].peak, i64(grown)) << "the peak since the reset, unseen";
}

// An allocation over the plug-in pool's limit: torch.OutOfMemoryError with the size and device,
// the pool's own numbers, num_ooms, and PyTorch's out-of-memory observers (the memory snapshot
// on OOM of torch.cuda.memory._record_memory_history uses one).
TEST_F(NativeAllocator, OutOfMemoryRaisesPyTorchsErrorAndCallsTheObservers) {
  static std::vector<std::pair<std::int64_t, std::size_t>> seen;  // observers stay attached
  installed().attachOutOfMemoryObserver([](std::int64_t device, std::size_t bytes, std::size_t,
                                           std::size_t) { seen.emplace_back(device, bytes); });
  ASSERT_EQ(sp_pool_set_memory_limit(plugin().pool, 16 * mib), STREAMPOOL_STATUS_SUCCESS);
  const DeviceStats before = stats();
  std::string what;
  try {
    (void)alloc(64 * mib);
    ADD_FAILURE() << "64 MiB under a 16 MiB limit";
  } catch (const c10::OutOfMemoryError& e) {
    what = e.what_without_backtrace();
  }
  EXPECT_EQ(sp_pool_set_memory_limit(plugin().pool, 0), STREAMPOOL_STATUS_SUCCESS);
  EXPECT_NE(what.find("CUDA out of memory"), std::string::npos) << what;
  EXPECT_NE(what.find("Tried to allocate 67108864 bytes on device 0"), std::string::npos) << what;
  EXPECT_NE(what.find("16777216"), std::string::npos) << "the pool's limit: " << what;
  const DeviceStats after = stats();
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  EXPECT_EQ(after.allocation[all].current, before.allocation[all].current);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, 0);
  EXPECT_EQ(seen[0].second, 64 * mib);
}

// MemPool(use_on_oom=True): a request of the default pool that runs out of memory takes a free
// block of that pool (on its stream) as a last resort, counted as the pool's; without the flag,
// or once its destructor says false, out of memory.
TEST_F(NativeAllocator, AMemPoolForOutOfMemoryLendsItsFreeBlocks) {
  cca::CUDAAllocator& a = installed();
  const c10::MempoolId_t id{11, 0};
  cudaStream_t s = plugin().a;
  a.createOrIncrefPool(0, id, nullptr);                             // MemPool's constructor
  a.beginAllocateToPool(0, id, [](cudaStream_t) { return true; });  // use_mem_pool's block
  void* held = alloc(40 * mib, s);
  a.raw_delete(held);  // free in the pool, which keeps it
  a.endAllocateToPool(0, id);
  a.releasePool(0, id);
  ASSERT_EQ(a.getPoolUseCount(0, id), 1);
  ASSERT_EQ(sp_pool_set_memory_limit(plugin().pool, 16 * mib), STREAMPOOL_STATUS_SUCCESS);
  const auto out_of_memory = [&] {
    try {
      a.raw_delete(alloc(40 * mib, s));
      return false;
    } catch (const c10::OutOfMemoryError&) {
      return true;
    }
  };
  EXPECT_TRUE(out_of_memory()) << "no use_on_oom yet";
  a.setUseOnOOM(0, id, true);
  void* lent = alloc(40 * mib, s);
  EXPECT_EQ(lent, held) << "the pool's free block";
  EXPECT_TRUE(a.checkPoolLiveAllocations(0, id, {lent}));
  EXPECT_NE(error_of([&] { (void)alloc(40 * mib, s); }).find("out of memory"), std::string::npos)
      << "only free blocks are lent: the pool does not grow for the default pool";
  a.raw_delete(lent);
  EXPECT_TRUE(a.checkPoolLiveAllocations(0, id, {})) << "freed back to the pool";
  a.setUseOnOOM(0, id, false);  // MemPool's destructor
  EXPECT_TRUE(out_of_memory());
  EXPECT_EQ(sp_pool_set_memory_limit(plugin().pool, 0), STREAMPOOL_STATUS_SUCCESS);
  a.setUseOnOOM(0, c10::MempoolId_t{99, 0}, true);  // a pool that is gone: nothing to change
  a.releasePool(0, id);
  a.emptyCache(id);
}

TEST_F(NativeAllocator, MemoryFractionOutsideZeroToOneIsRefused) {
  cca::CUDAAllocator& a = installed();
  EXPECT_EQ(a.getMemoryFraction(0), 1.0);
  EXPECT_NE(error_of([&] {
              a.setMemoryFraction(1.5, 0);
            }).find("memory fraction 1.5 of device 0 is outside [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.setMemoryFraction(-0.25, 0); }).find("outside [0, 1]"),
            std::string::npos);
  EXPECT_EQ(a.getMemoryFraction(0), 1.0);
}

TEST_F(NativeAllocator, DevicesOutOfRangeAreNamed) {
  EXPECT_NE(error_of([] { (void)stats(64); }).find("CUDA device 64 is out of range [0, 64)"),
            std::string::npos);
}

// tensor.record_stream(s): the plug-in is told (a queue it does not know is refused, naming
// it); memory of another allocator is left alone, as PyTorch's own allocator leaves it.
TEST_F(NativeAllocator, RecordStreamReachesThePlugin) {
  cca::CUDAAllocator& a = installed();
  void* p = alloc(1000);
  {
    c10::DataPtr ours(p, p, a.raw_deleter(), c10::Device(c10::DeviceType::CUDA, 0));
    alignas(64) static char not_a_queue[64];
    const auto unknown =
        c10::cuda::getStreamFromExternal(reinterpret_cast<cudaStream_t>(not_a_queue), 0);
    EXPECT_NE(error_of([&] { a.recordStream(ours, unknown); }).find("is not a queue of device"),
              std::string::npos);
    EXPECT_EQ(
        error_of([&] { a.recordStream(ours, c10::cuda::getStreamFromExternal(plugin().b, 0)); }),
        "");
    c10::DataPtr theirs(not_a_queue, not_a_queue, nullptr, c10::Device(c10::DeviceType::CUDA, 0));
    EXPECT_EQ(error_of([&] { a.recordStream(theirs, unknown); }), "");
  }  // `ours` frees p with the allocator's deleter, as a tensor's storage does
  EXPECT_EQ(stats().allocation[all].current, 0);
}

// What is not built yet raises an error that names it, never a silent no-op: graphs, memory
// pools, snapshots, history, IPC, checkpoints (issue 44).
// memory._snapshot(): segments whose blocks tile them (PyTorch's reader computes each block's
// address from that), whose allocated blocks are exactly the live allocations with their
// requested sizes and streams, and whose sums agree with memory_stats().
TEST_F(NativeAllocator, SnapshotSegmentsTileAndAgreeWithTheStatistics) {
  cca::CUDAAllocator& a = installed();
  struct request {
    std::size_t bytes;
    cudaStream_t stream;
  };
  const request requests[] = {{100, plugin().a},         {4000, plugin().a},
                              {4000, plugin().b},        {300000, plugin().a},
                              {3 * mib + 5, plugin().b}, {40 * mib, plugin().a}};
  std::vector<std::pair<void*, request>> live;
  for (const request& r : requests) live.emplace_back(alloc(r.bytes, r.stream), r);
  void* gone = alloc(2 * mib, plugin().a);  // freed: its memory shows as inactive
  a.raw_delete(gone);

  const cca::SnapshotInfo snap = a.snapshot();
  ASSERT_FALSE(snap.segments.empty());
  std::size_t allocated = 0, requested = 0, blocks_live = 0;
  bool small_seen = false, large_seen = false;
  for (const auto& seg : snap.segments) {
    EXPECT_EQ(seg.device, 0);
    EXPECT_EQ(seg.owner_private_pool_id, (c10::MempoolId_t{0, 0}));
    ASSERT_FALSE(seg.blocks.empty());
    std::size_t at = seg.address, seg_allocated = 0, seg_requested = 0;
    for (const auto& b : seg.blocks) {
      ASSERT_GT(b.size, 0u);
      if (b.allocated) {
        const auto it = std::find_if(live.begin(), live.end(), [&](const auto& l) {
          return l.first == reinterpret_cast<void*>(at);
        });
        ASSERT_NE(it, live.end()) << "an allocated block at " << at << " that is not live";
        EXPECT_EQ(b.requested_size, it->second.bytes);
        EXPECT_EQ(b.size, block_size(it->first));
        EXPECT_TRUE(b.active);
        seg_allocated += b.size;
        seg_requested += b.requested_size;
        ++blocks_live;
      } else {
        EXPECT_FALSE(b.active);
      }
      at += b.size;
    }
    EXPECT_EQ(at, seg.address + seg.total_size) << "blocks do not tile the segment";
    EXPECT_EQ(seg.allocated_size, seg_allocated);
    EXPECT_EQ(seg.active_size, seg_allocated);
    EXPECT_EQ(seg.requested_size, seg_requested);
    allocated += seg_allocated;
    requested += seg_requested;
    (seg.is_large ? large_seen : small_seen) = true;
  }
  EXPECT_TRUE(small_seen);
  EXPECT_TRUE(large_seen);
  EXPECT_EQ(blocks_live, live.size());
  const DeviceStats s = stats();
  EXPECT_EQ(i64(allocated), s.allocated_bytes[all].current);
  EXPECT_EQ(i64(requested), s.requested_bytes[all].current);
  // A segment's stream is one of its blocks' (the plug-in keeps large blocks per stream).
  for (const auto& seg : snap.segments) {
    if (seg.allocated_size == 0) continue;
    EXPECT_TRUE(seg.stream == plugin().a || seg.stream == plugin().b);
  }
  EXPECT_TRUE(a.snapshot(c10::MempoolId_t{0, 7}).segments.empty());
  EXPECT_TRUE(a.snapshot({0, 0}, /*include_traces=*/false).device_traces.empty());
  for (const auto& [p, r] : live) a.raw_delete(p);
}

// CUDA graphs' private pools (graph_pools.hpp): while a routing is under way, requests whose
// stream its filter takes go to the pool's own memory and come back to it; the device's pools
// give nothing back meanwhile; use counts decide when the pool's memory goes.
TEST_F(NativeAllocator, PrivatePoolsTakeWhatTheirFilterRoutesAndKeepIt) {
  cca::CUDAAllocator& a = installed();
  const c10::MempoolId_t id{7, 0};
  cudaStream_t routed = plugin().b;
  // Free memory in the default pool, for the trim below.
  a.raw_delete(alloc(8 * mib, plugin().a));
  a.beginAllocateToPool(0, id, [routed](cudaStream_t s) { return s == routed; });
  EXPECT_NE(error_of([&] { a.beginAllocateToPool(0, id, nullptr); }).find("already recording"),
            std::string::npos);
  void* in_pool = alloc(3 * mib, routed);
  void* small_in_pool = alloc(1000, routed);
  void* eager = alloc(3 * mib, plugin().a);
  std::size_t n = 0;
  EXPECT_NE(sp_pool_block_size(plugin().pool, in_pool, &n), STREAMPOOL_STATUS_SUCCESS)
      << "a routed block must not be the default pool's";
  EXPECT_EQ(sp_pool_block_size(plugin().pool, eager, &n), STREAMPOOL_STATUS_SUCCESS);
  EXPECT_TRUE(a.checkPoolLiveAllocations(0, id, {in_pool, small_in_pool}));
  EXPECT_FALSE(a.checkPoolLiveAllocations(0, id, {in_pool}));
  EXPECT_FALSE(a.checkPoolLiveAllocations(0, id, {in_pool, small_in_pool, eager}));
  // Freed during the routing: back to the private pool, where the routed stream finds it again.
  a.raw_delete(in_pool);
  void* again = alloc(3 * mib, routed);
  EXPECT_EQ(again, in_pool);
  // Nothing goes back to the device while a routing (a capture) is under way.
  std::size_t released = 1;
  ASSERT_EQ(sp_pool_trim(plugin().pool, &released), STREAMPOOL_STATUS_SUCCESS);
  EXPECT_EQ(released, 0u);
  // The snapshot of the pool has its segments, owned by its id.
  const cca::SnapshotInfo snap = a.snapshot(id);
  ASSERT_FALSE(snap.segments.empty());
  for (const auto& seg : snap.segments) EXPECT_EQ(seg.owner_private_pool_id, id);
  a.endAllocateToPool(0, id);
  EXPECT_NE(error_of([&] { a.endAllocateToPool(0, id); }).find("not currently recording"),
            std::string::npos);
  void* after = alloc(3 * mib, routed);  // routing over: the default pool
  EXPECT_EQ(sp_pool_block_size(plugin().pool, after, &n), STREAMPOOL_STATUS_SUCCESS);
  // Use counts: 1 from the begin, +1, then two releases make the pool freeable; it goes once
  // nothing of it is live.
  EXPECT_EQ(a.getPoolUseCount(0, id), 1);
  a.createOrIncrefPool(0, id, nullptr);
  EXPECT_EQ(a.getPoolUseCount(0, id), 2);
  a.releasePool(0, id);
  a.releasePool(0, id);
  a.emptyCache(id);
  EXPECT_TRUE(a.checkPoolLiveAllocations(0, id, {again, small_in_pool}));  // still there
  a.raw_delete(again);
  a.raw_delete(small_in_pool);
  EXPECT_EQ(a.getPoolUseCount(0, id), 0);
  EXPECT_NE(error_of([&] { (void)a.checkPoolLiveAllocations(0, id, {}); }).find("no memory pool"),
            std::string::npos);
  a.raw_delete(eager);
  a.raw_delete(after);
  ASSERT_EQ(sp_pool_trim(plugin().pool, &released), STREAMPOOL_STATUS_SUCCESS);
}

// Checkpoints (CUDA graph trees): the layout saved after a recording comes back exactly, with
// the blocks allocated since freed (no deleter runs) and the saved ones allocated again, at
// their addresses, with the statistics and the pool's live set following.
TEST_F(NativeAllocator, ACheckpointPutsThePoolsLayoutBack) {
  cca::CUDAAllocator& a = installed();
  const c10::MempoolId_t id{9, 0};
  cudaStream_t routed = plugin().b;
  a.beginAllocateToPool(0, id, [routed](cudaStream_t s) { return s == routed; });
  void* x = alloc(1000, routed);
  void* y = alloc(3 * mib, routed);
  void* z = alloc(5 * mib, routed);
  a.raw_delete(z);  // freed before the checkpoint: free in it
  const auto saved = a.getCheckpointState(0, id);
  const DeviceStats at_checkpoint = stats();
  // After the checkpoint: one saved block freed, others allocated where it and z were.
  a.raw_delete(y);
  void* w = alloc(6 * mib, routed);
  void* v = alloc(2000, routed);
  EXPECT_TRUE(a.checkPoolLiveAllocations(0, id, {x, w, v}));
  cca::CheckpointDelta delta = a.setCheckpointPoolState(0, saved);
  // Every block allocated at the restore is listed as freed, x too (allocated again below).
  std::set<void*> freed(delta.ptrs_freed.begin(), delta.ptrs_freed.end());
  EXPECT_EQ(freed, (std::set<void*>{x, w, v}));
  std::set<void*> allocated;
  for (const c10::DataPtr& d : delta.dataptrs_allocd) {
    allocated.insert(d.get());
    EXPECT_EQ(d.get_deleter(), a.raw_deleter());
    EXPECT_EQ(d.get_context(), d.get());
  }
  EXPECT_EQ(allocated, (std::set<void*>{x, y}));
  // PyTorch moves these into the tensors that own the blocks, or lets them go without a free
  // (raw_delete later): the latter here.
  for (c10::DataPtr& d : delta.dataptrs_allocd) (void)d.release_context();
  EXPECT_TRUE(a.checkPoolLiveAllocations(0, id, {x, y}));
  const DeviceStats now = stats();
  EXPECT_EQ(now.allocation[all].current, at_checkpoint.allocation[all].current);
  EXPECT_EQ(now.allocated_bytes[all].current, at_checkpoint.allocated_bytes[all].current);
  EXPECT_EQ(now.requested_bytes[all].current, at_checkpoint.requested_bytes[all].current);
  // The layout is the saved one: the snapshot of the pool is the same block for block.
  const auto layout = [&] {
    std::vector<std::tuple<std::size_t, std::size_t, bool>> out;
    for (const auto& seg : a.snapshot(id).segments) {
      std::size_t at = seg.address;
      for (const auto& b : seg.blocks) {
        out.emplace_back(at, b.size, b.allocated);
        at += b.size;
      }
      EXPECT_EQ(at, seg.address + seg.total_size);
    }
    return out;
  };
  const auto restored_layout = layout();
  // The same state again (PyTorch may put one checkpoint back several times): nothing changes.
  cca::CheckpointDelta again = a.setCheckpointPoolState(0, saved);
  for (c10::DataPtr& d : again.dataptrs_allocd) (void)d.release_context();
  EXPECT_EQ(std::set<void*>(again.ptrs_freed.begin(), again.ptrs_freed.end()),
            (std::set<void*>{x, y}));
  EXPECT_EQ(layout(), restored_layout);
  // The restored blocks are ordinary ones: freed, reused by the routed stream.
  a.raw_delete(y);
  EXPECT_EQ(alloc(3 * mib, routed), y);
  a.raw_delete(y);
  a.raw_delete(x);
  EXPECT_TRUE(a.checkPoolLiveAllocations(0, id, {}));
  a.endAllocateToPool(0, id);
  // A checkpoint of another device is refused, naming both.
  EXPECT_NE(error_of([&] { (void)a.setCheckpointPoolState(1, saved); }).find("of device 0 given"),
            std::string::npos);
  a.releasePool(0, id);
  EXPECT_NE(error_of([&] { (void)a.getCheckpointState(0, id); }).find("is freeable"),
            std::string::npos);
  a.emptyCache(id);
  EXPECT_NE(error_of([&] { (void)a.getCheckpointState(0, id); }).find("could not find pool"),
            std::string::npos)
      << "a freeable pool with nothing live goes at empty_cache";
}

// _record_memory_history: allocations and frees (requested and completed at once) in order,
// with block addresses and sizes, in a ring of the newest entries, skipping what is asked;
// off, nothing is recorded and the ring is empty.
TEST_F(NativeAllocator, HistoryRecordsAllocationsAndFreesInPyTorchsForm) {
  using Entry = c10::CachingDeviceAllocator::TraceEntry;
  using c10::CachingDeviceAllocator::RecordContext;
  cca::CUDAAllocator& a = installed();
  EXPECT_FALSE(a.isHistoryEnabled());
  a.recordHistory(true, nullptr, 100, RecordContext::ALL, false, {});
  EXPECT_TRUE(a.isHistoryEnabled());
  void* p = alloc(5000, plugin().a);
  const std::size_t p_size = block_size(p);
  void* q = alloc(3 * mib, plugin().b);
  a.raw_delete(p);
  const auto traces = a.snapshot().device_traces;
  ASSERT_GE(traces.size(), 1u);
  const auto& t = traces[0];
  ASSERT_EQ(t.size(), 5u);  // alloc, alloc, free_requested, free_completed, snapshot
  EXPECT_EQ(t[0].action_, Entry::ALLOC);
  EXPECT_EQ(t[0].addr_, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(t[0].size_, p_size);
  EXPECT_EQ(t[0].stream_, plugin().a);
  EXPECT_EQ(t[1].action_, Entry::ALLOC);
  EXPECT_EQ(t[1].addr_, reinterpret_cast<std::uintptr_t>(q));
  EXPECT_EQ(t[1].size_, block_size(q));
  EXPECT_EQ(t[2].action_, Entry::FREE_REQUESTED);
  EXPECT_EQ(t[3].action_, Entry::FREE_COMPLETED);
  EXPECT_EQ(t[3].addr_, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(t[4].action_, Entry::SNAPSHOT);
  EXPECT_LE(t[0].time_.t_, t[3].time_.t_);
  EXPECT_GT(t[0].time_.t_, 1'700'000'000'000'000);  // microseconds since the epoch: after 2023
  // A ring of 2 keeps the newest two; skipped actions are not recorded.
  a.recordHistory(true, nullptr, 2, RecordContext::ALL, true, {"free_requested"});
  for (int i = 0; i < 3; ++i) a.raw_delete(alloc(100, plugin().a));
  const auto ring = a.snapshot({0, 0}, true).device_traces[0];
  ASSERT_EQ(ring.size(), 2u);
  EXPECT_EQ(ring[0].action_, Entry::FREE_COMPLETED);
  EXPECT_EQ(ring[1].action_, Entry::SNAPSHOT);
  EXPECT_NE(error_of([&] {
              a.recordHistory(true, nullptr, 2, RecordContext::ALL, false, {"nap"});
            }).find("'nap' is not one of PyTorch's"),
            std::string::npos);
  a.recordHistory(false, nullptr, 0, RecordContext::NEVER, false, {});
  EXPECT_FALSE(a.isHistoryEnabled());
  a.raw_delete(alloc(100, plugin().a));
  EXPECT_TRUE(a.snapshot().device_traces[0].empty());
  a.raw_delete(q);
}

// IPC: what cannot be shared or opened is named (the sharing itself needs CUDA: gpu_ipc.py).
TEST_F(NativeAllocator, IpcRefusalsNameWhatIsWrong) {
  cca::CUDAAllocator& a = installed();
  void* p = alloc(4096);
  EXPECT_NE(error_of([&] {
              (void)a.shareIpcHandle(static_cast<char*>(p) + 512);
            }).find("not the start of a block"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)a.shareIpcHandle(p); }).find("on a host device, not CUDA"),
            std::string::npos);
  a.raw_delete(p);
  EXPECT_NE(error_of([&] {
              (void)a.getIpcDevPtr(
                  std::string("\x03"
                              "e",
                              2));
            }).find("of version 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)a.getIpcDevPtr(std::string("\x02x", 2)); }).find("of kind 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)a.getIpcDevPtr(
                  std::string("\x02"
                              "e",
                              2));
            }).find("bytes"),
            std::string::npos);
}

TEST_F(NativeAllocator, WhatIsNotSupportedYetIsNamedInTheError) {
  cca::CUDAAllocator& a = installed();
  const c10::MempoolId_t pool{0, 1};
  const std::pair<const char*, std::function<void()>> calls[] = {
      {"allocator trace trackers", [&] { a.attachAllocatorTraceTracker(nullptr); }},
      {"could not find pool of id (0, 1)", [&] { (void)a.getCheckpointState(0, pool); }},
      {"expected a state that streampool's getCheckpointState made",
       [&] { (void)a.setCheckpointPoolState(0, std::make_shared<cca::AllocatorState>()); }},
      {"getBaseAllocation", [&] { (void)a.getBaseAllocation(nullptr, nullptr); }},
      {"a MemPool with an allocator of its own",
       [&] {
         a.createOrIncrefPool(0, pool, std::shared_ptr<cca::CUDAAllocator>(&a, [](auto*) {}));
       }},
      {"caching_allocator_enable(False)", [&] { a.enable(false); }},
  };
  for (const auto& [what, call] : calls) {
    const std::string said = error_of(call);
    EXPECT_NE(said.find(what), std::string::npos) << what << ": " << said;
    EXPECT_NE(said.find("streampool"), std::string::npos) << what << ": " << said;
  }
  // Turning caching on asks for what is already so.
  EXPECT_EQ(error_of([&] { a.enable(true); }), "");
}

// Thousands of live blocks, freed in a shuffled order between new allocations: the block map
// (open addressing, deletion by backward shift) keeps finding every one, so the statistics
// count each block out exactly once and end where they began.
TEST_F(NativeAllocator, ManyLiveBlocksFreedInAnyOrderAreAllFound) {
  cca::CUDAAllocator& a = installed();
  const DeviceStats before = stats();
  std::mt19937_64 rng(44);
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t bytes = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 3000; ++i) {
      const std::size_t n = 1 + rng() % 20000;
      void* p = alloc(n);
      live.emplace_back(p, block_size(p));
      bytes += live.back().second;
    }
    std::shuffle(live.begin(), live.end(), rng);
    ASSERT_EQ(stats().allocation[all].current - before.allocation[all].current,
              static_cast<std::int64_t>(live.size()));
    ASSERT_EQ(stats().allocated_bytes[all].current - before.allocated_bytes[all].current,
              static_cast<std::int64_t>(bytes));
    for (std::size_t k = live.size() / 2; k > 0; --k) {
      a.raw_delete(live.back().first);
      bytes -= live.back().second;
      live.pop_back();
    }
  }
  for (const auto& [p, n] : live) a.raw_delete(p);
  EXPECT_EQ(stats().allocation[all].current, before.allocation[all].current);
  EXPECT_EQ(stats().allocated_bytes[all].current, before.allocated_bytes[all].current);
}
