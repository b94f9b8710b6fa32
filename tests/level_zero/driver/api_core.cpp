// Driver, device and context: one driver, one device, contexts as plain objects.
#include <algorithm>
#include <cstring>
#include <iterator>

#include "api.hpp"
#include "memory.hpp"
#include "settings.hpp"

namespace streampool::ze_test_driver::api {
namespace {

// The handles are addresses of these objects; nothing is stored behind them.
char the_driver;
char the_device;
struct context {};

ze_driver_handle_t driver_handle() { return reinterpret_cast<ze_driver_handle_t>(&the_driver); }
ze_device_handle_t device_handle() { return reinterpret_cast<ze_device_handle_t>(&the_device); }

bool is_driver(ze_driver_handle_t d) { return d == driver_handle(); }
bool is_device(ze_device_handle_t d) { return d == device_handle(); }

// The count protocol of zeDriverGet, zeDeviceGet and the property arrays: *count == 0 asks for
// the number; otherwise up to *count entries are written and *count is set to what was written.
template <class T, class Fill>
ze_result_t enumerate(uint32_t* count, T* out, uint32_t available, Fill fill) {
  if (count == nullptr) {
    return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  }
  if (*count == 0 || out == nullptr) {
    *count = available;
    return ZE_RESULT_SUCCESS;
  }
  *count = std::min(*count, available);
  for (uint32_t i = 0; i < *count; ++i) {
    fill(out[i]);
  }
  return ZE_RESULT_SUCCESS;
}

}  // namespace

ze_result_t ZE_APICALL init(ze_init_flags_t flags) {
  // A GPU driver: asked for VPUs only, it has nothing to offer.
  if (flags == ZE_INIT_FLAG_VPU_ONLY) {
    return ZE_RESULT_ERROR_UNINITIALIZED;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL driver_get(uint32_t* count, ze_driver_handle_t* drivers) {
  return enumerate(count, drivers, 1, [](ze_driver_handle_t& d) { d = driver_handle(); });
}

ze_result_t ZE_APICALL driver_get_api_version(ze_driver_handle_t d, ze_api_version_t* version) {
  if (!is_driver(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  *version = ZE_API_VERSION_1_4;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL driver_get_properties(ze_driver_handle_t d, ze_driver_properties_t* p) {
  if (!is_driver(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  std::memset(p->uuid.id, 0, sizeof p->uuid.id);
  std::memcpy(p->uuid.id, "sp-ze-test-drv", 14);
  p->driverVersion = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL driver_get_ipc_properties(ze_driver_handle_t d,
                                                 ze_driver_ipc_properties_t* p) {
  if (!is_driver(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  p->flags = 0;  // no IPC
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL driver_get_extension_properties(ze_driver_handle_t d, uint32_t* count,
                                                       ze_driver_extension_properties_t* p) {
  if (!is_driver(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  return enumerate(count, p, 0, [](ze_driver_extension_properties_t&) {});
}

ze_result_t ZE_APICALL device_get(ze_driver_handle_t d, uint32_t* count,
                                  ze_device_handle_t* devices) {
  if (!is_driver(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  return enumerate(count, devices, 1, [](ze_device_handle_t& h) { h = device_handle(); });
}

ze_result_t ZE_APICALL device_get_sub_devices(ze_device_handle_t d, uint32_t* count,
                                              ze_device_handle_t* devices) {
  if (!is_device(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  return enumerate(count, devices, 0, [](ze_device_handle_t&) {});
}

ze_result_t ZE_APICALL device_get_properties(ze_device_handle_t d, ze_device_properties_t* p) {
  if (!is_device(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  p->type = ZE_DEVICE_TYPE_GPU;
  p->vendorId = 0;
  p->deviceId = 0;
  p->flags = 0;  // a discrete GPU, as far as anyone asks
  p->subdeviceId = 0;
  p->coreClockRate = 1000;
  p->maxMemAllocSize = reported_memory();
  p->maxHardwareContexts = 64;
  p->maxCommandQueuePriority = 0;
  p->numThreadsPerEU = 1;
  p->physicalEUSimdWidth = 16;
  p->numEUsPerSubslice = 1;
  p->numSubslicesPerSlice = 1;
  p->numSlices = 1;
  p->timerResolution = 1;
  p->timestampValidBits = 64;
  p->kernelTimestampValidBits = 64;
  std::memset(p->uuid.id, 0, sizeof p->uuid.id);
  std::memcpy(p->uuid.id, "sp-ze-test-dev", 14);
  std::memset(p->name, 0, sizeof p->name);
  std::strncpy(p->name, "streampool host test device", sizeof p->name - 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL device_get_compute_properties(ze_device_handle_t d,
                                                     ze_device_compute_properties_t* p) {
  if (!is_device(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  p->maxTotalGroupSize = 1024;
  p->maxGroupSizeX = 1024;
  p->maxGroupSizeY = 1024;
  p->maxGroupSizeZ = 64;
  p->maxGroupCountX = 0xffffffffu;
  p->maxGroupCountY = 0xffffffffu;
  p->maxGroupCountZ = 0xffffffffu;
  p->maxSharedLocalMemory = 64 << 10;
  p->numSubGroupSizes = 1;
  std::fill(std::begin(p->subGroupSizes), std::end(p->subGroupSizes), 0u);
  p->subGroupSizes[0] = 16;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL device_get_module_properties(ze_device_handle_t d,
                                                    ze_device_module_properties_t* p) {
  if (!is_device(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  const ze_device_fp_flags_t ieee =
      ZE_DEVICE_FP_FLAG_DENORM | ZE_DEVICE_FP_FLAG_INF_NAN | ZE_DEVICE_FP_FLAG_ROUND_TO_NEAREST |
      ZE_DEVICE_FP_FLAG_ROUND_TO_ZERO | ZE_DEVICE_FP_FLAG_ROUND_TO_INF | ZE_DEVICE_FP_FLAG_FMA |
      ZE_DEVICE_FP_FLAG_ROUNDED_DIVIDE_SQRT;
  p->spirvVersionSupported = ZE_MAKE_VERSION(1, 2);
  p->flags = ZE_DEVICE_MODULE_FLAG_FP64 | ZE_DEVICE_MODULE_FLAG_INT64_ATOMICS;
  p->fp16flags = 0;
  p->fp32flags = ieee;
  p->fp64flags = ieee;
  p->maxArgumentsSize = 2048;
  p->printfBufferSize = 0;
  std::memset(&p->nativeKernelSupported, 0, sizeof p->nativeKernelSupported);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL device_get_command_queue_group_properties(
    ze_device_handle_t d, uint32_t* count, ze_command_queue_group_properties_t* p) {
  if (!is_device(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  // One group (ordinal 0) that does everything; every list has its own worker anyway.
  return enumerate(count, p, 1, [](ze_command_queue_group_properties_t& g) {
    g.flags =
        ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE | ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    g.maxMemoryFillPatternSize = 128;
    g.numQueues = 1;
  });
}

ze_result_t ZE_APICALL device_get_memory_properties(ze_device_handle_t d, uint32_t* count,
                                                    ze_device_memory_properties_t* p) {
  if (!is_device(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  return enumerate(count, p, 1, [](ze_device_memory_properties_t& m) {
    m.flags = 0;
    m.maxClockRate = 1000;
    m.maxBusWidth = 64;
    m.totalSize = reported_memory();
    std::memset(m.name, 0, sizeof m.name);
    std::strncpy(m.name, "host memory", sizeof m.name - 1);
  });
}

ze_result_t ZE_APICALL
device_get_memory_access_properties(ze_device_handle_t d, ze_device_memory_access_properties_t* p) {
  if (!is_device(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  const ze_memory_access_cap_flags_t all =
      ZE_MEMORY_ACCESS_CAP_FLAG_RW | ZE_MEMORY_ACCESS_CAP_FLAG_ATOMIC |
      ZE_MEMORY_ACCESS_CAP_FLAG_CONCURRENT | ZE_MEMORY_ACCESS_CAP_FLAG_CONCURRENT_ATOMIC;
  p->hostAllocCapabilities = all;
  p->deviceAllocCapabilities = all;
  p->sharedSingleDeviceAllocCapabilities = all;
  p->sharedCrossDeviceAllocCapabilities = 0;
  // None by default, so that the backend stages downloads to pageable memory (as a device without
  // it needs); SP_ZE_TEST_DRIVER_SHARED_SYSTEM=1 reports it (its memory is host memory anyway).
  p->sharedSystemAllocCapabilities = config().shared_system.load() ? all : 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL device_get_status(ze_device_handle_t d) {
  return is_device(d) ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

ze_result_t ZE_APICALL context_create(ze_driver_handle_t d, const ze_context_desc_t*,
                                      ze_context_handle_t* c) {
  if (!is_driver(d)) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  *c = reinterpret_cast<ze_context_handle_t>(new context);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL context_destroy(ze_context_handle_t c) {
  delete reinterpret_cast<context*>(c);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL context_get_status(ze_context_handle_t) { return ZE_RESULT_SUCCESS; }

}  // namespace streampool::ze_test_driver::api
