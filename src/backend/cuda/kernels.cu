// streampool: the CUDA backend's map kernels, the 8-byte fill, and the kernel dispatch.
//
// Map kernels are grid-stride loops, one instantiation per (dtype, op), so the op is a
// compile-time constant in the inner loop. Reduce and scans live in reduce.cu and scan.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels.hpp"
#include "ops.cuh"

namespace streampool::detail {
namespace {

using namespace cuda_ops;

constexpr unsigned threads_per_block = 256;
// Enough blocks to keep a large GPU busy (132 SMs with 8 resident blocks of 256 threads each,
// several times over); larger inputs are covered by the grid-stride loop.
constexpr std::size_t max_blocks = 132 * 32;

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(
      std::min<std::size_t>((n + threads_per_block - 1) / threads_per_block, max_blocks));
}

template <class T, op Fn>
__global__ void map_unary_kernel(const T* __restrict__ in, T* out, std::size_t n, T a) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = apply<T, Fn>(in[i], a);
  }
}

template <class T, op Fn>
__global__ void map_binary_kernel(const T* in0, const T* in1, T* out, std::size_t n, T a) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (Fn == op::axpy) {
      out[i] = static_cast<T>(a * in0[i] + in1[i]);
    } else {
      out[i] = apply<T, Fn>(in0[i], in1[i]);
    }
  }
}

__global__ void fill8_kernel(std::uint64_t* out, std::uint64_t pattern, std::size_t n) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = pattern;
  }
}

template <class T, op Fn>
int launch_map(const kernel_command& k, cudaStream_t s) {
  const T a = scalar_as<T>(k.a);
  const auto* in0 = static_cast<const T*>(k.in0);
  auto* out = static_cast<T*>(k.out);
  if (k.kind == kernel_kind::map_unary) {
    map_unary_kernel<T, Fn><<<blocks_for(k.n), threads_per_block, 0, s>>>(in0, out, k.n, a);
  } else {
    map_binary_kernel<T, Fn><<<blocks_for(k.n), threads_per_block, 0, s>>>(
        in0, static_cast<const T*>(k.in1), out, k.n, a);
  }
  return static_cast<int>(cudaGetLastError());
}

// map_unary never sees axpy and map_binary never sees the unary ops (validated by the caller);
// the instantiations below only keep the switch exhaustive.
template <class T>
int launch_map_typed(const kernel_command& k, cudaStream_t s) {
  switch (k.fn) {
    case op::identity:
      return launch_map<T, op::identity>(k, s);
    case op::negate:
      return launch_map<T, op::negate>(k, s);
    case op::abs:
      return launch_map<T, op::abs>(k, s);
    case op::sqrt:
      return launch_map<T, op::sqrt>(k, s);
    case op::square:
      return launch_map<T, op::square>(k, s);
    case op::add:
      return launch_map<T, op::add>(k, s);
    case op::sub:
      return launch_map<T, op::sub>(k, s);
    case op::mul:
      return launch_map<T, op::mul>(k, s);
    case op::div:
      return launch_map<T, op::div>(k, s);
    case op::min:
      return launch_map<T, op::min>(k, s);
    case op::max:
      return launch_map<T, op::max>(k, s);
    case op::axpy:
      if (k.kind != kernel_kind::map_binary) return static_cast<int>(cudaErrorInvalidValue);
      map_binary_kernel<T, op::axpy><<<blocks_for(k.n), threads_per_block, 0, s>>>(
          static_cast<const T*>(k.in0), static_cast<const T*>(k.in1), static_cast<T*>(k.out), k.n,
          scalar_as<T>(k.a));
      return static_cast<int>(cudaGetLastError());
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int cuda_launch_kernel(const kernel_command& k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (k.kind) {
    case kernel_kind::map_unary:
    case kernel_kind::map_binary:
      if (k.n == 0) return 0;
      return with_dtype(k.type, [&](auto t) { return launch_map_typed<decltype(t)>(k, s); });
    case kernel_kind::reduce:
      return cuda_launch_reduce(k, stream);
    case kernel_kind::inclusive_scan:
    case kernel_kind::exclusive_scan:
      return cuda_launch_scan(k, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int cuda_fill8(void* dst, std::uint64_t pattern, std::size_t count, void* stream) {
  if (count == 0) return 0;
  fill8_kernel<<<blocks_for(count), threads_per_block, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<std::uint64_t*>(dst), pattern, count);
  return static_cast<int>(cudaGetLastError());
}

const char* cuda_kernel_error_name(int code) {
  return cudaGetErrorName(static_cast<cudaError_t>(code));
}
const char* cuda_kernel_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // namespace streampool::detail
