// streampool: the CUDA driver API, loaded at run time.
//
// Glossary
//   driver table  the function pointers this backend uses, resolved once per process with
//                 dlopen("libcuda.so.1") + dlsym of the versioned symbol names (cuMemAlloc_v2,
//                 ...). The library never links libcuda, so it builds and loads on machines without
//                 a GPU; a missing driver is reported as "not available".
//
// The few driver types and enum values used here are declared below instead of including cuda.h,
// so that this translation unit compiles without a CUDA toolkit. Their values are part of the
// driver's stable ABI.
#pragma once

#include <cstddef>
#include <string>

#include "backend/common/check.hpp"

namespace streampool::detail::cu {

using result = int;                     // CUresult
using device = int;                     // CUdevice
using deviceptr = unsigned long long;   // CUdeviceptr (64-bit, the _v2 ABI)
using context = struct CUctx_st*;       // CUcontext
using stream = struct CUstream_st*;     // CUstream
using event = struct CUevent_st*;       // CUevent
using mem_handle = unsigned long long;  // CUmemGenericAllocationHandle

// Virtual memory management structures, laid out as cuda.h declares them (CUmemLocation,
// CUmemAllocationProp, CUmemAccessDesc).
struct mem_location {
  int type;  // CUmemLocationType
  int id;
};
struct mem_allocation_prop {
  int type;                    // CUmemAllocationType
  int requested_handle_types;  // CUmemAllocationHandleType
  mem_location location;
  void* win32_handle_meta_data;
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
};
struct mem_access_desc {
  mem_location location;
  int flags;  // CUmemAccess_flags
};

// CUresult values this backend distinguishes.
inline constexpr result success = 0;
inline constexpr result error_out_of_memory = 2;
inline constexpr result error_not_initialized = 3;
inline constexpr result error_deinitialized = 4;  // the driver is shutting down (process exit)
inline constexpr result error_not_ready = 600;

inline constexpr unsigned stream_non_blocking = 0x1;    // CU_STREAM_NON_BLOCKING
inline constexpr unsigned event_disable_timing = 0x2;   // CU_EVENT_DISABLE_TIMING
inline constexpr int mem_allocation_type_pinned = 0x1;  // CU_MEM_ALLOCATION_TYPE_PINNED
inline constexpr int mem_location_type_device = 0x1;    // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int mem_access_read_write = 0x3;       // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
inline constexpr int mem_granularity_minimum = 0x0;     // CU_MEM_ALLOC_GRANULARITY_MINIMUM
inline constexpr int attribute_virtual_memory =
    102;  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
inline constexpr int mem_handle_type_posix_fd = 0x1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
inline constexpr unsigned ipc_mem_lazy_enable_peer_access =
    0x1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

/// CUipcMemHandle: 64 opaque bytes.
struct ipc_mem_handle {
  char reserved[64];
};

/// The driver functions the backend calls. Every pointer is non-null once `load` succeeded, except
/// the virtual memory group (`has_virtual_memory()` says whether all of it resolved) and the
/// sharing group (`has_sharing()`). The table also names the driver's results for the checks.
struct driver final : runtime_errors {
  result (*init)(unsigned flags);
  result (*driver_get_version)(int* version);
  result (*get_error_name)(result r, const char** s);
  result (*get_error_string)(result r, const char** s);
  result (*device_get_count)(int* n);
  result (*device_get)(device* d, int ordinal);
  result (*device_total_mem)(std::size_t* bytes, device d);
  result (*primary_ctx_retain)(context* c, device d);
  result (*primary_ctx_release)(device d);
  result (*ctx_get_current)(context* c);
  result (*ctx_set_current)(context c);
  result (*ctx_push_current)(context c);
  result (*ctx_pop_current)(context* c);
  result (*mem_alloc)(deviceptr* p, std::size_t bytes);
  result (*mem_free)(deviceptr p);
  result (*mem_alloc_host)(void** p, std::size_t bytes);
  result (*mem_free_host)(void* p);
  result (*stream_create)(stream* s, unsigned flags);
  result (*stream_destroy)(stream s);
  result (*stream_synchronize)(stream s);
  result (*stream_wait_event)(stream s, event e, unsigned flags);
  result (*event_create)(event* e, unsigned flags);
  result (*event_record)(event e, stream s);
  result (*event_query)(event e);
  result (*event_synchronize)(event e);
  result (*event_destroy)(event e);
  result (*memcpy_htod_async)(deviceptr dst, const void* src, std::size_t bytes, stream s);
  result (*memcpy_dtoh_async)(void* dst, deviceptr src, std::size_t bytes, stream s);
  result (*memcpy_dtod_async)(deviceptr dst, deviceptr src, std::size_t bytes, stream s);
  result (*memset_d8_async)(deviceptr dst, unsigned char v, std::size_t n, stream s);
  result (*memset_d16_async)(deviceptr dst, unsigned short v, std::size_t n, stream s);
  result (*memset_d32_async)(deviceptr dst, unsigned int v, std::size_t n, stream s);
  result (*memset_d2d32_async)(deviceptr dst, std::size_t pitch, unsigned int v, std::size_t width,
                               std::size_t height, stream s);
  result (*device_get_attribute)(int* value, int attribute, device d);
  // Virtual memory management (CUDA 10.2+); null when the driver lacks them.
  result (*mem_address_reserve)(deviceptr* p, std::size_t bytes, std::size_t alignment,
                                deviceptr hint, unsigned long long flags);
  result (*mem_address_free)(deviceptr p, std::size_t bytes);
  result (*mem_create)(mem_handle* h, std::size_t bytes, const mem_allocation_prop* prop,
                       unsigned long long flags);
  result (*mem_release)(mem_handle h);
  result (*mem_map)(deviceptr p, std::size_t bytes, std::size_t offset, mem_handle h,
                    unsigned long long flags);
  result (*mem_unmap)(deviceptr p, std::size_t bytes);
  result (*mem_set_access)(deviceptr p, std::size_t bytes, const mem_access_desc* desc,
                           std::size_t count);
  result (*mem_get_allocation_granularity)(std::size_t* granularity,
                                           const mem_allocation_prop* prop, int option);
  // Sharing memory with other processes (PyTorch's IPC); null when the driver lacks them.
  result (*mem_retain_allocation_handle)(mem_handle* h, void* address);
  result (*mem_export_to_shareable_handle)(void* shareable, mem_handle h, int type,
                                           unsigned long long flags);
  result (*mem_import_from_shareable_handle)(mem_handle* h, void* shareable, int type);
  result (*mem_get_address_range)(deviceptr* base, std::size_t* bytes, deviceptr p);
  result (*ipc_get_mem_handle)(ipc_mem_handle* h, deviceptr p);
  result (*ipc_open_mem_handle)(deviceptr* p, ipc_mem_handle h, unsigned flags);
  result (*ipc_close_mem_handle)(deviceptr p);

