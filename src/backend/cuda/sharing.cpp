// streampool: CUDA memory shared with other processes (cuda_share, include/streampool/cuda.hpp).
//
// Two kinds of memory leave a pool: a driver allocation (cuMemAlloc: slabs, whole segments),
// which the driver's IPC handle opens whole in the other process, and granules of a virtual range
// (cuMemCreate + cuMemMap), which are exported one file descriptor each and mapped again into a
// range of the other process's own. The second needs granules created with an exportable handle
// type (cuda_backend.cpp, do_create_physical).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>

#include "backend/common/check.hpp"
#include "context_scope.hpp"
#include "driver.hpp"
#include "streampool/cuda.hpp"
#include "streampool/error.hpp"

namespace streampool {
namespace {

namespace cu = detail::cu;
using detail::check;

const cu::driver& sharing_driver() {
  std::string why;
  const cu::driver* d = cu::load(&why);
  if (d == nullptr) {
    detail::raise_backend_error(backend_error_kind::unavailable, "cuda", 0,
                                "not available: " + why);
  }
  if (!d->has_sharing()) {
    detail::raise_backend_error(backend_error_kind::unavailable, "cuda", 0,
                                "this driver cannot share memory with other processes (it lacks "
                                "cuMemExportToShareableHandle, cuIpcGetMemHandle or their kin)");
  }
  return *d;
}

/// Device `ordinal`'s primary context, retained and current for one call.
class device_context {
 public:
  device_context(const cu::driver& d, int ordinal) : d_(d) {
    check(d, d.device_get(&dev_, ordinal), "cuDeviceGet(%d)", ordinal);
    check(d, d.primary_ctx_retain(&ctx_, dev_), "cuDevicePrimaryCtxRetain(device %d)", ordinal);
    scope_.emplace(d, ctx_);
  }
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;
  ~device_context() {
    scope_.reset();
    (void)d_.primary_ctx_release(dev_);
  }
  [[nodiscard]] cu::device device() const noexcept { return dev_; }

