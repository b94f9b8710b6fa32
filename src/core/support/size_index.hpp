// streampool: the mapped free blocks of a block arena, ordered by size, then start address.
//
// Best fit is lower_bound(n): the smallest free block of at least n bytes, the lowest address
// among equal sizes; iterating on from it visits the next best fits in order.
//
// Why not a std::set: each search, insert and erase of a balanced tree walks log2(k) levels whose
// branch goes either way at random, so about half of them are mispredicted, and a large
// allocation and its free make five or six of these walks (the block taken out, its remainder put
// back; the freed block and its merged neighbours: docs/performance.md, "The live table and the
// size index"). Here:
//   bucket   sizes map to 8 buckets per power of two (size_bucket(): exact below 8 bytes, then the
//            leading bit and the three bits under it), so a bucket's sizes differ by at most
//            1/8 of its lower bound, and buckets ascend with size;
//   used_    a bitmap of the buckets that hold a block: the next one is a count of trailing zeros;
//   entries  each bucket is a vector sorted by (size, start); an insert or erase is a binary
//            search in it and a move of its tail.
// Cost: O(log k) compares plus a move of the bucket's tail, where k is the bucket's length; the
// mixed pattern's buckets hold a few blocks each. A program with many free blocks of sizes in one
// eighth of an octave (say 1,000 free blocks of one size kept apart by live ones) moves up to k
// entries of 24 bytes per insert or erase: still a memmove of 24 KB, not a walk of k nodes, but a
// forced coalesce() or a join() over many such blocks does one per merge, under the shard lock.
//
// Invariants: used_ bit i is set <=> buckets_[i] is non-empty; every entry of buckets_[i] has
// size_bucket(size) == i; each bucket is strictly ascending by (size, start); count_ is the total.
// The entry's key is a copy of its block's size and start (see mapped_entry): a block leaves the
// index before either changes, and erase() finds it by that key.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "streampool/error.hpp"

namespace streampool::detail {

struct arena_block;

/// An entry of the index: a free block with its key (size, then start) copied beside it, so that
/// a search reads the entries of one bucket, never the blocks they point to. It reads as the
/// block (conversion, ->) and is made from one (block_arena.hpp defines that constructor, where
/// arena_block is complete).
struct mapped_entry {
  std::size_t size = 0;
  std::uintptr_t start = 0;
  arena_block* block = nullptr;

  mapped_entry(arena_block* b) noexcept;  // NOLINT(google-explicit-constructor): reads as a block
  operator arena_block*() const noexcept { return block; }  // NOLINT(google-explicit-constructor)
  arena_block* operator->() const noexcept { return block; }

  friend bool operator<(const mapped_entry& a, const mapped_entry& b) noexcept {
    return a.size != b.size ? a.size < b.size : a.start < b.start;
  }
};

/// The bucket of a size: monotonic, 8 per power of two (exact below 8).
constexpr std::uint32_t size_bucket(std::size_t size) noexcept {
  if (size < 8) return static_cast<std::uint32_t>(size);
  const auto top = static_cast<std::uint32_t>(std::bit_width(size) - 1);  // >= 3
  return (top - 2) * 8 + static_cast<std::uint32_t>((size >> (top - 3)) & 7);
}
static_assert(size_bucket(7) == 7 && size_bucket(8) == 8 && size_bucket(15) == 15 &&
              size_bucket(16) == 16 && size_bucket(17) == 16 && size_bucket(18) == 17 &&
              size_bucket(31) == 23 && size_bucket(32) == 24 &&
              size_bucket(~std::size_t{0}) == 495);

class size_index {
 public:
  static constexpr std::uint32_t bucket_count = size_bucket(~std::size_t{0}) + 1;

  /// A forward iterator over the entries in (size, start) order. Any insert or erase invalidates
  /// every iterator.
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = mapped_entry;
    using difference_type = std::ptrdiff_t;
    using pointer = const mapped_entry*;
    using reference = const mapped_entry&;

    iterator() = default;
    reference operator*() const noexcept { return index_->buckets_[bucket_][pos_]; }
    pointer operator->() const noexcept { return &**this; }
    iterator& operator++() noexcept {
      if (++pos_ == index_->buckets_[bucket_].size()) {
        bucket_ = index_->next_used(bucket_ + 1);
        pos_ = 0;
      }
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator old = *this;
      ++*this;
      return old;
    }
    friend bool operator==(const iterator& a, const iterator& b) noexcept {
      return a.bucket_ == b.bucket_ && a.pos_ == b.pos_;
    }

   private:
    friend class size_index;
    iterator(const size_index* index, std::uint32_t bucket, std::uint32_t pos) noexcept
        : index_(index), bucket_(bucket), pos_(pos) {}
    const size_index* index_ = nullptr;
    std::uint32_t bucket_ = none;  // none: the end
    std::uint32_t pos_ = 0;
  };
  using const_iterator = iterator;

