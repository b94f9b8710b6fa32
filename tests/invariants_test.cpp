// DESIGN.md section 4: one test per invariant, each failing when its invariant is broken.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "conformance/accessor.hpp"
#include "core/pool/pool_state.hpp"
#include "core/stream/access.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;
using sp::test::fill_bytes;
using sp::test::first_mismatch;
using sp::test::read_bytes;

namespace {

std::shared_ptr<sp::backend> checked_backend(std::uint64_t seed, bool device_wait = true) {
  return sp::make_host_backend(
      {.checking = true, .max_delay_us = 100, .seed = seed, .device_wait = device_wait});
}

constexpr std::size_t busy_bytes = std::size_t{32} << 20;

}  // namespace

// 1. Reuse is safe. The detector itself is shown to work first (negative control).
TEST(Invariant1ReuseIsSafe, DetectorReportsUnorderedUseOfTheSameMemory) {
  sp::device d(checked_backend(1));
  sp::pool p(d);
  sp::stream s1(d), s2(d), s3(d);
  void* q = p.allocate(s1, 4096);
  // Two streams write the same 256-byte granule (the detector's unit) with no ordering between
  // them. Different bytes of it, so that the test itself has no data race for TSan to report.
  fill_bytes(s1, q, 128, 1);
  fill_bytes(s2, static_cast<char*>(q) + 128, 128, 2);
  // Wait for both through a third stream, so that neither completion is observed by the host
  // before the other fill has run (an observed completion orders later work in real time).
  s3.ref().wait(s1.ref().now());
  s3.ref().wait(s2.ref().now());
  s3.synchronize();
  EXPECT_FALSE(sp::host_violations(d.get_backend()).empty())
      << "the race detector missed two unordered writes";
  p.deallocate(s1, q);
}

TEST(Invariant1ReuseIsSafe, CrossStreamReuseAfterLongRunningUser) {
  for (bool device_wait : {true, false}) {
    sp::device d(checked_backend(2, device_wait));
    sp::pool p(d, {.share_between_streams = true});  // s2 may reuse s1's large blocks
    sp::stream s1(d), s2(d);
    void* busy = p.allocate(s1, busy_bytes);
    std::uint64_t waited = 0;
    for (int i = 0; i < 20; ++i) {
      const std::size_t n = (i % 2 != 0) ? 4096 : (2u << 20);
      void* a = p.allocate(s1, n);
      (void)sp::test::make_busy(s1, busy, busy_bytes);  // s1 stays busy for a while
      fill_bytes(s1, a, n, 0xA1);
      const sp::token t = s1.ref().now();
      p.deallocate(a, std::span<const sp::token>(&t, 1));
      void* b = p.allocate(s2, n);  // possibly a, with s1's work still running
      fill_bytes(s2, b, n, 0xB2);
      EXPECT_EQ(first_mismatch(read_bytes(s2, b, n), 0xB2), -1);
      p.deallocate(s2, b);
      waited = p.statistics().waited_reuses;
    }
    EXPECT_GT(waited, 0u) << "no reuse of a block whose previous user was still running";
    p.deallocate(s1, busy);
    EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{})
        << (device_wait ? "device waits" : "host waits");
  }
}

// 2. Destruction order is free: every permutation of {device handle, pool, stream, array, raw
// block}, each destroyed on its own thread, with work still pending.
TEST(Invariant2DestructionOrder, EveryPermutationFromOtherThreads) {
  std::array<int, 5> order{0, 1, 2, 3, 4};
  int permutations = 0;
  do {
    auto backend = checked_backend(static_cast<std::uint64_t>(permutations) + 3);
    {
      std::optional<sp::device> d(std::in_place, backend);
      std::optional<sp::pool> p(std::in_place, *d);
      std::optional<sp::stream> s(std::in_place, *d);
      std::optional<sp::array<float>> a;
      void* raw = nullptr;
      {
        sp::stream_scope scope(*s);
        a.emplace(5000, *p);
        a->fill(3.f);
        raw = p->allocate(*s, 100000);
        fill_bytes(*s, raw, 100000, 7);
        sp::map(*a, *a, sp::op::mul, 2.f);  // pending work everywhere
      }
      std::optional<sp::pool> raw_owner = *p;  // frees `raw` with a token of s
      const sp::token raw_use = s->ref().now();
      std::function<void()> destroy[5] = {
          [&] { d.reset(); },
          [&] { p.reset(); },
          [&] { s.reset(); },
          [&] { a.reset(); },
          [&] {
            raw_owner->deallocate(raw, std::span<const sp::token>(&raw_use, 1));
            raw_owner.reset();
          },
      };
      for (int i : order) std::thread(destroy[i]).join();
    }
    EXPECT_EQ(sp::host_allocated_bytes(*backend), 0u) << "leak, permutation " << permutations;
    EXPECT_EQ(sp::host_violations(*backend), std::vector<std::string>{});
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 120);
}

