// The exports the Level Zero loader looks for: one zeGet*ProcAddrTable per DDI table.
//
// What the loader (1.8) requires, found by experiment with the installed loader and its source:
// every core `ze` table getter (Global, Driver, Device, Context, CommandQueue, CommandList, Image,
// Fence, EventPool, Event, Module, ModuleBuildLog, Kernel, Sampler, PhysicalMem, Mem, VirtualMem),
// every `zet` getter (MetricGroupExp and TracerExp included) and every `zes` getter must exist
// and succeed, or zeInit answers ZE_RESULT_ERROR_UNINITIALIZED before calling the driver at all;
// the ze *Exp getters are optional and left out. A null entry in a table reaches the program as
// ZE_RESULT_ERROR_UNSUPPORTED_FEATURE (the loader, and the validation layer, check for null), so
// an entry point this driver does not emulate is simply left null. The tools (zet) and sysman
// (zes) tables are therefore all null.
#include <level_zero/ze_ddi.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include "api.hpp"

namespace {

using namespace streampool::ze_test_driver;

// Every getter: a table for API major version 1, fully written (nulls for what is not emulated).
template <class Table, class Fill>
ze_result_t give(ze_api_version_t version, Table* table, Fill fill) {
  if (table == nullptr) {
    return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  }
  if (ZE_MAJOR_VERSION(version) != 1) {
    return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;
  }
  *table = Table{};
  fill(*table);
  return ZE_RESULT_SUCCESS;
}

template <class Table>
ze_result_t give_empty(ze_api_version_t version, Table* table) {
  return give(version, table, [](Table&) {});
}

}  // namespace