  [[nodiscard]] iterator begin() const noexcept { return {this, next_used(0), 0}; }
  [[nodiscard]] iterator end() const noexcept { return {this, none, 0}; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }

  /// The first entry of at least `size` bytes: the best fit.
  [[nodiscard]] iterator lower_bound(std::size_t size) const noexcept {
    const std::uint32_t b = size_bucket(size);
    if (b < buckets_.size()) {
      const std::vector<mapped_entry>& v = buckets_[b];
      const std::size_t at = first_not(v, [size](const mapped_entry& e) { return e.size < size; });
      if (at != v.size()) return {this, b, static_cast<std::uint32_t>(at)};
    }
    return {this, next_used(b + 1), 0};
  }

  void insert(const mapped_entry& e) {
    const std::uint32_t b = size_bucket(e.size);
    if (b >= buckets_.size()) buckets_.resize(b + 1);
    std::vector<mapped_entry>& v = buckets_[b];
    const auto at = v.begin() + static_cast<std::ptrdiff_t>(first_not_before(v, e));
    STREAMPOOL_ASSERT(at == v.end() || e < *at);  // no entry twice
    v.insert(at, e);
    used_[b / 64] |= std::uint64_t{1} << (b % 64);
    ++count_;
  }

  /// Removes the entry with e's key, which must be there.
  void erase(const mapped_entry& e) noexcept {
    const mapped_entry* at = find(e);
    STREAMPOOL_ASSERT(at != nullptr);
    const std::uint32_t b = size_bucket(e.size);
    std::vector<mapped_entry>& v = buckets_[b];
    v.erase(v.begin() + (at - v.data()));
    if (v.empty()) used_[b / 64] &= ~(std::uint64_t{1} << (b % 64));
    --count_;
  }

  /// True when the entry with e's key is there and names e's block (for find_broken()).
  [[nodiscard]] bool contains(const mapped_entry& e) const noexcept { return find(e) != nullptr; }

 private:
  static constexpr std::uint32_t none = ~std::uint32_t{0};
  static constexpr std::size_t words = (bucket_count + 63) / 64;

  /// The entry with e's key and block; nullptr if there is none.
  [[nodiscard]] const mapped_entry* find(const mapped_entry& e) const noexcept {
    const std::uint32_t b = size_bucket(e.size);
    if (b >= buckets_.size()) return nullptr;
    const std::vector<mapped_entry>& v = buckets_[b];
    const auto at = v.begin() + static_cast<std::ptrdiff_t>(first_not_before(v, e));
    return at != v.end() && !(e < *at) && at->block == e.block ? &*at : nullptr;
  }

  /// The index of the first entry of `v` for which `before` is false (`before` is true for a
  /// prefix of v): a binary search whose halving is a conditional move, not a branch. A bucket's
  /// few entries come in no order a predictor can learn, so std::lower_bound's branch would miss
  /// about one step in two, and a large allocation and its free search five or six buckets.
  template <class Before>
  [[nodiscard]] static std::size_t first_not(const std::vector<mapped_entry>& v, Before before) {
    std::size_t n = v.size();
    if (n == 0) return 0;
    const mapped_entry* base = v.data();
    while (n > 1) {  // the answer is in [base, base + n]
      const std::size_t half = n / 2;
      base = before(base[half]) ? base + half : base;
      n -= half;
    }
    return static_cast<std::size_t>(base - v.data()) + (before(*base) ? 1 : 0);
  }
  /// first_not for the entries ordered before e (by size, then start).
  [[nodiscard]] static std::size_t first_not_before(const std::vector<mapped_entry>& v,
                                                    const mapped_entry& e) {
    return first_not(v, [&e](const mapped_entry& x) {
      // One comparison of (size, start) as a 128-bit pair: no branch on size equality.
      const auto key = [](const mapped_entry& m) {
        return (static_cast<unsigned __int128>(m.size) << 64) | m.start;
      };
      return key(x) < key(e);
    });
  }

  /// The first non-empty bucket at or after i; none if there is none.
  [[nodiscard]] std::uint32_t next_used(std::uint32_t i) const noexcept {
    for (std::size_t w = i / 64; w < words; ++w) {
      std::uint64_t bits = used_[w];
      if (w == i / 64) bits &= ~std::uint64_t{0} << (i % 64);
      if (bits != 0)
        return static_cast<std::uint32_t>(w * 64 +
                                          static_cast<std::size_t>(std::countr_zero(bits)));
    }
    return none;
  }

  // Grown on demand to the largest bucket used: an arena of 2 MiB..1 GiB blocks holds ~170.
  std::vector<std::vector<mapped_entry>> buckets_;
  std::array<std::uint64_t, words> used_{};
  std::size_t count_ = 0;
};

}  // namespace streampool::detail
