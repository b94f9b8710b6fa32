// White-box tests of slab pages (src/core/pool/slab_pages.hpp) on made-up addresses: slabs of
// several sizes share a page without overlapping, a page is reported empty exactly when its last
// slab goes, and pages are off where the granularity does not fit the slot mask. And the sizes of
// new slabs: a class's slabs double from one chunk's worth up to the full slab (issue 45).
#include "core/pool/slab_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/support/size_classes.hpp"

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

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t mib = std::size_t{1} << 20;

std::vector<std::size_t> ramp(const slab_pages& p, std::size_t chunk, std::size_t slabs) {
  std::vector<std::size_t> out;
  for (std::size_t n = 0; n < slabs; ++n) out.push_back(p.slab_bytes(chunk, n));
  return out;
}

TEST(SlabPages, AClasssSlabsDoubleFromOneChunksWorthToTheFullSlab) {
  const slab_pages one_slot(slot);  // host, OpenCL, Level Zero: no pages
  EXPECT_EQ(one_slot.full_slab_bytes(256), 2 * mib);
  EXPECT_EQ(ramp(one_slot, 256, 7),
            (std::vector<std::size_t>{64 * kib, 128 * kib, 256 * kib, 512 * kib, 1 * mib, 2 * mib,
                                      2 * mib}));
  EXPECT_EQ(ramp(one_slot, 80 * kib, 6),
            (std::vector<std::size_t>{128 * kib, 256 * kib, 512 * kib, 1 * mib, 2 * mib, 2 * mib}));
  EXPECT_EQ(ramp(one_slot, 256 * kib, 5),
            (std::vector<std::size_t>{256 * kib, 512 * kib, 1 * mib, 2 * mib, 2 * mib}));
  const slab_pages cuda(page);  // 2 MiB: slabs of up to four chunks in pages, as before
  EXPECT_EQ(ramp(cuda, 256, 2), (std::vector<std::size_t>{64 * kib, 64 * kib}));
  EXPECT_EQ(ramp(cuda, 80 * kib, 4),
            (std::vector<std::size_t>{128 * kib, 256 * kib, 320 * kib, 320 * kib}));
  EXPECT_EQ(ramp(cuda, 256 * kib, 4),
            (std::vector<std::size_t>{256 * kib, 512 * kib, 1 * mib, 1 * mib}));
  const slab_pages two_slots(2 * slot);  // a slot's slab in a page, the next ones on their own
  EXPECT_EQ(ramp(two_slots, 32 * kib, 7),
            (std::vector<std::size_t>{64 * kib, 128 * kib, 256 * kib, 512 * kib, 1 * mib, 2 * mib,
                                      2 * mib}));
  EXPECT_TRUE(two_slots.shares(two_slots.slab_bytes(32 * kib, 0)));
  EXPECT_FALSE(two_slots.shares(two_slots.slab_bytes(32 * kib, 1)));
  const slab_pages big(std::size_t{8} << 20);  // beyond the mask: every slab is a granule
  EXPECT_EQ(ramp(big, 256, 2), (std::vector<std::size_t>{8 * mib, 8 * mib}));
}

TEST(SlabPages, EverySlabSizeHoldsAChunkAndFitsItsPlace) {
  namespace d = streampool::detail;
  for (const std::size_t g : {slot, 2 * slot, page, 4 * mib, 8 * mib, 32 * mib}) {
    const slab_pages p(g);
    for (std::size_t c = 0; c < d::max_classes; ++c) {
      const std::size_t chunk = d::class_size(c);
      const std::size_t full = p.full_slab_bytes(chunk);
      EXPECT_EQ(p.slab_bytes(chunk, 0), p.smallest_slab_bytes(chunk)) << g << " " << chunk;
      std::size_t last = 0;
      for (std::size_t n = 0; n <= 40; ++n) {
        const std::size_t b = p.slab_bytes(chunk, n);
        SCOPED_TRACE(testing::Message() << "granularity " << g << ", chunk " << chunk << ", slab "
                                        << n << ": " << b << " bytes");
        EXPECT_GE(b, chunk);
        EXPECT_EQ(b % slot, 0u);
        EXPECT_LE(b, full);
        EXPECT_GE(b, last);
        EXPECT_EQ(p.shares(b), g / slot > 1 && g / slot <= slab_pages::max_slots && b < g);
        if (!p.shares(b)) {
          EXPECT_EQ(b % g, 0u);
        }
        if (n == 12) {
          EXPECT_EQ(b, full) << "the ramp is at most 11 doublings";
        }
        last = b;
      }
    }
  }
}

TEST(SlabPages, EachClassCountsItsOwnSlabs) {
  slab_pages p(slot);
  EXPECT_EQ(p.next_slab_bytes(3, 1024), 64 * kib);
  p.count_slab(3);
  p.count_slab(3);
  EXPECT_EQ(p.next_slab_bytes(3, 1024), 256 * kib);
  EXPECT_EQ(p.next_slab_bytes(4, 1280), 64 * kib) << "another class starts small";
  for (int i = 0; i < 1000; ++i) p.count_slab(3);  // the count stops; the size stays full
  EXPECT_EQ(p.next_slab_bytes(3, 1024), 2 * mib);
}

}  // namespace
