// streampool: the CUDA backend (see include/streampool/cuda.hpp and backend.hpp).
//
// Glossary
//   primary context  the device's context shared with the CUDA runtime. Retained for the backend's
//                    lifetime; made current on each calling thread (context_scope).
//   event free list  released markers, kept for re-recording: cuEventCreate costs microseconds,
//                    re-recording an idle event costs nothing extra. Re-recording is safe even if
//                    an earlier cuStreamWaitEvent still refers to the event: a wait captures the
//                    event's most recent record at the time of the wait call.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/common/aligned_bases.hpp"
#include "backend/common/check.hpp"
#include "context_scope.hpp"
#include "core/support/environment.hpp"
#include "driver.hpp"
#include "staging_ring.hpp"
#include "streampool/cuda.hpp"

#if defined(STREAMPOOL_HAVE_CUDA_KERNELS) && STREAMPOOL_HAVE_CUDA_KERNELS
#include "kernels.hpp"
#define STREAMPOOL_CUDA_KERNELS_ENABLED 1
#else
#define STREAMPOOL_CUDA_KERNELS_ENABLED 0
#endif

namespace streampool {
namespace {

namespace cu = detail::cu;
namespace environment = detail::environment;
using cu::context_scope;
using detail::check;
using detail::report_teardown_error;

constexpr std::size_t default_granularity = std::size_t{2} << 20;  // 2 MiB: the GPU's large page

/// The granule of virtual memory: 8 MiB (STREAMPOOL_CUDA_VM_GRANULARITY overrides it). Each
/// granule costs one physical allocation and one mapping, so a coarser granule makes fewer driver
/// calls, and a finer one reserves less; 8 MiB is the measured balance (docs/large-blocks.md, "The
/// granule").
constexpr std::size_t default_vm_granularity = std::size_t{8} << 20;

constexpr std::size_t staging_capacity = std::size_t{32} << 20;
constexpr std::size_t max_idle_events = 1024;

#if STREAMPOOL_CUDA_KERNELS_ENABLED
/// The kernels' results, cudaError_t values of the CUDA runtime (kernels.hpp), as check() names
/// them.
class kernel_errors final : public detail::runtime_errors {
 public:
  [[nodiscard]] const char* backend() const noexcept override { return "cuda"; }
  [[nodiscard]] std::string describe(long code) const override {
    const auto e = static_cast<int>(code);
    return detail::format("%s (%d): %s", detail::cuda_kernel_error_name(e), e,
                          detail::cuda_kernel_error_string(e));
  }
};
constexpr kernel_errors launch_errors;
#endif

/// Physical memory on `dev`, as cuMemCreate and cuMemGetAllocationGranularity take it.
cu::mem_allocation_prop device_memory(cu::device dev) {
  cu::mem_allocation_prop prop{};
  prop.type = cu::mem_allocation_type_pinned;
  prop.location = {cu::mem_location_type_device, dev};
  return prop;
}

/// Whether the pool may map granules on this device: the driver has the calls, the device says
/// it supports them, its minimum granule divides ours, and STREAMPOOL_CUDA_VIRTUAL_MEMORY is not 0.
bool virtual_memory_usable(const cu::driver& d, cu::device dev, std::size_t vm_granularity) {
  if (!environment::flag(environment::variable::cuda_virtual_memory, true)) return false;
  if (!d.has_virtual_memory()) return false;
  int supported = 0;
  if (d.device_get_attribute(&supported, cu::attribute_virtual_memory, dev) != cu::success ||
      supported == 0) {
    return false;
  }
  const cu::mem_allocation_prop prop = device_memory(dev);
  std::size_t g = 0;
  return d.mem_get_allocation_granularity(&g, &prop, cu::mem_granularity_minimum) == cu::success &&
         g != 0 && vm_granularity % g == 0;
}

/// Whether granules are made exportable: the driver can share memory and STREAMPOOL_CUDA_IPC is
/// not 0 (what it costs: docs/torch.md).
bool exportable_by_default(const cu::driver& d) {
  return d.has_sharing() && environment::flag(environment::variable::cuda_ipc, true);
}

class cuda_backend final : public backend {
 public:
  cuda_backend(const cu::driver& d, int ordinal, cu::device dev, cu::context ctx, std::size_t total,
               std::size_t vm_granularity)
      : backend("cuda",
                backend_caps{/*device_wait=*/true, /*host_accessible=*/false, default_granularity,
                             total, virtual_memory_usable(d, dev, vm_granularity), vm_granularity,
                             backend_kind::cuda}),
        granularity_(default_granularity),
        granule_(vm_granularity),
        d_(d),
        ordinal_(ordinal),
        dev_(dev),
        ctx_(ctx),
        staging_(std::make_unique<detail::staging_ring>(d, staging_capacity)) {}

