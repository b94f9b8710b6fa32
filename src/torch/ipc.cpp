// streampool: PyTorch's IPC handles on streampool's memory (ipc.hpp).
#include "ipc.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "check.hpp"

namespace streampool::torch_native {
namespace {

constexpr char handle_version = 2;  // PyTorch's SHAREABLE_HANDLE_VERSION
constexpr char kind_allocation = 'c';
constexpr char kind_granules = 'e';
constexpr std::size_t ipc_handle_bytes = 64;

/// What precedes the descriptors of an 'e' handle, laid out as PyTorch's: zeroed whole, so that
/// the padding is 0 and equal handles compare equal as strings.
struct granules_header {
  pid_t pid;
  std::size_t granule_bytes;
  std::size_t count;
};

/// A descriptor of process `pidfd`, duplicated into this one (pidfd_getfd: the same user, and
/// ptrace's permission to the exporter).
int duplicate(int pidfd, int fd) {
  const long r = ::syscall(SYS_pidfd_getfd, pidfd, fd, 0);
  TORCH_CHECK(r >= 0, "streampool: opening a shared CUDA tensor: pidfd_getfd of descriptor ", fd,
              " failed: ", std::strerror(errno),
              " (the receiving process needs ptrace permission to the sender's)");
  return static_cast<int>(r);
}

}  // namespace

c10::cuda::CUDACachingAllocator::ShareableHandle ipc::share(sp_pool_t pool, int device, void* p,
                                                            std::size_t size) {
  int kind = 0;
  std::uint64_t base = 0;
  std::size_t bytes = 0;
  std::size_t granule = 0;
  unsigned char handle[ipc_handle_bytes] = {};
  std::vector<int> fds(size / (std::size_t{2} << 20) + 2);
  std::size_t count = 0;
  check(sp_cuda_share(pool, device, p, size, &kind, &base, &bytes, &granule, handle, fds.data(),
                      fds.size(), &count),
        "streampool: sharing the block at ", p, " (", size, " bytes, device ", device,
        ") with another process");
  std::string out;
  out.push_back(handle_version);
  if (kind == SP_CUDA_SHARED_ALLOCATION) {
    out.push_back(kind_allocation);
    out.append(reinterpret_cast<const char*>(handle), ipc_handle_bytes);
  } else {
    fds.resize(count);
    granules_header h;
    std::memset(&h, 0, sizeof h);
    h.pid = ::getpid();
    h.granule_bytes = granule;
    h.count = count;
    out.push_back(kind_granules);
    out.append(reinterpret_cast<const char*>(&h), sizeof h);
    out.append(reinterpret_cast<const char*>(fds.data()), count * sizeof(int));
    const std::lock_guard lock(mu_);
    auto& kept = exported_[p];
    kept.insert(kept.end(), fds.begin(), fds.end());
    exported_count_.store(exported_.size(), std::memory_order_release);
  }
  const auto offset = static_cast<std::ptrdiff_t>(reinterpret_cast<std::uintptr_t>(p) - base);
  return {offset, out};
}

void ipc::close_exported(void* p) noexcept {
  const std::lock_guard lock(mu_);
  const auto it = exported_.find(p);
  if (it == exported_.end()) return;
  for (const int fd : it->second) (void)::close(fd);
  exported_.erase(it);
  exported_count_.store(exported_.size(), std::memory_order_release);
}

std::shared_ptr<void> ipc::open(const std::string& handle) {
  const std::lock_guard lock(mu_);
  if (auto live = opened_[handle].lock()) return live;
  const auto forget = [this, handle] {
    const std::lock_guard l(mu_);
    const auto it = opened_.find(handle);
    if (it != opened_.end() && it->second.expired()) opened_.erase(it);
  };
  const bool bare = handle.size() == ipc_handle_bytes;
  TORCH_CHECK(bare || (handle.size() >= 2 && handle[0] <= handle_version),
              "streampool: a shared CUDA tensor's handle of version ",
              handle.empty() ? -1 : static_cast<int>(handle[0]),
              " (received from a newer torch?); this one reads up to ", int{handle_version});
  const char kind = bare ? kind_allocation : handle[1];
  std::shared_ptr<void> out;
  if (kind == kind_allocation) {
    TORCH_CHECK(handle.size() == (bare ? 0 : 2) + ipc_handle_bytes,
                "streampool: a shared CUDA tensor's handle of ", handle.size(), " bytes");
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data() + (bare ? 0 : 2), sizeof h);
    void* p = nullptr;
    C10_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    out = std::shared_ptr<void>(p, [forget](void* q) {
      (void)cudaIpcCloseMemHandle(q);
      forget();
    });
  } else {
    TORCH_CHECK(kind == kind_granules, "streampool: a shared CUDA tensor's handle of kind '", kind,
                "', not 'c' or 'e'");
    granules_header h;
    TORCH_CHECK(handle.size() >= 2 + sizeof h, "streampool: a shared CUDA tensor's handle of ",
                handle.size(), " bytes");
    std::memcpy(&h, handle.data() + 2, sizeof h);
    TORCH_CHECK(h.count > 0 && handle.size() == 2 + sizeof h + h.count * sizeof(int),
                "streampool: a shared CUDA tensor's handle of ", handle.size(), " bytes for ",
                h.count, " granules");
    std::vector<int> theirs(h.count);
    std::memcpy(theirs.data(), handle.data() + 2 + sizeof h, h.count * sizeof(int));
    // DeviceIndex is a signed char, and devices are numbered from 0.
    const int device = static_cast<unsigned char>(c10::cuda::current_device());
    const long pidfd = ::syscall(SYS_pidfd_open, h.pid, 0);
    TORCH_CHECK(pidfd >= 0, "streampool: opening a shared CUDA tensor: pidfd_open of process ",
                h.pid, " failed: ", std::strerror(errno));
    std::vector<int> mine;
    void* base = nullptr;
    sp_status_t st = STREAMPOOL_STATUS_SUCCESS;
    try {
      for (const int fd : theirs) mine.push_back(duplicate(static_cast<int>(pidfd), fd));
      st = sp_cuda_map_shared(device, mine.data(), mine.size(), h.granule_bytes, &base);
    } catch (...) {
      for (const int fd : mine) (void)::close(fd);
      (void)::close(static_cast<int>(pidfd));
      throw;
    }
    for (const int fd : mine) (void)::close(fd);  // the mapping holds the memory
    (void)::close(static_cast<int>(pidfd));
    check(st, "streampool: mapping a shared CUDA tensor's ", h.count, " granules");
    const std::size_t bytes = h.count * h.granule_bytes;
    out = std::shared_ptr<void>(base, [device, bytes, forget](void* q) {
      (void)sp_cuda_unmap_shared(device, q, bytes);
      forget();
    });
  }
  opened_[handle] = out;
  return out;
}

}  // namespace streampool::torch_native
