// streampool: loading the CUDA driver (see driver.hpp).
#include "driver.hpp"

#include <array>
#include <cstdio>

#include "backend/common/dynamic_library.hpp"

namespace streampool::detail::cu {
namespace {

// The versioned names are the ABI that cuda.h maps the plain names to (cuMemAlloc ->
// cuMemAlloc_v2 ...). These are the legacy-default-stream variants (no _ptsz suffix); that only
// matters for stream 0, which this backend never uses.
constexpr std::array driver_symbols{
    required_symbol<&driver::init>("cuInit"),
    required_symbol<&driver::driver_get_version>("cuDriverGetVersion"),
    required_symbol<&driver::get_error_name>("cuGetErrorName"),
    required_symbol<&driver::get_error_string>("cuGetErrorString"),
    required_symbol<&driver::device_get_count>("cuDeviceGetCount"),
    required_symbol<&driver::device_get>("cuDeviceGet"),
    required_symbol<&driver::device_total_mem>("cuDeviceTotalMem_v2"),
    required_symbol<&driver::primary_ctx_retain>("cuDevicePrimaryCtxRetain"),
    required_symbol<&driver::primary_ctx_release>("cuDevicePrimaryCtxRelease_v2"),
    required_symbol<&driver::ctx_get_current>("cuCtxGetCurrent"),
    required_symbol<&driver::ctx_set_current>("cuCtxSetCurrent"),
    required_symbol<&driver::ctx_push_current>("cuCtxPushCurrent_v2"),
    required_symbol<&driver::ctx_pop_current>("cuCtxPopCurrent_v2"),
    required_symbol<&driver::mem_alloc>("cuMemAlloc_v2"),
    required_symbol<&driver::mem_free>("cuMemFree_v2"),
    required_symbol<&driver::mem_alloc_host>("cuMemAllocHost_v2"),
    required_symbol<&driver::mem_free_host>("cuMemFreeHost"),
    required_symbol<&driver::stream_create>("cuStreamCreate"),
    required_symbol<&driver::stream_destroy>("cuStreamDestroy_v2"),
    required_symbol<&driver::stream_synchronize>("cuStreamSynchronize"),
    required_symbol<&driver::stream_wait_event>("cuStreamWaitEvent"),
    required_symbol<&driver::event_create>("cuEventCreate"),
    required_symbol<&driver::event_record>("cuEventRecord"),
    required_symbol<&driver::event_query>("cuEventQuery"),
    required_symbol<&driver::event_synchronize>("cuEventSynchronize"),
    required_symbol<&driver::event_destroy>("cuEventDestroy_v2"),
    required_symbol<&driver::memcpy_htod_async>("cuMemcpyHtoDAsync_v2"),
    required_symbol<&driver::memcpy_dtoh_async>("cuMemcpyDtoHAsync_v2"),
    required_symbol<&driver::memcpy_dtod_async>("cuMemcpyDtoDAsync_v2"),
    required_symbol<&driver::memset_d8_async>("cuMemsetD8Async"),
    required_symbol<&driver::memset_d16_async>("cuMemsetD16Async"),
    required_symbol<&driver::memset_d32_async>("cuMemsetD32Async"),
    required_symbol<&driver::memset_d2d32_async>("cuMemsetD2D32Async"),
    required_symbol<&driver::device_get_attribute>("cuDeviceGetAttribute"),
    // Without these the backend reports no virtual memory and the pool keeps its large blocks in
    // whole allocations (has_virtual_memory()).
    optional_symbol<&driver::mem_address_reserve>("cuMemAddressReserve"),
    optional_symbol<&driver::mem_address_free>("cuMemAddressFree"),
    optional_symbol<&driver::mem_create>("cuMemCreate"),
    optional_symbol<&driver::mem_release>("cuMemRelease"),
    optional_symbol<&driver::mem_map>("cuMemMap"),
    optional_symbol<&driver::mem_unmap>("cuMemUnmap"),
    optional_symbol<&driver::mem_set_access>("cuMemSetAccess"),
    optional_symbol<&driver::mem_get_allocation_granularity>("cuMemGetAllocationGranularity"),
    // Without these, memory is not shared with other processes (has_sharing()).
    optional_symbol<&driver::mem_retain_allocation_handle>("cuMemRetainAllocationHandle"),
    optional_symbol<&driver::mem_export_to_shareable_handle>("cuMemExportToShareableHandle"),
    optional_symbol<&driver::mem_import_from_shareable_handle>("cuMemImportFromShareableHandle"),
    optional_symbol<&driver::mem_get_address_range>("cuMemGetAddressRange_v2"),
    optional_symbol<&driver::ipc_get_mem_handle>("cuIpcGetMemHandle"),
    optional_symbol<&driver::ipc_open_mem_handle>("cuIpcOpenMemHandle_v2"),
    optional_symbol<&driver::ipc_close_mem_handle>("cuIpcCloseMemHandle"),
};

loaded_runtime<driver> load_driver() {
  loaded_runtime<driver> l;
  if (!l.library.open("libcuda.so.1", l.why) ||
      !bind_symbols(l.library, l.table, driver_symbols, l.why)) {
    return l;
  }
  const result r = l.table.init(0);
  if (r != success) {
    l.code = r;
    l.why = "cuInit failed: " + l.table.describe(r);
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

std::string driver::describe(long code) const {
  const auto r = static_cast<result>(code);
  const char* name = nullptr;
  const char* text = nullptr;
  if (get_error_name == nullptr || get_error_name(r, &name) != success) name = nullptr;
  if (get_error_string == nullptr || get_error_string(r, &text) != success) text = nullptr;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (%d)%s%s", name != nullptr ? name : "CUresult", r,
                text != nullptr ? ": " : "", text != nullptr ? text : "");
  return buf;
}

const driver* load(std::string* why, result* code) noexcept {
  long c = 0;
  const auto* d = load_once<driver, load_driver>(why, &c, "the driver");
  if (d == nullptr && code != nullptr) *code = static_cast<result>(c);
  return d;
}

}  // namespace streampool::detail::cu