  ~cuda_backend() override {
    // Every stream is gone (each holds the backend), so no work is in flight. The staging ring
    // and the events are released while our context is still retained and current.
    {
      context_scope cs(d_, ctx_);
      for (cu::event e : idle_events_) (void)d_.event_destroy(e);
      idle_events_.clear();
      staging_.reset();
    }
    (void)d_.primary_ctx_release(dev_);
  }

 private:
  void* do_allocate(std::size_t bytes) override {
    context_scope cs(d_, ctx_);
    cu::deviceptr p = 0;
    cu::result r = d_.mem_alloc(&p, bytes);
    if (r == cu::error_out_of_memory) return nullptr;
    check(d_, r, "cuMemAlloc(%zu bytes) on device %d", bytes, ordinal_);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a CUdeviceptr is an address held as an integer
    if (p % granularity_ == 0) return reinterpret_cast<void*>(p);
    // cuMemAlloc promises only 256-byte alignment; for sizes that are multiples of 2 MiB the
    // driver usually hands out 2 MiB-aligned ranges. Should it not, over-allocate by one granule
    // and remember the real base (rare; unaligned_ takes no lock while it is empty).
    (void)d_.mem_free(p);
    r = d_.mem_alloc(&p, bytes + granularity_);
    if (r == cu::error_out_of_memory) return nullptr;
    check(d_, r, "cuMemAlloc(%zu bytes) on device %d", bytes + granularity_, ordinal_);
    // NOLINTBEGIN(performance-no-int-to-ptr): device addresses, held as integers
    auto* aligned = reinterpret_cast<void*>(detail::align_up(p, granularity_));
    auto* base = reinterpret_cast<void*>(p);
    // NOLINTEND(performance-no-int-to-ptr)
    try {
      unaligned_.remember(aligned, base);
    } catch (...) {
      (void)d_.mem_free(p);
      throw;
    }
    return aligned;
  }

  void do_deallocate(void* ptr, std::size_t) noexcept override {
    if (ptr == nullptr) return;
    context_scope cs(d_, ctx_);
    void* base = unaligned_.take(ptr);
    const auto p = reinterpret_cast<cu::deviceptr>(base != nullptr ? base : ptr);
    report_teardown_error(d_, d_.mem_free(p), "cuMemFree");
  }

  // ---- virtual memory: cuMemAddressReserve / cuMemCreate / cuMemMap --------------------------

  void* do_reserve(std::size_t bytes) override {
    context_scope cs(d_, ctx_);
    cu::deviceptr p = 0;
    const cu::result r = d_.mem_address_reserve(&p, bytes, granule_, 0, 0);
    if (r == cu::error_out_of_memory) return nullptr;
    check(d_, r, "cuMemAddressReserve(%zu bytes) on device %d", bytes, ordinal_);
    return reinterpret_cast<void*>(p);  // NOLINT(performance-no-int-to-ptr)
  }

  void do_unreserve(void* p, std::size_t bytes) noexcept override {
    context_scope cs(d_, ctx_);
    report_teardown_error(d_, d_.mem_address_free(reinterpret_cast<cu::deviceptr>(p), bytes),
                          "cuMemAddressFree");
  }

  native_physical do_create_physical() override {
    context_scope cs(d_, ctx_);
    cu::mem_allocation_prop prop = device_memory(dev_);
    cu::mem_handle h = 0;
    cu::result r = cu::success;
    if (exportable_.load(std::memory_order_relaxed)) {
      // Exportable as a file descriptor, so that another process can map it (PyTorch's IPC,
      // docs/torch.md); where the driver or the system refuses, every later granule is made
      // without, and such memory is not shared.
      prop.requested_handle_types = cu::mem_handle_type_posix_fd;
      r = d_.mem_create(&h, granule_, &prop, 0);
      if (r != cu::success && r != cu::error_out_of_memory) {
        exportable_.store(false, std::memory_order_relaxed);
        prop.requested_handle_types = 0;
        r = d_.mem_create(&h, granule_, &prop, 0);
      }
    } else {
      r = d_.mem_create(&h, granule_, &prop, 0);
    }
    if (r == cu::error_out_of_memory) return nullptr;
    check(d_, r, "cuMemCreate(%zu bytes) on device %d", granule_, ordinal_);
    return reinterpret_cast<native_physical>(h);  // NOLINT(performance-no-int-to-ptr)
  }

