// White-box tests of the block arena (src/core/pool/block_arena.hpp), the structure under the
// pool's large blocks, on made-up addresses: nothing here is ever dereferenced. check() verifies
// the arena's invariants after every step; the tests add what the invariants cannot see (where a
// block lands, what a window costs, which tokens survive a merge).
#include "core/pool/block_arena.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "streampool/streampool.hpp"

namespace sp = streampool;
using sp::detail::arena_block;
using sp::detail::block_arena;
using sp::detail::block_state;

namespace {

constexpr std::size_t g = std::size_t{2} << 20;           // granule
constexpr std::uintptr_t base = std::uintptr_t{1} << 40;  // a made-up range
constexpr std::size_t range_size = 64 * g;

bool always_ready(const arena_block&) { return true; }

/// Maps what a window needs, the way the pool does, and hands the window out.
arena_block* place(block_arena& a, std::size_t n) {
  auto w = a.best_window(n, always_ready);
  if (!w) return nullptr;
  const auto runs = a.granules_to_map(*w, n);
  std::vector<arena_block*> holes;
  for (arena_block* p : w->pieces)
    if (p->state == block_state::unmapped) holes.push_back(p);
  for (std::size_t i = 0; i < runs.size(); ++i)
    a.change_state(holes[i], runs[i].first, runs[i].second, block_state::mapped);
  // The window's pieces may have stayed apart (keep_streams_apart): one block, as the pool does.
  arena_block* holder =
      a.join(block_arena::block_at(*w->pieces.front()->range, w->start), w->start + n);
  return a.take(holder, w->start, n);
}

}  // namespace

TEST(BlockArena, FirstBlockGoesToTheStartAndMapsOnlyItsGranules) {
  block_arena a(g);
  a.add_range(base, range_size, block_state::unmapped, nullptr);
  a.check();
  auto w = a.best_window(3 * g + 4096, always_ready);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->start, base);
  EXPECT_EQ(w->map_granules, 4u);  // 3 granules and a bit: four
  arena_block* b = place(a, 3 * g + 4096);
  a.check();
  EXPECT_EQ(b->start, base);
  EXPECT_EQ(b->state, block_state::live);
  // The rest of the fourth granule is mapped and free; everything after it is unmapped.
  ASSERT_EQ(a.mapped_free().size(), 1u);
  EXPECT_EQ((*a.mapped_free().begin())->start, base + 3 * g + 4096);
  EXPECT_EQ((*a.mapped_free().begin())->end(), base + 4 * g);
  ASSERT_EQ(a.unmapped_free().size(), 1u);
  EXPECT_EQ((*a.unmapped_free().begin())->start, base + 4 * g);
}

TEST(BlockArena, NextBlockExtendsTheFrontierInsteadOfLeavingAHole) {
  block_arena a(g);
  a.add_range(base, range_size, block_state::unmapped, nullptr);
  place(a, g / 2);  // [0, g/2): granule 0 mapped, [g/2, g) free and mapped
  auto w = a.best_window(2 * g, always_ready);
  ASSERT_TRUE(w);
  // Starting in the mapped tail needs one more granule than the tail already gives...
  EXPECT_EQ(w->start, base + g / 2);
  EXPECT_EQ(w->map_granules, 2u);  // [g, 2.5g) touches granules 1 and 2
  // ...where starting past it would strand it and map as many.
  arena_block* b = place(a, 2 * g);
  a.check();
  EXPECT_EQ(b->start, base + g / 2);
}

TEST(BlockArena, FreedNeighboursCoalesceWithTheUnionOfTheirTokens) {
  sp::device d(sp::make_host_backend());
  sp::stream s1(d), s2(d);
  block_arena a(g);
  a.add_range(base, range_size, block_state::mapped, nullptr);  // a segment: all memory
  arena_block* whole = *a.mapped_free().begin();
  arena_block* x = a.take(whole, base, g);
  arena_block* y = a.take(*a.mapped_free().begin(), base + g, g);
  arena_block* z = a.take(*a.mapped_free().begin(), base + 2 * g, g);
  a.check();
  const sp::token s1_early{s1.get_timeline(), 1000}, s1_late{s1.get_timeline(), 2000},
      s2_mid{s2.get_timeline(), 1500};
  a.release(y, {s1_early});
  a.check();
  a.release(x, {s1_late, s2_mid});
  a.check();
  arena_block* merged = a.release(z, {});
  a.check();
  // One free block for the whole range, one token per timeline, the latest point of each.
  ASSERT_EQ(a.mapped_free().size(), 1u);
  EXPECT_EQ(merged->start, base);
  EXPECT_EQ(merged->size, range_size);
  ASSERT_EQ(merged->tokens.size(), 2u);
  for (const sp::token& t : merged->tokens) {
    EXPECT_EQ(t.at, t.line == s1.get_timeline() ? 2000u : 1500u);
  }
  EXPECT_EQ(a.live_count(), 0u);
  EXPECT_NE(block_arena::sole_free_block(*a.ranges().front()), nullptr);
}

