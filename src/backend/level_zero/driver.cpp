// streampool: loading the Level Zero loader (see driver.hpp).
#include "driver.hpp"

#include <dlfcn.h>

#include <cstdio>

namespace streampool::detail::ze {
namespace {

struct loaded {
  driver table{};
  bool ok = false;
  std::string why;
  ze_result_t code = ZE_RESULT_SUCCESS;
};

// Resolves `name` into `slot`; false (and a reason) when the symbol is missing.
template <class Fn>
bool resolve(void* lib, const char* name, Fn*& slot, std::string& why) {
  slot = reinterpret_cast<Fn*>(dlsym(lib, name));
  if (slot == nullptr) {
    why = std::string("libze_loader.so.1 has no symbol ") + name;
    return false;
  }
  return true;
}

loaded load_once() {
  loaded l;
  void* lib = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    l.why =
        std::string("dlopen(libze_loader.so.1) failed: ") + (e != nullptr ? e : "unknown error");
    return l;
  }
  // Never dlclose: memory, events and command lists may be released from static destructors
  // after any unload point we could choose, and the loader keeps its drivers loaded until exit.
  driver& d = l.table;
  const bool ok =
      resolve(lib, "zeInit", d.init, l.why) && resolve(lib, "zeDriverGet", d.driver_get, l.why) &&
      resolve(lib, "zeDriverGetApiVersion", d.driver_get_api_version, l.why) &&
      resolve(lib, "zeDeviceGet", d.device_get, l.why) &&
      resolve(lib, "zeDeviceGetProperties", d.device_get_properties, l.why) &&
      resolve(lib, "zeDeviceGetMemoryProperties", d.device_get_memory_properties, l.why) &&
      resolve(lib, "zeDeviceGetCommandQueueGroupProperties",
              d.device_get_command_queue_group_properties, l.why) &&
      resolve(lib, "zeDeviceGetModuleProperties", d.device_get_module_properties, l.why) &&
      resolve(lib, "zeDeviceGetComputeProperties", d.device_get_compute_properties, l.why) &&
      resolve(lib, "zeDeviceGetMemoryAccessProperties", d.device_get_memory_access_properties,
              l.why) &&
      resolve(lib, "zeContextCreate", d.context_create, l.why) &&
      resolve(lib, "zeContextDestroy", d.context_destroy, l.why) &&
      resolve(lib, "zeCommandListCreateImmediate", d.command_list_create_immediate, l.why) &&
      resolve(lib, "zeCommandListDestroy", d.command_list_destroy, l.why) &&
      resolve(lib, "zeCommandListAppendBarrier", d.command_list_append_barrier, l.why) &&
      resolve(lib, "zeCommandListAppendWaitOnEvents", d.command_list_append_wait_on_events,
              l.why) &&
      resolve(lib, "zeCommandListAppendMemoryCopy", d.command_list_append_memory_copy, l.why) &&
      resolve(lib, "zeCommandListAppendMemoryFill", d.command_list_append_memory_fill, l.why) &&
      resolve(lib, "zeCommandListAppendLaunchKernel", d.command_list_append_launch_kernel, l.why) &&
      resolve(lib, "zeEventPoolCreate", d.event_pool_create, l.why) &&
      resolve(lib, "zeEventPoolDestroy", d.event_pool_destroy, l.why) &&
      resolve(lib, "zeEventCreate", d.event_create, l.why) &&
      resolve(lib, "zeEventDestroy", d.event_destroy, l.why) &&
      resolve(lib, "zeEventHostSynchronize", d.event_host_synchronize, l.why) &&
      resolve(lib, "zeEventQueryStatus", d.event_query_status, l.why) &&
      resolve(lib, "zeEventHostReset", d.event_host_reset, l.why) &&
      resolve(lib, "zeMemAllocDevice", d.mem_alloc_device, l.why) &&
      resolve(lib, "zeMemAllocHost", d.mem_alloc_host, l.why) &&
      resolve(lib, "zeMemFree", d.mem_free, l.why) &&
      resolve(lib, "zeModuleCreate", d.module_create, l.why) &&
      resolve(lib, "zeModuleDestroy", d.module_destroy, l.why) &&
      resolve(lib, "zeModuleBuildLogGetString", d.module_build_log_get_string, l.why) &&
      resolve(lib, "zeModuleBuildLogDestroy", d.module_build_log_destroy, l.why) &&
      resolve(lib, "zeKernelCreate", d.kernel_create, l.why) &&
      resolve(lib, "zeKernelDestroy", d.kernel_destroy, l.why) &&
      resolve(lib, "zeKernelSetGroupSize", d.kernel_set_group_size, l.why) &&
      resolve(lib, "zeKernelSetArgumentValue", d.kernel_set_argument_value, l.why) &&
      resolve(lib, "zeVirtualMemQueryPageSize", d.virtual_mem_query_page_size, l.why) &&
      resolve(lib, "zeVirtualMemReserve", d.virtual_mem_reserve, l.why) &&
      resolve(lib, "zeVirtualMemFree", d.virtual_mem_free, l.why) &&
      resolve(lib, "zePhysicalMemCreate", d.physical_mem_create, l.why) &&
      resolve(lib, "zePhysicalMemDestroy", d.physical_mem_destroy, l.why) &&
      resolve(lib, "zeVirtualMemMap", d.virtual_mem_map, l.why) &&
      resolve(lib, "zeVirtualMemUnmap", d.virtual_mem_unmap, l.why);
  if (!ok) return l;
  // Later than the 1.4 headers: used only when the loader has it.
  d.driver_get_last_error_description =
      reinterpret_cast<decltype(d.driver_get_last_error_description)>(
          dlsym(lib, "zeDriverGetLastErrorDescription"));
  // 0: every device type the drivers offer (the test driver reports a GPU).
  const ze_result_t r = d.init(0);
  if (r != ZE_RESULT_SUCCESS) {
    l.code = r;
    l.why = "zeInit failed: " + d.describe(r) +
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

std::string driver::describe(ze_result_t r, ze_driver_handle_t drv) const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s (0x%x)", result_name(r), static_cast<unsigned>(r));
  std::string s = buf;
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
  // A function-local static, initialised once (thread-safe) and never destroyed: the table must
  // stay usable during static destruction, when the last memory and events are released.
  static const loaded* const l = [] {
    try {
      return new loaded(load_once());  // deliberate leak, see above
    } catch (...) {
      return static_cast<loaded*>(nullptr);
    }
  }();
  if (l != nullptr && l->ok) return &l->table;
  if (code != nullptr) *code = l != nullptr ? l->code : ZE_RESULT_SUCCESS;
  if (why != nullptr) {
    try {
      *why = l != nullptr ? l->why : "out of memory while loading the loader";
    } catch (...) {  // the caller only loses the reason
    }
  }
  return nullptr;
}

}  // namespace streampool::detail::ze
