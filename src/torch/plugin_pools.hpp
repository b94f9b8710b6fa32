// streampool: the plug-in's pools and devices (src/c_api/torch_plugin.cpp), as the native
// allocator reaches them: through the C ABI only, by CUDA device ordinal.
#pragma once

#include <c10/core/Device.h>

#include "streampool.h"

namespace streampool::torch_native {

/// CUDA devices the allocator serves, as the plug-in does: ordinals 0 to max_devices - 1.
inline constexpr int max_devices = 64;

/// The plug-in pool's handle for CUDA device `device` (its pool is made on first use), asked once
/// and kept. @throws c10::Error with the C ABI's message
sp_pool_t pool_of(int device);

/// The streampool device of CUDA device `device`'s pools (the plug-in pool's), asked once.
/// @throws c10::Error with the C ABI's message
sp_device_t device_handle(c10::DeviceIndex device);

/// The device of a call that names only a stream (raw_alloc_with_stream): CUDA's current device.
/// Where CUDA names none (no driver or no GPU) and the plug-in runs on the host backend
/// (STREAMPOOL_TORCH_BACKEND=host: the tests without a GPU), its device 0.
/// @throws c10::Error with CUDA's error otherwise
c10::DeviceIndex stream_call_device();

}  // namespace streampool::torch_native
