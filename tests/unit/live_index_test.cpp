// White-box tests of the live index (src/core/support/live_index.hpp), the block arena's live
// blocks by start address: against a std::unordered_map under random inserts and erases, with
// starts that collide in the table (equal low bits, as block starts have) and runs that wrap around
// its end.
#include "core/support/live_index.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace {

using streampool::detail::arena_block;
using streampool::detail::live_index;

arena_block* fake(std::uintptr_t v) { return reinterpret_cast<arena_block*>(v | 1); }

TEST(LiveIndex, FindsNothingWhenEmpty) {
  live_index x;
  EXPECT_EQ(x.size(), 0u);
  EXPECT_EQ(x.find(0), nullptr);
  EXPECT_EQ(x.find(4096), nullptr);
  x.insert(4096, fake(1));
  EXPECT_EQ(x.find(4096), fake(1));
  EXPECT_EQ(x.find(0), nullptr);  // an empty slot's start is 0: not a match
  x.erase(4096);
  EXPECT_EQ(x.find(4096), nullptr);
  EXPECT_EQ(x.size(), 0u);
}

TEST(LiveIndex, AgreesWithAHashMapUnderRandomUse) {
  std::mt19937_64 rng(20261204);
  live_index x;
  std::unordered_map<std::uintptr_t, arena_block*> model;
  std::vector<std::uintptr_t> keys;
  for (int step = 0; step < 200000; ++step) {
    // Grow to a few thousand entries, shrink, grow again: every table size and wrap-around.
    const bool grow = (step / 20000) % 2 == 0;
    if (keys.empty() || rng() % 10 < (grow ? 6u : 4u)) {
      std::uintptr_t start = 0;
      do {
        start = (rng() % 4 == 0 ? rng() % 64 : rng() % (std::uintptr_t{1} << 36)) << 8;
      } while (model.count(start) != 0);
      x.insert(start, fake(start));
      model.emplace(start, fake(start));
      keys.push_back(start);
    } else {
      const std::size_t k = rng() % keys.size();
      x.erase(keys[k]);
      model.erase(keys[k]);
      keys[k] = keys.back();
      keys.pop_back();
    }
    ASSERT_EQ(x.size(), model.size());
    if (step % 101 == 0) {
      for (std::uintptr_t s : keys) ASSERT_EQ(x.find(s), model.at(s)) << "start " << s;
    }
    const std::uintptr_t probe = (rng() % 64) << 8;
    const auto it = model.find(probe);
    ASSERT_EQ(x.find(probe), it == model.end() ? nullptr : it->second) << "start " << probe;
  }
}

}  // namespace
