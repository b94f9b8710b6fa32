// streampool: the native allocator between devices and processes (allocator.hpp): the device
// count, copies, peer access and IPC handles.
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "allocator.hpp"

namespace streampool::torch_native {

void allocator::init(int device_count) {
  TORCH_CHECK(device_count >= 0 && device_count <= max_devices, "streampool: ", device_count,
              " CUDA devices, at most ", max_devices, " supported");
  device_count_.store(device_count);
}

void allocator::copy_data(void* dest, const void* src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

void allocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  const c10::cuda::CUDAGuard guard(dev);
  const cudaError_t e = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  C10_CUDA_CHECK(e);
}

cudaError_t allocator::memcpyAsync(void* dst, int dst_device, const void* src, int src_device,
                                   size_t count, cudaStream_t stream, bool p2p_enabled) {
  if (!p2p_enabled && dst_device != src_device) {
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
  }
  return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

cca::ShareableHandle allocator::shareIpcHandle(void* ptr) {
  block b;
  TORCH_CHECK(blocks_.find(ptr, b), "streampool: shareIpcHandle of ", ptr,
              ", which is not the start of a block streampool's allocator handed out");
  return ipc_.share(b.pool != nullptr ? b.pool->pool : pool_of(b.device), b.device, ptr, b.size);
}

std::shared_ptr<void> allocator::getIpcDevPtr(std::string handle) { return ipc_.open(handle); }

}  // namespace streampool::torch_native
