// streampool: the Level Zero backend's kernel module, built from the embedded SPIR-V (spirv.hpp).
#pragma once

#include <level_zero/ze_api.h>

#include "driver.hpp"
#include "spirv.hpp"

namespace streampool::detail::ze {

/// zeModuleCreate of `spirv` (the fp64 variant when `fp64`) on `dev` in `ctx`. The build flags
/// name the macro the SPIR-V was compiled with (-DSP_FP64 for the fp64 variant): a driver that
/// compiles SPIR-V ignores a flag it does not support (the specification says so), and one that
/// cannot look inside the module (the test driver, which emulates kernels.cl by name) learns from
/// it which variant it has (kernels.cl's integer sqrt differs between them too).
/// @throws backend_error naming the call and quoting the module's build log when it fails.
[[nodiscard]] ze_module_handle_t create_kernel_module(const driver& d, ze_driver_handle_t drv,
                                                      ze_context_handle_t ctx,
                                                      ze_device_handle_t dev,
                                                      const spirv_module& spirv, bool fp64,
                                                      int ordinal);

}  // namespace streampool::detail::ze
