// The pool's statistics never lie (issue 45, finding 1): live, cached and reserved balance, and
// the peaks are exact for a thread's own calls whatever streams it uses (live changes are
// pending per thread, src/core/pool/live_cell.hpp), never wrap, and peak live never passes peak
// reserved. Each test failed when the pending change was kept per stream cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

void expect_balanced(const sp::pool_statistics& st) {
  EXPECT_LE(st.live_bytes, st.reserved_bytes);
  EXPECT_EQ(st.cached_bytes, st.reserved_bytes - st.live_bytes);
  EXPECT_LE(st.live_bytes, st.peak_live_bytes);
  EXPECT_LE(st.reserved_bytes, st.peak_reserved_bytes);
  EXPECT_LE(st.peak_live_bytes, st.peak_reserved_bytes);
}

}  // namespace

// The Python binding's free (and every Array finaliser) frees with tokens and no stream. A large
// block freed so while its allocation was still pending took the shared counter below zero; an
// unsigned counter wrapped, and the next slow-path allocation made the peak about 2^64.
TEST(Statistics, ALargeBlockFreedWithoutAStreamDoesNotWrapTheCounter) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  void* big = p.allocate(s, MiB);
  p.deallocate(big, {});              // no stream: tokens only
  void* small = p.allocate(s, 4096);  // a fresh chunk: the slow path counts it
  const sp::pool_statistics st = p.statistics();
  EXPECT_EQ(st.live_bytes, p.block_size(small));
  EXPECT_GE(st.peak_live_bytes, MiB);
  expect_balanced(st);
  p.deallocate(s, small);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
}

// One thread, two streams: each stream's change was pending apart, so the peak missed the
// other's (10 MiB reported where 20 MiB were live).
TEST(Statistics, ThePeakOfOneThreadOnTwoStreamsIsExact) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream a(d);
  sp::stream b(d);
  std::vector<void*> on_a, on_b;
  for (int i = 0; i < 5; ++i) on_a.push_back(p.allocate(a, MiB));
  for (int i = 0; i < 5; ++i) on_b.push_back(p.allocate(b, MiB));
  for (void* q : on_a) p.deallocate(a, q);
  for (void* q : on_b) p.deallocate(b, q);
  // Read only after the peak: a reader's own sum would lift it.
  const sp::pool_statistics st = p.statistics();
  EXPECT_EQ(st.peak_live_bytes, 10 * MiB);
  EXPECT_EQ(st.live_bytes, 0u);
  expect_balanced(st);
}

// Allocated on one stream, freed on another, under a 16 MiB limit: the freeing stream's
// negative change, pending apart, lifted every peak taken on the allocating stream (peak live
// 79,883,008 against peak reserved 16,777,216). The test tracks the true live sum itself.
TEST(Statistics, CrossStreamFreesUnderALimitKeepThePeakExact) {
  sp::device d(sp::make_host_backend({}));
  sp::pool_options o;
  o.memory_limit = 16 * MiB;
  sp::pool p(d, o);
  sp::stream a(d);
  sp::stream b(d);
  std::size_t live = 0, peak = 0;
  std::vector<void*> held;
  for (int round = 0; round < 200; ++round) {
    const std::size_t n = (round % 7 + 1) * 256 * 1024;  // 256 KiB .. 1.75 MiB, small and large
    if (live + 2 * n > 12 * MiB) {
      for (void* q : held) {
        live -= p.block_size(q);
        p.deallocate(b, q);  // the other stream
      }
      held.clear();
    }
    void* q = p.allocate(a, n);
    held.push_back(q);
    live += p.block_size(q);
    peak = std::max(peak, live);
  }
  const sp::pool_statistics st = p.statistics();
  EXPECT_EQ(st.live_bytes, live);
  EXPECT_EQ(st.peak_live_bytes, peak);
  expect_balanced(st);
  for (void* q : held) p.deallocate(a, q);
}

