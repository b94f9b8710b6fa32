// Basic pool behaviour on the host backend: allocate, free, reuse, statistics.
#include <gtest/gtest.h>

#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

TEST(PoolBasic, SameStreamReuseIsImmediate) {
  sp::device d(sp::make_host_backend({.checking = true}));
  sp::pool p(d);
  sp::stream s(d);
  void* a = p.allocate(s, 1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(p.block_size(a), 1024u);
  p.deallocate(s, a);
  void* b = p.allocate(s, 1000);
  EXPECT_EQ(a, b);
  auto st = p.statistics();
  EXPECT_EQ(st.same_stream_reuses, 1u);
  EXPECT_EQ(st.live_bytes, 1024u);
  p.deallocate(s, b);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
  EXPECT_THROW(p.deallocate(s, b), sp::logic_error);
}

TEST(PoolBasic, ArrayRoundTrip) {
  sp::device d(sp::make_host_backend({.checking = true, .max_delay_us = 50}));
  std::vector<float> h(1024);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i);
  sp::array<float> a(std::span<const float>(h), d);
  EXPECT_EQ(a.download(), h);
  sp::array<float> out(1024, d);
  sp::inclusive_scan(out, a);
  auto r = out.download();
  EXPECT_FLOAT_EQ(r[1023], 1023.f * 1024.f / 2.f);
  EXPECT_FLOAT_EQ(sp::reduce(a, sp::op::add), 1023.f * 1024.f / 2.f);
  EXPECT_TRUE(sp::host_violations(d.get_backend()).empty());
}

TEST(PoolBasic, LiveBytesStayExactAcrossStreamsAndTheirDestruction) {
  // Each stream adds its small reuses to the pool's live count in steps (stream_cache::live_delta);
  // the statistics must still add up exactly: across streams, frees on another stream than the
  // allocation's, and streams destroyed with a delta pending.
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream a(d);
  std::vector<void*> kept;
  {
    sp::stream b(d);
    for (int round = 0; round < 50; ++round) {
      std::vector<void*> on_a, on_b;
      for (int i = 0; i < 20; ++i) on_a.push_back(p.allocate(a, 4096));
      for (int i = 0; i < 7; ++i) on_b.push_back(p.allocate(b, 1000));
      for (void* q : on_a) p.deallocate(b, q);  // freed on the other stream
      for (void* q : on_b) p.deallocate(b, q);
    }
    for (int i = 0; i < 5; ++i) kept.push_back(p.allocate(b, 4096));  // fast path on b: pending
    EXPECT_EQ(p.statistics().live_bytes, 5 * p.block_size(kept[0]));
  }  // b is destroyed with its delta pending
  const std::size_t block = p.block_size(kept[0]);
  EXPECT_EQ(p.statistics().live_bytes, 5 * block);
  (void)p.trim();  // forgets b's cache
  EXPECT_EQ(p.statistics().live_bytes, 5 * block);
  for (void* q : kept) p.deallocate(a, q);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
  EXPECT_GE(p.statistics().peak_live_bytes, 20 * block);
}

TEST(PoolBasic, SmallClassesShareSlabPagesAndTrimGivesThemBack) {
  // With a 2 MiB granularity (CUDA's), a few blocks of many size classes used to hold 2 MiB per
  // class; their slabs now share pages of 64 KiB slots (src/core/slab_pages.hpp).
  sp::device d(sp::make_host_backend({.checking = true, .granularity = std::size_t{2} << 20}));
  sp::pool p(d);
  sp::stream s(d);
  std::vector<void*> blocks;
  for (std::size_t n = 256; n <= 64 * 1024; n *= 2)
    blocks.push_back(p.allocate(s, n));  // 9 classes
  sp::pool_statistics st = p.statistics();
  EXPECT_EQ(st.upstream_allocations, 1u) << "nine slabs in one page";
  EXPECT_EQ(st.reserved_bytes, std::size_t{2} << 20);
  for (void* b : blocks) p.deallocate(s, b);
  s.synchronize();
  EXPECT_EQ(p.trim(), std::size_t{2} << 20) << "the page goes back with its last slab";
  st = p.statistics();
  EXPECT_EQ(st.reserved_bytes, 0u);
  EXPECT_EQ(st.upstream_deallocations, 1u);
}
