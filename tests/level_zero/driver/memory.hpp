// Memory: allocations (device, host and shared are all host memory here), physical memory objects
// and virtual-memory reservations, with a byte count and an optional capacity.
//
// Virtual memory. The page size is 64 KiB for requests under 2 MiB and 2 MiB from 2 MiB up, as
// Intel's GPU driver answers zeVirtualMemQueryPageSize, so a backend cannot assume one constant.
// A reservation is an mmap(PROT_NONE) range; mapping puts fresh read-write anonymous pages at the
// address (MAP_FIXED), unmapping puts PROT_NONE back. A physical memory object is only a size
// counted against the capacity: its contents do not travel with it (mapping one object twice does
// not alias), which the streampool contract allows (contents after a map are unspecified).
#pragma once

#include <level_zero/ze_api.h>

#include <cstddef>
#include <cstdint>

namespace streampool::ze_test_driver {

/// Page size zeVirtualMemQueryPageSize reports for a request of `bytes`.
[[nodiscard]] std::size_t vm_page_size(std::size_t bytes) noexcept;

ze_result_t mem_alloc(ze_memory_type_t type, std::size_t bytes, std::size_t alignment, void** out);
ze_result_t mem_free(void* p);
/// The type of the allocation containing p (ZE_MEMORY_TYPE_UNKNOWN when none), its base and size.
ze_memory_type_t mem_type(const void* p, void** base, std::size_t* bytes);

ze_result_t physical_create(std::size_t bytes, ze_physical_mem_handle_t* out);
ze_result_t physical_destroy(ze_physical_mem_handle_t h);

ze_result_t vm_reserve(std::size_t bytes, void** out);
ze_result_t vm_free(void* p, std::size_t bytes);
ze_result_t vm_map(void* p, std::size_t bytes, ze_physical_mem_handle_t h, std::size_t offset,
                   ze_memory_access_attribute_t access);
ze_result_t vm_unmap(void* p, std::size_t bytes);
ze_result_t vm_set_access(void* p, std::size_t bytes, ze_memory_access_attribute_t access);

/// Bytes held by allocations and physical memory objects.
[[nodiscard]] std::size_t bytes_held() noexcept;
/// Total device memory reported to the program: the capacity, or 16 GiB when unlimited.
[[nodiscard]] std::size_t reported_memory() noexcept;

}  // namespace streampool::ze_test_driver
