// Basic pool behaviour on the host backend: allocate, free, reuse, statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

/// Frees `blocks` on s, more than `at_least` bytes, and checks the total bound: s's cache keeps
/// at most 4 x per_class of them and some; the rest is in the shared lists, none lost.
void expect_cache_within_total_bound(sp::pool& p, const sp::stream& s,
                                     const std::vector<void*>& blocks, std::size_t per_class,
                                     std::size_t at_least) {
  std::size_t freed = 0;
  for (void* q : blocks) {
    freed += p.block_size(q);
    p.deallocate(s, q);
  }
  ASSERT_GT(freed, at_least);
  const sp::pool_statistics st = p.statistics();
  std::size_t cached_on_s = 0;
  for (const sp::stream_statistics& c : st.streams) cached_on_s += c.cached_bytes;
  EXPECT_LE(cached_on_s, 4 * per_class);
  EXPECT_GT(cached_on_s, 0u);
  EXPECT_EQ(st.live_bytes, 0u);
  EXPECT_GE(st.cached_bytes, freed);
}

}  // namespace

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
  // class; their slabs now share pages of 64 KiB slots (src/core/pool/slab_pages.hpp).
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

// One class: a bin past stream_cache_bytes spills its older half to the shared list, whichever way
// the free goes (the owner thread's fast path declines a push past the bound and the locked
// push spills; another thread's free takes the lock), and what was spilled serves another stream
// with no growth.
TEST(PoolBasic, ABinPastItsBoundSpillsItsOlderHalfToTheSharedList) {
  sp::device d(sp::make_host_backend({}));
  constexpr std::size_t per_class = std::size_t{64} << 10;
  sp::pool p(d, {.stream_cache_bytes = per_class});
  const auto cached_on = [&](const sp::stream& on) {
    for (const sp::stream_statistics& c : p.statistics().streams)
      if (c.timeline_id == on.ref().get_timeline().id()) return c.cached_bytes;
    return std::size_t{0};
  };
  for (const bool other_thread : {false, true}) {
    sp::stream s(d);
    std::vector<void*> blocks;
    for (int i = 0; i < 48; ++i) blocks.push_back(p.allocate(s, 4096));  // 192 KiB
    const auto free_all = [&] {
      for (void* b : blocks) p.deallocate(s, b);
    };
    if (other_thread) {
      std::thread(free_all).join();
    } else {
      free_all();
    }
    EXPECT_LE(cached_on(s), per_class) << "other thread: " << other_thread;
    EXPECT_GT(cached_on(s), per_class / 4) << "the newer half stays";
    s.synchronize();  // per stream, a spilled chunk is taken when its work is known complete
    const std::size_t reserved = p.statistics().reserved_bytes;
    const sp::pool_statistics before = p.statistics();
    sp::stream t(d);
    std::vector<void*> again;
    for (int i = 0; i < 24; ++i) again.push_back(p.allocate(t, 4096));
    const sp::pool_statistics after = p.statistics();
    EXPECT_EQ(after.reserved_bytes, reserved) << "the spilled chunks serve another stream";
    EXPECT_EQ(after.fresh_allocations, before.fresh_allocations);
    for (void* b : again) p.deallocate(t, b);
  }
}

// A stream that frees many size classes keeps at most 4 x stream_cache_bytes in its cache in
// all, not that much per class: the fullest bin spills its older half to the shared lists.
TEST(PoolBasic, AStreamCacheIsBoundedInTotalNotOnlyPerClass) {
  sp::device d(sp::make_host_backend({}));
  constexpr std::size_t per_class = std::size_t{1} << 20;
  sp::pool p(d, {.stream_cache_bytes = per_class});
  sp::stream s(d);
  std::vector<void*> blocks;
  for (std::size_t size = 4 << 10; size <= (256 << 10); size += size / 2) {
    void* first = p.allocate(s, size);
    blocks.push_back(first);
    // Just under the per-class limit in each class, so that no bin spills on its own.
    const std::size_t n = (per_class * 9 / 10) / p.block_size(first);
    for (std::size_t i = 1; i < n; ++i) blocks.push_back(p.allocate(s, size));
  }
  // More than 8 x per_class: without the total bound, the cache would hold it all.
  expect_cache_within_total_bound(p, s, blocks, per_class, 8 * per_class);
}

