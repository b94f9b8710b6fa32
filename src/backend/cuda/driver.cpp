// streampool: loading the CUDA driver (see driver.hpp).
#include "driver.hpp"

#include <dlfcn.h>

#include <cstdio>

namespace streampool::detail::cu {
namespace {

struct loaded {
  driver table{};
  bool ok = false;
  std::string why;
  result code = 0;
};

// Resolves `name` into `slot`; false (and a reason) when the symbol is missing.
template <class Fn>
bool resolve(void* lib, const char* name, Fn*& slot, std::string& why) {
  slot = reinterpret_cast<Fn*>(dlsym(lib, name));
  if (slot == nullptr) {
    why = std::string("libcuda.so.1 has no symbol ") + name;
    return false;
  }
  return true;
}

template <class Fn>
void resolve_optional(void* lib, const char* name, Fn*& slot) {
  slot = reinterpret_cast<Fn*>(dlsym(lib, name));
}

loaded load_once() {
  loaded l;
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace, so a program that links
  // libcuda itself (or cudart, which dlopens it too) gets the same library, loaded once.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    l.why = std::string("dlopen(libcuda.so.1) failed: ") + (e != nullptr ? e : "unknown error");
    return l;
  }
  // Never dlclose: the driver must stay mapped until process exit, because streams, events and
  // memory may be released from static destructors after any unload point we could choose.
  driver& d = l.table;
  // The versioned names are the ABI that cuda.h maps the plain names to (cuMemAlloc ->
  // cuMemAlloc_v2 ...). We use the legacy-default-stream variants (no _ptsz suffix); that only
  // matters for stream 0, which this backend never uses.
  bool ok = resolve(lib, "cuInit", d.init, l.why) &&
            resolve(lib, "cuDriverGetVersion", d.driver_get_version, l.why) &&
            resolve(lib, "cuGetErrorName", d.get_error_name, l.why) &&
            resolve(lib, "cuGetErrorString", d.get_error_string, l.why) &&
            resolve(lib, "cuDeviceGetCount", d.device_get_count, l.why) &&
            resolve(lib, "cuDeviceGet", d.device_get, l.why) &&
            resolve(lib, "cuDeviceTotalMem_v2", d.device_total_mem, l.why) &&
            resolve(lib, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain, l.why) &&
            resolve(lib, "cuDevicePrimaryCtxRelease_v2", d.primary_ctx_release, l.why) &&
            resolve(lib, "cuCtxGetCurrent", d.ctx_get_current, l.why) &&
            resolve(lib, "cuCtxSetCurrent", d.ctx_set_current, l.why) &&
            resolve(lib, "cuCtxPushCurrent_v2", d.ctx_push_current, l.why) &&
            resolve(lib, "cuCtxPopCurrent_v2", d.ctx_pop_current, l.why) &&
            resolve(lib, "cuMemAlloc_v2", d.mem_alloc, l.why) &&
            resolve(lib, "cuMemFree_v2", d.mem_free, l.why) &&
            resolve(lib, "cuMemAllocHost_v2", d.mem_alloc_host, l.why) &&
            resolve(lib, "cuMemFreeHost", d.mem_free_host, l.why) &&
            resolve(lib, "cuStreamCreate", d.stream_create, l.why) &&
            resolve(lib, "cuStreamDestroy_v2", d.stream_destroy, l.why) &&
            resolve(lib, "cuStreamSynchronize", d.stream_synchronize, l.why) &&
            resolve(lib, "cuStreamWaitEvent", d.stream_wait_event, l.why) &&
            resolve(lib, "cuEventCreate", d.event_create, l.why) &&
            resolve(lib, "cuEventRecord", d.event_record, l.why) &&
            resolve(lib, "cuEventQuery", d.event_query, l.why) &&
            resolve(lib, "cuEventSynchronize", d.event_synchronize, l.why) &&
            resolve(lib, "cuEventDestroy_v2", d.event_destroy, l.why) &&
            resolve(lib, "cuMemcpyHtoDAsync_v2", d.memcpy_htod_async, l.why) &&
            resolve(lib, "cuMemcpyDtoHAsync_v2", d.memcpy_dtoh_async, l.why) &&
            resolve(lib, "cuMemcpyDtoDAsync_v2", d.memcpy_dtod_async, l.why) &&
            resolve(lib, "cuMemsetD8Async", d.memset_d8_async, l.why) &&
            resolve(lib, "cuMemsetD16Async", d.memset_d16_async, l.why) &&
            resolve(lib, "cuMemsetD32Async", d.memset_d32_async, l.why) &&
            resolve(lib, "cuMemsetD2D32Async", d.memset_d2d32_async, l.why) &&
            resolve(lib, "cuDeviceGetAttribute", d.device_get_attribute, l.why);
  if (!ok) return l;
  // Optional: without them the backend reports no virtual memory and the pool keeps its large
  // blocks in whole allocations.
  resolve_optional(lib, "cuMemAddressReserve", d.mem_address_reserve);
  resolve_optional(lib, "cuMemAddressFree", d.mem_address_free);
  resolve_optional(lib, "cuMemCreate", d.mem_create);
  resolve_optional(lib, "cuMemRelease", d.mem_release);
  resolve_optional(lib, "cuMemMap", d.mem_map);
  resolve_optional(lib, "cuMemUnmap", d.mem_unmap);
  resolve_optional(lib, "cuMemSetAccess", d.mem_set_access);
  resolve_optional(lib, "cuMemGetAllocationGranularity", d.mem_get_allocation_granularity);
  // Optional too: without them, memory is not shared with other processes (has_sharing()).
  resolve_optional(lib, "cuMemRetainAllocationHandle", d.mem_retain_allocation_handle);
  resolve_optional(lib, "cuMemExportToShareableHandle", d.mem_export_to_shareable_handle);
  resolve_optional(lib, "cuMemImportFromShareableHandle", d.mem_import_from_shareable_handle);
  resolve_optional(lib, "cuMemGetAddressRange_v2", d.mem_get_address_range);
  resolve_optional(lib, "cuIpcGetMemHandle", d.ipc_get_mem_handle);
  resolve_optional(lib, "cuIpcOpenMemHandle_v2", d.ipc_open_mem_handle);
  resolve_optional(lib, "cuIpcCloseMemHandle", d.ipc_close_mem_handle);
  const result r = d.init(0);
  if (r != success) {
    l.code = r;
    l.why = "cuInit failed: " + d.describe(r);
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

std::string driver::describe(result r) const {
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
  // A function-local static: initialised once, thread-safe, and never destroyed before any
  // object that could still call the driver (it is trivially destructible apart from `why`).
  static const loaded* const l = [] {
    try {
      return new loaded(load_once());  // deliberate leak: usable during static destruction
    } catch (...) {
      return static_cast<loaded*>(nullptr);
    }
  }();
  if (l != nullptr && l->ok) return &l->table;
  if (code != nullptr) *code = l != nullptr ? l->code : 0;
  if (why != nullptr) {
    try {
      *why = l != nullptr ? l->why : "out of memory while loading the driver";
    } catch (...) {  // the caller only loses the reason
    }
  }
  return nullptr;
}

}  // namespace streampool::detail::cu
