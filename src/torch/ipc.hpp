// streampool: PyTorch's sharing of CUDA tensors between processes (torch.multiprocessing) on
// streampool's memory: shareIpcHandle and getIpcDevPtr of the native allocator.
//
// Glossary
//   handle    PyTorch's shareable handle string, in PyTorch's own format so that a process on
//             PyTorch's allocator can open what streampool shares and the other way round:
//             byte 0 the version (2), byte 1 the kind, then
//               'c'  the 64-byte cudaIpcMemHandle_t of the driver allocation holding the block
//                    (slabs, private pools' segments, whole large segments);
//               'e'  a header {pid, granule bytes, granule count} (zero padding) and one int per
//                    granule: the exporter's file descriptors of the granules covering the block
//                    (virtual ranges), which the importer duplicates with pidfd_getfd.
//             A 64-byte string is a bare cudaIpcMemHandle_t (older PyTorch).
//   offset    the block's distance from the start of what the handle opens.
//
// Invariants
//   - A granule descriptor exported for a block stays open until that block is freed: the
//     importer duplicates it after the exporter sent the handle, and PyTorch frees the block only
//     once every importer has dropped it (CudaIPCSentData's counter).
//   - One mapping per handle per process: a handle opened again while its mapping lives gets the
//     same mapping (the driver opens a cudaIpcMemHandle_t once per context).
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "streampool.h"

namespace streampool::torch_native {

class ipc {
 public:
  /// The handle of the block at p (`size` bytes, from `pool`, on CUDA device `device`).
  /// @throws c10::Error naming the block when its memory cannot be shared
  c10::cuda::CUDACachingAllocator::ShareableHandle share(sp_pool_t pool, int device, void* p,
                                                         std::size_t size);
  /// The block at p was freed: the descriptors exported for it are closed. Never throws.
  void freed(void* p) noexcept {
    if (exported_count_.load(std::memory_order_acquire) != 0) [[unlikely]]
      close_exported(p);
  }
  /// The memory a handle opens, on the current device, mapped while the pointer lives.
  /// @throws c10::Error naming the handle's kind and the call that failed
  std::shared_ptr<void> open(const std::string& handle);

 private:
  void close_exported(void* p) noexcept;

  std::mutex mu_;
  std::unordered_map<void*, std::vector<int>> exported_;
  std::atomic<std::size_t> exported_count_{0};
  std::unordered_map<std::string, std::weak_ptr<void>> opened_;
};

}  // namespace streampool::torch_native
