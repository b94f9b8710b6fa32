// What a small pool reserves (issue 45): at 64 KiB granularity (host, OpenCL, Level Zero) a pool
// with 20 small blocks of mixed sizes held one 2 MiB slab per size class, about 38 MiB here
// (1,300 MiB for 50 such pools in the run). A class's slabs now start at one chunk's
// worth and double up to the size they had (src/core/pool/slab_pages.hpp): a small pool is small, a
// busy class still reaches the full slab after a few slabs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <set>
#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t mib = std::size_t{1} << 20;

/// 20 sizes spread evenly on a log scale from 256 B to 256 KiB (small_max): 19 size classes.
std::vector<std::size_t> mixed_small_sizes() {
  std::vector<std::size_t> sizes;
  for (int k = 0; k < 20; ++k)
    sizes.push_back(static_cast<std::size_t>(256.0 * std::exp2(10.0 * k / 19.0)));
  return sizes;
}

/// The sizes of p's slabs of `chunk`-byte chunks, smallest first.
std::vector<std::size_t> slab_sizes(const sp::pool& p, std::size_t chunk) {
  std::vector<std::size_t> out;
  for (const sp::snapshot_range& r : p.snapshot().ranges)
    if (r.kind == sp::range_kind::slab && r.chunk_bytes == chunk) out.push_back(r.bytes);
  std::sort(out.begin(), out.end());
  return out;
}

/// Allocates on s, one after another, as many `chunk`-byte blocks as the slabs `expected` hold
/// but the last one, and one more: the last of `expected` is then made for that block.
std::vector<void*> fill_slabs(sp::pool& p, const sp::stream& s, std::size_t chunk,
                              const std::vector<std::size_t>& expected) {
  std::size_t n = 1;
  for (std::size_t i = 0; i + 1 < expected.size(); ++i) n += expected[i] / chunk;
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < n; ++i) blocks.push_back(p.allocate(s, chunk));
  return blocks;
}

}  // namespace

TEST(SmallPoolFootprint, TwentyMixedSmallBlocksReserveAtMostTwoMiBAt64KiBGranularity) {
  sp::device d(sp::make_host_backend({.checking = true, .granularity = 64 * kib}));
  sp::pool p(d);
  sp::stream s(d);
  std::vector<void*> blocks;
  std::set<std::size_t> classes;
  for (std::size_t n : mixed_small_sizes()) {
    blocks.push_back(p.allocate(s, n));
    classes.insert(p.block_size(blocks.back()));
  }
  ASSERT_EQ(classes.size(), 19u) << "the sizes were meant to span the small classes";
  const sp::pool_statistics st = p.statistics();
  EXPECT_LE(st.reserved_bytes, 2 * mib) << st.upstream_allocations << " upstream allocations";
  for (void* b : blocks) p.deallocate(s, b);
  s.synchronize();
  EXPECT_EQ(p.trim(), st.reserved_bytes);
  EXPECT_EQ(p.statistics().reserved_bytes, 0u);
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

TEST(SmallPoolFootprint, FiftySuchPoolsReserveAtMostTwoMiBEach) {
  sp::device d(sp::make_host_backend({.granularity = 64 * kib}));
  sp::stream s(d);
  std::vector<sp::pool> pools;
  std::vector<std::vector<void*>> blocks(50);
  for (std::size_t i = 0; i < 50; ++i) {
    sp::pool& p = pools.emplace_back(d);
    for (std::size_t n : mixed_small_sizes()) blocks[i].push_back(p.allocate(s, n));
  }
  std::size_t total = 0;
  std::size_t most = 0;
  for (const sp::pool& p : pools) {
    total += p.statistics().reserved_bytes;
    most = std::max(most, p.statistics().reserved_bytes);
  }
  EXPECT_LE(most, 2 * mib);
  EXPECT_EQ(sp::host_allocated_bytes(d.get_backend()), total) << "the pools hold nothing else";
  EXPECT_LE(total, 50 * 2 * mib);
  for (std::size_t i = 0; i < 50; ++i)
    for (void* b : blocks[i]) pools[i].deallocate(s, b);
}

// A busy class's slabs double from one chunk's worth (a 64 KiB slot here) up to the size every
// slab of it had before: eight chunks and 2 MiB, an upstream allocation of its own.
TEST(SmallPoolFootprint, ABusyClasssSlabsDoubleUpToTheFullSlabAt64KiBGranularity) {
  sp::device d(sp::make_host_backend({.granularity = 64 * kib}));
  sp::pool p(d);
  sp::stream s(d);
  const std::vector<std::size_t> expected = {64 * kib,   128 * kib, 256 * kib, 512 * kib,
                                             1024 * kib, 2 * mib,   2 * mib,   2 * mib};
  const std::vector<void*> small = fill_slabs(p, s, 4 * kib, expected);
  EXPECT_EQ(slab_sizes(p, 4 * kib), expected);
  // The largest class: one chunk, then 2, 4 and 8 (today's slab).
  const std::vector<std::size_t> largest = {256 * kib, 512 * kib, 1 * mib, 2 * mib, 2 * mib};
  const std::vector<void*> large = fill_slabs(p, s, 256 * kib, largest);
  EXPECT_EQ(slab_sizes(p, 256 * kib), largest);
  for (void* b : small) p.deallocate(s, b);
  for (void* b : large) p.deallocate(s, b);
}

// At CUDA's 2 MiB granularity a class's slabs share slab pages; they double from a slot up to the
// size they had before (four chunks, at least a slot), and a busy class makes only those.
TEST(SmallPoolFootprint, ABusyClassReachesItsFullSlabInPagesAt2MiBGranularity) {
  sp::device d(sp::make_host_backend({.granularity = 2 * mib}));
  sp::pool p(d);
  sp::stream s(d);
  const std::vector<std::size_t> mid = {64 * kib, 128 * kib, 256 * kib, 256 * kib, 256 * kib};
  const std::vector<void*> a = fill_slabs(p, s, 64 * kib, mid);
  EXPECT_EQ(slab_sizes(p, 64 * kib), mid);
  const std::vector<std::size_t> tiny = {64 * kib, 64 * kib, 64 * kib};  // 256 chunks each
  const std::vector<void*> b = fill_slabs(p, s, 256, tiny);
  EXPECT_EQ(slab_sizes(p, 256), tiny);
  const std::vector<std::size_t> largest = {256 * kib, 512 * kib, 1 * mib, 1 * mib};
  const std::vector<void*> c = fill_slabs(p, s, 256 * kib, largest);
  EXPECT_EQ(slab_sizes(p, 256 * kib), largest);
  // Every slab is in a page: 64+128+768 + 192 + 256+512+2048 KiB = 3,968 KiB, two pages.
  EXPECT_EQ(p.statistics().reserved_bytes, 4 * mib);
  for (const auto* v : {&a, &b, &c})
    for (void* q : *v) p.deallocate(s, q);
}
