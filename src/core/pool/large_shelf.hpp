// streampool: the shelf, a shard's cache of large blocks just freed (docs/large-blocks.md,
// "The shelf").
//
// A large block of at most max_block bytes freed on a stream does not go back into the arena at
// once: it stays live there, marked shelved (arena_block::shelved), and waits on its shard's
// shelf, in the bin of its size class. The next request of that class on the shard takes the
// newest one back: no search, no split, no merge, none of the arena's index work, which is most
// of a large allocation and free (docs/large-blocks.md, "What a call costs"). Requests that may
// be shelved are rounded up to their class (eight per power of two, so at most an eighth more),
// so that every block of a bin fits every request of its class exactly.
//
// Bounded: past `limit` bytes, the oldest blocks (by push order, over all bins) go back into the
// arena. The pool empties the shelf into the arena before anything that needs to see all the
// free memory: a growth over the shards within its reach, trim, the give-backs, the stream that
// uses the shard going away, and the pool's end.
//
// Invariants (under the shard's lock; pool_state::validate_large checks them):
//   - every entry's block is live in the shard's arena, with shelved set and size == its class's
//     size; no block is listed twice; every live block of the arena with shelved set is listed;
//   - bytes() == the sum of the entries' sizes, count() == their number;
//   - the age list (arena_block::shelf_older/shelf_newer, from oldest_ to newest_) links
//     every entry's block once, in push order over all bins; each bin holds its blocks in the
//     list's order (oldest first).
// The shelf takes no lock and does no I/O: the pool calls it under the shard's lock.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/pool/block_arena.hpp"
#include "core/support/locked_count.hpp"
#include "core/support/size_classes.hpp"
#include "core/support/size_index.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {

class large_shelf {
 public:
  /// Blocks above this are never shelved (nor rounded): few, and each worth the arena's
  /// placement.
  static constexpr std::size_t max_block = std::size_t{16} << 20;

  /// `limit`: the most bytes the shelf holds after a push (pool_options::large_cache_bytes); 0
  /// turns the shelf off.
  explicit large_shelf(std::size_t limit) : limit_(limit) {}
  large_shelf(const large_shelf&) = delete;
  large_shelf& operator=(const large_shelf&) = delete;

  [[nodiscard]] bool on() const noexcept { return limit_ != 0; }

  /// The size a request of `n` bytes (1 <= n <= max_block) is placed with: its class's size,
  /// min_block apart up to 2 KiB, eight per power of two above.
  [[nodiscard]] static constexpr std::size_t class_size_of(std::size_t n) noexcept {
    if (n <= 2048) return (n + min_block - 1) / min_block * min_block;
    const std::size_t step = std::size_t{1} << (std::bit_width(n - 1) - 4);
    return (n + step - 1) / step * step;
  }
  /// The class of a block whose size is a class size: its size index bucket (size_index.hpp),
  /// counted from min_block's. A class size has at most four significant bits, so it is the
  /// lower bound of its bucket and no two class sizes share one. (Buckets between 256 and 2048
  /// that no class size starts stay empty bins.)
  [[nodiscard]] static constexpr std::size_t class_of(std::size_t size) noexcept {
    return size_bucket(size) - size_bucket(min_block);
  }
  static constexpr std::size_t classes = size_bucket(max_block) - size_bucket(min_block) + 1;

  /// Whether a block of `size` bytes may be shelved: a class size within max_block.
  [[nodiscard]] static constexpr bool fits(std::size_t size) noexcept {
    return size != 0 && size <= max_block && class_size_of(size) == size;
  }

  /// How many classes above its own a request may take a block from (at most (9/8)^3, 42%, more
  /// than its class while it is live), and how many blocks such a bin must hold: exact bins alone
  /// miss many requests a slightly larger block serves (docs/performance.md, "The shelf"). A bin
  /// with fewer blocks is not taken from: a stream that repeats its work takes back per step what
  /// it freed per class, and borrowing a larger class's last blocks would make the next request
  /// of that class miss, grow and never settle (large_blocks_test's settling tests).
  static constexpr std::size_t reach_up = 3;
  static constexpr std::size_t spare_min = 3;

  /// For a request of class `cls`: the newest block of that class, else of the nearest of the
  /// reach_up classes above it that holds spare_min blocks or more, if `ready(block)` accepts it
  /// (its tokens need no wait for the caller); taken off the shelf with shelved cleared, or
  /// nullptr. Only that bin's newest is looked at: the shelf is a cache, a miss costs a placement
  /// in the arena.
  template <class Ready>
  arena_block* pop(std::size_t cls, Ready&& ready) noexcept {
    const std::size_t last = std::min(cls + reach_up, classes - 1);
    std::size_t c = cls;
    while (bins_[c].size() < (c == cls ? 1 : spare_min)) {
      if (c == last) return nullptr;
      ++c;
    }
    auto& bin = bins_[c];
    arena_block* b = bin.back();
    if (!ready(*b)) return nullptr;
    bin.pop_back();
    unlink(b);
    b->shelved = false;
    bytes_ -= b->size;
    --count_;
    ++hits_;
    return b;
  }

