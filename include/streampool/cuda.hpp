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

#include <memory>

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

/// The native_queue for a CUstream (or cudaStream_t) created elsewhere, for stream::wrap.
/// streampool never destroys a wrapped stream. It must belong to the same device's primary context.
[[nodiscard]] inline native_queue cuda_native_queue(void* custream) noexcept { return custream; }

}  // namespace streampool
