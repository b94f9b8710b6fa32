// streampool: what the Level Zero backend asks of the loader and the device before it starts.
//
// Glossary
//   location  a device's driver and handle; devices are numbered across every driver the loader
//             reports, in its order (driver 0's devices first).
//   facts     what the backend needs to know of one device, asked once when it is made.
#pragma once

#include <level_zero/ze_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "driver.hpp"
#include "streampool/backend.hpp"

namespace streampool::detail::ze {

/// caps().granularity: 64 KiB, the smallest the pool accepts and the page size of device memory
/// on Intel's discrete GPUs; zeMemAllocDevice takes it as the alignment.
constexpr std::size_t allocation_granularity = min_pool_granularity;

/// The virtual-memory granule: 2 MiB (the large page of Intel GPUs), or the driver's page size
/// for 2 MiB if that is larger; STREAMPOOL_LEVEL_ZERO_VM_GRANULARITY overrides it.
constexpr std::size_t default_vm_granularity = std::size_t{2} << 20;

/// The work-group size the kernel plans use, at most (a power of two; the device's limit can
/// lower it).
constexpr std::size_t preferred_group_size = 256;

/// Where one device is: its driver and handle.
struct device_location {
  ze_driver_handle_t drv = nullptr;
  ze_device_handle_t dev = nullptr;
};

/// Every device of every driver, in the loader's order.
/// @throws backend_error when the loader cannot list them.
[[nodiscard]] std::vector<device_location> enumerate(const driver& d);

/// What the backend needs to know of one device.
struct device_facts {
  std::string name;                  ///< for messages
  std::size_t total_memory = 0;      ///< the sum of its memory properties' totalSize
  std::uint32_t compute_group = 0;   ///< ordinal of the first queue group with compute
  std::size_t max_fill_pattern = 0;  ///< that group's maxMemoryFillPatternSize
  bool fp64 = false;                 ///< ZE_DEVICE_MODULE_FLAG_FP64: the f64 kernels run
  std::size_t group_size = preferred_group_size;  ///< lowered to the device's limits
  std::size_t vm_granule = 0;                     ///< 0: no virtual memory
  /// sharedSystemAllocCapabilities is not 0: the device may access pageable (system) memory, so a
  /// copy may write the caller's pageable memory directly. Without it downloads are staged.
  bool shared_system_memory = false;
};

/// The facts of the device at `loc`, as seen from context `ctx` (virtual memory's page size is
/// asked per context).
/// @throws backend_error when a query fails or the device has no compute queue group;
///         logic_error when STREAMPOOL_LEVEL_ZERO_VM_GRANULARITY is not a valid size.
[[nodiscard]] device_facts query_facts(const driver& d, device_location loc,
                                       ze_context_handle_t ctx, int ordinal);

}  // namespace streampool::detail::ze
