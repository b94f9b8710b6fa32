// White-box tests of the size index (src/core/support/size_index.hpp), the block arena's mapped
// free set: its order, best fit and erase must be exactly those of a set ordered by (size, start),
// which is what it replaced and what the pool's placement decisions (and so the trace replays'
// peaks) depend on.
#include "core/support/size_index.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <set>
#include <utility>

#include "core/pool/block_arena.hpp"

namespace {

using sp_block = streampool::detail::arena_block;
using streampool::detail::size_bucket;
using streampool::detail::size_index;
using key = std::pair<std::size_t, std::uintptr_t>;  // (size, start)

TEST(SizeIndex, BucketsAscendWithSizeAndSplitEachPowerOfTwoInEight) {
  std::uint32_t last = 0;
  for (std::size_t s = 0; s < 4096; ++s) {
    ASSERT_GE(size_bucket(s), last) << "size " << s;
    last = size_bucket(s);
  }
  for (unsigned top = 3; top < 64; ++top) {
    const std::size_t low = std::size_t{1} << top;
    // The eight sub-ranges of [2^top, 2^(top+1)) are eight consecutive buckets.
    for (std::size_t k = 0; k < 8; ++k)
      EXPECT_EQ(size_bucket(low + k * (low / 8)), size_bucket(low) + k) << "2^" << top;
    EXPECT_EQ(size_bucket(low - 1) + 1, size_bucket(low)) << "2^" << top;
  }
  EXPECT_EQ(size_bucket(~std::size_t{0}) + 1, size_index::bucket_count);
}

TEST(SizeIndex, IsEmptyUntilAnInsert) {
  size_index x;
  EXPECT_TRUE(x.empty());
  EXPECT_EQ(x.begin(), x.end());
  EXPECT_EQ(x.lower_bound(1), x.end());
  sp_block b;
  b.size = 3u << 20;
  b.start = 0x1000;
  x.insert(&b);
  EXPECT_EQ(x.size(), 1u);
  EXPECT_TRUE(x.contains(&b));
  EXPECT_EQ(x.lower_bound(3u << 20)->block, &b);
  EXPECT_EQ(x.lower_bound((3u << 20) + 1), x.end());
  x.erase(&b);
  EXPECT_TRUE(x.empty());
  EXPECT_FALSE(x.contains(&b));
}

// find_broken() relies on contains() to see a block whose size or start changed while indexed.
TEST(SizeIndex, ContainsSeesABlockWhoseKeyChangedWhileIndexed) {
  size_index x;
  sp_block a, b;
  a.size = b.size = std::size_t{5} << 20;
  a.start = 0x10000000;
  b.start = 0x20000000;
  x.insert(&a);
  x.insert(&b);
  EXPECT_TRUE(x.contains(&a));
  a.size += 4096;  // same bucket, different key
  EXPECT_FALSE(x.contains(&a));
  a.size -= 4096;
  b.start += 256;
  EXPECT_FALSE(x.contains(&b));
  b.start -= 256;
  EXPECT_TRUE(x.contains(&b));
  // The biggest sizes: the last bucket, the bitmap's last word.
  sp_block c;
  c.size = ~std::size_t{0} - 255;
  c.start = 0x30000000;
  x.insert(&c);
  EXPECT_EQ(x.lower_bound(std::size_t{6} << 20)->block, &c);
  EXPECT_EQ(x.lower_bound(~std::size_t{0}), x.end());
  x.erase(&c);
  EXPECT_EQ(x.lower_bound(std::size_t{6} << 20), x.end());
}

// Random inserts and erases against std::set<(size, start)>: after each step the whole order, and
// lower_bound for sizes in and around the stored ones, agree.
TEST(SizeIndex, AgreesWithAnOrderedSetUnderRandomUse) {
  std::mt19937_64 rng(20261204);
  std::deque<sp_block> blocks;  // stable addresses
  std::vector<sp_block*> in;    // indexed, in no order
  size_index x;
  std::set<key> model;
  auto random_size = [&]() -> std::size_t {
    switch (rng() % 4) {
      case 0:
        return 1 + rng() % 64;  // tiny and exact buckets
      case 1:
        return (std::size_t{1} << (8 + rng() % 55)) + rng() % 4096;  // near powers of two
      case 2:
        return std::size_t{2} << 20;  // many equal sizes
      default:
        return 256 + rng() % (std::size_t{64} << 20);  // anything
    }
  };
  for (int step = 0; step < 20000; ++step) {
    if (in.empty() || rng() % 5 < 3) {
      sp_block& b = blocks.emplace_back();
      b.size = random_size();
      do b.start = (rng() % (std::uintptr_t{1} << 40)) & ~std::uintptr_t{255};
      while (model.count({b.size, b.start}) != 0);
      x.insert(&b);
      model.emplace(b.size, b.start);
      in.push_back(&b);
    } else {
      const std::size_t k = rng() % in.size();
      sp_block* b = in[k];
      x.erase(b);
      model.erase({b->size, b->start});
      in[k] = in.back();
      in.pop_back();
    }
    ASSERT_EQ(x.size(), model.size());
    if (step % 97 == 0) {
      auto m = model.begin();
      for (const auto& e : x) {
        ASSERT_NE(m, model.end());
        ASSERT_EQ(key(e.size, e.start), *m);
        ++m;
      }
      ASSERT_EQ(m, model.end());
    }
    for (int probe = 0; probe < 4; ++probe) {
      std::size_t n = random_size();
      if (!in.empty() && probe % 2 == 0) n = in[rng() % in.size()]->size - 1 + rng() % 3;
      const auto want = model.lower_bound({n, 0});
      const auto got = x.lower_bound(n);
      if (want == model.end()) {
        ASSERT_EQ(got, x.end()) << "size " << n;
      } else {
        ASSERT_NE(got, x.end()) << "size " << n;
        ASSERT_EQ(key(got->size, got->start), *want) << "size " << n;
        // Iterating on gives the next best fits in order.
        auto next_want = std::next(want);
        auto next_got = std::next(got);
        ASSERT_EQ(next_want == model.end(), next_got == x.end());
        if (next_got != x.end()) {
          ASSERT_EQ(key(next_got->size, next_got->start), *next_want);
        }
      }
    }
  }
  for (sp_block* b : in) EXPECT_TRUE(x.contains(b));
}

}  // namespace