  void do_release_physical(native_physical h) noexcept override {
    context_scope cs(d_, ctx_);
    report_teardown_error(d_, d_.mem_release(reinterpret_cast<cu::mem_handle>(h)), "cuMemRelease");
  }

  bool do_map(void* p, std::span<const native_physical> handles) override {
    context_scope cs(d_, ctx_);
    const auto base = reinterpret_cast<cu::deviceptr>(p);
    std::size_t mapped = 0;
    cu::result r = cu::success;
    const char* what = "cuMemMap";
    for (; mapped < handles.size(); ++mapped) {
      r = d_.mem_map(base + mapped * granule_, granule_, 0,
                     reinterpret_cast<cu::mem_handle>(handles[mapped]), 0);
      if (r != cu::success) break;
    }
    if (r == cu::success) {
      // One access call for the whole run: the range is contiguous and fully mapped now.
      const cu::mem_access_desc access{{cu::mem_location_type_device, dev_},
                                       cu::mem_access_read_write};
      what = "cuMemSetAccess";
      r = d_.mem_set_access(base, handles.size() * granule_, &access, 1);
    }
    if (r != cu::success) {
      // Nothing stays mapped after a failure (the contract), out of memory or not.
      for (std::size_t i = 0; i < mapped; ++i) (void)d_.mem_unmap(base + i * granule_, granule_);
      if (r == cu::error_out_of_memory) return false;
    }
    check(d_, r, "%s(%p, %zu granules) on device %d", what, p, handles.size(), ordinal_);
    return true;
  }

  void do_unmap(void* p, std::size_t bytes) noexcept override {
    context_scope cs(d_, ctx_);
    const auto base = reinterpret_cast<cu::deviceptr>(p);
    // One call per granule: cuMemUnmap takes whole mappings, and each granule is its own.
    for (std::size_t off = 0; off < bytes; off += granule_)
      report_teardown_error(d_, d_.mem_unmap(base + off, granule_), "cuMemUnmap");
  }

  native_queue do_create_queue() override {
    context_scope cs(d_, ctx_);
    cu::stream s = nullptr;
    const cu::result r = d_.stream_create(&s, cu::stream_non_blocking);
    check(d_, r, "cuStreamCreate on device %d", ordinal_);
    return s;
  }

  void do_destroy_queue(native_queue q) noexcept override {
    context_scope cs(d_, ctx_);
    report_teardown_error(d_, d_.stream_destroy(static_cast<cu::stream>(q)), "cuStreamDestroy");
  }

  void do_submit(native_queue q, const command& c) override {
    context_scope cs(d_, ctx_);
    auto s = static_cast<cu::stream>(q);
    switch (c.kind) {
      case command_kind::copy:
        return submit_copy(s, c.copy);
      case command_kind::fill:
        return submit_fill(s, c.fill);
      case command_kind::kernel:
        return submit_kernel(s, c.kernel);
    }
  }

  void submit_copy(cu::stream s, const copy_command& c) {
    if (c.bytes == 0) return;
    const auto dst = reinterpret_cast<cu::deviceptr>(c.dst);
    const auto src = reinterpret_cast<cu::deviceptr>(c.src);
    cu::result r = cu::success;
    const char* what = "";
    if (c.src_is_host && c.dst_is_host) {
      // Host to host is ordered after the queue's earlier work (which may still be writing dst
      // or src) by draining the queue first; it is never on a fast path.
      what = "cuStreamSynchronize (host-to-host copy)";
      r = d_.stream_synchronize(s);
      if (r == cu::success) std::memmove(c.dst, c.src, c.bytes);
    } else if (c.src_is_host) {
      what = "cuMemcpyHtoDAsync (staged)";
      r = staging_->upload(dst, c.src, c.bytes, s);
    } else if (c.dst_is_host) {
      // Pageable destination: the driver stages and completes it in stream order; the caller
      // waits on a marker recorded after this copy before reading dst.
      what = "cuMemcpyDtoHAsync";
      r = d_.memcpy_dtoh_async(c.dst, src, c.bytes, s);
    } else {
      what = "cuMemcpyDtoDAsync";
      r = d_.memcpy_dtod_async(dst, src, c.bytes, s);
    }
    check(d_, r, "%s(dst=%p, src=%p, %zu bytes) on device %d", what, c.dst, c.src, c.bytes,
          ordinal_);
  }

