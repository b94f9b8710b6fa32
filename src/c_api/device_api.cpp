// streampool C ABI: devices.
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "handles.hpp"
#include "streampool/backend.hpp"
#include "streampool/host.hpp"
#include "struct_size.hpp"

// A GPU backend is compiled in only when its sources and API headers were there (the build sets
// STREAMPOOL_HAVE_<NAME>_BACKEND); without it its entry points answer "not available".
#if defined(STREAMPOOL_HAVE_CUDA_BACKEND) && __has_include("streampool/cuda.hpp")
#include "streampool/cuda.hpp"
#define SP_C_API_CUDA 1
#endif
#if defined(STREAMPOOL_HAVE_OPENCL_BACKEND) && __has_include("streampool/opencl.hpp")
#include "streampool/opencl.hpp"
#define SP_C_API_OPENCL 1
#endif
#if defined(STREAMPOOL_HAVE_LEVEL_ZERO_BACKEND) && __has_include("streampool/level_zero.hpp")
#include "streampool/level_zero.hpp"
#define SP_C_API_LEVEL_ZERO 1
#endif

using streampool::c_api::add_device;
using streampool::c_api::destroy_handle;
using streampool::c_api::device_of;
using streampool::c_api::device_payload;
using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::handle_kind;
using streampool::c_api::host_options_abi;
using streampool::c_api::require;
using streampool::c_api::version_to_read;
using streampool::c_api::version_to_write;

namespace {
// Backs the const char* of sp_device_violation_message until the next call on this thread.
thread_local std::string violation_text;

bool is_host(const streampool::device& d) {
  return d.get_backend().kind() == streampool::backend_kind::host;
}

/// One GPU runtime as the C ABI sees it: null functions when this build does not have it.
struct gpu_runtime {
  const char* name;  // as in backend::name(), for messages
  bool (*available)() noexcept;
  int (*count)();
  std::shared_ptr<streampool::backend> (*make)(int ordinal);
};

#ifdef SP_C_API_CUDA
constexpr gpu_runtime cuda_runtime{"cuda", streampool::cuda_available,
                                   streampool::cuda_device_count, streampool::make_cuda_backend};
#else
constexpr gpu_runtime cuda_runtime{"cuda", nullptr, nullptr, nullptr};
#endif
#ifdef SP_C_API_OPENCL
constexpr gpu_runtime opencl_runtime{"opencl", streampool::opencl_available,
                                     streampool::opencl_device_count,
                                     streampool::make_opencl_backend};
#else
constexpr gpu_runtime opencl_runtime{"opencl", nullptr, nullptr, nullptr};
#endif
#ifdef SP_C_API_LEVEL_ZERO
constexpr gpu_runtime level_zero_runtime{"level_zero", streampool::level_zero_available,
                                         streampool::level_zero_device_count,
                                         streampool::make_level_zero_backend};
#else
constexpr gpu_runtime level_zero_runtime{"level_zero", nullptr, nullptr, nullptr};
#endif

/// sp_device_create_<name> (`entry`): NOT_AVAILABLE without the backend in the build, without
/// the runtime or device (the backend's error kinds map the rest, in guarded()).
sp_status_t create_gpu_device(const char* entry, const gpu_runtime& r, int ordinal,
                              sp_device_t* device) {
  return guarded(entry, [&] {
    require(device, entry, "device (the output)");
    if (r.make == nullptr) {
      throw error{STREAMPOOL_STATUS_NOT_AVAILABLE,
                  std::string("streampool: ") + entry + "(" + std::to_string(ordinal) + "): " +
                      r.name + ": not available (this build has no " + r.name + " backend)"};
    }
    // make() names the reason (no runtime, no such device) in a backend_error of that kind.
    *device = add_device(
        std::make_unique<device_payload>(device_payload{streampool::device(r.make(ordinal))}));
  });
}

/// sp_<name>_device_count (`entry`): 0 without the backend, the runtime or a device.
sp_status_t gpu_device_count(const char* entry, const gpu_runtime& r, int* count) {
  return guarded(entry, [&] {
    require(count, entry, "count");
    *count = r.available != nullptr && r.available() ? r.count() : 0;
  });
}
}  // namespace

