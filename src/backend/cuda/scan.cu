// streampool: inclusive and exclusive scans on the CUDA backend, through CUB.
//
// Temporary storage is stream-ordered (cudaMallocAsync / cudaFreeAsync on the scan's stream), as
// in reduce.cu. out may equal in0 (CUB scans support in-place operation).
#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

#include "kernels.hpp"
#include "ops.cuh"

namespace streampool::detail {
namespace {

using namespace cuda_ops;

template <class T, class Fold>
int scan_with(const kernel_command& k, cudaStream_t s, Fold fold) {
  if (k.n == 0) return 0;
  const auto* in = static_cast<const T*>(k.in0);
  auto* out = static_cast<T*>(k.out);
  const auto n = static_cast<unsigned long long>(k.n);
  const bool inclusive = k.kind == kernel_kind::inclusive_scan;
  const T init = scalar_as<T>(k.a);
  auto run = [&](void* tmp, std::size_t& bytes) {
    return inclusive ? cub::DeviceScan::InclusiveScan(tmp, bytes, in, out, fold, n, s)
                     : cub::DeviceScan::ExclusiveScan(tmp, bytes, in, out, fold, init, n, s);
  };
  std::size_t bytes = 0;
  cudaError_t e = run(nullptr, bytes);
  if (e != cudaSuccess) return static_cast<int>(e);
  void* tmp = nullptr;
  e = cudaMallocAsync(&tmp, bytes > 0 ? bytes : 1, s);
  if (e != cudaSuccess) return static_cast<int>(e);
  e = run(tmp, bytes);
  const cudaError_t f = cudaFreeAsync(tmp, s);
  return static_cast<int>(e != cudaSuccess ? e : f);
}

template <class T>
int scan_typed(const kernel_command& k, cudaStream_t s) {
  switch (k.fn) {
    case op::add:
      return scan_with<T>(k, s, fold_add<T>{});
    case op::mul:
      return scan_with<T>(k, s, fold_mul<T>{});
    case op::min:
      return scan_with<T>(k, s, fold_min<T>{});
    case op::max:
      return scan_with<T>(k, s, fold_max<T>{});
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int cuda_launch_scan(const kernel_command& k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return with_dtype(k.type, [&](auto t) { return scan_typed<decltype(t)>(k, s); });
}

}  // namespace streampool::detail
