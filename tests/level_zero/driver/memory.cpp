#include "memory.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_set>

#include "settings.hpp"

namespace streampool::ze_test_driver {
namespace {

constexpr std::size_t small_page = std::size_t{64} << 10;
constexpr std::size_t large_page = std::size_t{2} << 20;

struct allocation {
  std::size_t bytes;
  ze_memory_type_t type;
};

struct physical {
  std::size_t bytes;
  std::size_t mappings = 0;  // guarded by memory_state::mu
};

struct mapping {
  std::size_t bytes;
  physical* backing;
};

struct memory_state {
  std::mutex mu;
  std::map<std::uintptr_t, allocation> allocations;
  std::unordered_set<physical*> physicals;
  std::map<std::uintptr_t, std::size_t> reservations;
  std::map<std::uintptr_t, mapping> mappings;
  std::atomic<std::size_t> held{0};
};

// Never destroyed: a program may free memory from its own static destructors.
memory_state& state() {
  static auto* const instance = new memory_state;
  return *instance;
}

bool is_power_of_two(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// Counts `bytes` as held unless that passes the capacity.
bool charge(std::size_t bytes) {
  const std::size_t capacity = config().capacity.load();
  std::size_t held = state().held.load();
  do {
    if (capacity != 0 && (bytes > capacity || held > capacity - bytes)) {
      return false;
    }
  } while (!state().held.compare_exchange_weak(held, held + bytes));
  return true;
}

void refund(std::size_t bytes) { state().held.fetch_sub(bytes); }

int protection(ze_memory_access_attribute_t access) {
  switch (access) {
    case ZE_MEMORY_ACCESS_ATTRIBUTE_NONE:
      return PROT_NONE;
    case ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY:
      return PROT_READ;
    case ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE:
      return PROT_READ | PROT_WRITE;
    default:
      return -1;
  }
}

// The reservation holding [p, p + bytes), or end().
auto reservation_of(std::uintptr_t p, std::size_t bytes) {
  auto& r = state().reservations;
  auto it = r.upper_bound(p);
  if (it == r.begin()) {
    return r.end();
  }
  --it;
  return (p + bytes <= it->first + it->second) ? it : r.end();
}

bool overlaps_mapping(std::uintptr_t p, std::size_t bytes) {
  auto& m = state().mappings;
  auto it = m.lower_bound(p);
  if (it != m.end() && it->first < p + bytes) {
    return true;
  }
  return it != m.begin() && std::prev(it)->first + std::prev(it)->second.bytes > p;
}

}  // namespace

std::size_t vm_page_size(std::size_t bytes) noexcept {
  return bytes >= large_page ? large_page : small_page;
}

ze_result_t mem_alloc(ze_memory_type_t type, std::size_t bytes, std::size_t alignment, void** out) {
  if (bytes == 0) {
    return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  }
  if (alignment == 0) {
    alignment = 64;
  }
  if (!is_power_of_two(alignment)) {
    return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  }
  alignment = alignment < sizeof(void*) ? sizeof(void*) : alignment;
  if (!charge(bytes)) {
    return type == ZE_MEMORY_TYPE_HOST ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
                                       : ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  }
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    refund(bytes);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  std::lock_guard lock(state().mu);
  state().allocations.emplace(address(p), allocation{bytes, type});
  *out = p;
  return ZE_RESULT_SUCCESS;
}

ze_result_t mem_free(void* p) {
  std::size_t bytes = 0;
  {
    std::lock_guard lock(state().mu);
    auto it = state().allocations.find(address(p));
    if (it == state().allocations.end()) {
      return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    bytes = it->second.bytes;
    state().allocations.erase(it);
  }
  std::free(p);
  refund(bytes);
  return ZE_RESULT_SUCCESS;
}

ze_memory_type_t mem_type(const void* p, void** base, std::size_t* bytes) {
  std::lock_guard lock(state().mu);
  auto& a = state().allocations;
  auto it = a.upper_bound(address(p));
  if (it != a.begin()) {
    --it;
    if (address(p) < it->first + it->second.bytes) {
      *base = reinterpret_cast<void*>(it->first);
      *bytes = it->second.bytes;
      return it->second.type;
    }
  }
  *base = nullptr;
  *bytes = 0;
  return ZE_MEMORY_TYPE_UNKNOWN;
}

ze_result_t physical_create(std::size_t bytes, ze_physical_mem_handle_t* out) {
  if (bytes == 0 || bytes % small_page != 0) {
    return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  }
  if (!charge(bytes)) {
    return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  }
  auto* h = new physical{bytes};
  std::lock_guard lock(state().mu);
  state().physicals.insert(h);
  *out = reinterpret_cast<ze_physical_mem_handle_t>(h);
  return ZE_RESULT_SUCCESS;
}

ze_result_t physical_destroy(ze_physical_mem_handle_t handle) {
  auto* h = reinterpret_cast<physical*>(handle);
  {
    std::lock_guard lock(state().mu);
    auto it = state().physicals.find(h);
    if (it == state().physicals.end()) {
      return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (h->mappings != 0) {
      return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    state().physicals.erase(it);
  }
  refund(h->bytes);
  delete h;
  return ZE_RESULT_SUCCESS;
}

ze_result_t vm_reserve(std::size_t bytes, void** out) {
  if (bytes == 0 || bytes % small_page != 0) {
    return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  }
  // Over-reserve by one large page and trim, so that every reservation is 2 MiB aligned.
  const std::size_t padded = bytes + large_page;
  void* raw = mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  const std::uintptr_t start = (address(raw) + large_page - 1) & ~(large_page - 1);
  const std::size_t head = start - address(raw);
  if (head != 0) {
    munmap(raw, head);
  }
  const std::size_t tail = padded - head - bytes;
  if (tail != 0) {
    munmap(reinterpret_cast<void*>(start + bytes), tail);
  }
  std::lock_guard lock(state().mu);
  state().reservations.emplace(start, bytes);
  *out = reinterpret_cast<void*>(start);
  return ZE_RESULT_SUCCESS;
}

ze_result_t vm_free(void* p, std::size_t bytes) {
  std::lock_guard lock(state().mu);
  auto it = state().reservations.find(address(p));
  if (it == state().reservations.end() || it->second != bytes) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (overlaps_mapping(address(p), bytes)) {
    return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;  // unmap first
  }
  munmap(p, bytes);
  state().reservations.erase(it);
  return ZE_RESULT_SUCCESS;
}

ze_result_t vm_map(void* p, std::size_t bytes, ze_physical_mem_handle_t handle, std::size_t offset,
                   ze_memory_access_attribute_t access) {
  auto* h = reinterpret_cast<physical*>(handle);
  const int prot = protection(access);
  if (prot < 0) {
    return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  }
  if (bytes == 0 || bytes % small_page != 0 || address(p) % small_page != 0 ||
      offset % small_page != 0) {
    return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  }
  std::lock_guard lock(state().mu);
  if (state().physicals.count(h) == 0 || offset > h->bytes || bytes > h->bytes - offset) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (reservation_of(address(p), bytes) == state().reservations.end() ||
      overlaps_mapping(address(p), bytes)) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (mmap(p, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  state().mappings.emplace(address(p), mapping{bytes, h});
  ++h->mappings;
  return ZE_RESULT_SUCCESS;
}

ze_result_t vm_unmap(void* p, std::size_t bytes) {
  std::lock_guard lock(state().mu);
  // [p, p + bytes) must be exactly a run of whole mappings.
  auto& m = state().mappings;
  auto first = m.find(address(p));
  if (first == m.end()) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  auto last = first;
  std::uintptr_t end = address(p);
  while (last != m.end() && last->first == end && end < address(p) + bytes) {
    end += last->second.bytes;
    ++last;
  }
  if (end != address(p) + bytes) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
      MAP_FAILED) {
    return ZE_RESULT_ERROR_UNKNOWN;
  }
  for (auto it = first; it != last; ++it) {
    --it->second.backing->mappings;
  }
  m.erase(first, last);
  return ZE_RESULT_SUCCESS;
}

ze_result_t vm_set_access(void* p, std::size_t bytes, ze_memory_access_attribute_t access) {
  const int prot = protection(access);
  if (prot < 0) {
    return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  }
  std::lock_guard lock(state().mu);
  if (reservation_of(address(p), bytes) == state().reservations.end()) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  return mprotect(p, bytes, prot) == 0 ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

std::size_t bytes_held() noexcept { return state().held.load(); }

std::size_t reported_memory() noexcept {
  const std::size_t capacity = config().capacity.load();
  return capacity != 0 ? capacity : std::size_t{16} << 30;
}

}  // namespace streampool::ze_test_driver
