// streampool: the page map, pointer -> segment in three dependent loads, no lock on lookup.
//
// Glossary
//   page     64 KiB of address space, the smallest upstream granularity the pool accepts. Every
//            segment starts on a page boundary and covers whole pages, so one page belongs to at
//            most one segment.
//
// Lookups are lock-free (acquire loads); inserts and erases happen under the pool's segment lock.
// Interior nodes are never freed before the map itself, so a racing lookup never reads freed
// memory; a lookup racing with an erase sees either the segment or nullptr, and the caller's
// per-chunk state decides (a pointer being freed cannot be in a segment being released).
//
// Invariant (pool_state::validate() checks it at each segment's ends and each mapped granule):
// find(a) == s for every address a of a registered segment s that has memory behind it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace streampool::detail {

struct segment;

class page_map {
 public:
  static constexpr unsigned page_shift = 16;
  static constexpr std::size_t page_size = std::size_t{1} << page_shift;

  page_map() = default;
  page_map(const page_map&) = delete;
  page_map& operator=(const page_map&) = delete;
  ~page_map();

  void insert(const void* base, std::size_t bytes, segment* s);
  void erase(const void* base, std::size_t bytes);
  [[nodiscard]] segment* find(const void* p) const noexcept {
    const auto page = reinterpret_cast<std::uintptr_t>(p) >> page_shift;
    if (page >> (top_bits + mid_bits + leaf_bits) != 0) return nullptr;  // beyond 48 bits
    mid_node* m = top_[page >> (mid_bits + leaf_bits)].load(std::memory_order_acquire);
    if (m == nullptr) return nullptr;
    leaf_node* l = m->at[(page >> leaf_bits) & (mid_size - 1)].load(std::memory_order_acquire);
    if (l == nullptr) return nullptr;
    return l->at[page & (leaf_size - 1)].load(std::memory_order_acquire);
  }

 private:
  static constexpr unsigned top_bits = 11, mid_bits = 11, leaf_bits = 10;  // 16 + 32 = 48 bits
  static constexpr std::size_t mid_size = std::size_t{1} << mid_bits;
  static constexpr std::size_t leaf_size = std::size_t{1} << leaf_bits;
  struct leaf_node {
    std::array<std::atomic<segment*>, leaf_size> at{};
  };
  struct mid_node {
    std::array<std::atomic<leaf_node*>, mid_size> at{};
  };
  void set(std::uintptr_t page, segment* s);

  std::array<std::atomic<mid_node*>, std::size_t{1} << top_bits> top_{};
};

}  // namespace streampool::detail