// keep_streams_apart (the virtual-memory path): a block freed on one stream is not fused with a
// neighbour that another stream's pending work still holds, so that it stays ready for its own
// stream; they merge once the work is known complete, or when the pool forces it.
TEST(BlockArena, PendingBlocksOfDifferentStreamsStayApartUntilComplete) {
  sp::device d(sp::make_host_backend());
  sp::stream s1(d), s2(d);
  block_arena a(g, /*keep_streams_apart=*/true);
  a.add_range(base, range_size, block_state::mapped, nullptr);
  arena_block* x = a.take(*a.mapped_free().begin(), base, g);
  arena_block* y = a.take(*a.mapped_free().begin(), base + g, g);
  arena_block* z = a.take(*a.mapped_free().begin(), base + 2 * g, g);
  a.release(x, {s1.ref().now()});  // pending: no marker was recorded yet
  a.release(y, {s2.ref().now()});
  a.check();
  EXPECT_EQ(a.mapped_free().size(), 3u);  // x, y, and the rest after z
  EXPECT_EQ(a.coalesce(/*force=*/false), 0u);
  // The same stream's neighbour merges, and so does memory with no tokens.
  arena_block* yz = a.release(z, {s2.ref().now()});
  a.check();
  EXPECT_EQ(yz->start, base + g);
  EXPECT_EQ(yz->end(), base + range_size);
  EXPECT_EQ(a.mapped_free().size(), 2u);
  // s1's work completes: only s2's is pending now, so x and the rest may merge.
  s1.synchronize();
  EXPECT_EQ(a.coalesce(/*force=*/false), 1u);
  a.check();
  ASSERT_EQ(a.mapped_free().size(), 1u);
  EXPECT_NE(block_arena::sole_free_block(*a.ranges().front()), nullptr);
}

TEST(BlockArena, ForcedCoalescingAndJoinWaitForBothStreams) {
  sp::device d(sp::make_host_backend());
  sp::stream s1(d), s2(d);
  for (const bool use_join : {false, true}) {
    block_arena a(g, /*keep_streams_apart=*/true);
    a.add_range(base, 4 * g, block_state::mapped, nullptr);
    arena_block* x = a.take(*a.mapped_free().begin(), base, g);
    arena_block* y = a.take(*a.mapped_free().begin(), base + g, 3 * g);
    a.release(x, {s1.ref().now()});
    a.release(y, {s2.ref().now()});
    ASSERT_EQ(a.mapped_free().size(), 2u);
    arena_block* merged = nullptr;
    if (use_join) {
      merged = a.join(block_arena::block_at(*a.ranges().front(), base), base + 2 * g);
    } else {
      EXPECT_EQ(a.coalesce(/*force=*/true), 1u);
      merged = *a.mapped_free().begin();
    }
    a.check();
    ASSERT_EQ(a.mapped_free().size(), 1u);
    EXPECT_EQ(merged->start, base);
    EXPECT_EQ(merged->size, 4 * g);
    EXPECT_EQ(merged->tokens.size(), 2u);  // reuse waits for both streams
  }
}

