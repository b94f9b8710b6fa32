// gpu_pool_bench's only device code: a one-thread kernel that spins for a given time (read from
// %globaltimer, nanoseconds) and then writes one byte of the block it "used", so a block freed
// behind it is genuinely busy for that long.
#include <cuda_runtime.h>

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin(unsigned long long ns, unsigned char* touch) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
  if (touch != nullptr) *touch = 1;
}

}  // namespace

/// Enqueues the spin kernel on `stream`; returns the launch's error.
cudaError_t streampool_bench_spin(cudaStream_t stream, unsigned long long ns, void* touch) {
  spin<<<1, 1, 0, stream>>>(ns, static_cast<unsigned char*>(touch));
  return cudaGetLastError();
}
