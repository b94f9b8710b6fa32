// streampool: the live blocks of a block arena by start address, for the free that must find its
// block.
//
// Why not a std::unordered_map: its lookup reads the bucket array, then a node elsewhere in the
// heap, and its insert needs a node (recycled, but still a second line written). Here the table
// is one array of (start, block) slots, open addressing with linear probing: a lookup is a
// multiply, a shift and, at a load of at most one quarter, one or two slots on one cache line. An
// erase shifts the entries that follow back (no tombstones), so a probe still ends at the first
// empty slot. The load stays at most a quarter: each probe's and each shift's loop ends at an
// empty slot after a varying number of entries, a branch the predictor misses the more often the
// longer the runs (docs/performance.md, "The live table and the size index"); a slot is 16
// bytes, so a pool with 10,000 live large blocks spends 640 KiB on it.
//
// Invariants: slots_.size() is 0 or a power of two >= 16 with count_ <= slots_.size() / 4; a slot
// is empty iff its block is null; every entry lies between its home slot and the first empty slot
// after it (cyclically), which is what find() relies on and erase() restores.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "streampool/error.hpp"

namespace streampool::detail {

struct arena_block;

class live_index {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  /// The block that starts at `start`, or nullptr.
  [[nodiscard]] arena_block* find(std::uintptr_t start) const noexcept {
    if (count_ == 0) return nullptr;
    for (std::size_t i = home(start);; i = (i + 1) & mask()) {
      const slot& s = slots_[i];
      if (s.block == nullptr) return nullptr;
      if (s.start == start) return s.block;
    }
  }

  /// Adds `b` under `start`, which must not be there.
  void insert(std::uintptr_t start, arena_block* b) {
    STREAMPOOL_ASSERT(b != nullptr);
    if ((count_ + 1) * max_load > slots_.size()) grow();
    place(start, b);
    ++count_;
  }

  /// Removes the entry of `start`, which must be there (debug builds check; else a no-op).
  void erase(std::uintptr_t start) noexcept {
    if (count_ == 0) return;
    std::size_t hole = home(start);
    while (slots_[hole].block != nullptr && slots_[hole].start != start) hole = (hole + 1) & mask();
    STREAMPOOL_ASSERT(slots_[hole].block != nullptr);
    if (slots_[hole].block == nullptr) return;
    // Backward shift: an entry after the hole moves into it when the hole lies on its probe path
    // (between its home and its slot), until an empty slot ends the run.
    for (std::size_t j = (hole + 1) & mask(); slots_[j].block != nullptr; j = (j + 1) & mask()) {
      const std::size_t k = home(slots_[j].start);
      if (((j - k) & mask()) >= ((j - hole) & mask())) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = slot{};
    --count_;
  }

 private:
  static constexpr std::size_t max_load = 4;  // slots per entry, at least

  struct slot {
    std::uintptr_t start = 0;
    arena_block* block = nullptr;
  };

  [[nodiscard]] std::size_t mask() const noexcept { return slots_.size() - 1; }
  /// Fibonacci hashing: block starts are multiples of 256, so the low bits say nothing; the
  /// product's top bits mix all of them. Never called on an empty table (shift_ 64 would be an
  /// undefined shift): find() and erase() return first when count_ is 0, insert() grows first.
  [[nodiscard]] std::size_t home(std::uintptr_t start) const noexcept {
    return static_cast<std::size_t>((start * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  /// Puts (start, b) in the first empty slot from start's home on. The probe passes every entry
  /// that could hold start, so it also checks that none does (no second probe on the hot path).
  void place(std::uintptr_t start, arena_block* b) noexcept {
    std::size_t i = home(start);
    while (slots_[i].block != nullptr) {
      STREAMPOOL_ASSERT(slots_[i].start != start);
      i = (i + 1) & mask();
    }
    slots_[i] = slot{start, b};
  }

  /// Doubles the table. The new one is allocated first: a bad_alloc leaves this one as it was.
  void grow() {
    std::vector<slot> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    bigger.swap(slots_);
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(slots_.size()));
    for (const slot& s : bigger)
      if (s.block != nullptr) place(s.start, s.block);
  }

  std::vector<slot> slots_;
  unsigned shift_ = 64;
  std::size_t count_ = 0;
};

}  // namespace streampool::detail
