// streampool: the OpenCL backend (any OpenCL 2.0+ device with coarse-grain buffer SVM, e.g. PoCL's
// CPU device).
//
// Glossary
//   loader   libOpenCL.so.1 (the ICD loader), loaded with dlopen on first use; the library never
//            links it, so a program built with streampool runs where OpenCL is absent and simply
//            finds it unavailable.
//   ordinal  a device's index in the list of every platform's devices, platforms in the order
//            clGetPlatformIDs gives them, devices in clGetDeviceIDs(CL_DEVICE_TYPE_ALL) order.
//   queue    an in-order cl_command_queue on the backend's own context.
//   marker   a cl_event from clEnqueueMarkerWithWaitList (the queue is flushed right after, so
//            another queue may wait for it); it holds its own reference and outlives its queue.
//
// Memory is coarse-grain SVM (clSVMAlloc): device pointers that kernels and clEnqueueSVM* take
// directly. OpenCL has no virtual memory, so the pool keeps large blocks in whole allocations.
// Uploads from pageable memory are staged: `submit` returns once the source has been copied out,
// as the backend contract requires. The kernels (src/backend/opencl_c/kernels.cl) are built once
// per backend, on the first kernel submitted, so a program that never runs one never compiles
// them. docs/backends.md, "OpenCL", describes the choices.
#pragma once

#include <cstddef>
#include <memory>

#include "streampool/backend.hpp"

namespace streampool {

/// True when libOpenCL.so.1 loads and at least one device exists. Never throws.
[[nodiscard]] STREAMPOOL_EXPORT bool opencl_available() noexcept;

/// The number of OpenCL devices over all platforms; 0 when OpenCL is not available.
[[nodiscard]] STREAMPOOL_EXPORT int opencl_device_count();

/// A backend for OpenCL device `ordinal` (see the glossary).
/// @throws backend_error kind unavailable "opencl: not available: <reason>" when the loader cannot
///         be loaded or the device lacks what the backend needs (OpenCL 2.0 coarse-grain SVM);
///         kind no_device "opencl: no device <ordinal> (<n> devices)" when the ordinal is out of
///         range; kind runtime when an OpenCL call fails (naming the call, the code's name and
///         the values).
[[nodiscard]] STREAMPOOL_EXPORT std::shared_ptr<backend> make_opencl_backend(int ordinal = 0);

/// Bytes the OpenCL backend `b` currently holds for the pool (allocate minus deallocate), for leak
/// checks. Staging buffers and kernel scratch are not counted.
/// @throws logic_error when `b` is not an OpenCL backend.
[[nodiscard]] STREAMPOOL_EXPORT std::size_t opencl_allocated_bytes(backend& b);

}  // namespace streampool
