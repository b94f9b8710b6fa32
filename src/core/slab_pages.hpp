// streampool: slab pages, upstream allocations shared by several small slabs.
//
// Glossary
//   slab page   one upstream allocation of the backend's granularity (2 MiB on CUDA), cut into
//               64 KiB slots (the page map's pages). A slab smaller than a page takes a run of
//               free slots instead of an upstream allocation of its own, so that a size class
//               used by a few blocks holds 64 KiB, not 2 MiB. (ResNet-50 training: 23 small sizes,
//               9 MiB live at the peak, held 34 MiB in whole-allocation slabs.)
//   slot        64 KiB of a page; a bit in the page's mask, set while a slab covers it.
//
// Bookkeeping only: the pool creates and releases the pages (the upstream calls) and guards this
// structure with its segment lock. A page goes back when its last slab does.
//
// Invariants (find_broken() checks them against the pool's slabs; pool_state::validate() calls it):
//   - slabs taken from one page never overlap (disjoint bit runs), and each lies in one listed
//     page on slots marked used: for every slab s in a page pg,
//         run(s) = run_mask((s.base - pg.base) / slot_bytes, s.bytes / slot_bytes) ⊆ pg.used;
//   - pg.used == OR of run(s) over the slabs in pg, once the pool has registered every slab it
//     took slots for (a slab is registered just after its slots are taken);
//   - a page is listed exactly while some slot of it is used: pg.used != 0 (take() follows add()
//     under the same lock);
//   - give() receives exactly what take() returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace streampool::detail {

class slab_pages {
 public:
  static constexpr std::size_t slot_bytes = std::size_t{64} << 10;
  static constexpr std::size_t max_slots = 64;  // one std::uint64_t mask per page

  /// page_bytes: the upstream granularity. Pages are off (shares() is always false) when it is not
  /// a multiple of a slot or holds more than max_slots of them.
  explicit slab_pages(std::size_t page_bytes) noexcept;

  /// Whether a slab of `bytes` (a multiple of slot_bytes) lives in a shared page.
  [[nodiscard]] bool shares(std::size_t bytes) const noexcept {
    return slots_per_page_ > 1 && bytes % slot_bytes == 0 && bytes < page_bytes_;
  }
  [[nodiscard]] std::size_t page_bytes() const noexcept { return page_bytes_; }

  /// A run of free slots for `bytes` in a listed page (first fit, newest page first), or nullptr.
  [[nodiscard]] void* take(std::size_t bytes);
  /// Lists a new, empty page (the caller just created it upstream).
  void add(void* base);
  /// Returns a slab's slots. When its page is left empty, the page is unlisted and its base
  /// returned (the caller releases it upstream); otherwise nullptr.
  [[nodiscard]] void* give(const void* p, std::size_t bytes);

  /// Every listed page's base (the pool's destructor releases them).
  [[nodiscard]] std::vector<void*> bases() const;
  [[nodiscard]] std::size_t pages() const noexcept { return pages_.size(); }

  /// Checks the invariants above for `slabs` (base and bytes of every slab living in a page);
  /// `exact`: every slab that took slots is among them. Returns the first broken invariant,
  /// named, with the numbers; empty when all hold. Linear in slabs and pages.
  [[nodiscard]] std::string find_broken(
      const std::vector<std::pair<std::uintptr_t, std::size_t>>& slabs, bool exact) const;

 private:
  struct page {
    std::uintptr_t base;
    std::uint64_t used;  // bit i: slot i is covered by a slab
  };

  std::size_t page_bytes_;
  std::size_t slots_per_page_;
  std::vector<page> pages_;
};

}  // namespace streampool::detail
