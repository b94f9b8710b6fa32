// streampool C ABI: CUDA memory shared with other processes (streampool/cuda.hpp, cuda_share).
#include <unistd.h>

#include <cstring>
#include <vector>

#include "handles.hpp"
#include "streampool/backend.hpp"
#include "streampool/error.hpp"

#if defined(STREAMPOOL_HAVE_CUDA_BACKEND) && __has_include("streampool/cuda.hpp")
#include "streampool/cuda.hpp"
#define SP_C_API_CUDA 1
#endif

using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::pool_of;
using streampool::c_api::require;
using streampool::detail::format;

#ifndef SP_C_API_CUDA
namespace {

[[noreturn]] void no_cuda(const char* entry) {
  throw error{STREAMPOOL_STATUS_NOT_AVAILABLE,
              std::string("streampool: ") + entry + ": this build has no CUDA backend"};
}

}  // namespace
#endif

sp_status_t sp_cuda_share(sp_pool_t pool, int ordinal, const void* ptr, size_t bytes, int* kind,
                          uint64_t* base, size_t* shared_bytes, size_t* granule_bytes,
                          unsigned char* ipc_handle, int* fds, size_t fd_capacity,
                          size_t* fd_count) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    for (const auto& [v, name] : {std::pair<const void*, const char*>{ptr, "ptr"},
                                  {kind, "kind"},
                                  {base, "base"},
                                  {shared_bytes, "shared_bytes"},
                                  {granule_bytes, "granule_bytes"},
                                  {ipc_handle, "ipc_handle"},
                                  {fd_count, "fd_count"}})
      require(v, entry, name);
    const streampool::device dev = p->p.get_device();
    const streampool::backend& b = dev.get_backend();
    if (b.kind() != streampool::backend_kind::cuda) {
      throw error{
          STREAMPOOL_STATUS_NOT_AVAILABLE,
          format("streampool: %s: the pool is on a %s device, not CUDA", entry, b.name().c_str())};
    }
#ifdef SP_C_API_CUDA
    streampool::cuda_shared_memory s =
        streampool::cuda_share(ordinal, ptr, bytes, b.caps().vm_granularity);
    if (s.fds.size() > fd_capacity || (!s.fds.empty() && fds == nullptr)) {
      // Refused: the descriptors exported for the caller are closed, not leaked.
      for (const int fd : s.fds) (void)::close(fd);
      require(fds, entry, "fds");
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: [%p, +%zu) is %zu granules, fds holds %zu", entry, ptr,
                         bytes, s.fds.size(), fd_capacity)};
    }
    *kind = s.what == streampool::cuda_shared_memory::kind::allocation ? SP_CUDA_SHARED_ALLOCATION
                                                                       : SP_CUDA_SHARED_GRANULES;
    *base = s.base;
    *shared_bytes = s.bytes;
    *granule_bytes = s.granule_bytes;
    std::memcpy(ipc_handle, s.ipc_handle.data(), s.ipc_handle.size());
    if (!s.fds.empty()) std::memcpy(fds, s.fds.data(), s.fds.size() * sizeof(int));
    *fd_count = s.fds.size();
#else
    (void)ordinal, (void)bytes, (void)fds, (void)fd_capacity;
    no_cuda(entry);
#endif
  });
}

sp_status_t sp_cuda_map_shared(int ordinal, const int* fds, size_t count, size_t granule_bytes,
                               void** base) {
  return guarded(__func__, [&](const char* entry) {
    require(fds, entry, "fds");
    require(base, entry, "base");
#ifdef SP_C_API_CUDA
    *base = streampool::cuda_map_shared(ordinal, std::vector<int>(fds, fds + count), granule_bytes);
#else
    (void)ordinal, (void)count, (void)granule_bytes;
    no_cuda(entry);
#endif
  });
}

sp_status_t sp_cuda_unmap_shared(int ordinal, void* base, size_t bytes) {
  return guarded(__func__, [&](const char* entry) {
    require(base, entry, "base");
#ifdef SP_C_API_CUDA
    streampool::cuda_unmap_shared(ordinal, base, bytes);
#else
    (void)ordinal, (void)bytes;
    no_cuda(entry);
#endif
  });
}