  void submit_fill(cu::stream s, const fill_command& f) {
    // f passed backend::submit's checks: element size 1, 2, 4 or 8, dst non-null.
    if (f.count == 0) return;
    const auto dst = reinterpret_cast<cu::deviceptr>(f.dst);
    cu::result r = cu::success;
    const char* what = "";
    switch (f.element_size) {
      case 1:
        what = "cuMemsetD8Async";
        r = d_.memset_d8_async(dst, static_cast<unsigned char>(f.pattern), f.count, s);
        break;
      case 2:
        what = "cuMemsetD16Async";
        r = d_.memset_d16_async(dst, static_cast<unsigned short>(f.pattern), f.count, s);
        break;
      case 4:
        what = "cuMemsetD32Async";
        r = d_.memset_d32_async(dst, static_cast<unsigned int>(f.pattern), f.count, s);
        break;
      default: {  // 8, the only size left: backend::submit admits 1, 2, 4 and 8
        const auto lo = static_cast<unsigned int>(f.pattern);
        const auto hi = static_cast<unsigned int>(f.pattern >> 32);
        if (lo == hi) {  // zero and other repeated words: one plain 32-bit memset
          what = "cuMemsetD32Async";
          r = d_.memset_d32_async(dst, lo, f.count * 2, s);
          break;
        }
#if STREAMPOOL_CUDA_KERNELS_ENABLED
        if (dst % 8 == 0) {
          const int e = detail::cuda_fill8(f.dst, f.pattern, f.count, s);
          check(launch_errors, e, "fill8(dst=%p, %zu elements) on device %d", f.dst, f.count,
                ordinal_);
          return;
        }
#endif
        // Two strided 32-bit memsets: a "2D" region of count rows of one word, pitch 8 bytes.
        what = "cuMemsetD2D32Async";
        r = d_.memset_d2d32_async(dst, 8, lo, 1, f.count, s);
        if (r == cu::success) r = d_.memset_d2d32_async(dst + 4, 8, hi, 1, f.count, s);
        break;
      }
    }
    check(d_, r, "%s(dst=%p, %zu elements of %zu bytes) on device %d", what, f.dst, f.count,
          f.element_size, ordinal_);
  }

  /// `k` passed backend::submit's checks: a combination kernel.hpp defines, with its operands.
  void submit_kernel(cu::stream s, const kernel_command& k) {
    // Nothing to do for an empty map or scan; a reduction of nothing still writes the identity.
    if (k.n == 0 && k.kind != kernel_kind::reduce) return;
#if STREAMPOOL_CUDA_KERNELS_ENABLED
    check(launch_errors, detail::cuda_launch_kernel(k, s),
          "%s kernel (op %s, dtype %s, n=%zu) on device %d", kind_name(k.kind), op_name(k.fn),
          dtype_name(k.type), k.n, ordinal_);
#else
    (void)s;
    // Kind runtime, not unavailable: the backend works, this build lacks one of its features, and
    // the C ABI reports it as BACKEND_ERROR.
    detail::raise_backend_error(backend_error_kind::runtime, "cuda", 0,
                                "built without kernels (no CUDA compiler at build time)");
#endif
  }

  native_marker do_record(native_queue q) override {
    context_scope cs(d_, ctx_);
    cu::event e = take_event();
    const cu::result r = d_.event_record(e, static_cast<cu::stream>(q));
    if (r != cu::success) {
      do_release_marker(e);
      check(d_, r, "cuEventRecord on device %d", ordinal_);
    }
    return e;
  }

  bool do_query(native_marker m) override {
    context_scope cs(d_, ctx_);
    const cu::result r = d_.event_query(static_cast<cu::event>(m));
    if (r == cu::error_not_ready) return false;
    check(d_, r, "cuEventQuery on device %d", ordinal_);
    return true;
  }