// The same bound when every bin holds one chunk: a stream that frees one chunk of each of many
// large classes (a pool with a high small_max) must not keep them all because no bin has two.
TEST(PoolBasic, AStreamCacheOfSingleChunkBinsIsBoundedInTotalToo) {
  sp::device d(sp::make_host_backend({}));
  constexpr std::size_t per_class = std::size_t{4} << 20;
  sp::pool p(d, {.small_max = std::size_t{4} << 20, .stream_cache_bytes = per_class});
  sp::stream s(d);
  std::vector<void*> blocks;
  for (std::size_t size = 256 << 10; size <= (std::size_t{4} << 20); size += size / 8)
    blocks.push_back(p.allocate(s, size));
  // One chunk per class, and more than the total bound.
  expect_cache_within_total_bound(p, s, blocks, per_class, 4 * per_class);
}

// Contention per lock: each kind's total is the sum over its locks, and a stream's cache says
// whether its lock is still biased to one thread: no more once a second thread allocated on it.
TEST(PoolBasic, ContentionIsCountedPerLockAndAStreamSharedByThreadsLosesItsBias) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  p.deallocate(s, p.allocate(s, 4096));
  const auto stats_of = [&](const sp::stream& on) {
    const sp::pool_statistics st = p.statistics();
    for (const sp::stream_statistics& c : st.streams)
      if (c.timeline_id == on.ref().get_timeline().id()) return c;
    ADD_FAILURE() << "no statistics for the stream";
    return sp::stream_statistics{};
  };
  std::thread([&] {
    for (int i = 0; i < 1000; ++i) p.deallocate(s, p.allocate(s, 4096));
  }).join();
  EXPECT_FALSE(stats_of(s).biased) << "another thread allocated on the stream";

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      const sp::stream own(d);
      for (int i = 0; i < 2000; ++i) {
        p.deallocate(s, p.allocate(s, 4096));  // shared: the cache lock may be contended
        p.deallocate(own, p.allocate(own, (std::size_t{1} << 20) + 4096));
      }
    });
  }
  for (auto& t : threads) t.join();
  const sp::pool_statistics st = p.statistics();
  const auto sum = [](const std::vector<std::uint64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
  };
  EXPECT_EQ(st.contention.per_large_shard.size(), 16u);
  EXPECT_FALSE(st.contention.per_class_list.empty());
  EXPECT_EQ(sum(st.contention.per_large_shard), st.contention.large_shards);
  EXPECT_EQ(sum(st.contention.per_class_list), st.contention.class_lists);
  std::uint64_t per_stream = 0;
  for (const sp::stream_statistics& c : st.streams) per_stream += c.contended;
  EXPECT_LE(per_stream, st.contention.stream_caches);  // gone streams' counts are folded in
}

