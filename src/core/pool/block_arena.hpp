// streampool: the block arena, the structure of the pool's large blocks (docs/large-blocks.md).
//
// Glossary
//   range     an address interval that the arena cuts into blocks: one whole upstream allocation
//             (the segment path) or one reserved virtual range (the virtual-memory path). Blocks
//             never cross ranges.
//   block     [start, start + size) of one range, in one of three states:
//               live      handed out;
//               mapped    free, with memory behind it; carries the tokens its reuse must wait for;
//               unmapped  free address space with no memory behind it (virtual ranges only).
//   chain     a maximal run of adjacent free blocks; mapped and unmapped blocks alternate in it.
//   window    where a request is placed inside a chain; the unmapped granules under it must be
//             mapped before it can be handed out.
//
// Invariants (check() and find_broken() verify them; the white-box tests call check() after every
// step, pool_state::validate() calls find_broken() on every shard). For each range r:
//   tiling      r.first->start == r.base; b->next->start == b->end(); b->next->prev == b;
//               last->end() == r.base + r.size; b->size > 0; b->range == &r.
//   indexes     mapped_ == {mapped blocks of at least index_min bytes} and unindexed_ counts the
//               smaller ones (fragments); unmapped_ == {unmapped blocks},
//               live_ == {b->start -> b : live blocks}.
//   unmapped    start % granularity == size % granularity == 0 and tokens empty (no memory,
//               nothing to wait for).
//   tokens      a mapped block holds at most one token per timeline (the latest point), the union
//               of both sides' tokens when blocks merge.
//   merged      two adjacent blocks a, b = a->next are never both free in the same state, except
//               mapped neighbours in an arena with `keep_streams_apart` when
//                   |timelines(a.tokens ∪ b.tokens)| >= 2  or  a.absorbed_complete
//                   or  b.absorbed_complete.
//               Why exactly that: may_merge() keeps mapped neighbours apart while their work not
//               known complete is on two or more timelines (a stream's freed block stays its own,
//               ready for it with no wait, instead of being fused with another stream's pending
//               block into one that every stream must wait for). Completion advances without the
//               arena hearing of it, so a pair kept apart may be mergeable by now: it merges at
//               the next coalesce() (or when the pool asks: coalesce(force), join()), and what
//               stays checkable is that its tokens named two timelines when it was looked at.
//               Tokens only accumulate on a free block, with one exception: absorb() drops the
//               absorbed block's tokens that are complete by then (merge_token), and the merged
//               block's far boundary is not looked at again. Such a block is marked
//               absorbed_complete, and its boundaries are exempt until it is handed out again.
//               Unmapped neighbours, and every pair without `keep_streams_apart`, always merge.
//               Blocks of different ranges (or arenas, i.e. shards) are never neighbours.
// The arena does no I/O and takes no lock: the pool calls it under its shard's lock, and the tests
// drive it on made-up addresses. It never decides policy (which block, when to map or give back):
// that is the pool's (pool_large.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/pool/segment.hpp"
#include "core/support/live_index.hpp"
#include "core/support/size_index.hpp"

namespace streampool::detail {

enum class block_state : std::uint8_t { live, mapped, unmapped };

struct arena_range;
struct arena_block;
struct test_access;

/// The order of the unmapped free set: by address. (The mapped one, by size, is size_index.)
struct block_by_start {
  bool operator()(const arena_block* a, const arena_block* b) const noexcept;
};
using unmapped_set = std::set<arena_block*, block_by_start>;

struct arena_block {
  std::uintptr_t start = 0;
  std::size_t size = 0;
  arena_range* range = nullptr;
  arena_block* prev = nullptr;  // address order within the range
  arena_block* next = nullptr;
  block_state state = block_state::unmapped;
  // Free: this block absorbed a neighbour and dropped some of its tokens (complete by then), so
  // the "merged" invariant above is exempt at its boundaries. Cleared when it is handed out.
  bool absorbed_complete = false;
  // Live here, but free to the program: on its shard's shelf (large_shelf.hpp), its free tokens
  // in `tokens`. The arena does not look at it; the pool does (a free of it is a double free).
  bool shelved = false;
  // Shelved: the blocks shelved just before and after it, on its shard's shelf (the shelf's age
  // list, large_shelf.hpp). Not looked at otherwise.
  arena_block* shelf_older = nullptr;
  arena_block* shelf_newer = nullptr;
  token_set tokens;  // mapped: what reuse waits for; live: recorded uses
  // Live, handed out from the shelf: the timeline of the free point it was shelved with (the
  // taking stream's), kept so that its next free there makes that point's token without a
  // reference count change (a locked increment at the free and a decrement at the take:
  // docs/performance.md, "The shelf"). Nothing waits on it; empty once the block is freed.
  std::shared_ptr<timeline> kept_line;
  // Live: the timeline id of the stream it was handed to, for snapshots (0: not known).
  std::uint64_t stream = 0;
  // Where the block is in the unmapped set, while it is there (erasing by key would search the
  // tree). The mapped set finds a block by its key (size_index.hpp).
  unmapped_set::iterator in_unmapped;

