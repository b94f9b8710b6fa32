// streampool: memory over-allocated for alignment, and the real base of each such allocation.
//
// Some runtimes cannot be asked for the alignment the pool needs (clSVMAlloc beyond 128 bytes,
// cuMemAlloc beyond 256, zeVirtualMemReserve beyond the driver's page). A backend then allocates
// one alignment unit more, hands out the aligned address inside, and remembers the base the
// runtime returned, which is what the runtime must be given back.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace streampool::detail {

/// `p` rounded up to a multiple of `alignment` (not 0).
[[nodiscard]] constexpr std::uintptr_t align_up(std::uintptr_t p, std::size_t alignment) noexcept {
  return (p + alignment - 1) / alignment * alignment;
}

/// The aligned address handed out -> the base the runtime returned. Thread-safe.
class aligned_bases {
 public:
  /// Remembers that the allocation at `base` was handed out as `aligned`.
  /// @throws std::bad_alloc (nothing is remembered then).
  void remember(const void* aligned, void* base);

  /// The base of what was handed out as `aligned`, forgotten now; nullptr when `aligned` was never
  /// remembered (the runtime returned it aligned). Takes no lock while nothing was ever
  /// remembered, so a backend whose runtime usually aligns pays nothing for the rare case.
  [[nodiscard]] void* take(const void* aligned) noexcept;

  /// Calls `release(base)` for every base still remembered and forgets them all: the owner's
  /// teardown gives back what its callers never released.
  template <class Release>
  void release_all(Release release) noexcept {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [aligned, base] : bases_) release(base);
    bases_.clear();
  }

 private:
  std::atomic<bool> used_{false};  // set (release) once anything was remembered
  std::mutex mu_;                  // guards bases_
  std::unordered_map<const void*, void*> bases_;
};

}  // namespace streampool::detail