// A stream that stops (a worker waiting for input) does not keep its cache while others grow:
// once the pool has made 16 MiB of slabs without it allocating or freeing, its chunks go to the
// shared lists, and another stream reuses them with no wait and no new memory.
TEST(PoolBasic, AnIdleStreamsCacheGoesToTheStreamsThatGrow) {
  sp::device d(sp::make_host_backend({.checking = true}));
  sp::pool p(d);
  sp::stream idle(d), busy(d);
  constexpr std::size_t small = 4096, other = 64 << 10;
  std::vector<void*> cached;
  for (int i = 0; i < 64; ++i) cached.push_back(p.allocate(idle, small));
  for (void* q : cached) p.deallocate(idle, q);
  idle.synchronize();
  const auto cached_on = [&](const sp::stream& s) {
    for (const sp::stream_statistics& c : p.statistics().streams)
      if (c.timeline_id == s.ref().get_timeline().id()) return c.cached_bytes;
    return std::size_t{0};
  };
  ASSERT_EQ(cached_on(idle), 64 * small);
  // busy grows the pool by well over twice the idle check's 16 MiB, in another class.
  std::vector<void*> held;
  while (p.statistics().reserved_bytes < (48u << 20)) held.push_back(p.allocate(busy, other));
  EXPECT_EQ(cached_on(idle), 0u);
  const auto before = p.statistics();
  void* q = p.allocate(busy, small);
  const auto after = p.statistics();
  EXPECT_NE(std::find(cached.begin(), cached.end(), q), cached.end());
  EXPECT_EQ(after.fresh_allocations, before.fresh_allocations);
  EXPECT_EQ(after.device_waits + after.host_waits, before.device_waits + before.host_waits);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  p.deallocate(busy, q);
  for (void* h : held) p.deallocate(busy, h);
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

// A shared pool's stream that takes from another stream's cache takes the older half of the bin
// in one visit (a visit to a cache biased to another thread is a heavy fence): the chunk it needs,
// and the rest to the shared list, where its next misses find them. The other stream keeps the
// newer half.
TEST(PoolBasic, AStealTakesTheOlderHalfOfTheBinInOneVisit) {
  // With 64 KiB upstream granularity, a full slab of this class is its own 2 MiB allocation: 8
  // chunks. The class's first three slabs (1, 2 and 4 chunks) are held live on w.
  sp::device d(sp::make_host_backend({.checking = true, .granularity = 64u << 10}));
  sp::pool p(d, {.share_between_streams = true});
  sp::stream a(d), b(d), w(d);
  constexpr std::size_t chunk = 256 << 10;
  std::vector<void*> ramp;
  for (int i = 0; i < 7; ++i) ramp.push_back(p.allocate(w, chunk));
  std::vector<void*> freed;
  for (int i = 0; i < 8; ++i) freed.push_back(p.allocate(b, chunk));  // the slab, all carved
  for (void* q : freed) p.deallocate(b, q);
  const auto cached_on = [&](const sp::stream& s) {
    for (const sp::stream_statistics& c : p.statistics().streams)
      if (c.timeline_id == s.ref().get_timeline().id()) return c.cached_bytes;
    return std::size_t{0};
  };
  ASSERT_EQ(cached_on(b), 8 * chunk);
  const std::size_t reserved = p.statistics().reserved_bytes;
  std::vector<void*> on_a;
  const auto take = [&](std::size_t n, std::size_t left_on_b) {
    for (std::size_t i = 0; i < n; ++i) {
      on_a.push_back(p.allocate(a, chunk));
      EXPECT_NE(std::find(freed.begin(), freed.end(), on_a.back()), freed.end());
    }
    EXPECT_EQ(cached_on(b), left_on_b * chunk) << "after " << on_a.size() << " on a";
  };
  take(1, 4);  // one steal: 1 to a, 3 to the shared list, 4 stay
  take(3, 4);  // the shared list: no visit
  take(1, 2);  // the next steal: half of the 4
  EXPECT_EQ(p.statistics().reserved_bytes, reserved);
  for (void* q : on_a) p.deallocate(a, q);
  for (void* q : ramp) p.deallocate(w, q);
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

// Size 0 is taken as 1 byte: with small_max 0 every request is a large block, size 0 too (a
// unique block, freed like any other), and no slab is made for it.
TEST(PoolBasic, SizeZeroIsALargeBlockWhenEveryRequestIs) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d, {.small_max = 0});
  sp::stream s(d);
  void* zero = p.allocate(s, 0);
  void* one = p.allocate(s, 1);
  EXPECT_NE(zero, one);
  for (const sp::snapshot_range& r : p.snapshot().ranges)
    EXPECT_NE(r.kind, sp::range_kind::slab) << "a slab at " << r.base;
  p.deallocate(s, zero);
  p.deallocate(s, one);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
}
