// streampool: the PyTorch plug-in (docs/torch.md), the entry points that
// torch.cuda.memory.CUDAPluggableAllocator calls, and the hooks it does not forward by itself.
//
// Glossary
//   plug-in pool    one pool per CUDA device (not the device's default pool), created on the first
//                   allocation there and never destroyed (PyTorch frees from static destructors).
//   record_stream   tensor.record_stream(s): "do not reuse this memory before the work queued on s
//                   so far is done". PyTorch's Python API for pluggable allocators forwards only
//                   alloc and free (free names the allocation stream), so a plain plug-in reuses
//                   such memory too early. sp_torch_install_hooks reaches into PyTorch's C++
//                   allocator object and sets its record-stream and reset functions; where that
//                   is not possible, the plug-in is conservative: a free waits for every stream it
//                   knows (tokens: no event per free, but reuse may wait for streams that never
//                   touched the memory).
//   per stream      the plug-in pool keeps large blocks with the streams that free them
//                   (pool_options::share_between_streams false), as PyTorch's own allocators do: a
//                   multi-stream program settles with no driver call and no device-side wait.
//                   STREAMPOOL_TORCH_PER_STREAM=0 shares them between live streams instead.
//   trace           with STREAMPOOL_TORCH_TRACE=FILE, each plug-in pool records its allocations
//                   and frees from its creation on (pool::start_recording, the core's allocation
//                   log): the first device's pool to FILE, any other device's to FILE.<ordinal>.
//                   CUDA's legacy default stream (handle 0) is stream 0 of the file.
//
// Errors: an allocation that fails throws (out_of_memory names the numbers); PyTorch's C++ frames
// carry it to Python as an exception, never a NULL that crashes later. A free never throws (it
// runs in tensor destructors): a bad pointer is reported on stderr.
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "allocation_registry.hpp"
#include "core/support/environment.hpp"
#include "handles.hpp"
#include "native_streams.hpp"
#include "streampool/backend.hpp"
#include "streampool/error.hpp"
#include "streampool/host.hpp"
#if defined(STREAMPOOL_HAVE_CUDA_BACKEND) && __has_include("streampool/cuda.hpp")
#include "streampool/cuda.hpp"
#define STREAMPOOL_TORCH_CUDA 1
#else
#define STREAMPOOL_TORCH_CUDA 0
#endif

struct CUstream_st;  // cudaStream_t, as PyTorch's hook types spell it

namespace {

using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::printf_arg;
using streampool::c_api::require;
namespace sp = streampool;
namespace env = streampool::detail::environment;

struct plugin_device {
  sp::device dev;
  sp::pool pool;
  // The pool's count of live sp_pool_allocate allocations (sp_torch_pool's handle can make
  // them): a free of such memory is refused, as sp_pool_deallocate_native refuses it.
  std::shared_ptr<std::atomic<std::size_t>> registry_live;
};

constexpr int max_devices = 64;
std::array<std::atomic<plugin_device*>, max_devices> devices{};
std::mutex devices_mu;  // guards creation
std::atomic<bool> conservative{false};

std::shared_ptr<sp::backend> make_backend(int ordinal) {
  // Tests without a GPU drive the plug-in on the host backend (checking mode: the race detector
  // sees every command), with host queues as the "native streams".
  if (env::text(env::variable::torch_backend) == "host") {
    return sp::make_host_backend({.checking = true});
  }
#if STREAMPOOL_TORCH_CUDA
  return sp::make_cuda_backend(ordinal);
#else
  throw sp::backend_error(sp::backend_error_kind::unavailable,
                          "streampool: torch plug-in: this build has no CUDA backend", "cuda",
                          ordinal);
#endif
}

/// The plug-in pool's options: large blocks per stream unless STREAMPOOL_TORCH_PER_STREAM says
/// 0, false, off or no.
sp::pool_options plugin_options() {
  sp::pool_options o;
  // No shelf: training keeps the tightest placement (best fit, no class rounding), which is its
  // memory lead (docs/large-blocks.md, "The shelf").
  o.large_cache_bytes = 0;
  o.share_between_streams = !env::flag(env::variable::torch_per_stream, true);
  return o;
}

/// The file STREAMPOOL_TORCH_TRACE names for the `nth` plug-in pool (0: the first one made).
std::string trace_file(const char* path, int nth, int ordinal) {
  return nth == 0 ? std::string(path) : std::string(path) + "." + std::to_string(ordinal);
}

/// Starts d's allocation log in `path`, with CUDA's legacy default stream as stream 0 where the
/// backend has one (the host backend of the tests has none: streams count from 0 there). `who`:
/// what asked, for messages.
void start_recording(plugin_device& d, const std::string& path, const char* who) {
  if (sp::c_api::wrappable_queue(d.dev, nullptr) != nullptr) {
    d.pool.start_recording(path, sp::c_api::native_stream(d.dev, nullptr, who));
  } else {
    d.pool.start_recording(path);
  }
}

/// STREAMPOOL_TORCH_TRACE, read when a device's pool is made (the first allocation there), so that
/// a program may set it after loading the library. A file that cannot be opened is reported on
/// stderr, and the program runs on without the trace.
void start_env_trace(plugin_device& d, int ordinal) {
  static int traced = 0;  // pools recording so far; guarded by devices_mu
  const std::optional<std::string> path = env::text(env::variable::torch_trace);
  if (!path) return;
  const std::string file = trace_file(path->c_str(), traced, ordinal);
  try {
    start_recording(d, file, env::name(env::variable::torch_trace));
    ++traced;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool: torch plug-in: STREAMPOOL_TORCH_TRACE: device %d: %s\n",
                 ordinal, e.what());
  }
}

