// streampool: the CUDA backend's precompiled kernels (kernels.cu, reduce.cu, scan.cu).
//
// These are compiled by nvcc only when a CUDA compiler exists (the build then defines
// STREAMPOOL_HAVE_CUDA_KERNELS=1); cuda_backend.cpp calls them only in that case. They use the CUDA
// runtime (cudart, linked statically) on the context that is current on the calling thread, which
// the backend makes the device's primary context, the same one the driver API side uses.
//
// Every function enqueues on `stream` (a CUstream, i.e. cudaStream_t) and returns without waiting;
// the result is a cudaError_t value, 0 on success.
#pragma once

#include <cstddef>
#include <cstdint>

#include "streampool/kernel.hpp"

namespace streampool::detail {

/// Launches `k` (already validated: a supported kind/op/dtype combination) on `stream`.
/// Reduce and scans take temporary storage with cudaMallocAsync and return it with cudaFreeAsync
/// on the same stream, so it is stream-ordered and never freed while the kernel may still run.
int cuda_launch_kernel(const kernel_command& k, void* stream);

/// Fills `count` 8-byte elements at `dst` (8-byte aligned) with `pattern`.
int cuda_fill8(void* dst, std::uint64_t pattern, std::size_t count, void* stream);

/// cudaGetErrorName + cudaGetErrorString of a value returned above.
const char* cuda_kernel_error_name(int code);
const char* cuda_kernel_error_string(int code);

// Split by file so that nvcc compiles the CUB-heavy parts in parallel.
int cuda_launch_reduce(const kernel_command& k, void* stream);
int cuda_launch_scan(const kernel_command& k, void* stream);

}  // namespace streampool::detail
