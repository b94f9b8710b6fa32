// Allocations, physical memory and virtual memory (memory.hpp says how they are emulated).
#include "api.hpp"
#include "memory.hpp"

namespace streampool::ze_test_driver::api {

ze_result_t ZE_APICALL mem_alloc_device(ze_context_handle_t, const ze_device_mem_alloc_desc_t*,
                                        size_t size, size_t alignment, ze_device_handle_t,
                                        void** p) {
  return mem_alloc(ZE_MEMORY_TYPE_DEVICE, size, alignment, p);
}

ze_result_t ZE_APICALL mem_alloc_host(ze_context_handle_t, const ze_host_mem_alloc_desc_t*,
                                      size_t size, size_t alignment, void** p) {
  return mem_alloc(ZE_MEMORY_TYPE_HOST, size, alignment, p);
}

ze_result_t ZE_APICALL mem_alloc_shared(ze_context_handle_t, const ze_device_mem_alloc_desc_t*,
                                        const ze_host_mem_alloc_desc_t*, size_t size,
                                        size_t alignment, ze_device_handle_t, void** p) {
  return mem_alloc(ZE_MEMORY_TYPE_SHARED, size, alignment, p);
}

ze_result_t ZE_APICALL mem_free(ze_context_handle_t, void* p) {
  return ze_test_driver::mem_free(p);
}

ze_result_t ZE_APICALL mem_get_alloc_properties(ze_context_handle_t, const void* p,
                                                ze_memory_allocation_properties_t* props,
                                                ze_device_handle_t* d) {
  void* base = nullptr;
  size_t bytes = 0;
  props->type = mem_type(p, &base, &bytes);
  props->id = reinterpret_cast<uint64_t>(base);
  props->pageSize = props->type == ZE_MEMORY_TYPE_UNKNOWN ? 0 : vm_page_size(bytes);
  if (d != nullptr) {
    *d = nullptr;  // no device association is tracked; the one device owns everything
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL mem_get_address_range(ze_context_handle_t, const void* p, void** base,
                                             size_t* size) {
  void* b = nullptr;
  size_t bytes = 0;
  if (mem_type(p, &b, &bytes) == ZE_MEMORY_TYPE_UNKNOWN) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (base != nullptr) {
    *base = b;
  }
  if (size != nullptr) {
    *size = bytes;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL physical_mem_create(ze_context_handle_t, ze_device_handle_t,
                                           ze_physical_mem_desc_t* desc,
                                           ze_physical_mem_handle_t* h) {
  return physical_create(desc->size, h);
}

ze_result_t ZE_APICALL physical_mem_destroy(ze_context_handle_t, ze_physical_mem_handle_t h) {
  return physical_destroy(h);
}

ze_result_t ZE_APICALL virtual_mem_reserve(ze_context_handle_t, const void*, size_t size,
                                           void** p) {
  return vm_reserve(size, p);  // the start hint is only a hint: ignored
}

ze_result_t ZE_APICALL virtual_mem_free(ze_context_handle_t, const void* p, size_t size) {
  return vm_free(const_cast<void*>(p), size);
}

ze_result_t ZE_APICALL virtual_mem_query_page_size(ze_context_handle_t, ze_device_handle_t,
                                                   size_t size, size_t* page_size) {
  *page_size = vm_page_size(size);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL virtual_mem_map(ze_context_handle_t, const void* p, size_t size,
                                       ze_physical_mem_handle_t h, size_t offset,
                                       ze_memory_access_attribute_t access) {
  return vm_map(const_cast<void*>(p), size, h, offset, access);
}

ze_result_t ZE_APICALL virtual_mem_unmap(ze_context_handle_t, const void* p, size_t size) {
  return vm_unmap(const_cast<void*>(p), size);
}

ze_result_t ZE_APICALL virtual_mem_set_access_attribute(ze_context_handle_t, const void* p,
                                                        size_t size,
                                                        ze_memory_access_attribute_t access) {
  return vm_set_access(const_cast<void*>(p), size, access);
}

}  // namespace streampool::ze_test_driver::api