plugin_device& device_for(int ordinal) {
  STREAMPOOL_EXPECTS(
      ordinal >= 0 && ordinal < max_devices,
      sp::detail::format("torch plug-in: device %d is out of range [0, %d)", ordinal, max_devices));
  if (plugin_device* d = devices[static_cast<std::size_t>(ordinal)].load(std::memory_order_acquire))
    return *d;
  std::lock_guard lock(devices_mu);
  auto& slot = devices[static_cast<std::size_t>(ordinal)];
  if (plugin_device* d = slot.load(std::memory_order_relaxed)) return *d;
  sp::device dev(make_backend(ordinal));
  // Deliberately leaked: PyTorch frees tensors from static destructors, after ours would run.
  sp::pool pool(dev, plugin_options());
  auto live = sp::c_api::allocation_registry::instance().live_counter(pool.id());
  auto* d = new plugin_device{dev, std::move(pool), std::move(live)};
  start_env_trace(*d, ordinal);
  slot.store(d, std::memory_order_release);
  return *d;
}

sp::c_api::pinned_stream stream_on(plugin_device& d, void* native, const char* entry) {
  try {
    return sp::c_api::native_stream_of(
        sp::c_api::this_thread(), d.dev.id(), native, [&]() -> const sp::device& { return d.dev; },
        entry);
  } catch (const error& e) {
    // The C layer's own error (a native stream the backend refuses) is no std::exception: PyTorch
    // turns only those into Python exceptions.
    throw sp::logic_error(e.message);
  }
}

/// The plug-in device whose pool owns p, or nullptr.
plugin_device* owner_of(const void* p) {
  for (auto& slot : devices) {
    plugin_device* d = slot.load(std::memory_order_acquire);
    if (d != nullptr && d->pool.owns(p)) return d;
  }
  return nullptr;
}

void free_on(plugin_device& d, void* ptr, void* native, const char* entry) {
  if (d.registry_live->load(std::memory_order_acquire) != 0 &&
      sp::c_api::allocation_registry::instance().find(ptr) != nullptr) {
    throw sp::logic_error(sp::detail::format(
        "%p was allocated by sp_pool_allocate (through sp_torch_pool): free it with "
        "sp_pool_deallocate; nothing was freed",
        printf_arg(ptr)));
  }
  const sp::c_api::pinned_stream pinned = stream_on(d, native, entry);
  const sp::stream_ref s = pinned;
  const bool per_thread =
      reinterpret_cast<std::uintptr_t>(native) == sp::c_api::cuda_per_thread_stream &&
      d.dev.get_backend().kind() == sp::backend_kind::cuda;
  if (!conservative.load(std::memory_order_relaxed) && !per_thread) {
    d.pool.deallocate(s, ptr);
    return;
  }
  // Conservative: after everything every known stream has queued so far. And a per-thread
  // default stream may be another thread's than the allocating one: the legacy default stream's
  // point (among all_native_stream_points) covers every thread's.
  std::vector<sp::token> points = sp::c_api::all_native_stream_points(d.dev.id(), nullptr);
  points.push_back(s.now());
  d.pool.deallocate(ptr, points);
}

// ---- reaching PyTorch's allocator object -------------------------------------------------------
//
// CUDAPluggableAllocator has setters for a record-stream and a reset (empty_cache) function that
// its Python API does not expose. Its library exports them, and the allocator in use is the
// global c10::cuda::CUDACachingAllocator::allocator. Both libraries are already loaded by
// PyTorch; dlopen(RTLD_NOLOAD) finds them without loading anything. The setters are called through
// function pointers with the member's ABI (this first; std::function by invisible reference), and
// only after the object's vtable proves it is a CUDAPluggableAllocator.

constexpr const char* allocator_symbol = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
constexpr const char* vtable_symbol =
    "_ZTVN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocatorE";
constexpr const char* set_record_stream_symbol =
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator20set_record_stream_fnESt8func"
    "tionIFvPvP11CUstream_stEE";
constexpr const char* set_reset_symbol =
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator12set_reset_fnESt8functionIFvv"
    "EE";

using record_stream_fn = std::function<void(void*, CUstream_st*)>;
using reset_fn = std::function<void()>;
using set_record_stream_t = void (*)(void*, record_stream_fn);
using set_reset_t = void (*)(void*, reset_fn);

void* loaded(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name;
  return dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
}

}  // namespace

