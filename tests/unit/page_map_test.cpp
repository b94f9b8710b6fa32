// White-box: the page map (src/core/support/page_map.hpp), pointer -> segment. Every address of an
// inserted range finds its segment, nothing outside it does, erasing clears exactly the range,
// and addresses beyond the 48 bits the map covers are refused on insert and not found on lookup.
#include "core/support/page_map.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "streampool/error.hpp"

namespace sd = streampool::detail;

namespace {

constexpr std::size_t page = sd::page_map::page_size;

const void* at(std::uintptr_t a) { return reinterpret_cast<const void*>(a); }

// The map never dereferences a segment: distinct addresses are enough to tell them apart.
struct fake_segments {
  alignas(16) unsigned char storage[3][16];
  sd::segment* get(int i) { return reinterpret_cast<sd::segment*>(storage[i]); }
};

TEST(PageMap, EveryAddressOfARangeFindsItsSegmentAndNoneOutside) {
  sd::page_map map;
  fake_segments s;
  const std::uintptr_t base = std::uintptr_t{0x7f12} << 32;
  map.insert(at(base), 3 * page, s.get(0));
  for (std::uintptr_t a = base; a < base + 3 * page; a += page / 4) {
    EXPECT_EQ(map.find(at(a)), s.get(0)) << "offset " << (a - base);
  }
  EXPECT_EQ(map.find(at(base + 3 * page - 1)), s.get(0));
  EXPECT_EQ(map.find(at(base - 1)), nullptr);
  EXPECT_EQ(map.find(at(base + 3 * page)), nullptr);
}

TEST(PageMap, NeighbouringRangesAndDistantOnesKeepTheirOwnSegments) {
  sd::page_map map;
  fake_segments s;
  const std::uintptr_t base = std::uintptr_t{0x5500} << 32;
  map.insert(at(base), page, s.get(0));
  map.insert(at(base + page), 2 * page, s.get(1));
  // A different top-level and mid-level node: the map's three levels all split here.
  const std::uintptr_t far = std::uintptr_t{0x0001} << 40;
  map.insert(at(far), page, s.get(2));
  EXPECT_EQ(map.find(at(base + page - 1)), s.get(0));
  EXPECT_EQ(map.find(at(base + page)), s.get(1));
  EXPECT_EQ(map.find(at(base + 3 * page - 1)), s.get(1));
  EXPECT_EQ(map.find(at(far + 5)), s.get(2));
}

TEST(PageMap, EraseClearsExactlyItsRange) {
  sd::page_map map;
  fake_segments s;
  const std::uintptr_t base = std::uintptr_t{0x2000} << 32;
  map.insert(at(base), page, s.get(0));
  map.insert(at(base + page), page, s.get(1));
  map.erase(at(base + page), page);
  EXPECT_EQ(map.find(at(base)), s.get(0));
  EXPECT_EQ(map.find(at(base + page)), nullptr);
  // The pages can be reused by another segment.
  map.insert(at(base + page), page, s.get(2));
  EXPECT_EQ(map.find(at(base + page + 7)), s.get(2));
}

TEST(PageMap, AddressesBeyondFortyEightBitsAreRefusedAndNotFound) {
  sd::page_map map;
  fake_segments s;
  const std::uintptr_t beyond = std::uintptr_t{1} << 48;
  EXPECT_THROW(map.insert(at(beyond), page, s.get(0)), streampool::logic_error);
  EXPECT_EQ(map.find(at(beyond)), nullptr);
  EXPECT_EQ(map.find(at(~std::uintptr_t{0})), nullptr);
  EXPECT_EQ(map.find(nullptr), nullptr);
}

}  // namespace