extern "C" {

sp_status_t sp_host_options_set_defaults(sp_host_options_t* options) {
  return guarded(__func__, [&](const char* entry) {
    require(options, entry, "options");
    // One version so far: every field below is in it.
    (void)version_to_write(host_options_abi, options, entry);
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
  return guarded(__func__, [&](const char* entry) {
    require(device, entry, "device (the output)");
    streampool::host_options o;
    if (options != nullptr) {
      (void)version_to_read(host_options_abi, options, entry);
      o.checking = options->checking != 0;
      o.max_delay_us = options->max_delay_us;
      o.seed = options->seed;
      o.total_memory = options->total_memory;
      o.granularity = options->granularity;
      o.device_wait = options->device_wait != 0;
      o.virtual_memory = options->virtual_memory != 0;
    }
    *device = add_device(std::make_unique<device_payload>(
        device_payload{streampool::device(streampool::make_host_backend(o))}));
  });
}

sp_status_t sp_device_create_cuda(int ordinal, sp_device_t* device) {
  return create_gpu_device(__func__, cuda_runtime, ordinal, device);
}
sp_status_t sp_cuda_device_count(int* count) {
  return gpu_device_count(__func__, cuda_runtime, count);
}
sp_status_t sp_device_create_opencl(int ordinal, sp_device_t* device) {
  return create_gpu_device(__func__, opencl_runtime, ordinal, device);
}
sp_status_t sp_opencl_device_count(int* count) {
  return gpu_device_count(__func__, opencl_runtime, count);
}
sp_status_t sp_device_create_level_zero(int ordinal, sp_device_t* device) {
  return create_gpu_device(__func__, level_zero_runtime, ordinal, device);
}
sp_status_t sp_level_zero_device_count(int* count) {
  return gpu_device_count(__func__, level_zero_runtime, count);
}

sp_status_t sp_device_destroy(sp_device_t device) {
  return guarded(__func__, [&](const char* entry) {
    // Streams, pools and allocations hold the device state themselves: this only drops a handle.
    destroy_handle<device_payload>(handle_kind::device, device, entry, "device",
                                   [](device_payload&) {});
  });
}

sp_status_t sp_device_id(sp_device_t device, uint64_t* id) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(id, entry, "id");
    *id = d->dev.id();
  });
}

sp_status_t sp_device_backend_name(sp_device_t device, const char** name) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(name, entry, "name");
    *name = d->dev.get_backend().name().c_str();
  });
}

static_assert(static_cast<int>(streampool::backend_kind::other) == SP_BACKEND_OTHER &&
                  static_cast<int>(streampool::backend_kind::host) == SP_BACKEND_HOST &&
                  static_cast<int>(streampool::backend_kind::cuda) == SP_BACKEND_CUDA &&
                  static_cast<int>(streampool::backend_kind::opencl) == SP_BACKEND_OPENCL &&
                  static_cast<int>(streampool::backend_kind::level_zero) == SP_BACKEND_LEVEL_ZERO,
              "sp_backend_kind_t follows streampool::backend_kind");

sp_status_t sp_device_backend_kind(sp_device_t device, sp_backend_kind_t* kind) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(kind, entry, "kind (the output)");
    *kind = static_cast<sp_backend_kind_t>(d->dev.get_backend().kind());
  });
}

sp_status_t sp_device_begin_capture(sp_device_t device) {
  return guarded(__func__, [&](const char* entry) {
    device_of(device, entry)->dev.get_backend().begin_capture();
  });
}

sp_status_t sp_device_end_capture(sp_device_t device) {
  return guarded(__func__, [&](const char* entry) {
    device_of(device, entry)->dev.get_backend().end_capture();
  });
}

sp_status_t sp_device_violation_count(sp_device_t device, size_t* count) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(count, entry, "count");
    *count = is_host(d->dev) ? streampool::host_violations(d->dev.get_backend()).size() : 0;
  });
}

sp_status_t sp_device_violation_message(sp_device_t device, size_t index, const char** text) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(text, entry, "text");
    std::vector<std::string> v;
    if (is_host(d->dev)) v = streampool::host_violations(d->dev.get_backend());
    if (index >= v.size()) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  std::string("streampool: ") + entry + ": index " + std::to_string(index) +
                      " is out of range (" + std::to_string(v.size()) + " violations)"};
    }
    violation_text = v[index];
    *text = violation_text.c_str();
  });
}

sp_status_t sp_device_upstream_bytes(sp_device_t device, size_t* bytes) {
  return guarded(__func__, [&](const char* entry) {
    const auto d = device_of(device, entry);
    require(bytes, entry, "bytes");
    *bytes = streampool::host_allocated_bytes(d->dev.get_backend());
  });
}

}  // extern "C"