extern "C" {

SP_API void* sp_torch_malloc(size_t size, int device, void* stream) {
  plugin_device& d = device_for(device);
  return d.pool.allocate(stream_on(d, stream, __func__), size);
}

SP_API void* sp_torch_malloc_sized(size_t size, int device, void* stream, size_t* block_size) {
  STREAMPOOL_EXPECTS(block_size != nullptr, std::string(__func__) + ": block_size is NULL");
  plugin_device& d = device_for(device);
  void* p = d.pool.allocate(stream_on(d, stream, __func__), size);
  *block_size = d.pool.block_size(p);
  return p;
}

SP_API void sp_torch_free(void* ptr, size_t size, int device, void* stream) {
  if (ptr == nullptr) return;
  try {
    free_on(device_for(device), ptr, stream, __func__);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool: torch plug-in: free of %p (%zu bytes, device %d): %s\n", ptr,
                 size, device, e.what());
  }
}

SP_API void sp_torch_record_stream(void* ptr, void* stream) {
  plugin_device* d = owner_of(ptr);
  STREAMPOOL_EXPECTS(d != nullptr,
                     sp::detail::format("torch plug-in: record_stream: %p is not memory of the "
                                        "plug-in's pools",
                                        printf_arg(ptr)));
  // What the stream queues until the free, like PyTorch's own allocator (which records its
  // events at the free): record_stream usually comes before the work that reads the tensor.
  d->pool.record_use(ptr, stream_on(*d, stream, __func__));
}

SP_API void sp_torch_empty_cache(void) {
  // Like PyTorch's own empty_cache (whose cudaFree synchronises): the streams' work finishes
  // first, so that everything free goes back, not only what happens to be known complete.
  for (auto& slot : devices) {
    if (plugin_device* d = slot.load(std::memory_order_acquire)) {
      sp::c_api::synchronize_native_streams(d->dev.id());
      d->pool.trim();
    }
  }
}

SP_API void sp_torch_trace_phase(const char* name) {
  if (name == nullptr) return;
  // Every plug-in pool that records (STREAMPOOL_TORCH_TRACE, sp_torch_record_start) gets the line.
  for (auto& slot : devices) {
    if (plugin_device* d = slot.load(std::memory_order_acquire)) d->pool.record_phase(name);
  }
}

SP_API sp_status_t sp_torch_record_start(int device, const char* path) {
  return guarded(__func__, [&](const char* entry) {
    require(path, entry, "path");
    if (*path == '\0') {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  sp::detail::format("streampool: %s: path is empty (device %d)", entry, device)};
    }
    start_recording(device_for(device), path, entry);
  });
}

SP_API sp_status_t sp_torch_set_conservative(int on) {
  return guarded(__func__, [&] { conservative.store(on != 0); });
}

SP_API sp_status_t sp_torch_pool(int device, sp_pool_t* pool) {
  return guarded(__func__, [&](const char* entry) {
    require(pool, entry, "pool (the output)");
    *pool = sp::c_api::add_pool(device_for(device).pool);
  });
}

SP_API sp_status_t sp_torch_install_hooks(const char* torch_lib_dir, int* installed) {
  return guarded(__func__, [&](const char* entry) {
    require(torch_lib_dir, entry, "torch_lib_dir");
    require(installed, entry, "installed (the output)");
    *installed = 0;
    const std::string dir = torch_lib_dir;
    void* c10 = loaded(dir, "libc10_cuda.so");
    void* torch_cuda = loaded(dir, "libtorch_cuda.so");
    if (c10 == nullptr || torch_cuda == nullptr) {
      throw error{STREAMPOOL_STATUS_NOT_AVAILABLE,
                  std::string("streampool: ") + entry +
                      ": libc10_cuda.so or libtorch_cuda.so is not loaded from " + dir};
    }
    auto* current = static_cast<std::atomic<void*>*>(dlsym(c10, allocator_symbol));
    void* vtable = dlsym(torch_cuda, vtable_symbol);
    if (current == nullptr || vtable == nullptr) {
      throw error{STREAMPOOL_STATUS_NOT_AVAILABLE,
                  std::string("streampool: ") + entry +
                      ": this PyTorch does not export the allocator or CUDAPluggableAllocator's "
                      "vtable"};
    }
    void* self = current->load();
    // An object's vtable pointer points two words into the vtable symbol (past offset-to-top and
    // the type info).
    if (self == nullptr ||
        *static_cast<void**>(self) != static_cast<char*>(vtable) + 2 * sizeof(void*)) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  std::string("streampool: ") + entry +
                      ": PyTorch's current CUDA allocator is not a CUDAPluggableAllocator (call "
                      "change_current_allocator first)"};
    }
    if (void* f = dlsym(torch_cuda, set_record_stream_symbol)) {
      reinterpret_cast<set_record_stream_t>(f)(
          self, [](void* p, CUstream_st* s) { sp_torch_record_stream(p, s); });
      *installed |= 1;
    }
    if (void* f = dlsym(torch_cuda, set_reset_symbol)) {
      reinterpret_cast<set_reset_t>(f)(self, [] { sp_torch_empty_cache(); });
      *installed |= 2;
    }
  });
}

}  // extern "C"
