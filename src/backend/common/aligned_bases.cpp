// streampool: the real bases of memory over-allocated for alignment (aligned_bases.hpp).
#include "backend/common/aligned_bases.hpp"

namespace streampool::detail {

void aligned_bases::remember(const void* aligned, void* base) {
  std::lock_guard<std::mutex> lk(mu_);
  bases_.emplace(aligned, base);
  used_.store(true, std::memory_order_release);
}

void* aligned_bases::take(const void* aligned) noexcept {
  // A pointer remembered here reached its caller after remember() returned, so the caller's own
  // ordering makes the store above visible to this load.
  if (!used_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = bases_.find(aligned);
  if (it == bases_.end()) return nullptr;
  void* base = it->second;
  bases_.erase(it);
  return base;
}

}  // namespace streampool::detail