extern "C" {

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetGlobalProcAddrTable(ze_api_version_t version,
                                                             ze_global_dditable_t* t) {
  return give(version, t, [](auto& d) { d.pfnInit = api::init; });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetDriverProcAddrTable(ze_api_version_t version,
                                                             ze_driver_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnGet = api::driver_get;
    d.pfnGetApiVersion = api::driver_get_api_version;
    d.pfnGetProperties = api::driver_get_properties;
    d.pfnGetIpcProperties = api::driver_get_ipc_properties;
    d.pfnGetExtensionProperties = api::driver_get_extension_properties;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetDeviceProcAddrTable(ze_api_version_t version,
                                                             ze_device_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnGet = api::device_get;
    d.pfnGetSubDevices = api::device_get_sub_devices;
    d.pfnGetProperties = api::device_get_properties;
    d.pfnGetComputeProperties = api::device_get_compute_properties;
    d.pfnGetModuleProperties = api::device_get_module_properties;
    d.pfnGetCommandQueueGroupProperties = api::device_get_command_queue_group_properties;
    d.pfnGetMemoryProperties = api::device_get_memory_properties;
    d.pfnGetMemoryAccessProperties = api::device_get_memory_access_properties;
    d.pfnGetStatus = api::device_get_status;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetContextProcAddrTable(ze_api_version_t version,
                                                              ze_context_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnCreate = api::context_create;
    d.pfnDestroy = api::context_destroy;
    d.pfnGetStatus = api::context_get_status;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetCommandQueueProcAddrTable(ze_api_version_t version,
                                                                   ze_command_queue_dditable_t* t) {
  return give_empty(version, t);
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetCommandListProcAddrTable(ze_api_version_t version,
                                                                  ze_command_list_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnCreateImmediate = api::command_list_create_immediate;
    d.pfnDestroy = api::command_list_destroy;
    d.pfnAppendBarrier = api::command_list_append_barrier;
    d.pfnAppendMemoryCopy = api::command_list_append_memory_copy;
    d.pfnAppendMemoryFill = api::command_list_append_memory_fill;
    d.pfnAppendSignalEvent = api::command_list_append_signal_event;
    d.pfnAppendWaitOnEvents = api::command_list_append_wait_on_events;
    d.pfnAppendEventReset = api::command_list_append_event_reset;
    d.pfnAppendLaunchKernel = api::command_list_append_launch_kernel;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetImageProcAddrTable(ze_api_version_t version,
                                                            ze_image_dditable_t* t) {
  return give_empty(version, t);
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetFenceProcAddrTable(ze_api_version_t version,
                                                            ze_fence_dditable_t* t) {
  return give_empty(version, t);
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetEventPoolProcAddrTable(ze_api_version_t version,
                                                                ze_event_pool_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnCreate = api::event_pool_create;
    d.pfnDestroy = api::event_pool_destroy;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetEventProcAddrTable(ze_api_version_t version,
                                                            ze_event_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnCreate = api::event_create;
    d.pfnDestroy = api::event_destroy;
    d.pfnHostSignal = api::event_host_signal;
    d.pfnHostSynchronize = api::event_host_synchronize;
    d.pfnQueryStatus = api::event_query_status;
    d.pfnHostReset = api::event_host_reset;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetModuleProcAddrTable(ze_api_version_t version,
                                                             ze_module_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnCreate = api::module_create;
    d.pfnDestroy = api::module_destroy;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL
zeGetModuleBuildLogProcAddrTable(ze_api_version_t version, ze_module_build_log_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnDestroy = api::module_build_log_destroy;
    d.pfnGetString = api::module_build_log_get_string;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetKernelProcAddrTable(ze_api_version_t version,
                                                             ze_kernel_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnCreate = api::kernel_create;
    d.pfnDestroy = api::kernel_destroy;
    d.pfnSetGroupSize = api::kernel_set_group_size;
    d.pfnSuggestGroupSize = api::kernel_suggest_group_size;
    d.pfnSetArgumentValue = api::kernel_set_argument_value;
    d.pfnGetProperties = api::kernel_get_properties;
    d.pfnGetName = api::kernel_get_name;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetSamplerProcAddrTable(ze_api_version_t version,
                                                              ze_sampler_dditable_t* t) {
  return give_empty(version, t);
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetPhysicalMemProcAddrTable(ze_api_version_t version,
                                                                  ze_physical_mem_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnCreate = api::physical_mem_create;
    d.pfnDestroy = api::physical_mem_destroy;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetMemProcAddrTable(ze_api_version_t version,
                                                          ze_mem_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnAllocShared = api::mem_alloc_shared;
    d.pfnAllocDevice = api::mem_alloc_device;
    d.pfnAllocHost = api::mem_alloc_host;
    d.pfnFree = api::mem_free;
    d.pfnGetAllocProperties = api::mem_get_alloc_properties;
    d.pfnGetAddressRange = api::mem_get_address_range;
  });
}

ZE_DLLEXPORT ze_result_t ZE_APICALL zeGetVirtualMemProcAddrTable(ze_api_version_t version,
                                                                 ze_virtual_mem_dditable_t* t) {
  return give(version, t, [](auto& d) {
    d.pfnReserve = api::virtual_mem_reserve;
    d.pfnFree = api::virtual_mem_free;
    d.pfnQueryPageSize = api::virtual_mem_query_page_size;
    d.pfnMap = api::virtual_mem_map;
    d.pfnUnmap = api::virtual_mem_unmap;
    d.pfnSetAccessAttribute = api::virtual_mem_set_access_attribute;
  });
}

// Tools (zet) and sysman (zes): required to exist, nothing emulated.
#define SP_ZE_EMPTY_TABLE(getter, table)                                           \
  ZE_DLLEXPORT ze_result_t ZE_APICALL getter(ze_api_version_t version, table* t) { \
    return give_empty(version, t);                                                 \
  }
SP_ZE_EMPTY_TABLE(zetGetDeviceProcAddrTable, zet_device_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetContextProcAddrTable, zet_context_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetCommandListProcAddrTable, zet_command_list_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetModuleProcAddrTable, zet_module_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetKernelProcAddrTable, zet_kernel_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetMetricGroupProcAddrTable, zet_metric_group_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetMetricGroupExpProcAddrTable, zet_metric_group_exp_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetMetricProcAddrTable, zet_metric_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetMetricStreamerProcAddrTable, zet_metric_streamer_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetMetricQueryPoolProcAddrTable, zet_metric_query_pool_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetMetricQueryProcAddrTable, zet_metric_query_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetTracerExpProcAddrTable, zet_tracer_exp_dditable_t)
SP_ZE_EMPTY_TABLE(zetGetDebugProcAddrTable, zet_debug_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetDriverProcAddrTable, zes_driver_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetDeviceProcAddrTable, zes_device_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetSchedulerProcAddrTable, zes_scheduler_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetPerformanceFactorProcAddrTable, zes_performance_factor_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetPowerProcAddrTable, zes_power_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetFrequencyProcAddrTable, zes_frequency_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetEngineProcAddrTable, zes_engine_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetStandbyProcAddrTable, zes_standby_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetFirmwareProcAddrTable, zes_firmware_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetMemoryProcAddrTable, zes_memory_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetFabricPortProcAddrTable, zes_fabric_port_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetTemperatureProcAddrTable, zes_temperature_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetPsuProcAddrTable, zes_psu_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetFanProcAddrTable, zes_fan_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetLedProcAddrTable, zes_led_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetRasProcAddrTable, zes_ras_dditable_t)
SP_ZE_EMPTY_TABLE(zesGetDiagnosticsProcAddrTable, zes_diagnostics_dditable_t)
#undef SP_ZE_EMPTY_TABLE

}  // extern "C"
