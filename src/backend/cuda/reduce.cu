// streampool: reduce on the CUDA backend, through CUB.
//
// CUB's temporary storage is taken with cudaMallocAsync and given back with cudaFreeAsync on the
// kernel's own stream: the free is ordered after the reduction, so the storage is never reused
// while the kernel may still read it, and no host synchronisation is needed.
#include <cuda_runtime.h>

#include <cub/device/device_reduce.cuh>

#include "kernels.hpp"
#include "ops.cuh"

namespace streampool::detail {
namespace {

using namespace cuda_ops;

template <class T>
__global__ void write_one(T* out, T v) {
  *out = v;
}

template <class T, class Fold>
int reduce_with(const kernel_command& k, cudaStream_t s, Fold fold) {
  const auto* in = static_cast<const T*>(k.in0);
  auto* out = static_cast<T*>(k.out);
  const T init = identity_of<T>(k.fn);
  if (k.n == 0) {  // n == 0 gives op's identity (kernel.hpp)
    write_one<T><<<1, 1, 0, s>>>(out, init);
    return static_cast<int>(cudaGetLastError());
  }
  const auto n = static_cast<unsigned long long>(k.n);
  std::size_t bytes = 0;
  cudaError_t e = cub::DeviceReduce::Reduce(nullptr, bytes, in, out, n, fold, init, s);
  if (e != cudaSuccess) return static_cast<int>(e);
  void* tmp = nullptr;
  e = cudaMallocAsync(&tmp, bytes > 0 ? bytes : 1, s);
  if (e != cudaSuccess) return static_cast<int>(e);
  e = cub::DeviceReduce::Reduce(tmp, bytes, in, out, n, fold, init, s);
  const cudaError_t f = cudaFreeAsync(tmp, s);
  return static_cast<int>(e != cudaSuccess ? e : f);
}

template <class T>
int reduce_typed(const kernel_command& k, cudaStream_t s) {
  switch (k.fn) {
    case op::add:
      return reduce_with<T>(k, s, fold_add<T>{});
    case op::mul:
      return reduce_with<T>(k, s, fold_mul<T>{});
    case op::min:
      return reduce_with<T>(k, s, fold_min<T>{});
    case op::max:
      return reduce_with<T>(k, s, fold_max<T>{});
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int cuda_launch_reduce(const kernel_command& k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return with_dtype(k.type, [&](auto t) { return reduce_typed<decltype(t)>(k, s); });
}

}  // namespace streampool::detail
