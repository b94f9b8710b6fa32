// streampool: the Level Zero backend's kernel module, built from the embedded SPIR-V (spirv.hpp).
#pragma once

#include <level_zero/ze_api.h>

#include "driver.hpp"
#include "spirv.hpp"

namespace streampool::detail::ze {

/// zeModuleCreate of `spirv` (the fp64 variant when `fp64`; only for messages) on `dev` in `ctx`,
/// with no build flags: the variants differ in their SPIR-V, which was compiled with or without
/// SP_FP64, and a driver may ignore or reject a -D for SPIR-V input. (The test driver tells the
/// variants apart by the kernel names the module holds.)
/// @throws backend_error naming the call and quoting the module's build log when it fails.
[[nodiscard]] ze_module_handle_t create_kernel_module(const driver& d, ze_driver_handle_t drv,
                                                      ze_context_handle_t ctx,
                                                      ze_device_handle_t dev,
                                                      const spirv_module& spirv, bool fp64,
                                                      int ordinal);

}  // namespace streampool::detail::ze
