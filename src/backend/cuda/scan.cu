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
  return run_with_temp_storage(s, run);
}

}  // namespace

int cuda_launch_scan(const kernel_command& k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return with_dtype(k.type, [&](auto t) {
    using T = decltype(t);
    return with_fold<T>(k.fn, [&](auto fold) { return scan_with<T>(k, s, fold); });
  });
}

}  // namespace streampool::detail