TEST(BlockArena, UnmappingAHoleMergesWithUnmappedNeighboursAndDropsTokens) {
  sp::device d(sp::make_host_backend());
  sp::stream s(d);
  block_arena a(g);
  a.add_range(base, range_size, block_state::unmapped, nullptr);
  arena_block* left = place(a, 2 * g);
  arena_block* mid = place(a, 4 * g);
  arena_block* right = place(a, g);
  a.check();
  EXPECT_EQ(mid->start, base + 2 * g);
  EXPECT_EQ(right->start, base + 6 * g);
  arena_block* f = a.release(mid, {sp::token{s.get_timeline(), 7}});
  ASSERT_EQ(f->size, 4 * g);
  // The pool unmaps the interior of a free block whose work is complete (a remap source).
  arena_block* hole = a.change_state(f, base + 3 * g, base + 5 * g, block_state::unmapped);
  a.check();
  EXPECT_EQ(hole->start, base + 3 * g);
  EXPECT_TRUE(hole->tokens.empty());
  // The mapped slivers on both sides keep their tokens.
  ASSERT_NE(hole->prev, nullptr);
  EXPECT_EQ(hole->prev->state, block_state::mapped);
  EXPECT_EQ(hole->prev->tokens.size(), 1u);
  // Freeing `right` merges it with the sliver after the hole; unmapping that joins the hole, the
  // freed space and the unmapped frontier into one block.
  arena_block* freed_right = a.release(right, {});
  EXPECT_EQ(freed_right->start, base + 5 * g);
  EXPECT_EQ(freed_right->end(), base + 7 * g);
  arena_block* tail =
      a.change_state(freed_right, base + 5 * g, base + 7 * g, block_state::unmapped);
  a.check();
  EXPECT_EQ(tail->start, base + 3 * g);
  EXPECT_EQ(tail->end(), base + range_size);
  (void)left;
}

TEST(BlockArena, AWindowThatNeedsNoWaitIsPreferred) {
  sp::device d(sp::make_host_backend());
  sp::stream other(d);
  block_arena a(g);
  a.add_range(base, range_size, block_state::unmapped, nullptr);
  arena_block* x = place(a, 3 * g);
  a.release(x, {sp::token{other.get_timeline(), 99}});
  a.check();
  // A request bigger than x's space must map anyway. A window over x and the frontier (x has
  // pending work of another stream) maps fewer granules than one past x, but needs a wait.
  const auto pending = [&](const arena_block& b) { return b.tokens.empty(); };
  auto w = a.best_window(4 * g, pending);
  ASSERT_TRUE(w);
  EXPECT_FALSE(w->pending);
  EXPECT_EQ(w->start, base + 3 * g);
  EXPECT_EQ(w->map_granules, 4u);
  auto w2 = a.best_window(4 * g, always_ready);
  ASSERT_TRUE(w2);
  EXPECT_EQ(w2->start, base);
  EXPECT_EQ(w2->map_granules, 1u);
}

// Free mapped blocks under index_min (fragments: the pool's best fit leaves them as remainders)
// stay out of the size index, but are still free memory: they merge with a freed neighbour, and
// the merged block enters the index once it is big enough; coalescing and the walks over every
// free block see them.
TEST(BlockArena, FragmentsStayOutOfTheIndexButMergeAndAreWalked) {
  sp::device d(sp::make_host_backend());
  sp::stream s1(d), s2(d);
  block_arena a(g, /*keep_streams_apart=*/true, /*index_min=*/g);
  a.add_range(base, 4 * g, block_state::mapped, nullptr);
  arena_block* x = a.take(*a.mapped_free().begin(), base, g);
  // Cut out at g + 4 KiB: [g, g + 4 KiB) is left between x and y, a fragment.
  arena_block* y = a.take(*a.mapped_free().begin(), base + g + 4096, g);
  a.check();
  ASSERT_EQ(a.mapped_free().size(), 1u);  // [2g + 4 KiB, 4g) only
  EXPECT_EQ((*a.mapped_free().begin())->start, base + 2 * g + 4096);
  EXPECT_EQ(a.mapped_count(), 2u);
  std::vector<std::uintptr_t> walked;
  a.for_each_mapped_free([&](const arena_block* b) { walked.push_back(b->start); });
  EXPECT_EQ(walked, (std::vector<std::uintptr_t>{base + g, base + 2 * g + 4096}));

  // x, freed on s1 while the fragment holds nothing: they merge, and the result is indexed.
  arena_block* xf = a.release(x, {s1.ref().now()});
  a.check();
  EXPECT_EQ(xf->start, base);
  EXPECT_EQ(xf->size, g + 4096);
  EXPECT_EQ(a.mapped_free().size(), 2u);
  EXPECT_EQ(a.mapped_count(), 2u);

  // A fragment kept apart from its neighbour (pending work of two streams) merges at the
  // coalesce after that work is complete, though no index holds it.
  arena_block* z = a.take(xf, base, g);  // leaves [g, g + 4 KiB) free again, with s1's token
  a.release(z, {s2.ref().now()});
  a.check();
  EXPECT_EQ(a.mapped_count(), 3u);  // z (s2), the fragment (s1), the rest after y
  EXPECT_EQ(a.mapped_free().size(), 2u);
  s1.synchronize();
  s2.synchronize();
  EXPECT_EQ(a.coalesce(/*force=*/false), 1u);
  a.check();
  EXPECT_EQ(a.mapped_count(), 2u);
  a.release(y, {});
  a.check();
  ASSERT_EQ(a.mapped_count(), 1u);
  EXPECT_NE(block_arena::sole_free_block(*a.ranges().front()), nullptr);
}

