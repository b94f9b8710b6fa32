// streampool: the CUDA backend (an NVIDIA GPU through the CUDA driver API).
//
// Glossary
//   driver   libcuda.so.1, loaded with dlopen on first use; the library never links it, so a
//            program built with streampool runs on machines without CUDA and simply finds it
//            unavailable.
//   queue    a CUstream created with CU_STREAM_NON_BLOCKING on the device's primary context.
//   marker   a CUevent created with CU_EVENT_DISABLE_TIMING; released markers are kept in a small
//            free list and re-recorded.
//
// The backend works on the device's primary context (the one the CUDA runtime uses), so memory
// and streams are interchangeable with cudart and with frameworks built on it. Every call makes
// that context current on the calling thread if it is not already.
//
// Host -> device copies from pageable memory are staged through a pinned ring buffer owned by the
// backend: `submit` returns once the source has been copied out, as the backend contract requires.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "streampool/backend.hpp"

namespace streampool {

/// True when libcuda.so.1 loads, cuInit succeeds and at least one device exists. Never throws.
[[nodiscard]] STREAMPOOL_EXPORT bool cuda_available() noexcept;

/// The number of CUDA devices; 0 when the driver is not available.
[[nodiscard]] STREAMPOOL_EXPORT int cuda_device_count();

/// A backend for CUDA device `ordinal`.
/// @throws backend_error "cuda: not available: <reason>" when the driver cannot be loaded or
///         initialised, or "cuda: no device <ordinal> ..." when the ordinal is out of range.
[[nodiscard]] STREAMPOOL_EXPORT std::shared_ptr<backend> make_cuda_backend(int ordinal = 0);

/// Memory of device `ordinal` made openable by another process (PyTorch's IPC of CUDA tensors,
/// docs/torch.md): what cuda_share says of the range it was given.
struct cuda_shared_memory {
  enum class kind : std::uint8_t {
    allocation,  ///< inside one driver allocation (cuMemAlloc): `ipc_handle` opens all of it
    granules,    ///< mapped granules of a virtual range: `fds`, one per granule, in order
  };
  kind what = kind::allocation;
  std::uintptr_t base = 0;  ///< the allocation's base, or the first granule's address
  std::size_t bytes = 0;    ///< the allocation's size, or granules * granule_bytes
  std::size_t granule_bytes = 0;
  std::array<unsigned char, 64> ipc_handle{};  ///< allocation: cuIpcGetMemHandle's bytes
  std::vector<int> fds;  ///< granules: POSIX file descriptors, the caller's to close
};

/// Makes [p, p + bytes) of device `ordinal`, memory a pool of it handed out, openable by another
/// process: a driver allocation's IPC handle, or the file descriptors of the granules (of
/// `granule_bytes`, the backend's caps().vm_granularity) that cover it.
/// @throws backend_error naming the range when the driver cannot share it (granules created
///         without an exportable handle type: STREAMPOOL_CUDA_IPC=0, or the driver refused)
[[nodiscard]] STREAMPOOL_EXPORT cuda_shared_memory cuda_share(int ordinal, const void* p,
                                                              std::size_t bytes,
                                                              std::size_t granule_bytes);

/// Maps granules another process shared (file descriptors of this process, which stay the
/// caller's) into a new virtual range of device `ordinal`, readable and writable there.
/// @returns the range's base; cuda_unmap_shared(ordinal, base, fds.size() * granule_bytes) ends it
/// @throws backend_error naming the call that failed; nothing stays mapped or reserved then
[[nodiscard]] STREAMPOOL_EXPORT void* cuda_map_shared(int ordinal, const std::vector<int>& fds,
                                                      std::size_t granule_bytes);

/// Unmaps and frees a range cuda_map_shared made. Errors are reported on stderr.
STREAMPOOL_EXPORT void cuda_unmap_shared(int ordinal, void* base, std::size_t bytes) noexcept;

/// The native_queue for a CUstream (or cudaStream_t) created elsewhere, for stream::wrap.
/// streampool never destroys a wrapped stream. It must belong to the same device's primary context.
[[nodiscard]] inline native_queue cuda_native_queue(void* custream) noexcept { return custream; }

}  // namespace streampool
