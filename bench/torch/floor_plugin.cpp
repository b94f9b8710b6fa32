// bench/torch: the floor plug-in, the cheapest allocator PyTorch's pluggable path can call. It
// tells what CUDAPluggableAllocator itself costs a real program (PyTorch's own bookkeeping around
// every call), apart from what the allocator behind it costs: a workload under it runs as fast as
// any plug-in can, so streampool's distance from it is streampool's own, and its distance from
// PyTorch's native allocator is the pluggable path's.
//
// Exact-size free lists, never given back: a request of n bytes takes the last block freed with
// size n, else cuMemAlloc. One lock, one hash lookup, no splitting, no stream order at all, so it
// is safe only where every allocation and free is on one stream (the training workloads;
// workload.py refuses it for the server). Memory grows to the sum of each size's most live blocks.
//
// The driver is reached through the libcuda that PyTorch has loaded (dlopen RTLD_NOLOAD), so this
// file builds with no CUDA headers and links nothing but libdl.
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

using mem_alloc_fn = int (*)(unsigned long long*, std::size_t);  // cuMemAlloc_v2

mem_alloc_fn driver_alloc() {
  static const mem_alloc_fn fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void* sym = lib != nullptr ? dlsym(lib, "cuMemAlloc_v2") : nullptr;
    if (sym == nullptr) {
      std::fprintf(stderr, "floor plug-in: libcuda's cuMemAlloc_v2 is not loaded\n");
      std::abort();
    }
    return reinterpret_cast<mem_alloc_fn>(sym);
  }();
  return fn;
}

std::mutex mu;
std::unordered_map<std::size_t, std::vector<void*>>& free_lists() {
  static auto* lists = new std::unordered_map<std::size_t, std::vector<void*>>;  // outlives tensors
  return *lists;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* floor_malloc(std::size_t size, int /*device*/,
                                                          void* /*stream*/) {
  if (size == 0) return nullptr;
  {
    const std::lock_guard lock(mu);
    auto& list = free_lists()[size];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      return p;
    }
  }
  unsigned long long p = 0;
  if (const int rc = driver_alloc()(&p, size); rc != 0) {
    std::fprintf(stderr, "floor plug-in: cuMemAlloc of %zu bytes failed (CUresult %d)\n", size, rc);
    return nullptr;
  }
  return reinterpret_cast<void*>(p);  // NOLINT(performance-no-int-to-ptr): a device address
}

__attribute__((visibility("default"))) void floor_free(void* ptr, std::size_t size, int /*device*/,
                                                       void* /*stream*/) {
  if (ptr == nullptr) return;
  const std::lock_guard lock(mu);
  free_lists()[size].push_back(ptr);
}

}  // extern "C"
