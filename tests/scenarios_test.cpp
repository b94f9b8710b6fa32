// The origin report's other test sets (DESIGN.md section 6), on the host backend in checking
// mode with delay injection: uploads from many threads at once, aliasing views, shared buffers and
// wrapped foreign memory, scans on arrays whose blocks were reused across streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "conformance/accessor.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

sp::device checked_device(std::uint64_t seed) {
  return sp::device(sp::make_host_backend({.checking = true, .max_delay_us = 30, .seed = seed}));
}

void expect_no_violations(const sp::device& d) {
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

}  // namespace

TEST(Scenarios, UploadsFromManyThreadsAtOnce) {
  sp::device d = checked_device(1);
  constexpr int threads = 8;
  constexpr int per_thread = 60;
  std::vector<std::vector<sp::array<std::int64_t>>> results(threads);
  std::vector<std::vector<std::vector<std::int64_t>>> expected(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      sp::stream s(d);  // each thread on its own stream
      sp::stream_scope scope(s);
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 100);
      for (int i = 0; i < per_thread; ++i) {
        std::vector<std::int64_t> h(1 + rng() % 5000);
        for (auto& x : h) x = static_cast<std::int64_t>(rng());
        sp::array<std::int64_t> a(std::span<const std::int64_t>(h), d);
        if (i % 3 == 0) {
          EXPECT_EQ(a.download(), h);  // read back on the uploading thread too
        }
        results[static_cast<std::size_t>(t)].push_back(std::move(a));
        expected[static_cast<std::size_t>(t)].push_back(std::move(h));
      }
    });
  }
  for (auto& t : ts) t.join();
  // Read back on the main thread, after every uploading stream is gone.
  sp::stream s(d);
  sp::stream_scope scope(s);
  for (std::size_t t = 0; t < results.size(); ++t)
    for (std::size_t i = 0; i < results[t].size(); ++i)
      ASSERT_EQ(results[t][i].download(), expected[t][i]) << "thread " << t << " array " << i;
  results.clear();
  expect_no_violations(d);
  EXPECT_EQ(d.default_pool().statistics().live_bytes, 0u);
}

TEST(Scenarios, AliasingViews) {
  sp::device d = checked_device(2);
  sp::stream s1(d), s2(d);
  constexpr std::size_t n = 4096;
  std::vector<float> h(n);
  std::iota(h.begin(), h.end(), 0.f);
  std::optional<sp::array<float>> a;
  {
    sp::stream_scope scope(s1);
    a.emplace(std::span<const float>(h), d);
  }
  // Two overlapping views written on two streams in turn: each write is ordered after the last.
  sp::array<float> left = a->view(0, n / 2 + 100);
  sp::array<float> right = a->view(n / 2 - 100, n / 2 + 100);
  for (int i = 0; i < 10; ++i) {
    {
      sp::stream_scope scope(s1);
      sp::map(left, left, sp::op::add, 1.f);
    }
    {
      sp::stream_scope scope(s2);
      sp::map(right, right, sp::op::mul, 2.f);
    }
  }
  // Expected: the overlap [n/2-100, n/2+100) went through both, alternating.
  std::vector<float> expect = h;
  for (int i = 0; i < 10; ++i) {
    for (std::size_t j = 0; j < n / 2 + 100; ++j) expect[j] += 1.f;
    for (std::size_t j = n / 2 - 100; j < n; ++j) expect[j] *= 2.f;
  }
  sp::stream_scope scope(s2);
  EXPECT_EQ(a->download(), expect);
  EXPECT_EQ(left.download(), std::vector<float>(expect.begin(), expect.begin() + n / 2 + 100));
  // A view copied onto an overlapping view of the same buffer.
  sp::array<float> dst = a->view(10, 100);
  dst.copy_from(a->view(2000, 100));
  const auto got = a->download();
  for (std::size_t j = 0; j < 100; ++j) ASSERT_EQ(got[10 + j], expect[2000 + j]);
  a.reset();
  EXPECT_GT(d.default_pool().statistics().live_bytes, 0u) << "views keep the buffer alive";
  left = sp::array<float>();
  right = sp::array<float>();
  dst = sp::array<float>();
  EXPECT_EQ(d.default_pool().statistics().live_bytes, 0u);
  expect_no_violations(d);
}

