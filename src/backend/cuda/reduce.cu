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
  const T init = fold_identity<T>(k.fn);
  if (k.n == 0) {  // n == 0 gives op's identity (kernel.hpp)
    write_one<T><<<1, 1, 0, s>>>(out, init);
    return static_cast<int>(cudaGetLastError());
  }
  const auto n = static_cast<unsigned long long>(k.n);
  return run_with_temp_storage(s, [&](void* tmp, std::size_t& bytes) {
    return cub::DeviceReduce::Reduce(tmp, bytes, in, out, n, fold, init, s);
  });
}

}  // namespace

int cuda_launch_reduce(const kernel_command& k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return with_dtype(k.type, [&](auto t) {
    using T = decltype(t);
    return with_fold<T>(k.fn, [&](auto fold) { return reduce_with<T>(k, s, fold); });
  });
}

}  // namespace streampool::detail
