// The driver's Level Zero entry points (the api_*.cpp files), as the DDI tables (ddi_tables.cpp)
// hand them to the loader. Each follows the Level Zero specification 1.4 for what it implements;
// anything it does not implement is left out of the tables, and the loader then answers
// ZE_RESULT_ERROR_UNSUPPORTED_FEATURE for it.
#pragma once

#include <level_zero/ze_api.h>

namespace streampool::ze_test_driver::api {

// api_core.cpp: driver, device, context
ze_result_t ZE_APICALL init(ze_init_flags_t flags);
ze_result_t ZE_APICALL driver_get(uint32_t* count, ze_driver_handle_t* drivers);
ze_result_t ZE_APICALL driver_get_api_version(ze_driver_handle_t d, ze_api_version_t* version);
ze_result_t ZE_APICALL driver_get_properties(ze_driver_handle_t d, ze_driver_properties_t* p);
ze_result_t ZE_APICALL driver_get_ipc_properties(ze_driver_handle_t d,
                                                 ze_driver_ipc_properties_t* p);
ze_result_t ZE_APICALL driver_get_extension_properties(ze_driver_handle_t d, uint32_t* count,
                                                       ze_driver_extension_properties_t* p);
ze_result_t ZE_APICALL device_get(ze_driver_handle_t d, uint32_t* count,
                                  ze_device_handle_t* devices);
ze_result_t ZE_APICALL device_get_sub_devices(ze_device_handle_t d, uint32_t* count,
                                              ze_device_handle_t* devices);
ze_result_t ZE_APICALL device_get_properties(ze_device_handle_t d, ze_device_properties_t* p);
ze_result_t ZE_APICALL device_get_compute_properties(ze_device_handle_t d,
                                                     ze_device_compute_properties_t* p);
ze_result_t ZE_APICALL device_get_module_properties(ze_device_handle_t d,
                                                    ze_device_module_properties_t* p);
ze_result_t ZE_APICALL device_get_command_queue_group_properties(
    ze_device_handle_t d, uint32_t* count, ze_command_queue_group_properties_t* p);
ze_result_t ZE_APICALL device_get_memory_properties(ze_device_handle_t d, uint32_t* count,
                                                    ze_device_memory_properties_t* p);
ze_result_t ZE_APICALL device_get_memory_access_properties(ze_device_handle_t d,
                                                           ze_device_memory_access_properties_t* p);
ze_result_t ZE_APICALL device_get_status(ze_device_handle_t d);
ze_result_t ZE_APICALL context_create(ze_driver_handle_t d, const ze_context_desc_t* desc,
                                      ze_context_handle_t* context);
ze_result_t ZE_APICALL context_destroy(ze_context_handle_t c);
ze_result_t ZE_APICALL context_get_status(ze_context_handle_t c);

// api_memory.cpp: allocations, physical and virtual memory
ze_result_t ZE_APICALL mem_alloc_device(ze_context_handle_t c,
                                        const ze_device_mem_alloc_desc_t* desc, size_t size,
                                        size_t alignment, ze_device_handle_t d, void** p);
ze_result_t ZE_APICALL mem_alloc_host(ze_context_handle_t c, const ze_host_mem_alloc_desc_t* desc,
                                      size_t size, size_t alignment, void** p);
ze_result_t ZE_APICALL mem_alloc_shared(ze_context_handle_t c,
                                        const ze_device_mem_alloc_desc_t* device_desc,
                                        const ze_host_mem_alloc_desc_t* host_desc, size_t size,
                                        size_t alignment, ze_device_handle_t d, void** p);
ze_result_t ZE_APICALL mem_free(ze_context_handle_t c, void* p);
ze_result_t ZE_APICALL mem_get_alloc_properties(ze_context_handle_t c, const void* p,
                                                ze_memory_allocation_properties_t* props,
                                                ze_device_handle_t* d);
ze_result_t ZE_APICALL mem_get_address_range(ze_context_handle_t c, const void* p, void** base,
                                             size_t* size);
ze_result_t ZE_APICALL physical_mem_create(ze_context_handle_t c, ze_device_handle_t d,
                                           ze_physical_mem_desc_t* desc,
                                           ze_physical_mem_handle_t* h);
ze_result_t ZE_APICALL physical_mem_destroy(ze_context_handle_t c, ze_physical_mem_handle_t h);
ze_result_t ZE_APICALL virtual_mem_reserve(ze_context_handle_t c, const void* start, size_t size,
                                           void** p);
ze_result_t ZE_APICALL virtual_mem_free(ze_context_handle_t c, const void* p, size_t size);
ze_result_t ZE_APICALL virtual_mem_query_page_size(ze_context_handle_t c, ze_device_handle_t d,
                                                   size_t size, size_t* page_size);
ze_result_t ZE_APICALL virtual_mem_map(ze_context_handle_t c, const void* p, size_t size,
                                       ze_physical_mem_handle_t h, size_t offset,
                                       ze_memory_access_attribute_t access);
ze_result_t ZE_APICALL virtual_mem_unmap(ze_context_handle_t c, const void* p, size_t size);
ze_result_t ZE_APICALL virtual_mem_set_access_attribute(ze_context_handle_t c, const void* p,
                                                        size_t size,
                                                        ze_memory_access_attribute_t access);

// api_event.cpp: event pools and events
ze_result_t ZE_APICALL event_pool_create(ze_context_handle_t c, const ze_event_pool_desc_t* desc,
                                         uint32_t num_devices, ze_device_handle_t* devices,
                                         ze_event_pool_handle_t* pool);
ze_result_t ZE_APICALL event_pool_destroy(ze_event_pool_handle_t pool);
ze_result_t ZE_APICALL event_create(ze_event_pool_handle_t pool, const ze_event_desc_t* desc,
                                    ze_event_handle_t* e);
ze_result_t ZE_APICALL event_destroy(ze_event_handle_t e);
ze_result_t ZE_APICALL event_host_signal(ze_event_handle_t e);
ze_result_t ZE_APICALL event_host_synchronize(ze_event_handle_t e, uint64_t timeout);
ze_result_t ZE_APICALL event_query_status(ze_event_handle_t e);
ze_result_t ZE_APICALL event_host_reset(ze_event_handle_t e);

// api_command_list.cpp: immediate command lists and their appends
ze_result_t ZE_APICALL command_list_create_immediate(ze_context_handle_t c, ze_device_handle_t d,
                                                     const ze_command_queue_desc_t* desc,
                                                     ze_command_list_handle_t* list);
ze_result_t ZE_APICALL command_list_destroy(ze_command_list_handle_t list);
ze_result_t ZE_APICALL command_list_append_barrier(ze_command_list_handle_t list,
                                                   ze_event_handle_t signal, uint32_t num_waits,
                                                   ze_event_handle_t* waits);
ze_result_t ZE_APICALL command_list_append_memory_copy(ze_command_list_handle_t list, void* dst,
                                                       const void* src, size_t size,
                                                       ze_event_handle_t signal, uint32_t num_waits,
                                                       ze_event_handle_t* waits);
ze_result_t ZE_APICALL command_list_append_memory_fill(ze_command_list_handle_t list, void* dst,
                                                       const void* pattern, size_t pattern_size,
                                                       size_t size, ze_event_handle_t signal,
                                                       uint32_t num_waits,
                                                       ze_event_handle_t* waits);
ze_result_t ZE_APICALL command_list_append_signal_event(ze_command_list_handle_t list,
                                                        ze_event_handle_t e);
ze_result_t ZE_APICALL command_list_append_wait_on_events(ze_command_list_handle_t list,
                                                          uint32_t num_events,
                                                          ze_event_handle_t* events);
ze_result_t ZE_APICALL command_list_append_event_reset(ze_command_list_handle_t list,
                                                       ze_event_handle_t e);
ze_result_t ZE_APICALL command_list_append_launch_kernel(
    ze_command_list_handle_t list, ze_kernel_handle_t k, const ze_group_count_t* count,
    ze_event_handle_t signal, uint32_t num_waits, ze_event_handle_t* waits);

// api_module.cpp: modules, build logs, kernels
ze_result_t ZE_APICALL module_create(ze_context_handle_t c, ze_device_handle_t d,
                                     const ze_module_desc_t* desc, ze_module_handle_t* module,
                                     ze_module_build_log_handle_t* build_log);
ze_result_t ZE_APICALL module_destroy(ze_module_handle_t module);
ze_result_t ZE_APICALL module_build_log_destroy(ze_module_build_log_handle_t log);
ze_result_t ZE_APICALL module_build_log_get_string(ze_module_build_log_handle_t log, size_t* size,
                                                   char* text);
ze_result_t ZE_APICALL kernel_create(ze_module_handle_t module, const ze_kernel_desc_t* desc,
                                     ze_kernel_handle_t* k);
ze_result_t ZE_APICALL kernel_destroy(ze_kernel_handle_t k);
ze_result_t ZE_APICALL kernel_set_argument_value(ze_kernel_handle_t k, uint32_t index, size_t size,
                                                 const void* value);
ze_result_t ZE_APICALL kernel_set_group_size(ze_kernel_handle_t k, uint32_t x, uint32_t y,
                                             uint32_t z);
ze_result_t ZE_APICALL kernel_suggest_group_size(ze_kernel_handle_t k, uint32_t global_x,
                                                 uint32_t global_y, uint32_t global_z, uint32_t* x,
                                                 uint32_t* y, uint32_t* z);
ze_result_t ZE_APICALL kernel_get_properties(ze_kernel_handle_t k, ze_kernel_properties_t* p);
ze_result_t ZE_APICALL kernel_get_name(ze_kernel_handle_t k, size_t* size, char* name);

}  // namespace streampool::ze_test_driver::api
