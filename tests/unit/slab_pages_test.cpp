// White-box tests of slab pages (src/core/slab_pages.hpp) on made-up addresses: slabs of several
// sizes share a page without overlapping, a page is reported empty exactly when its last slab
// goes, and pages are off where the granularity does not fit the slot mask.
#include "core/slab_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

using streampool::detail::slab_pages;

namespace {

constexpr std::size_t slot = slab_pages::slot_bytes;
constexpr std::size_t page = std::size_t{2} << 20;  // 32 slots

void* at(std::uintptr_t a) {
  return reinterpret_cast<void*>(a);  // NOLINT(performance-no-int-to-ptr)
}
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(SlabPages, OnlySlabsSmallerThanAPageOfWholeSlotsShare) {
  slab_pages p(page);
  EXPECT_TRUE(p.shares(slot));
  EXPECT_TRUE(p.shares(page - slot));
  EXPECT_FALSE(p.shares(page));
  EXPECT_FALSE(p.shares(slot + 1));
  EXPECT_FALSE(slab_pages(slot).shares(slot)) << "a page of one slot shares nothing";
  EXPECT_FALSE(slab_pages(std::size_t{8} << 20).shares(slot)) << "128 slots: beyond the mask";
}

TEST(SlabPages, SlabsFillAPageThenTheNextAndTheLastOneOutEmptiesIt) {
  slab_pages p(page);
  EXPECT_EQ(p.take(slot), nullptr) << "no page yet";
  const std::uintptr_t a = std::uintptr_t{1} << 40;
  p.add(at(a));
  void* x = p.take(4 * slot);
  void* y = p.take(slot);
  void* z = p.take(27 * slot);
  EXPECT_EQ(addr(x), a);
  EXPECT_EQ(addr(y), a + 4 * slot);
  EXPECT_EQ(addr(z), a + 5 * slot);
  EXPECT_EQ(p.take(slot), nullptr) << "the page is full";
  EXPECT_EQ(p.give(y, slot), nullptr);
  EXPECT_EQ(addr(p.take(slot)), a + 4 * slot) << "a freed run is taken again";
  EXPECT_EQ(p.take(2 * slot), nullptr) << "one slot free at most";
  EXPECT_EQ(p.give(x, 4 * slot), nullptr);
  EXPECT_EQ(p.give(at(a + 4 * slot), slot), nullptr);
  EXPECT_EQ(p.give(z, 27 * slot), at(a)) << "the last slab out empties the page";
  EXPECT_EQ(p.pages(), 0u);
}

TEST(SlabPages, RandomSlabsNeverOverlapAndEveryPageEmptiesAtTheEnd) {
  slab_pages p(page);
  std::mt19937_64 rng(3);
  struct taken {
    std::uintptr_t a;
    std::size_t bytes;
  };
  std::vector<taken> live;
  std::uintptr_t next_page = std::uintptr_t{1} << 40;
  std::size_t emptied = 0, added = 0;
  for (int step = 0; step < 20'000; ++step) {
    if (!live.empty() && rng() % 2 == 0) {
      const std::size_t k = rng() % live.size();
      if (p.give(at(live[k].a), live[k].bytes) != nullptr) ++emptied;
      live[k] = live.back();
      live.pop_back();
      continue;
    }
    const std::size_t bytes = (1 + rng() % 16) * slot;
    void* q = p.take(bytes);
    if (q == nullptr) {
      p.add(at(next_page));
      ++added;
      next_page += page;
      q = p.take(bytes);
    }
    ASSERT_NE(q, nullptr);
    const std::uintptr_t a = addr(q);
    for (const taken& t : live) {
      ASSERT_TRUE(a + bytes <= t.a || t.a + t.bytes <= a) << "overlap at step " << step;
    }
    ASSERT_EQ((a - (std::uintptr_t{1} << 40)) % page + bytes <= page, true) << "crosses a page";
    live.push_back({a, bytes});
  }
  for (const taken& t : live)
    if (p.give(at(t.a), t.bytes) != nullptr) ++emptied;
  EXPECT_EQ(p.pages(), 0u);
  EXPECT_EQ(emptied, added);
}

}  // namespace
