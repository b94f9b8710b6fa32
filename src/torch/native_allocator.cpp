// streampool: installing the native allocator (native_allocator.hpp; the allocator itself:
// allocator.hpp).
#include "native_allocator.hpp"

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>

#include "allocator.hpp"

namespace streampool::torch_native {
namespace {

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    cca::CUDAAllocator* current = cca::allocator.load();
    if (current != nullptr && current->initialized()) {
      // Every device, not only the current one: a tensor of device 1 would be freed here. An
      // initialised allocator has device 0 at least (PyTorch initialises it only where CUDA
      // counts a device; the tests' stand-in without a GPU is initialised with none counted).
      const int devices = std::max<int>(c10::cuda::device_count(), 1);
      for (int d = 0; d < devices; ++d) {
        const DeviceStats s = current->getDeviceStats(static_cast<c10::DeviceIndex>(d));
        const std::int64_t live =
            s.allocation[static_cast<std::size_t>(StatType::AGGREGATE)].current;
        TORCH_CHECK(live == 0, "streampool: PyTorch's CUDA allocator (", current->name(),
                    ") already holds ", live, " allocations on device ", d,
                    "; enable streampool before the first CUDA tensor");
      }
    }
    the_allocator = new allocator();  // never deleted: tensors die in static destructors
    if (current != nullptr && current->initialized()) {
      the_allocator->init(c10::cuda::device_count());
    }
    c10::SetAllocator(c10::DeviceType::CUDA, the_allocator, /*priority=*/1);
    cca::allocator.store(the_allocator);
  });
}

}  // namespace streampool::torch_native

int sp_torch_native_install(char* message, size_t capacity) {
  const auto tell = [&](const char* text) {
    if (message != nullptr && capacity > 0) std::snprintf(message, capacity, "%s", text);
    return 1;
  };
  try {
    streampool::torch_native::install();
    return 0;
  } catch (const c10::Error& e) {
    return tell(e.what_without_backtrace());  // what() adds C++ frames to the message
  } catch (const std::exception& e) {
    return tell(e.what());
  }
}