  [[nodiscard]] std::uintptr_t end() const noexcept { return start + size; }
  [[nodiscard]] bool is_free() const noexcept { return state != block_state::live; }
};

inline mapped_entry::mapped_entry(arena_block* b) noexcept
    : size(b->size), start(b->start), block(b) {}
inline bool block_by_start::operator()(const arena_block* a, const arena_block* b) const noexcept {
  return a->start < b->start;
}

struct arena_range {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  void* owner = nullptr;  // the pool's record of the range (its segment)
  arena_block* first = nullptr;
};

class block_arena {
 public:
  /// `granularity`: the unit in which memory is mapped and unmapped (a power of two).
  /// `keep_streams_apart`: do not merge mapped neighbours whose pending work is on different
  /// timelines (see the invariants); false merges every free neighbour.
  /// `index_min`: mapped free blocks smaller than this stay out of the size index (fragments).
  /// The pool passes the smallest request it places here, or the granularity if that is smaller:
  /// then no search of the index (best fit for a request, whole granules to remap) could return
  /// a fragment, and leaving them out changes no placement. It saves the index work: a best fit
  /// leaves a small remainder, and such fragments, each put in and taken out of the index as it
  /// is cut off and merged again, can be most of the free blocks (docs/performance.md, "The live
  /// table and the size index").
  explicit block_arena(std::size_t granularity, bool keep_streams_apart = false,
                       std::size_t index_min = 0);
  block_arena(const block_arena&) = delete;
  block_arena& operator=(const block_arena&) = delete;
  ~block_arena();

  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }

  /// Adds [base, base + size) as one free block in `initial` state (mapped or unmapped).
  arena_range* add_range(std::uintptr_t base, std::size_t size, block_state initial, void* owner);
  /// The range's only block when the whole range is one free block, else nullptr.
  [[nodiscard]] static arena_block* sole_free_block(const arena_range& r) noexcept;
  /// Forgets a range that is one free block (sole_free_block() != nullptr).
  void remove_range(arena_range* r);
  [[nodiscard]] const std::vector<std::unique_ptr<arena_range>>& ranges() const noexcept {
    return ranges_;
  }

  /// Hands out [at, at + n) of the mapped free block `b`. What is left of `b` before and after
  /// stays free with b's tokens. Returns the live block (tokens cleared: the caller took them),
  /// marked as handed to the stream of timeline id `stream` (0: not known).
  arena_block* take(arena_block* b, std::uintptr_t at, std::size_t n, std::uint64_t stream = 0);
  /// Frees the live block `b` with `tokens`; merges it with free mapped neighbours (token union).
  /// Returns the merged free block.
  arena_block* release(arena_block* b, token_set tokens);
  /// Turns [from, to) of the free block `b` into `state` (mapped <-> unmapped) and merges it with
  /// neighbours in that state. Unmapping needs granule-aligned bounds and drops the tokens (the
  /// caller knows they are complete); newly mapped memory has none. Returns the block that now
  /// holds [from, to).
  arena_block* change_state(arena_block* b, std::uintptr_t from, std::uintptr_t to,
                            block_state state);

  /// Merges adjacent mapped free blocks that may merge now (their pending work has completed
  /// meanwhile), or, with `force`, every adjacent pair (token union: the merged block waits for
  /// both). Returns the number of merges.
  std::size_t coalesce(bool force);
  /// Merges the consecutive mapped free blocks from `b` up to address `to` into one (token
  /// union); they must all be mapped and free. Returns the merged block.
  arena_block* join(arena_block* b, std::uintptr_t to);

  [[nodiscard]] arena_block* find_live(std::uintptr_t p) const noexcept;
  /// The block of `r` that holds address a (a walk through the range: for rare paths).
  [[nodiscard]] static arena_block* block_at(const arena_range& r, std::uintptr_t a) noexcept;
  [[nodiscard]] std::size_t live_count() const noexcept { return live_.size(); }

