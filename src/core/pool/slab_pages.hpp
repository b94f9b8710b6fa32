// streampool: slab pages, upstream allocations shared by several small slabs, and the size of a
// new slab.
//
// Glossary
//   slab page   one upstream allocation of the backend's granularity (2 MiB on CUDA), cut into
//               64 KiB slots (the page map's pages). A slab smaller than a page takes a run of
//               free slots instead of an upstream allocation of its own, so that a size class
//               used by a few blocks holds 64 KiB, not 2 MiB (docs/performance.md, "Slabs and
//               state lines").
//   slot        64 KiB of a page; a bit in the page's mask, set while a slab covers it.
//   full slab   the size a busy class's slabs settle at (full_slab_bytes()): four chunks and at
//               least a slot where that fits a page, else eight chunks and at least 2 MiB.
//   ramp        a class's first slab is the smallest that holds a chunk (a slot, for chunks up
//               to 64 KiB); each slab made of the class doubles the next, up to the full slab
//               (next_slab_bytes()). Where the granularity is one slot (host, OpenCL, Level
//               Zero), there are no pages, and the ramp alone keeps a class used by a few blocks
//               from holding a full slab (docs/design.md).
//
// Bookkeeping only: the pool creates and releases the pages (the upstream calls) and guards the
// pages with its segment lock. A page goes back when its last slab does. The ramp's counts are
// atomics, read and written with no lock.
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
// And of the sizes (tests/unit/slab_pages_test.cpp): slab_bytes(c, n) holds at least one chunk,
// is a multiple of a slot, grows with n up to full_slab_bytes(c) and reaches it; it shares() a
// page exactly when it is smaller than one and pages are on.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/support/size_classes.hpp"

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

  // ---- slab sizes ----

  /// The slab a busy class of `chunk`-byte chunks settles at. In a page: four chunks, at least a
  /// slot. Else an upstream allocation of its own, of eight chunks and at least 2 MiB, rounded to
  /// the granularity: the upstream call is amortised over many chunks, and a class above 256 KiB
  /// would strand megabytes in a half-used slab (pool_options::small_max).
  [[nodiscard]] std::size_t full_slab_bytes(std::size_t chunk) const noexcept;
  /// The smallest slab that holds a chunk: one chunk rounded to a slot, or to the granularity
  /// where that does not share a page. A class's first slab, and what a memory limit may leave.
  [[nodiscard]] std::size_t smallest_slab_bytes(std::size_t chunk) const noexcept;
  /// The size of a class's slab after `made` slabs of it: one chunk rounded to a slot, doubled
  /// `made` times, up to full_slab_bytes(chunk); rounded to the granularity where it does not
  /// share a page. made == 0 gives smallest_slab_bytes(chunk).
  [[nodiscard]] std::size_t slab_bytes(std::size_t chunk, std::size_t made) const noexcept;
  /// The size of the next slab of class `cls` (chunks of `chunk` bytes): slab_bytes after the
  /// slabs counted for it. A few blocks of a class hold one small slab; a busy class reaches the
  /// full slab after a few (its sixth slab, from 64 KiB to 2 MiB), so that its steady state is
  /// the full slab's: as few upstream calls, and slabs of as many chunks.
  [[nodiscard]] std::size_t next_slab_bytes(std::size_t cls, std::size_t chunk) const noexcept {
    return slab_bytes(chunk, made_[cls].load(std::memory_order_relaxed));
  }
  /// Counts a slab made of class `cls`: its next one is twice as large, up to the full slab. Two
  /// threads that count at once may count once (a load and a store, no read-modify-write): that
  /// only delays the ramp by a slab, and the count is off every allocation's path anyway.
  void count_slab(std::size_t cls) noexcept {
    const std::uint8_t n = made_[cls].load(std::memory_order_relaxed);
    if (n < max_doublings)
      made_[cls].store(static_cast<std::uint8_t>(n + 1), std::memory_order_relaxed);
  }

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

  /// More doublings than any ramp needs (a slot to the largest full slab, 8 x 16 MiB, is 11).
  static constexpr std::uint8_t max_doublings = 32;

  std::size_t page_bytes_;
  std::size_t slots_per_page_;
  std::vector<page> pages_;
  std::array<std::atomic<std::uint8_t>, max_classes> made_{};  // slabs made per class, capped
};

}  // namespace streampool::detail