  void do_wait_host(native_marker m) override {
    context_scope cs(d_, ctx_);
    const cu::result r = d_.event_synchronize(static_cast<cu::event>(m));
    check(d_, r, "cuEventSynchronize on device %d", ordinal_);
  }

  void do_wait_device(native_queue q, native_marker m) override {
    context_scope cs(d_, ctx_);
    const cu::result r =
        d_.stream_wait_event(static_cast<cu::stream>(q), static_cast<cu::event>(m), 0);
    check(d_, r, "cuStreamWaitEvent on device %d", ordinal_);
  }

  void do_release_marker(native_marker m) noexcept override {
    auto e = static_cast<cu::event>(m);
    {
      std::lock_guard<std::mutex> lk(events_mu_);
      if (idle_events_.size() < max_idle_events) {
        try {
          idle_events_.push_back(e);
          return;
        } catch (...) {  // no memory for the list: destroy the event instead
        }
      }
    }
    context_scope cs(d_, ctx_);
    report_teardown_error(d_, d_.event_destroy(e), "cuEventDestroy");
  }

  cu::event take_event() {
    {
      std::lock_guard<std::mutex> lk(events_mu_);
      if (!idle_events_.empty()) {
        cu::event e = idle_events_.back();
        idle_events_.pop_back();
        return e;
      }
    }
    cu::event e = nullptr;
    const cu::result r = d_.event_create(&e, cu::event_disable_timing);
    check(d_, r, "cuEventCreate on device %d", ordinal_);
    return e;
  }

  const std::size_t granularity_;  // caps().granularity: cuMemAlloc sizes and alignment
  const std::size_t granule_;      // caps().vm_granularity: one physical handle, one mapping
  const cu::driver& d_;
  const int ordinal_;
  const cu::device dev_;
  const cu::context ctx_;

  std::mutex events_mu_;                // guards idle_events_
  std::vector<cu::event> idle_events_;  // released markers, ready to re-record

  // Granules are created exportable (POSIX file descriptors) while the driver accepts it and
  // STREAMPOOL_CUDA_IPC is not 0.
  std::atomic<bool> exportable_{exportable_by_default(d_)};

  detail::aligned_bases unaligned_;  // over-allocated segments: aligned -> cuMemAlloc's base

  std::unique_ptr<detail::staging_ring> staging_;  // pinned uploads; reset before the context goes
};

const cu::driver* driver_or_throw() {
  std::string why;
  cu::result code = 0;
  const cu::driver* d = cu::load(&why, &code);
  if (d == nullptr) {
    detail::raise_backend_error(backend_error_kind::unavailable, "cuda", code,
                                "not available: " + why);
  }
  return d;
}

}  // namespace

bool cuda_available() noexcept {
  const cu::driver* d = cu::load();
  int n = 0;
  return d != nullptr && d->device_get_count(&n) == cu::success && n > 0;
}

int cuda_device_count() {
  const cu::driver* d = cu::load();
  int n = 0;
  if (d == nullptr || d->device_get_count(&n) != cu::success) return 0;
  return n;
}

std::shared_ptr<backend> make_cuda_backend(int ordinal) {
  const cu::driver& d = *driver_or_throw();
  int count = 0;
  cu::result r = d.device_get_count(&count);
  check(d, r, "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    detail::raise_backend_error(backend_error_kind::no_device, "cuda",
                                101 /* CUDA_ERROR_INVALID_DEVICE */,
                                detail::format("no device %d (%d devices)", ordinal, count));
  }
  cu::device dev = 0;
  r = d.device_get(&dev, ordinal);
  check(d, r, "cuDeviceGet(%d)", ordinal);
  std::size_t total = 0;
  r = d.device_total_mem(&total, dev);
  check(d, r, "cuDeviceTotalMem(device %d)", ordinal);
  cu::context ctx = nullptr;
  r = d.primary_ctx_retain(&ctx, dev);
  check(d, r, "cuDevicePrimaryCtxRetain(device %d)", ordinal);
  try {
    return std::make_shared<cuda_backend>(
        d, ordinal, dev, ctx, total,
        environment::power_of_two_bytes(environment::variable::cuda_vm_granularity,
                                        default_vm_granularity, default_granularity));
  } catch (...) {
    (void)d.primary_ctx_release(dev);
    throw;
  }
}

}  // namespace streampool
