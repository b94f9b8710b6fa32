#include "core/support/page_map.hpp"

#include "streampool/error.hpp"

namespace streampool::detail {

page_map::~page_map() {
  for (auto& m : top_) {
    mid_node* mid = m.load(std::memory_order_relaxed);
    if (mid == nullptr) continue;
    for (auto& l : mid->at) delete l.load(std::memory_order_relaxed);
    delete mid;
  }
}

void page_map::set(std::uintptr_t page, segment* s) {
  STREAMPOOL_EXPECTS(page >> (top_bits + mid_bits + leaf_bits) == 0,
                     format("address %#llx is beyond the 48-bit range the page map covers",
                            static_cast<unsigned long long>(page << page_shift)));
  auto& mslot = top_[page >> (mid_bits + leaf_bits)];
  mid_node* m = mslot.load(std::memory_order_acquire);
  if (m == nullptr) {
    m = new mid_node;
    mslot.store(m, std::memory_order_release);
  }
  auto& lslot = m->at[(page >> leaf_bits) & (mid_size - 1)];
  leaf_node* l = lslot.load(std::memory_order_acquire);
  if (l == nullptr) {
    l = new leaf_node;
    lslot.store(l, std::memory_order_release);
  }
  l->at[page & (leaf_size - 1)].store(s, std::memory_order_release);
}

void page_map::insert(const void* base, std::size_t bytes, segment* s) {
  const auto first = reinterpret_cast<std::uintptr_t>(base) >> page_shift;
  const auto last = (reinterpret_cast<std::uintptr_t>(base) + bytes - 1) >> page_shift;
  for (auto page = first; page <= last; ++page) set(page, s);
}

void page_map::erase(const void* base, std::size_t bytes) {
  const auto first = reinterpret_cast<std::uintptr_t>(base) >> page_shift;
  const auto last = (reinterpret_cast<std::uintptr_t>(base) + bytes - 1) >> page_shift;
  for (auto page = first; page <= last; ++page) set(page, nullptr);
}

}  // namespace streampool::detail
