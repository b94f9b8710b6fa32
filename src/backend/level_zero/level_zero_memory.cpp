// streampool: the Level Zero backend's memory: device allocations, and virtual ranges with
// physical granules mapped into them (level_zero_backend.hpp).
#include <cstdint>

#include "level_zero_backend.hpp"

namespace streampool::detail::ze {

void* level_zero_backend::do_allocate(std::size_t bytes) {
  const ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* p = nullptr;
  const ze_result_t r = d_.mem_alloc_device(ctx_, &desc, bytes, allocation_granularity, dev_, &p);
  if (is_out_of_memory(r)) return nullptr;
  check(errors_, r, "zeMemAllocDevice(%zu bytes, alignment %zu) on device %d", bytes,
        allocation_granularity, ordinal_);
  if (reinterpret_cast<std::uintptr_t>(p) % allocation_granularity != 0) {
    report_teardown(d_.mem_free(ctx_, p), "zeMemFree");
    raise_backend_error(backend_error_kind::runtime, "level_zero", 0,
                        format("zeMemAllocDevice(%zu bytes) on device %d returned %s, not aligned "
                               "to %zu as asked",
                               bytes, ordinal_, format_ptr(p).c_str(), allocation_granularity));
  }
  return p;
}

void level_zero_backend::do_deallocate(void* p, std::size_t) noexcept {
  report_teardown(d_.mem_free(ctx_, p), "zeMemFree");
}

void* level_zero_backend::do_reserve(std::size_t bytes) {
  const std::size_t g = facts_.vm_granule;
  void* p = nullptr;
  ze_result_t r = d_.virtual_mem_reserve(ctx_, reserve_hint(), bytes, &p);
  if (is_out_of_memory(r)) return nullptr;
  check(errors_, r, "zeVirtualMemReserve(%zu bytes) on device %d", bytes, ordinal_);
  if (reinterpret_cast<std::uintptr_t>(p) % g == 0) {
    note_reserved(p, bytes);
    return p;
  }
  // The driver aligns ranges to its page size, which may be finer than our granule: reserve
  // one granule more and use the aligned part, remembering the real range for unreserve.
  report_teardown(d_.virtual_mem_free(ctx_, p, bytes), "zeVirtualMemFree");
  r = d_.virtual_mem_reserve(ctx_, reserve_hint(), bytes + g, &p);
  if (is_out_of_memory(r)) return nullptr;
  check(errors_, r, "zeVirtualMemReserve(%zu bytes) on device %d", bytes + g, ordinal_);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the aligned address is computed as an integer
  auto* aligned = reinterpret_cast<void*>(align_up(reinterpret_cast<std::uintptr_t>(p), g));
  try {
    unaligned_.remember(aligned, p);
  } catch (...) {
    report_teardown(d_.virtual_mem_free(ctx_, p, bytes + g), "zeVirtualMemFree");
    throw;
  }
  note_reserved(p, bytes + g);
  return aligned;
}

const void* level_zero_backend::reserve_hint() const noexcept {
  std::uintptr_t next = next_reserve_.load(std::memory_order_relaxed);
  if (next == 0) next = std::uintptr_t{1} << 44;  // 16 TiB: a multiple of every granule we use
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the hint is computed as an integer
  return reinterpret_cast<const void*>(align_up(next, facts_.vm_granule));
}

void level_zero_backend::note_reserved(void* p, std::size_t bytes) noexcept {
  next_reserve_.store(reinterpret_cast<std::uintptr_t>(p) + bytes, std::memory_order_relaxed);
}

void level_zero_backend::do_unreserve(void* p, std::size_t bytes) noexcept {
  void* base = unaligned_.take(p);
  if (base != nullptr) {
    report_teardown(d_.virtual_mem_free(ctx_, base, bytes + facts_.vm_granule), "zeVirtualMemFree");
  } else {
    report_teardown(d_.virtual_mem_free(ctx_, p, bytes), "zeVirtualMemFree");
  }
}

native_physical level_zero_backend::do_create_physical() {
  ze_physical_mem_desc_t desc{ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, nullptr, 0, facts_.vm_granule};
  ze_physical_mem_handle_t h = nullptr;
  const ze_result_t r = d_.physical_mem_create(ctx_, dev_, &desc, &h);
  if (is_out_of_memory(r)) return nullptr;
  check(errors_, r, "zePhysicalMemCreate(%zu bytes) on device %d", facts_.vm_granule, ordinal_);
  return h;
}

void level_zero_backend::do_release_physical(native_physical h) noexcept {
  report_teardown(d_.physical_mem_destroy(ctx_, static_cast<ze_physical_mem_handle_t>(h)),
                  "zePhysicalMemDestroy");
}

bool level_zero_backend::do_map(void* p, std::span<const native_physical> handles) {
  const std::size_t g = facts_.vm_granule;
  auto* base = static_cast<unsigned char*>(p);
  std::size_t mapped = 0;
  ze_result_t r = ZE_RESULT_SUCCESS;
  for (; mapped < handles.size(); ++mapped) {
    r = d_.virtual_mem_map(ctx_, base + mapped * g, g,
                           static_cast<ze_physical_mem_handle_t>(handles[mapped]), 0,
                           ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE);
    if (r != ZE_RESULT_SUCCESS) break;
  }
  if (r == ZE_RESULT_SUCCESS) return true;
  // Nothing stays mapped after a failure (the contract), out of memory or not.
  for (std::size_t i = 0; i < mapped; ++i)
    report_teardown(d_.virtual_mem_unmap(ctx_, base + i * g, g), "zeVirtualMemUnmap");
  if (is_out_of_memory(r)) return false;
  check(errors_, r, "zeVirtualMemMap(%p + %zu granules of %zu, of %zu) on device %d", p, mapped, g,
        handles.size(), ordinal_);
  return true;  // not reached: check threw
}

void level_zero_backend::do_unmap(void* p, std::size_t bytes) noexcept {
  // One call per granule: each granule was mapped on its own.
  auto* base = static_cast<unsigned char*>(p);
  for (std::size_t off = 0; off < bytes; off += facts_.vm_granule)
    report_teardown(d_.virtual_mem_unmap(ctx_, base + off, facts_.vm_granule), "zeVirtualMemUnmap");
}

}  // namespace streampool::detail::ze