  using by_start = block_by_start;
  /// Free mapped blocks of at least index_min bytes, smallest first (best fit is lower_bound):
  /// every block a request can be placed in. Searches only: a walk over every free mapped block
  /// (for its tokens) is for_each_mapped_free().
  [[nodiscard]] const size_index& mapped_free() const noexcept { return mapped_; }
  /// Calls f(arena_block*) for every free mapped block, fragments included, in address order
  /// within each range. Linear in all blocks, live ones too: for the rare paths (waits, markers,
  /// polls before a coalesce), not for placement.
  template <class F>
  void for_each_mapped_free(F&& f) const {
    for (const auto& r : ranges_)
      for (arena_block* b = r->first; b != nullptr; b = b->next)
        if (b->state == block_state::mapped) f(b);
  }
  /// Free mapped blocks, fragments included.
  [[nodiscard]] std::size_t mapped_count() const noexcept { return mapped_.size() + unindexed_; }
  /// Free unmapped blocks, in address order.
  [[nodiscard]] const unmapped_set& unmapped_free() const noexcept { return unmapped_; }

  /// A place for n bytes that needs mapping: a window in a chain that contains unmapped space.
  struct window {
    std::uintptr_t start = 0;
    std::size_t map_granules = 0;  // unmapped granules under the window
    std::uintptr_t chain_start = 0, chain_end = 0;
    bool pending = false;  // a mapped block under it is not ready (its tokens need a wait)
    std::vector<arena_block*> pieces;  // the free blocks the window overlaps, in address order
  };
  /// The window for n bytes: one whose mapped part is ready (`ready(block)`) if any, then the one
  /// that maps the fewest granules, then the smallest chain, then the lowest address. nullopt
  /// when no chain with unmapped space is large enough.
  [[nodiscard]] std::optional<window> best_window(
      std::size_t n, const std::function<bool(const arena_block&)>& ready) const;
  /// The granules [first, last) under the unmapped blocks of `w`, one pair per unmapped piece.
  [[nodiscard]] std::vector<std::pair<std::uintptr_t, std::uintptr_t>> granules_to_map(
      const window& w, std::size_t n) const;

  /// Verifies every invariant above; aborts with find_broken()'s message when one is broken. For
  /// tests and debug builds (cost: linear in the number of blocks).
  void check() const;
  /// The first broken invariant above, named, with the block and the numbers; empty when all
  /// hold. Same cost as check().
  [[nodiscard]] std::string find_broken() const;

 private:
  /// find_broken's count of the blocks in each state (and of the unindexed fragments).
  struct block_counts {
    std::size_t mapped = 0, fragments = 0, unmapped = 0, live = 0;
  };
  /// find_broken for one block's state and indexes; counts it in `n`.
  [[nodiscard]] std::string find_broken_in(const arena_block& block, block_counts& n) const;

 private:
  friend struct test_access;  // tests that break an invariant on purpose (tests/unit)

  [[nodiscard]] std::uintptr_t round_down(std::uintptr_t a) const noexcept {
    return a / granularity_ * granularity_;
  }
  [[nodiscard]] std::uintptr_t round_up(std::uintptr_t a) const noexcept {
    return (a + granularity_ - 1) / granularity_ * granularity_;
  }
  void index(arena_block* b);    // into the free set of its state
  void unindex(arena_block* b);  // out of it
  /// Cuts b at `at` (inside it); the new right part has b's state and tokens. Neither is indexed.
  /// `move_tokens`: b is about to drop its tokens (it is handed out, or changes state), so they
  /// move to the right part instead of being copied: a copy is a reference count's locked
  /// increment per token, and its drop a decrement, on every large allocation.
  arena_block* split(arena_block* b, std::uintptr_t at, bool move_tokens = false);
  /// Merges the unindexed free block b with neighbours in its state, indexes the result.
  arena_block* merge_and_index(arena_block* b);
  /// True when the adjacent free blocks a and b (same state) may be merged now.
  [[nodiscard]] bool may_merge(const arena_block& a, const arena_block& b) const noexcept;
  /// right (the next block after left, both free and unindexed) into left.
  void absorb(arena_block* left, arena_block* right);

  /// A block record, recycled: records are made and dropped at every split and merge, so the
  /// arena keeps the dropped ones (at most spare_max) instead of calling malloc and free.
  arena_block* new_block();
  void delete_block(arena_block* b);
  static constexpr std::size_t spare_max = 1024;

  const std::size_t granularity_;
  const bool keep_streams_apart_;
  const std::size_t index_min_;
  std::size_t unindexed_ = 0;  // mapped free blocks under index_min_
  std::vector<std::unique_ptr<arena_range>> ranges_;
  size_index mapped_;
  unmapped_set unmapped_;
  live_index live_;
  std::vector<arena_block*> spare_;
  // The unmapped set's nodes are recycled the same way (node handles): the malloc and free behind
  // each node would cost more than the tree walk. (The other two indexes keep their entries in
  // arrays.)
  std::vector<unmapped_set::node_type> spare_unmapped_nodes_;
};

}  // namespace streampool::detail
