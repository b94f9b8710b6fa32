// White-box tests of the shelf (src/core/pool/large_shelf.hpp): past its bound it gives back its
// oldest block over all bins, in push order, whatever pop() took in between; its age list stays
// what find_broken() checks. A model (a list in push order) says which block is the oldest.
#include "core/pool/large_shelf.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <list>
#include <random>

#include "core/pool/block_arena.hpp"

namespace {

using streampool::detail::arena_block;
using streampool::detail::block_state;
using streampool::detail::large_shelf;

constexpr std::size_t mib = std::size_t{1} << 20;

/// Blocks of class sizes, as the pool's arena would hand them to the shelf: live.
std::deque<arena_block> make_blocks(std::size_t n, std::mt19937_64& rng) {
  std::deque<arena_block> blocks(n);
  std::uintptr_t start = 0;
  for (arena_block& b : blocks) {
    b.size = large_shelf::class_size_of(mib / 4 + rng() % (3 * mib));
    b.start = start;
    b.state = block_state::live;
    start += b.size;
  }
  return blocks;
}

TEST(LargeShelf, PastItsBoundTheOldestBlockOfAnyClassGoesFirst) {
  std::mt19937_64 rng(7);
  std::deque<arena_block> blocks = make_blocks(4000, rng);
  large_shelf shelf(24 * mib);
  std::list<arena_block*> model;  // shelved blocks, oldest first
  std::size_t evictions = 0, pops = 0;
  for (arena_block& b : blocks) {
    // Now and then a request of b's class (or of a class below it) takes a block back, from the
    // back of its bin: the model forgets it wherever it was in the push order.
    if (rng() % 3 == 0) {
      arena_block* took =
          shelf.pop(large_shelf::class_of(b.size), [](const arena_block&) { return true; });
      if (took != nullptr) {
        ++pops;
        ASSERT_FALSE(took->shelved);
        const auto it = std::find(model.begin(), model.end(), took);
        ASSERT_NE(it, model.end());
        model.erase(it);
      }
    }
    shelf.push(&b, [&](arena_block* old) {
      ++evictions;
      ASSERT_FALSE(model.empty());
      EXPECT_EQ(old, model.front()) << "evicted block at " << old->start << ", not the oldest";
      EXPECT_FALSE(old->shelved);
      model.pop_front();
    });
    model.push_back(&b);
    ASSERT_EQ(shelf.count(), model.size());
    ASSERT_EQ(shelf.find_broken(), "");
  }
  EXPECT_GT(evictions, 1000u);
  EXPECT_GT(pops, 500u);
  // Emptied: every block in push order.
  shelf.empty([&](arena_block* old) {
    ASSERT_FALSE(model.empty());
    EXPECT_EQ(old, model.front());
    model.pop_front();
  });
  EXPECT_TRUE(model.empty());
  EXPECT_EQ(shelf.count(), 0u);
  EXPECT_EQ(shelf.find_broken(), "");
}

TEST(LargeShelf, FindBrokenNamesABrokenAgeList) {
  std::mt19937_64 rng(3);
  std::deque<arena_block> blocks = make_blocks(3, rng);
  large_shelf shelf(64 * mib);
  for (arena_block& b : blocks) shelf.push(&b, [](arena_block*) { FAIL() << "under the bound"; });
  ASSERT_EQ(shelf.find_broken(), "");
  arena_block* third = blocks[1].shelf_newer;
  blocks[1].shelf_newer = nullptr;  // the list now ends early: the third block is not on it
  EXPECT_NE(shelf.find_broken().find("age list"), std::string::npos) << shelf.find_broken();
  blocks[1].shelf_newer = third;
  EXPECT_EQ(shelf.find_broken(), "");
}

}  // namespace
