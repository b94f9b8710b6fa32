// The native allocator refuses to replace a PyTorch CUDA allocator that holds allocations: their
// tensors would be freed to streampool. Without a GPU PyTorch's own allocator never holds any, so
// a stand-in (busy_allocator) says it does. The first successful install of the process happens
// here, which is why this is a program of its own (tests/torch_native/CMakeLists.txt).
#include <c10/cuda/CUDACachingAllocator.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "torch/native_allocator.hpp"

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

const bool host_plugin = [] {
  setenv("STREAMPOOL_TORCH_BACKEND", "host", 1);
  return true;
}();

/// An initialised CUDA allocator that holds `live` allocations on device 0. The install reads
/// only initialized(), getDeviceStats() and name(); anything else it calls fails the test.
class busy_allocator final : public cca::CUDAAllocator {
 public:
  std::int64_t live = 3;

  bool initialized() override { return true; }
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats s;
    if (device == 0) s.allocation[static_cast<std::size_t>(StatType::AGGREGATE)].current = live;
    return s;
  }
  std::string name() override { return "busy"; }

  c10::DataPtr allocate(size_t) override { unexpected("allocate"); }
  void copy_data(void*, const void*, std::size_t) const override { unexpected("copy_data"); }
  void emptyCache(c10::MempoolId_t) override { unexpected("emptyCache"); }
  using cca::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr&, c10::cuda::CUDAStream) override {
    unexpected("recordStream");
  }
  void resetAccumulatedStats(c10::DeviceIndex) override { unexpected("resetAccumulatedStats"); }
  void resetPeakStats(c10::DeviceIndex) override { unexpected("resetPeakStats"); }
  void* raw_alloc(size_t) override { unexpected("raw_alloc"); }
  void* raw_alloc_with_stream(size_t, cudaStream_t) override {
    unexpected("raw_alloc_with_stream");
  }
  void raw_delete(void*) override { unexpected("raw_delete"); }
  void init(int) override { unexpected("init"); }
  double getMemoryFraction(c10::DeviceIndex) override { unexpected("getMemoryFraction"); }
  void setMemoryFraction(double, c10::DeviceIndex) override { unexpected("setMemoryFraction"); }
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override {
    unexpected("getExpandableSegmentSizes");
  }
  void enable(bool) override { unexpected("enable"); }
  bool isEnabled() const override { unexpected("isEnabled"); }
  void cacheInfo(c10::DeviceIndex, size_t*) override { unexpected("cacheInfo"); }
  void* getBaseAllocation(void*, size_t*) override { unexpected("getBaseAllocation"); }
  cca::SnapshotInfo snapshot(c10::MempoolId_t, bool) override { unexpected("snapshot"); }
  void beginAllocateToPool(c10::DeviceIndex, c10::MempoolId_t,
                           std::function<bool(cudaStream_t)>) override {
    unexpected("beginAllocateToPool");
  }
  void endAllocateToPool(c10::DeviceIndex, c10::MempoolId_t) override {
    unexpected("endAllocateToPool");
  }
  void releasePool(c10::DeviceIndex, c10::MempoolId_t) override { unexpected("releasePool"); }
  cca::ShareableHandle shareIpcHandle(void*) override { unexpected("shareIpcHandle"); }
  std::shared_ptr<void> getIpcDevPtr(std::string) override { unexpected("getIpcDevPtr"); }
  void recordHistory(bool, c10::CachingDeviceAllocator::CreateContextFn, size_t,
                     c10::CachingDeviceAllocator::RecordContext, bool,
                     const std::vector<std::string>&) override {
    unexpected("recordHistory");
  }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver) override {
    unexpected("attachOutOfMemoryObserver");
  }
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker) override {
    unexpected("attachAllocatorTraceTracker");
  }
  void enablePeerAccess(c10::DeviceIndex, c10::DeviceIndex) override {
    unexpected("enablePeerAccess");
  }
  cudaError_t memcpyAsync(void*, int, const void*, int, size_t, cudaStream_t, bool) override {
    unexpected("memcpyAsync");
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex,
                                                          c10::MempoolId_t) override {
    unexpected("getCheckpointState");
  }
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex,
                                              std::shared_ptr<cca::AllocatorState>) override {
    unexpected("setCheckpointPoolState");
  }

 private:
  [[noreturn]] static void unexpected(const char* what) {
    ADD_FAILURE() << "the install called busy_allocator::" << what;
    std::abort();
  }
};

}  // namespace

TEST(NativeInstall, RefusedWhilePyTorchsAllocatorHoldsAllocations) {
  ASSERT_TRUE(host_plugin);
  cca::CUDAAllocator* const pytorch = cca::allocator.load();
  ASSERT_NE(pytorch, nullptr);
  ASSERT_NE(pytorch->name(), "streampool") << "installed before this test";
  c10::Allocator* const cuda_before = c10::GetAllocator(c10::DeviceType::CUDA);
  static busy_allocator busy;  // PyTorch may hold the pointer for the process's life
  cca::allocator.store(&busy);

  char message[512] = "";
  EXPECT_EQ(sp_torch_native_install(message, sizeof message), 1);
  EXPECT_NE(std::string(message).find("PyTorch's CUDA allocator (busy) already holds 3 "
                                      "allocations on device 0; enable streampool before the "
                                      "first CUDA tensor"),
            std::string::npos)
      << message;
  EXPECT_EQ(std::string(message).find("Exception raised from"), std::string::npos)
      << "the message without C++ frames: " << message;
  EXPECT_EQ(cca::allocator.load(), &busy) << "a refused install changes nothing";
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::CUDA), cuda_before);

  // Once the allocations are gone, the same call installs (a refusal is not remembered).
  busy.live = 0;
  message[0] = '\0';
  EXPECT_EQ(sp_torch_native_install(message, sizeof message), 0) << message;
  cca::CUDAAllocator* const installed = cca::allocator.load();
  EXPECT_EQ(installed->name(), "streampool");
  EXPECT_NE(installed, &busy);
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::CUDA), installed);
}