// A stream destroyed with work pending retires its timeline only after that work: its blocks,
// freed with its tokens, are then reused by another stream with no wait and no race.
TEST(Invariant2DestructionOrder, DestroyedStreamsBlocksAreReusedSafely) {
  sp::device d(checked_backend(10));
  sp::pool p(d);
  sp::stream s2(d);
  for (int i = 0; i < 5; ++i) {
    void* a = nullptr;
    sp::token t;
    {
      sp::stream s1(d);
      void* busy = p.allocate(s1, busy_bytes);
      a = p.allocate(s1, 2u << 20);
      (void)sp::test::make_busy(s1, busy, busy_bytes);
      fill_bytes(s1, a, 2u << 20, 0x31);
      t = s1.ref().now();
      p.deallocate(s1, busy);
      std::thread([s = std::move(s1)]() mutable { sp::stream dying = std::move(s); }).join();
    }
    EXPECT_TRUE(t.line->retired());
    p.deallocate(a, std::span<const sp::token>(&t, 1));
    void* b = p.allocate(s2, 2u << 20);
    fill_bytes(s2, b, 2u << 20, 0x32);
    EXPECT_EQ(first_mismatch(read_bytes(s2, b, 2u << 20), 0x32), -1);
    p.deallocate(s2, b);
  }
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

// The origin report's shape: a thread's default stream and its arrays die with the thread, while
// the pool and device are dropped by the main thread at the same time.
TEST(Invariant2DestructionOrder, ThreadDefaultStreamDiesWithItsArraysInFlight) {
  auto backend = checked_backend(4);
  for (int round = 0; round < 20; ++round) {
    std::optional<sp::device> d(std::in_place, backend);
    std::vector<sp::array<float>> handed;
    std::thread t([dev = *d, &handed] {
      for (int i = 0; i < 50; ++i) {
        sp::array<float> a(256, dev);
        a.fill(1.f);
        if (i % 2 == 0) handed.push_back(std::move(a));
      }
    });  // no synchronize: work pending when the thread exits
    d.reset();
    t.join();
    std::thread([&] { handed.clear(); }).join();
  }
  EXPECT_EQ(sp::host_allocated_bytes(*backend), 0u);
  EXPECT_EQ(sp::host_violations(*backend), std::vector<std::string>{});
}

// 3. free never blocks: the stream that used the memory is held up behind another stream's long
// work, and the free returns while that work is still known to be pending.
TEST(Invariant3FreeNeverBlocks, FreeReturnsWhileTheStreamIsStillWaiting) {
  sp::device d(checked_backend(5));
  sp::pool p(d);
  sp::stream gate(d), s(d);
  void* busy = p.allocate(gate, busy_bytes);
  bool proven = false;
  int hook_calls = 0;
  p.add_reclaim_hook([&](std::size_t) { ++hook_calls; });
  for (int attempt = 0; attempt < 10 && !proven; ++attempt) {
    const sp::token gate_done = sp::test::make_busy(gate, busy, busy_bytes);
    s.ref().wait(gate_done);  // s cannot run anything until the gate's work is done
    void* small = p.allocate(s, 1000);
    void* large = p.allocate(s, 3u << 20);
    std::optional<sp::array<float>> arr;
    {
      sp::stream_scope scope(s);
      arr.emplace(2000, p);
      arr->fill(1.f);
    }
    fill_bytes(s, small, 1000, 1);
    fill_bytes(s, large, 3u << 20, 2);
    // Free from a foreign thread (a finaliser), both forms, and an array.
    std::thread([&] {
      p.deallocate(s, small);
      const sp::token t = s.ref().now();
      p.deallocate(large, std::span<const sp::token>(&t, 1));
      arr.reset();
    }).join();
    // The frees have returned. If the gate's work is still pending, they cannot have waited for
    // it (nor for s's work, which waits on the gate).
    if (!gate_done.line->poll(gate_done.at)) proven = true;
    s.synchronize();
  }
  EXPECT_TRUE(proven) << "never observed a free returning while its stream's work was pending";
  EXPECT_EQ(hook_calls, 0) << "free called user code";
  p.deallocate(gate, busy);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

// 4. Bad input: a clear error, and the pool exactly as before.
TEST(Invariant4BadInput, ErrorsLeaveThePoolConsistent) {
  sp::device d(checked_backend(6));
  sp::device other_device(checked_backend(7));
  sp::pool p(d, sp::pool_options{.memory_limit = 8u << 20});
  sp::stream s(d), s_other(other_device);
  std::vector<void*> live{p.allocate(s, 512), p.allocate(s, 2u << 20)};
  fill_bytes(s, live[0], 512, 0x11);
  fill_bytes(s, live[1], 2u << 20, 0x22);
  const auto snapshot = [&] {
    const auto st = p.statistics();
    return std::array<std::uint64_t, 4>{st.live_bytes, st.allocations, st.deallocations,
                                        st.reserved_bytes};
  };
  const auto before = snapshot();
  int x = 0;
  void* freed = p.allocate(s, 512);
  p.deallocate(s, freed);
  const auto base = snapshot();
  const std::function<void()> bad[] = {
      [&] { p.deallocate(s, freed); },                              // double free
      [&] { p.deallocate(s, &x); },                                 // foreign pointer
      [&] { p.deallocate(s, static_cast<char*>(live[1]) + 256); },  // inside a block
      [&] { (void)p.allocate(s, ~std::size_t{0}); },                // overflow
      [&] { (void)p.allocate(s_other, 512); },                      // wrong device
      [&] { sp::array<double> a(~std::size_t{0} / 4, p); },         // element count overflow
  };
  for (const auto& fn : bad) {
    EXPECT_THROW(fn(), sp::logic_error);
    EXPECT_EQ(snapshot(), base);
    EXPECT_NO_THROW(sp::detail::access::state(p)->validate());  // every internal invariant too
  }
  // Out of memory: numbers, and nothing changed.
  try {
    (void)p.allocate(s, 16u << 20);
    ADD_FAILURE() << "no out_of_memory";
  } catch (const sp::out_of_memory& e) {
    EXPECT_EQ(e.requested(), 16u << 20);
    EXPECT_EQ(e.limit(), 8u << 20);
  }
  EXPECT_EQ(snapshot()[0], before[0]);
  EXPECT_NO_THROW(sp::detail::access::state(p)->validate());
  EXPECT_EQ(first_mismatch(read_bytes(s, live[0], 512), 0x11), -1);
  EXPECT_EQ(first_mismatch(read_bytes(s, live[1], 2u << 20), 0x22), -1);
  for (void* q : live) p.deallocate(s, q);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

// 5. Nothing is lost: every byte handed out is accounted for, across threads and streams.
TEST(Invariant5StatisticsBalance, LiveEqualsOutstandingAndEverythingReturns) {
  auto backend = checked_backend(8);
  {
    sp::device d(backend);
    sp::pool p(d);
    std::vector<std::thread> ts;
    std::vector<std::vector<std::pair<void*, std::size_t>>> kept(4);
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        sp::stream s(d);
        std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 9);
        std::vector<void*> mine;
        for (int i = 0; i < 400; ++i) {
          if (mine.empty() || rng() % 3 != 0) {
            mine.push_back(p.allocate(s, 1 + rng() % ((rng() % 10 == 0) ? (3u << 20) : 9000u)));
          } else {
            const std::size_t k = rng() % mine.size();
            p.deallocate(s, mine[k]);
            mine[k] = mine.back();
            mine.pop_back();
          }
        }
        for (void* q : mine) kept[static_cast<std::size_t>(t)].emplace_back(q, p.block_size(q));
        // The stream dies with its blocks still live; they are freed below with no stream.
      });
    }
    for (auto& t : ts) t.join();
    std::size_t outstanding = 0, count = 0;
    for (auto& v : kept)
      for (auto& [q, n] : v) outstanding += n, ++count;
    // Reserved bytes are exactly what the segments hold, every free chunk listed once, ...
    EXPECT_NO_THROW(sp::detail::access::state(p)->validate());
    sp::pool_statistics st = p.statistics();
    EXPECT_EQ(st.live_bytes, outstanding);
    EXPECT_EQ(st.allocations - st.deallocations, count);
    EXPECT_EQ(st.allocations,
              st.fresh_allocations + st.same_stream_reuses + st.ready_reuses + st.waited_reuses);
    for (auto& v : kept)
      for (auto& [q, n] : v) p.deallocate(q, {});
    st = p.statistics();
    EXPECT_EQ(st.live_bytes, 0u);
    EXPECT_EQ(st.allocations, st.deallocations);
    p.trim();
    EXPECT_NO_THROW(sp::detail::access::state(p)->validate());
    st = p.statistics();
    EXPECT_EQ(st.reserved_bytes, 0u);
    EXPECT_EQ(st.upstream_allocations, st.upstream_deallocations);
    EXPECT_EQ(sp::host_allocated_bytes(*backend), 0u);
  }
  EXPECT_EQ(sp::host_violations(*backend), std::vector<std::string>{});
}