// The modes: every free neighbour merges; mapped neighbours of different streams' pending work
// stay apart; and apart with fragments, where requests are at least index_min (as in the pool).
enum class random_mode { merge_all, streams_apart, fragments };

class BlockArenaRandom : public ::testing::TestWithParam<random_mode> {};

TEST_P(BlockArenaRandom, OperationsKeepTheInvariantsAndNeverOverlap) {
  // Random takes, frees and unmaps, checked against a shadow of every live block and of which
  // granules the arena says are mapped. With keep_streams_apart, frees carry tokens of three
  // streams (pending until a stream synchronises), and coalescing runs now and then.
  const bool apart = GetParam() != random_mode::merge_all;
  const std::size_t index_min = GetParam() == random_mode::fragments ? g / 2 : 0;
  sp::device d(sp::make_host_backend());
  sp::stream streams[3] = {sp::stream(d), sp::stream(d), sp::stream(d)};
  std::mt19937_64 rng(7);
  block_arena a(g, apart, index_min);
  a.add_range(base, 4096 * g, block_state::unmapped, nullptr);
  std::map<std::uintptr_t, std::size_t> live;  // start -> size
  for (int step = 0; step < 4000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 5 || live.empty()) {
      const std::size_t n = index_min + (1 + rng() % (6 * g / 256)) * 256;
      // Best fit first, as the pool does; else a window.
      arena_block* b = nullptr;
      auto it = a.mapped_free().lower_bound(n);
      if (it != a.mapped_free().end()) {
        b = a.take(*it, (*it)->start, n);
      } else {
        b = place(a, n);
      }
      ASSERT_NE(b, nullptr);
      auto next = live.lower_bound(b->start);
      ASSERT_TRUE(next == live.end() || next->first >= b->end()) << "overlaps the next block";
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, b->start) << "overlaps the previous block";
      }
      live.emplace(b->start, b->size);
    } else if (op < 9) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      arena_block* b = a.find_live(it->first);
      ASSERT_NE(b, nullptr);
      const std::size_t k = rng() % 4;
      a.release(b, apart && k < 3 ? sp::detail::token_set{streams[k].ref().now()}
                                  : sp::detail::token_set{});
      live.erase(it);
      if (apart && rng() % 50 == 0) streams[rng() % 3].synchronize();
      if (apart && rng() % 20 == 0) a.coalesce(/*force=*/rng() % 2 == 0);
    } else if (!a.mapped_free().empty()) {
      // Unmap the whole-granule interior of a random free mapped block.
      auto it = a.mapped_free().begin();
      std::advance(it, static_cast<long>(rng() % a.mapped_free().size()));
      arena_block* b = *it;
      const std::uintptr_t from = (b->start + g - 1) / g * g, to = b->end() / g * g;
      if (from < to) a.change_state(b, from, to, block_state::unmapped);
    }
    a.check();
    // Every granule a live block touches is mapped: no unmapped block overlaps a live one.
    for (arena_block* u : a.unmapped_free()) {
      auto next = live.lower_bound(u->start);
      if (next != live.end()) {
        ASSERT_GE(next->first, u->end());
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE((prev->first + prev->second + g - 1) / g * g, u->start);
      }
    }
  }
  EXPECT_EQ(a.live_count(), live.size());
}

INSTANTIATE_TEST_SUITE_P(BlockArena, BlockArenaRandom,
                         ::testing::Values(random_mode::merge_all, random_mode::streams_apart,
                                           random_mode::fragments),
                         [](const ::testing::TestParamInfo<random_mode>& i) {
                           switch (i.param) {
                             case random_mode::merge_all:
                               return std::string("MergeAll");
                             case random_mode::streams_apart:
                               return std::string("StreamsApart");
                             case random_mode::fragments:
                               break;
                           }
                           return std::string("StreamsApartWithFragments");
                         });