 private:
  const cu::driver& d_;
  cu::device dev_ = 0;
  cu::context ctx_ = nullptr;
  std::optional<cu::context_scope> scope_;
};

void* pointer(cu::deviceptr p) {
  return reinterpret_cast<void*>(p);  // NOLINT(performance-no-int-to-ptr): a device address
}

}  // namespace

cuda_shared_memory cuda_share(int ordinal, const void* p, std::size_t bytes,
                              std::size_t granule_bytes) {
  const cu::driver& d = sharing_driver();
  const device_context context(d, ordinal);
  cuda_shared_memory out;
  const auto at = reinterpret_cast<cu::deviceptr>(p);
  cu::mem_handle h = 0;
  // Only memory cuMemCreate made has an allocation handle: the virtual ranges' granules.
  if (d.mem_retain_allocation_handle(&h, const_cast<void*>(p)) == cu::success) {
    (void)d.mem_release(h);
    STREAMPOOL_EXPECTS(
        granule_bytes != 0 && (granule_bytes & (granule_bytes - 1)) == 0,
        detail::format("cuda_share: granule_bytes %zu is not a power of two", granule_bytes));
    const cu::deviceptr first = at / granule_bytes * granule_bytes;
    const cu::deviceptr end = (at + bytes + granule_bytes - 1) / granule_bytes * granule_bytes;
    out.what = cuda_shared_memory::kind::granules;
    out.base = first;
    out.bytes = end - first;
    out.granule_bytes = granule_bytes;
    try {
      for (cu::deviceptr g = first; g < end; g += granule_bytes) {
        check(d, d.mem_retain_allocation_handle(&h, pointer(g)),
              "cuMemRetainAllocationHandle(%p) on device %d", pointer(g), ordinal);
        int fd = -1;
        const cu::result r =
            d.mem_export_to_shareable_handle(&fd, h, cu::mem_handle_type_posix_fd, 0);
        (void)d.mem_release(h);
        check(d, r,
              "cuMemExportToShareableHandle(the granule at %p of [%p, +%zu)) on device %d "
              "(its memory was made without an exportable handle: STREAMPOOL_CUDA_IPC=0, or "
              "the driver refused one)",
              pointer(g), p, bytes, ordinal);
        out.fds.push_back(fd);
      }
    } catch (...) {
      for (const int fd : out.fds) (void)::close(fd);
      throw;
    }
    return out;
  }
  cu::deviceptr base = 0;
  std::size_t size = 0;
  check(d, d.mem_get_address_range(&base, &size, at), "cuMemGetAddressRange(%p) on device %d", p,
        ordinal);
  cu::ipc_mem_handle handle{};
  check(d, d.ipc_get_mem_handle(&handle, base), "cuIpcGetMemHandle(%p) on device %d", pointer(base),
        ordinal);
  out.what = cuda_shared_memory::kind::allocation;
  out.base = base;
  out.bytes = size;
  static_assert(sizeof handle.reserved == std::tuple_size_v<decltype(out.ipc_handle)>);
  std::memcpy(out.ipc_handle.data(), handle.reserved, sizeof handle.reserved);
  return out;
}

void* cuda_map_shared(int ordinal, const std::vector<int>& fds, std::size_t granule_bytes) {
  const cu::driver& d = sharing_driver();
  const device_context context(d, ordinal);
  STREAMPOOL_EXPECTS(!fds.empty() && granule_bytes != 0,
                     detail::format("cuda_map_shared: %zu file descriptors of %zu bytes",
                                    fds.size(), granule_bytes));
  const std::size_t bytes = fds.size() * granule_bytes;
  std::vector<cu::mem_handle> handles;
  cu::deviceptr base = 0;
  std::size_t mapped = 0;
  try {
    for (const int fd : fds) {
      cu::mem_handle h = 0;
      // The driver takes a POSIX descriptor as the pointer-sized value itself.
      check(d,
            d.mem_import_from_shareable_handle(
                &h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),  // NOLINT
                cu::mem_handle_type_posix_fd),
            "cuMemImportFromShareableHandle(fd %d) on device %d", fd, ordinal);
      handles.push_back(h);
    }
    check(d, d.mem_address_reserve(&base, bytes, granule_bytes, 0, 0),
          "cuMemAddressReserve(%zu bytes) on device %d", bytes, ordinal);
    for (; mapped < handles.size(); ++mapped) {
      check(d, d.mem_map(base + mapped * granule_bytes, granule_bytes, 0, handles[mapped], 0),
            "cuMemMap(granule %zu of %zu) on device %d", mapped, handles.size(), ordinal);
    }
    const cu::mem_access_desc access{{cu::mem_location_type_device, context.device()},
                                     cu::mem_access_read_write};
    check(d, d.mem_set_access(base, bytes, &access, 1),
          "cuMemSetAccess(%p, %zu bytes) on device %d", pointer(base), bytes, ordinal);
  } catch (...) {
    for (std::size_t i = 0; i < mapped; ++i)
      (void)d.mem_unmap(base + i * granule_bytes, granule_bytes);
    if (base != 0) (void)d.mem_address_free(base, bytes);
    for (const cu::mem_handle h : handles) (void)d.mem_release(h);
    throw;
  }
  // The mappings hold the memory now.
  for (const cu::mem_handle h : handles) (void)d.mem_release(h);
  return pointer(base);
}

void cuda_unmap_shared(int ordinal, void* base, std::size_t bytes) noexcept {
  try {
    const cu::driver& d = sharing_driver();
    const device_context context(d, ordinal);
    const auto at = reinterpret_cast<cu::deviceptr>(base);
    cu::result r = d.mem_unmap(at, bytes);
    if (r == cu::success) r = d.mem_address_free(at, bytes);
    if (r != cu::success && r != cu::error_deinitialized) {
      std::fprintf(stderr,
                   "streampool: cuda: unmapping shared memory %p (%zu bytes) on device %d: %s\n",
                   base, bytes, ordinal, d.describe(r).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool: cuda: unmapping shared memory %p: %s\n", base, e.what());
  }
}

}  // namespace streampool
