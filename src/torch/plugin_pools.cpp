// streampool: the plug-in's pools and devices for the native allocator (plugin_pools.hpp).
#include "plugin_pools.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>

#include "check.hpp"

namespace streampool::torch_native {
namespace {

/// Whether the plug-in's pools run on the host backend. Asked once, and only where CUDA names no
/// device: asking makes the plug-in's pool of device 0.
bool plugin_on_host() {
  static const bool on_host = [] {
    try {
      sp_device_t dev = nullptr;
      if (sp_pool_get_device(pool_of(0), &dev) != STREAMPOOL_STATUS_SUCCESS) return false;
      sp_backend_kind_t kind = SP_BACKEND_OTHER;
      const bool host = sp_device_backend_kind(dev, &kind) == STREAMPOOL_STATUS_SUCCESS &&
                        kind == SP_BACKEND_HOST;
      (void)sp_device_destroy(dev);
      return host;
    } catch (const c10::Error&) {
      return false;  // no plug-in pool either: CUDA's error is the one to report
    }
  }();
  return on_host;
}

}  // namespace

sp_pool_t pool_of(int device) {
  // sp_torch_pool adds a handle at each call: one per device is kept (a race makes two, one of
  // which is destroyed).
  static std::array<std::atomic<sp_pool_t>, max_devices> handles{};
  std::atomic<sp_pool_t>& slot = handles.at(static_cast<std::size_t>(device));
  if (sp_pool_t h = slot.load(std::memory_order_acquire)) return h;
  sp_pool_t pool = nullptr;
  check(sp_torch_pool(device, &pool), "streampool: device ", device);
  sp_pool_t expected = nullptr;
  if (!slot.compare_exchange_strong(expected, pool, std::memory_order_acq_rel)) {
    (void)sp_pool_destroy(pool);
    return expected;
  }
  return pool;
}

sp_device_t device_handle(c10::DeviceIndex device) {
  static std::array<std::atomic<sp_device_t>, max_devices> handles{};
  std::atomic<sp_device_t>& slot = handles.at(static_cast<std::size_t>(device));
  if (sp_device_t h = slot.load(std::memory_order_acquire)) return h;
  sp_device_t dev = nullptr;
  check(sp_pool_get_device(pool_of(device), &dev), "streampool: device ", static_cast<int>(device));
  sp_device_t expected = nullptr;
  if (!slot.compare_exchange_strong(expected, dev, std::memory_order_acq_rel)) {
    (void)sp_device_destroy(dev);
    return expected;
  }
  return dev;
}

c10::DeviceIndex stream_call_device() {
  c10::DeviceIndex device = -1;
  const cudaError_t e = c10::cuda::GetDevice(&device);
  if (e == cudaSuccess) return device;
  (void)cudaGetLastError();  // reported below, or not an error on the host backend
  if (plugin_on_host()) return 0;
  C10_CUDA_CHECK(e);
  return device;  // not reached: C10_CUDA_CHECK threw
}

}  // namespace streampool::torch_native
