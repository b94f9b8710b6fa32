// streampool: the Level Zero loader, loaded at run time.
//
// Glossary
//   loader        libze_loader.so.1, the Level Zero entry point that forwards every call to the
//                 drivers it found (ZE_ENABLE_ALT_DRIVERS names others, such as the project's
//                 host-semantics test driver). Loaded with dlopen on first use; the library never
//                 links it, so a program built with streampool runs where Level Zero is absent and
//                 simply finds it unavailable.
//   driver table  the loader functions this backend calls, resolved once per process with dlsym.
//                 Their types come from the 1.4 headers (<level_zero/ze_api.h>), which is what the
//                 build needs; entry points of later specifications are resolved only if the
//                 loader exports them and are null otherwise (the feature is then off).
#pragma once

#include <level_zero/ze_api.h>

#include <string>

#include "backend/common/check.hpp"

namespace streampool::detail::ze {

/// The loader functions the backend calls. Every pointer is non-null once `load` succeeded, except
/// the ones marked optional. The table also names the results for the checks and the teardown
/// reports, without a driver's own words (driver_errors adds them, check.hpp).
struct driver final : runtime_errors {
  decltype(&::zeInit) init;
  decltype(&::zeDriverGet) driver_get;
  decltype(&::zeDriverGetApiVersion) driver_get_api_version;
  decltype(&::zeDeviceGet) device_get;
  decltype(&::zeDeviceGetProperties) device_get_properties;
  decltype(&::zeDeviceGetMemoryProperties) device_get_memory_properties;
  decltype(&::zeDeviceGetCommandQueueGroupProperties) device_get_command_queue_group_properties;
  decltype(&::zeDeviceGetModuleProperties) device_get_module_properties;
  decltype(&::zeDeviceGetComputeProperties) device_get_compute_properties;
  decltype(&::zeDeviceGetMemoryAccessProperties) device_get_memory_access_properties;
  decltype(&::zeContextCreate) context_create;
  decltype(&::zeContextDestroy) context_destroy;
  decltype(&::zeCommandListCreateImmediate) command_list_create_immediate;
  decltype(&::zeCommandListDestroy) command_list_destroy;
  decltype(&::zeCommandListAppendBarrier) command_list_append_barrier;
  decltype(&::zeCommandListAppendWaitOnEvents) command_list_append_wait_on_events;
  decltype(&::zeCommandListAppendMemoryCopy) command_list_append_memory_copy;
  decltype(&::zeCommandListAppendMemoryFill) command_list_append_memory_fill;
  decltype(&::zeCommandListAppendLaunchKernel) command_list_append_launch_kernel;
  decltype(&::zeEventPoolCreate) event_pool_create;
  decltype(&::zeEventPoolDestroy) event_pool_destroy;
  decltype(&::zeEventCreate) event_create;
  decltype(&::zeEventDestroy) event_destroy;
  decltype(&::zeEventHostSynchronize) event_host_synchronize;
  decltype(&::zeEventQueryStatus) event_query_status;
  decltype(&::zeEventHostReset) event_host_reset;
  decltype(&::zeMemAllocDevice) mem_alloc_device;
  decltype(&::zeMemAllocHost) mem_alloc_host;
  decltype(&::zeMemFree) mem_free;
  decltype(&::zeModuleCreate) module_create;
  decltype(&::zeModuleDestroy) module_destroy;
  decltype(&::zeModuleBuildLogGetString) module_build_log_get_string;
  decltype(&::zeModuleBuildLogDestroy) module_build_log_destroy;
  decltype(&::zeKernelCreate) kernel_create;
  decltype(&::zeKernelDestroy) kernel_destroy;
  decltype(&::zeKernelSetGroupSize) kernel_set_group_size;
  decltype(&::zeKernelSetArgumentValue) kernel_set_argument_value;
  decltype(&::zeVirtualMemQueryPageSize) virtual_mem_query_page_size;
  decltype(&::zeVirtualMemReserve) virtual_mem_reserve;
  decltype(&::zeVirtualMemFree) virtual_mem_free;
  decltype(&::zePhysicalMemCreate) physical_mem_create;
  decltype(&::zePhysicalMemDestroy) physical_mem_destroy;
  decltype(&::zeVirtualMemMap) virtual_mem_map;
  decltype(&::zeVirtualMemUnmap) virtual_mem_unmap;
  /// Optional (specification 1.6): the driver's own words for its last error on this thread;
  /// null when the loader does not export it. Declared here because the 1.4 headers lack it.
  ze_result_t (*driver_get_last_error_description)(ze_driver_handle_t driver, const char** text);

  [[nodiscard]] const char* backend() const noexcept override { return "level_zero"; }
  /// "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003)".
  [[nodiscard]] std::string describe(long code) const override;
  /// describe(r), plus driver `drv`'s description of its last error when it has one (`drv` may be
  /// nullptr: none).
  [[nodiscard]] std::string describe(ze_result_t r, ze_driver_handle_t drv) const;
};

/// The name of a ze_result_t of the 1.4 specification ("ZE_RESULT_<unknown>" otherwise).
[[nodiscard]] const char* result_name(ze_result_t r) noexcept;

/// The process-wide driver table, loaded and zeInit'ed on first call (thread-safe). nullptr when
/// the loader cannot be loaded or initialised; then `*why` (if given) says why and `*code` holds
/// the ze_result_t of the failing call (0 for a dlopen/dlsym failure).
[[nodiscard]] const driver* load(std::string* why = nullptr, ze_result_t* code = nullptr) noexcept;

}  // namespace streampool::detail::ze