// Threads: each thread's pending change is its own, so what a reader sums at a moment when no
// thread is inside a call is exact, and the peak it reads is at least that.
TEST(Statistics, AReaderBetweenThreadsCallsSeesExactLiveBytes) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  constexpr int threads = 4;
  constexpr int blocks = 6;
  std::barrier sync(threads + 1);
  std::vector<std::thread> pool_threads;
  std::vector<std::size_t> held(threads, 0);
  for (int t = 0; t < threads; ++t) {
    pool_threads.emplace_back([&, t] {
      sp::stream s(d);
      std::vector<void*> mine;
      for (int i = 0; i < blocks; ++i) {
        mine.push_back(p.allocate(s, (t % 2 == 0 ? 1000 : 300 * 1024) * (i + 1)));
        held[static_cast<std::size_t>(t)] += p.block_size(mine.back());
      }
      sync.arrive_and_wait();  // all hold their blocks
      sync.arrive_and_wait();  // the reader has read
      for (void* q : mine) p.deallocate(s, q);
    });
  }
  sync.arrive_and_wait();
  std::size_t sum = 0;
  for (std::size_t h : held) sum += h;
  const sp::pool_statistics st = p.statistics();
  EXPECT_EQ(st.live_bytes, sum);
  EXPECT_GE(st.peak_live_bytes, sum);
  expect_balanced(st);
  sync.arrive_and_wait();
  for (auto& th : pool_threads) th.join();
  // The threads are gone: what they had pending went into the counter at their exit.
  const sp::pool_statistics after = p.statistics();
  EXPECT_EQ(after.live_bytes, 0u);
  EXPECT_GE(after.peak_live_bytes, sum);
  expect_balanced(after);
}

// A pool's statistics stay balanced while threads that come and go free each other's blocks
// without a stream (finalisers): no counter wraps, and the end is exact.
TEST(Statistics, ThreadsThatComeAndGoLeaveTheCountExact) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  std::vector<void*> handed;
  for (int generation = 0; generation < 20; ++generation) {
    std::thread([&] {
      sp::stream s(d);
      for (void* q : handed) p.deallocate(q, {});
      handed.clear();
      for (int i = 0; i < 10; ++i) handed.push_back(p.allocate(s, (i % 3 == 0) ? MiB : 4096));
    }).join();
    expect_balanced(p.statistics());
  }
  for (void* q : handed) p.deallocate(q, {});
  const sp::pool_statistics st = p.statistics();
  EXPECT_EQ(st.live_bytes, 0u);
  expect_balanced(st);
}

// reset_peak_statistics() (PyTorch's reset_peak_memory_stats) starts both peaks from now: after
// it they are the highest live and reserved bytes since the reset, exactly, not the pool's
// all-time peaks; before it those stayed.
TEST(Statistics, ResetPeaksStartFromNow) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  std::vector<void*> held;
  for (int i = 0; i < 8; ++i) held.push_back(p.allocate(s, MiB));
  for (int i = 0; i < 6; ++i) p.deallocate(s, held[static_cast<std::size_t>(i)]);
  held.erase(held.begin(), held.begin() + 6);
  s.synchronize();
  p.trim();
  const sp::pool_statistics before = p.statistics();
  ASSERT_GE(before.peak_live_bytes, 8 * MiB);
  ASSERT_LT(before.reserved_bytes, before.peak_reserved_bytes);  // trim gave memory back

  p.reset_peak_statistics();
  const sp::pool_statistics now = p.statistics();
  const std::size_t two = p.block_size(held[0]) + p.block_size(held[1]);
  EXPECT_EQ(now.live_bytes, two);
  EXPECT_EQ(now.peak_live_bytes, two);
  EXPECT_EQ(now.peak_reserved_bytes, now.reserved_bytes);
  expect_balanced(now);

  held.push_back(p.allocate(s, MiB));
  const sp::pool_statistics after = p.statistics();
  EXPECT_EQ(after.peak_live_bytes, two + p.block_size(held[2]));
  EXPECT_EQ(after.peak_reserved_bytes, std::max(now.reserved_bytes, after.reserved_bytes));
  EXPECT_LT(after.peak_live_bytes, before.peak_live_bytes);
  expect_balanced(after);
  for (void* q : held) p.deallocate(s, q);
}
