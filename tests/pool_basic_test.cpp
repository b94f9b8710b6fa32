// Basic pool behaviour on the host backend: allocate, free, reuse, statistics.
#include <gtest/gtest.h>

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