  /// Shelves the live block `b` (fits(b->size), its free tokens already in b->tokens). Then,
  /// while the shelf holds more than its limit, its oldest block goes to `unshelve(block)` (which
  /// puts it back into the arena), shelved cleared first.
  template <class Unshelve>
  void push(arena_block* b, Unshelve&& unshelve) {
    const std::size_t cls = class_of(b->size);
    bins_[cls].push_back(b);
    b->shelf_older = newest_;
    b->shelf_newer = nullptr;
    (newest_ != nullptr ? newest_->shelf_newer : oldest_) = b;
    newest_ = b;
    b->shelved = true;
    bytes_ += b->size;
    ++count_;
    while (bytes_ > limit_) unshelve(take_oldest());
  }

  /// Every block leaves the shelf, oldest first, through `unshelve(block)` (shelved cleared).
  template <class Unshelve>
  void empty(Unshelve&& unshelve) {
    while (count_ != 0) unshelve(take_oldest());
  }

  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// Requests served from the shelf since the pool was made (statistics).
  [[nodiscard]] std::uint64_t hits() const noexcept { return hits_; }

  /// The first broken invariant above that the shelf can see by itself, or empty.
  [[nodiscard]] std::string find_broken() const {
    // The age list: each class's blocks in their bin's order, and nothing else.
    std::array<std::size_t, classes> matched{};
    std::size_t listed = 0;
    for (const arena_block* b = oldest_; b != nullptr; b = b->shelf_newer) {
      const std::size_t cls = fits(b->size) ? class_of(b->size) : 0;
      const auto& bin = bins_[cls];
      const arena_block* newer = b->shelf_newer;
      if (listed == count_ || matched[cls] == bin.size() || bin[matched[cls]] != b ||
          (newer != nullptr ? newer->shelf_older : newest_) != b) {
        return format(
            "shelf: the age list's block [%#zx, +%zu) (number %zu) is not the next of "
            "class %zu, or its links are broken",
            static_cast<std::size_t>(b->start), b->size, listed, cls);
      }
      ++matched[cls];
      ++listed;
    }
    if (listed != count_ || (oldest_ == nullptr) != (newest_ == nullptr))
      return format("shelf: the age list links %zu blocks of %zu", listed, count_);
    std::size_t bytes = 0, count = 0;
    for (std::size_t cls = 0; cls < classes; ++cls) {
      for (const arena_block* e : bins_[cls]) {
        const arena_block& b = *e;
        if (b.state != block_state::live || !b.shelved || !fits(b.size) ||
            class_of(b.size) != cls) {
          return format("shelf: block [%#zx, +%zu) in class %zu: state %d, shelved %d",
                        static_cast<std::size_t>(b.start), b.size, cls, static_cast<int>(b.state),
                        static_cast<int>(b.shelved));
        }
        bytes += b.size;
        ++count;
      }
    }
    if (bytes != bytes_ || count != count_)
      return format("shelf: counts %zu blocks and %zu bytes, its bins hold %zu and %zu", count_,
                    bytes_, count, bytes);
    return {};
  }

 private:
  /// The oldest entry over all bins, removed (count() > 0): the head of the age list, which is
  /// the front of its bin, found with no scan of the bins (docs/performance.md, "The shelf").
  arena_block* take_oldest() noexcept {
    arena_block* b = oldest_;
    auto& bin = bins_[class_of(b->size)];
    STREAMPOOL_ASSERT_INTERNAL(bin.front() == b);
    bin.erase(bin.begin());
    unlink(b);
    b->shelved = false;
    bytes_ -= b->size;
    --count_;
    return b;
  }
  /// Takes `b` (shelved) off the age list.
  void unlink(arena_block* b) noexcept {
    (b->shelf_older != nullptr ? b->shelf_older->shelf_newer : oldest_) = b->shelf_newer;
    (b->shelf_newer != nullptr ? b->shelf_newer->shelf_older : newest_) = b->shelf_older;
  }

  std::array<std::vector<arena_block*>, classes> bins_;
  arena_block* oldest_ = nullptr;  // the age list's ends (the invariants above)
  arena_block* newest_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t count_ = 0;
  locked_count<std::uint64_t> hits_;  // read without the lock (statistics)
  const std::size_t limit_;
};

static_assert(large_shelf::class_of(min_block) == 0 &&
              large_shelf::class_of(3 * min_block) == large_shelf::class_of(2 * min_block) + 4 &&
              large_shelf::class_of(large_shelf::class_size_of((std::size_t{3} << 20) + 1)) ==
                  large_shelf::class_of(std::size_t{3} << 20) + 1 &&
              large_shelf::classes == 129);

}  // namespace streampool::detail
