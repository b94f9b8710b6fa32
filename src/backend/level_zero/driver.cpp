// streampool: loading the Level Zero loader (see driver.hpp).
#include "driver.hpp"

#include <array>
#include <cstdio>

#include "backend/common/dynamic_library.hpp"

namespace streampool::detail::ze {
namespace {

// Every entry point of the 1.4 specification the backend calls is required; a later one is
// optional and its feature is off when the loader lacks it.
constexpr std::array driver_symbols{
    required_symbol<&driver::init>("zeInit"),
    required_symbol<&driver::driver_get>("zeDriverGet"),
    required_symbol<&driver::driver_get_api_version>("zeDriverGetApiVersion"),
    required_symbol<&driver::device_get>("zeDeviceGet"),
    required_symbol<&driver::device_get_properties>("zeDeviceGetProperties"),
    required_symbol<&driver::device_get_memory_properties>("zeDeviceGetMemoryProperties"),
    required_symbol<&driver::device_get_command_queue_group_properties>(
        "zeDeviceGetCommandQueueGroupProperties"),
    required_symbol<&driver::device_get_module_properties>("zeDeviceGetModuleProperties"),
    required_symbol<&driver::device_get_compute_properties>("zeDeviceGetComputeProperties"),
    required_symbol<&driver::device_get_memory_access_properties>(
        "zeDeviceGetMemoryAccessProperties"),
    required_symbol<&driver::context_create>("zeContextCreate"),
    required_symbol<&driver::context_destroy>("zeContextDestroy"),
    required_symbol<&driver::command_list_create_immediate>("zeCommandListCreateImmediate"),
    required_symbol<&driver::command_list_destroy>("zeCommandListDestroy"),
    required_symbol<&driver::command_list_append_barrier>("zeCommandListAppendBarrier"),
    required_symbol<&driver::command_list_append_wait_on_events>("zeCommandListAppendWaitOnEvents"),
    required_symbol<&driver::command_list_append_memory_copy>("zeCommandListAppendMemoryCopy"),
    required_symbol<&driver::command_list_append_memory_fill>("zeCommandListAppendMemoryFill"),
    required_symbol<&driver::command_list_append_launch_kernel>("zeCommandListAppendLaunchKernel"),
    required_symbol<&driver::event_pool_create>("zeEventPoolCreate"),
    required_symbol<&driver::event_pool_destroy>("zeEventPoolDestroy"),
    required_symbol<&driver::event_create>("zeEventCreate"),
    required_symbol<&driver::event_destroy>("zeEventDestroy"),
    required_symbol<&driver::event_host_synchronize>("zeEventHostSynchronize"),
    required_symbol<&driver::event_query_status>("zeEventQueryStatus"),
    required_symbol<&driver::event_host_reset>("zeEventHostReset"),
    required_symbol<&driver::mem_alloc_device>("zeMemAllocDevice"),
    required_symbol<&driver::mem_alloc_host>("zeMemAllocHost"),
    required_symbol<&driver::mem_free>("zeMemFree"),
    required_symbol<&driver::module_create>("zeModuleCreate"),
    required_symbol<&driver::module_destroy>("zeModuleDestroy"),
    required_symbol<&driver::module_build_log_get_string>("zeModuleBuildLogGetString"),
    required_symbol<&driver::module_build_log_destroy>("zeModuleBuildLogDestroy"),
    required_symbol<&driver::kernel_create>("zeKernelCreate"),
    required_symbol<&driver::kernel_destroy>("zeKernelDestroy"),
    required_symbol<&driver::kernel_set_group_size>("zeKernelSetGroupSize"),
    required_symbol<&driver::kernel_set_argument_value>("zeKernelSetArgumentValue"),
    required_symbol<&driver::virtual_mem_query_page_size>("zeVirtualMemQueryPageSize"),
    required_symbol<&driver::virtual_mem_reserve>("zeVirtualMemReserve"),
    required_symbol<&driver::virtual_mem_free>("zeVirtualMemFree"),
    required_symbol<&driver::physical_mem_create>("zePhysicalMemCreate"),
    required_symbol<&driver::physical_mem_destroy>("zePhysicalMemDestroy"),
    required_symbol<&driver::virtual_mem_map>("zeVirtualMemMap"),
    required_symbol<&driver::virtual_mem_unmap>("zeVirtualMemUnmap"),
    // Specification 1.6, later than the headers.
    optional_symbol<&driver::driver_get_last_error_description>("zeDriverGetLastErrorDescription"),
};

loaded_runtime<driver> load_driver() {
  loaded_runtime<driver> l;
  if (!l.library.open("libze_loader.so.1", l.why) ||
      !bind_symbols(l.library, l.table, driver_symbols, l.why)) {
    return l;
  }
  // 0: every device type the drivers offer (the test driver reports a GPU).
  const ze_result_t r = l.table.init(0);
  if (r != ZE_RESULT_SUCCESS) {
    l.code = static_cast<long>(r);
    l.why = "zeInit failed: " + l.table.describe(r) +
            (r == ZE_RESULT_ERROR_UNINITIALIZED ? " (no Level Zero driver found)" : "");
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

const char* result_name(ze_result_t r) noexcept {
  switch (r) {
    case ZE_RESULT_SUCCESS:
      return "ZE_RESULT_SUCCESS";
    case ZE_RESULT_NOT_READY:
      return "ZE_RESULT_NOT_READY";
    case ZE_RESULT_ERROR_DEVICE_LOST:
      return "ZE_RESULT_ERROR_DEVICE_LOST";
    case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY:
      return "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY";
    case ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY:
      return "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY";
    case ZE_RESULT_ERROR_MODULE_BUILD_FAILURE:
      return "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE";
    case ZE_RESULT_ERROR_MODULE_LINK_FAILURE:
      return "ZE_RESULT_ERROR_MODULE_LINK_FAILURE";
    case ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET:
      return "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET";
    case ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE:
      return "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE";
    case ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS:
      return "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS";
    case ZE_RESULT_ERROR_NOT_AVAILABLE:
      return "ZE_RESULT_ERROR_NOT_AVAILABLE";
    case ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE:
      return "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE";
    case ZE_RESULT_ERROR_UNINITIALIZED:
      return "ZE_RESULT_ERROR_UNINITIALIZED";
    case ZE_RESULT_ERROR_UNSUPPORTED_VERSION:
      return "ZE_RESULT_ERROR_UNSUPPORTED_VERSION";
    case ZE_RESULT_ERROR_UNSUPPORTED_FEATURE:
      return "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE";
    case ZE_RESULT_ERROR_INVALID_ARGUMENT:
      return "ZE_RESULT_ERROR_INVALID_ARGUMENT";
    case ZE_RESULT_ERROR_INVALID_NULL_HANDLE:
      return "ZE_RESULT_ERROR_INVALID_NULL_HANDLE";
    case ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE:
      return "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE";
    case ZE_RESULT_ERROR_INVALID_NULL_POINTER:
      return "ZE_RESULT_ERROR_INVALID_NULL_POINTER";
    case ZE_RESULT_ERROR_INVALID_SIZE:
      return "ZE_RESULT_ERROR_INVALID_SIZE";
    case ZE_RESULT_ERROR_UNSUPPORTED_SIZE:
      return "ZE_RESULT_ERROR_UNSUPPORTED_SIZE";
    case ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT:
      return "ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT";
    case ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT:
      return "ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT";
    case ZE_RESULT_ERROR_INVALID_ENUMERATION:
      return "ZE_RESULT_ERROR_INVALID_ENUMERATION";
    case ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION:
      return "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION";
    case ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT:
      return "ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT";
    case ZE_RESULT_ERROR_INVALID_NATIVE_BINARY:
      return "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY";
    case ZE_RESULT_ERROR_INVALID_GLOBAL_NAME:
      return "ZE_RESULT_ERROR_INVALID_GLOBAL_NAME";
    case ZE_RESULT_ERROR_INVALID_KERNEL_NAME:
      return "ZE_RESULT_ERROR_INVALID_KERNEL_NAME";
    case ZE_RESULT_ERROR_INVALID_FUNCTION_NAME:
      return "ZE_RESULT_ERROR_INVALID_FUNCTION_NAME";
    case ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION:
      return "ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION";
    case ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION:
      return "ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION";
    case ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX:
      return "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX";
    case ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE:
      return "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE";
    case ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE:
      return "ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE";
    case ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED:
      return "ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED";
    case ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE:
      return "ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE";
    case ZE_RESULT_ERROR_OVERLAPPING_REGIONS:
      return "ZE_RESULT_ERROR_OVERLAPPING_REGIONS";
    case ZE_RESULT_ERROR_UNKNOWN:
      return "ZE_RESULT_ERROR_UNKNOWN";
    default:
      return "ZE_RESULT_<unknown>";
  }
}

std::string driver::describe(long code) const {
  const auto r = static_cast<ze_result_t>(code);
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s (0x%x)", result_name(r), static_cast<unsigned>(r));
  return buf;
}

std::string driver::describe(ze_result_t r, ze_driver_handle_t drv) const {
  std::string s = describe(static_cast<long>(r));
  const char* text = nullptr;
  if (drv != nullptr && driver_get_last_error_description != nullptr &&
      driver_get_last_error_description(drv, &text) == ZE_RESULT_SUCCESS && text != nullptr &&
      *text != '\0') {
    s += ": ";
    s += text;
  }
  return s;
}

const driver* load(std::string* why, ze_result_t* code) noexcept {
  long c = 0;
  const auto* d = load_once<driver, load_driver>(why, &c, "the loader");
  if (d == nullptr && code != nullptr) *code = static_cast<ze_result_t>(c);
  return d;
}

}  // namespace streampool::detail::ze
