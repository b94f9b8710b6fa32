// streampool C ABI: devices.
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "handles.hpp"
#include "streampool/host.hpp"
#include "struct_size.hpp"

// The CUDA backend is compiled in only when its sources exist (STREAMPOOL_HAVE_CUDA_BACKEND is set
// by the build); without it the entry points answer "not available".
#if defined(STREAMPOOL_HAVE_CUDA_BACKEND) && __has_include("streampool/cuda.hpp")
#include "streampool/cuda.hpp"
#define SP_C_API_CUDA 1
#else
#define SP_C_API_CUDA 0
#endif

using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::host_options_abi;
using streampool::c_api::require;
using streampool::c_api::version_to_read;
using streampool::c_api::version_to_write;

namespace {
// Backs the const char* of sp_device_violation_message until the next call on this thread.
thread_local std::string violation_text;

bool is_host(const streampool::device& d) { return d.get_backend().name() == "host"; }
}  // namespace

extern "C" {

sp_status_t sp_host_options_set_defaults(sp_host_options_t* options) {
  return guarded([&] {
    require(options, "sp_host_options_set_defaults", "options");
    // One version so far: every field below is in it.
    (void)version_to_write(host_options_abi, options, "sp_host_options_set_defaults");
    const streampool::host_options o;
    options->checking = o.checking ? 1 : 0;
    options->max_delay_us = o.max_delay_us;
    options->seed = o.seed;
    options->total_memory = o.total_memory;
    options->granularity = o.granularity;
    options->device_wait = o.device_wait ? 1 : 0;
    options->virtual_memory = o.virtual_memory ? 1 : 0;
  });
}

sp_status_t sp_device_create_host(const sp_host_options_t* options, sp_device_t* device) {
  return guarded([&] {
    require(device, "sp_device_create_host", "device (the output)");
    streampool::host_options o;
    if (options != nullptr) {
      (void)version_to_read(host_options_abi, options, "sp_device_create_host");
      o.checking = options->checking != 0;
      o.max_delay_us = options->max_delay_us;
      o.seed = options->seed;
      o.total_memory = options->total_memory;
      o.granularity = options->granularity;
      o.device_wait = options->device_wait != 0;
      o.virtual_memory = options->virtual_memory != 0;
    }
    *device = new sp_device_s{streampool::device(streampool::make_host_backend(o))};
  });
}

sp_status_t sp_device_create_cuda(int ordinal, sp_device_t* device) {
  return guarded([&] {
    require(device, "sp_device_create_cuda", "device (the output)");
#if SP_C_API_CUDA
    if (!streampool::cuda_available()) {
      throw error{STREAMPOOL_STATUS_NOT_AVAILABLE,
                  "streampool: sp_device_create_cuda: cuda: not available (no driver or no GPU)"};
    }
    *device = new sp_device_s{streampool::device(streampool::make_cuda_backend(ordinal))};
#else
    throw error{STREAMPOOL_STATUS_NOT_AVAILABLE,
                "streampool: sp_device_create_cuda(" + std::to_string(ordinal) +
                    "): cuda: not available (this build has no CUDA backend)"};
#endif
  });
}

sp_status_t sp_cuda_device_count(int* count) {
  return guarded([&] {
    require(count, "sp_cuda_device_count", "count");
#if SP_C_API_CUDA
    *count = streampool::cuda_available() ? streampool::cuda_device_count() : 0;
#else
    *count = 0;
#endif
  });
}

sp_status_t sp_device_destroy(sp_device_t device) {
  return guarded([&] {
    require(device, "sp_device_destroy", "device");
    // Streams, pools and allocations hold the device state themselves: this only drops a handle.
    delete device;
  });
}

sp_status_t sp_device_id(sp_device_t device, uint64_t* id) {
  return guarded([&] {
    require(device, "sp_device_id", "device");
    require(id, "sp_device_id", "id");
    *id = device->dev.id();
  });
}

sp_status_t sp_device_backend_name(sp_device_t device, const char** name) {
  return guarded([&] {
    require(device, "sp_device_backend_name", "device");
    require(name, "sp_device_backend_name", "name");
    *name = device->dev.get_backend().name().c_str();
  });
}

sp_status_t sp_device_violation_count(sp_device_t device, size_t* count) {
  return guarded([&] {
    require(device, "sp_device_violation_count", "device");
    require(count, "sp_device_violation_count", "count");
    *count =
        is_host(device->dev) ? streampool::host_violations(device->dev.get_backend()).size() : 0;
  });
}

sp_status_t sp_device_violation_message(sp_device_t device, size_t index, const char** text) {
  return guarded([&] {
    require(device, "sp_device_violation_message", "device");
    require(text, "sp_device_violation_message", "text");
    std::vector<std::string> v;
    if (is_host(device->dev)) v = streampool::host_violations(device->dev.get_backend());
    if (index >= v.size()) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  "streampool: sp_device_violation_message: index " + std::to_string(index) +
                      " is out of range (" + std::to_string(v.size()) + " violations)"};
    }
    violation_text = v[index];
    *text = violation_text.c_str();
  });
}

sp_status_t sp_device_upstream_bytes(sp_device_t device, size_t* bytes) {
  return guarded([&] {
    require(device, "sp_device_upstream_bytes", "device");
    require(bytes, "sp_device_upstream_bytes", "bytes");
    *bytes = streampool::host_allocated_bytes(device->dev.get_backend());
  });
}

}  // extern "C"
