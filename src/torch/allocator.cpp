// streampool: the native allocator's allocation and free, the path of every tensor (allocator.hpp).
//
// The pools are the plug-in's (src/c_api/torch_plugin.cpp: one per device, large blocks per
// stream, never destroyed), reached through the C ABI only (sp_torch_*), so that this library
// depends on streampool's public interface and on PyTorch's headers, nothing else.
#include "allocator.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <utility>
#include <vector>

#include "check.hpp"

namespace streampool::torch_native {
namespace {

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

/// PyTorch's own split between its small and large pools: blocks of at most 1 MiB are small.
constexpr std::size_t small_max = std::size_t{1} << 20;

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

}  // namespace

allocator* the_allocator = nullptr;

void delete_block(void* p) { the_allocator->free(p); }

c10::DataPtr allocator::allocate(size_t n) {
  const c10::DeviceIndex d = c10::cuda::current_device();
  void* p = n == 0 ? nullptr : alloc(n, d, c10::cuda::getCurrentCUDAStream(d).stream());
  return {p, p, &delete_block, c10::Device(c10::DeviceType::CUDA, d)};
}

void* allocator::raw_alloc(size_t nbytes) {
  const c10::DeviceIndex d = c10::cuda::current_device();
  return raw_alloc_with_stream(nbytes, c10::cuda::getCurrentCUDAStream(d).stream());
}

void* allocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return nullptr;
  return alloc(nbytes, stream_call_device(), stream);
}

void allocator::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  // Not ours (a tensor shared over IPC keeps PyTorch's deleter), or empty: nothing to record.
  if (ptr.get() == nullptr || ptr.get_deleter() != &delete_block) return;
  block b;
  if (blocks_.find(ptr.get(), b) && b.pool != nullptr) {
    b.pool->arena->record_use(ptr.get(), stream.stream());
    return;
  }
  sp_torch_record_stream(ptr.get(), stream.stream());
}

void allocator::count(DeviceStats& s, const block& b, bool out) {
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

void* allocator::alloc(std::size_t n, c10::DeviceIndex device, cudaStream_t stream) {
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

void* allocator::default_alloc(state& st, std::size_t n, c10::DeviceIndex device,
                               cudaStream_t stream, private_pool*& pp, std::size_t& size) {
  try {
    return sp_torch_malloc_sized(n, device, stream, &size);
  } catch (const std::bad_alloc& e) {
    const auto [pool, p] = graphs_.borrow(device, n, stream, size);
    if (p == nullptr) out_of_memory(st, n, device, e.what());
    pp = pool;
    return p;
  }
}

void allocator::out_of_memory(state& st, std::size_t n, c10::DeviceIndex device, const char* what) {
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

void allocator::attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) {
  const std::lock_guard lock(observers_mu_);
  oom_observers_.push_back(std::move(observer));
}

void allocator::free(void* p) noexcept {
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

}  // namespace streampool::torch_native