TEST(Scenarios, SharedBuffersAndWrap) {
  sp::device d = checked_device(3);
  sp::stream s(d);
  sp::stream_scope scope(s);
  // Foreign memory the library never saw (host memory is device memory on the host backend).
  std::vector<std::int64_t> foreign(1000, -1);
  {
    auto w = sp::array<std::int64_t>::wrap(foreign.data(), foreign.size(), d);
    EXPECT_FALSE(w.get_buffer().owned());
    w.fill(5);
    auto shared = w.view(0, 500);  // a shared view of wrapped memory
    sp::map(shared, shared, sp::op::mul, std::int64_t{3});
    EXPECT_EQ(sp::reduce(w, sp::op::add), 500 * 15 + 500 * 5);
    sp::array<std::int64_t> copy(1000, d);
    copy.copy_from(w);
    EXPECT_EQ(copy.download(), w.download());
  }
  // The wrapped memory is the caller's, intact and not freed.
  EXPECT_EQ(foreign[0], 15);
  EXPECT_EQ(foreign[999], 5);
  // Memory shared between a pool allocation and a wrap of it on another stream.
  sp::pool p(d);
  void* raw = p.allocate(s, 4096);
  sp::stream s2(d);
  {
    sp::stream_scope scope2(s2);
    auto w = sp::array<float>::wrap(static_cast<float*>(raw), 1024, d);
    w.fill(2.f);
    EXPECT_EQ(sp::reduce(w, sp::op::add), 2048.f);
  }
  p.record_use(raw, s2.ref().now());
  p.deallocate(s, raw);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
  expect_no_violations(d);
}

// The report's failing test set: scans on arrays whose blocks were last used by other streams,
// some of them destroyed.
TEST(Scenarios, ScansOnBlocksReusedAcrossStreams) {
  sp::device d = checked_device(4);
  sp::pool p = d.default_pool();
  std::mt19937_64 rng(5);
  sp::stream mine(d);
  for (int round = 0; round < 10; ++round) {
    // Other streams (one per thread, gone afterwards) use and free blocks of several sizes.
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t) {
      ts.emplace_back([&d, t] {
        sp::stream s(d);
        sp::stream_scope scope(s);
        for (std::size_t n : {1000u, 3000u, 70000u, 300000u}) {
          sp::array<std::int64_t> a(n + static_cast<std::size_t>(t), d);
          a.fill(-7);
          sp::inclusive_scan(a, a);
        }  // freed with pending work, no synchronisation
      });
    }
    for (auto& t : ts) t.join();
    const sp::pool_statistics before = p.statistics();
    sp::stream_scope scope(mine);
    for (std::size_t n : {1000u, 3000u, 70000u, 300000u}) {
      std::vector<std::int64_t> h(n);
      for (auto& x : h) x = static_cast<std::int64_t>(rng() % 1000) - 500;
      sp::array<std::int64_t> a(std::span<const std::int64_t>(h), d), out(n, d);
      sp::inclusive_scan(out, a);
      std::vector<std::int64_t> expect(n);
      std::inclusive_scan(h.begin(), h.end(), expect.begin());
      ASSERT_EQ(out.download(), expect) << "round " << round << " n " << n;
      std::vector<float> hf(n);
      for (std::size_t i = 0; i < n; ++i) hf[i] = static_cast<float>(h[i] % 8);
      sp::array<float> af(std::span<const float>(hf), d);
      sp::exclusive_scan(af, af, 1.f);
      std::vector<float> expect_f(n);
      std::exclusive_scan(hf.begin(), hf.end(), expect_f.begin(), 1.f);
      ASSERT_EQ(af.download(), expect_f) << "round " << round << " n " << n;
    }
    if (round > 0) {
      const sp::pool_statistics after = p.statistics();
      EXPECT_GT(sp::test::reuses(after), sp::test::reuses(before)) << "round " << round;
    }
  }
  expect_no_violations(d);
}