  [[nodiscard]] bool has_virtual_memory() const noexcept {
    return mem_address_reserve != nullptr && mem_address_free != nullptr && mem_create != nullptr &&
           mem_release != nullptr && mem_map != nullptr && mem_unmap != nullptr &&
           mem_set_access != nullptr && mem_get_allocation_granularity != nullptr;
  }

  [[nodiscard]] bool has_sharing() const noexcept {
    return has_virtual_memory() && mem_retain_allocation_handle != nullptr &&
           mem_export_to_shareable_handle != nullptr &&
           mem_import_from_shareable_handle != nullptr && mem_get_address_range != nullptr &&
           ipc_get_mem_handle != nullptr && ipc_open_mem_handle != nullptr &&
           ipc_close_mem_handle != nullptr;
  }

  [[nodiscard]] const char* backend() const noexcept override { return "cuda"; }
  /// "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", or the bare number if the driver cannot say.
  [[nodiscard]] std::string describe(long code) const override;
  /// CUDA_ERROR_DEINITIALIZED: the driver is unloading at process exit.
  [[nodiscard]] bool shutting_down(long code) const noexcept override {
    return code == error_deinitialized;
  }
};

/// The process-wide driver table, loaded and cuInit'ed on first call (thread-safe). nullptr when
/// the driver cannot be loaded or initialised; then `*why` (if given) says why, and `*code` holds
/// the CUresult of the failing call (0 for a dlopen/dlsym failure).
[[nodiscard]] const driver* load(std::string* why = nullptr, result* code = nullptr) noexcept;

}  // namespace streampool::detail::cu
