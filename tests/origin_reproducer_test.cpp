// Ports of the origin report's reproducer (DESIGN.md section 2, issue 2): a thread allocates
// 1000 small arrays on its own stream, fills them, synchronises and exits; its arrays die
// (a) inside the thread, (b) after the thread and its stream are gone, (c) concurrently on other
// threads while the stream is being destroyed. Then the main thread uploads 1000 arrays of random
// data, which must reuse those blocks, and reads every one back exactly. In the original this
// waited on a destroyed queue and crashed; here the freed blocks carry only tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "conformance/accessor.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

constexpr int rounds = 20;
constexpr std::size_t arrays_per_round = 1000;
constexpr std::size_t elements = 1024;

enum class variant { inside_thread, after_thread, concurrently };

sp::device make_device(std::uint64_t seed) {
  return sp::device(sp::make_host_backend({.checking = true, .max_delay_us = 2, .seed = seed}));
}

std::vector<sp::array<float>> allocate_and_fill(const sp::device& d) {
  std::vector<sp::array<float>> as;
  as.reserve(arrays_per_round);
  for (std::size_t i = 0; i < arrays_per_round; ++i) as.emplace_back(elements, d);
  for (auto& a : as) a.fill(1.f);
  return as;
}

// One `use_elsewhere(1000)` of the report. Returns arrays that outlive the thread (variant b).
std::vector<sp::array<float>> use_elsewhere(const sp::device& d, variant v) {
  std::vector<sp::array<float>> survivors;
  switch (v) {
    case variant::inside_thread:
      // The thread's default stream, like the report's task-local stream: destroyed when the
      // thread exits, right after the arrays.
      std::thread([&] {
        auto as = allocate_and_fill(d);
        sp::current_stream(d).synchronize();
      }).join();
      break;
    case variant::after_thread:
      std::thread([&] {
        sp::stream s(d);
        sp::stream_scope scope(s);
        survivors = allocate_and_fill(d);
        s.synchronize();
      }).join();  // the stream is gone; the arrays are still alive
      break;
    case variant::concurrently: {
      constexpr int killers = 3;
      std::barrier start(killers + 1);
      std::vector<std::vector<sp::array<float>>> parts(killers);
      std::vector<std::thread> threads;
      std::thread owner([&] {
        std::optional<sp::stream> s(std::in_place, d);
        {
          sp::stream_scope scope(*s);
          auto as = allocate_and_fill(d);
          s->synchronize();
          for (std::size_t i = 0; i < as.size(); ++i)
            parts[i % killers].push_back(std::move(as[i]));
        }
        for (int k = 0; k < killers; ++k) {
          threads.emplace_back([&parts, &start, k] {
            start.arrive_and_wait();
            parts[static_cast<std::size_t>(k)].clear();  // frees, racing with the stream's end
          });
        }
        start.arrive_and_wait();
        s.reset();
      });
      owner.join();
      for (auto& t : threads) t.join();
      break;
    }
  }
  return survivors;
}

void run_reproducer(variant v, std::uint64_t seed) {
  sp::device d = make_device(seed);
  sp::pool p = d.default_pool();
  sp::stream main_stream(d);
  sp::stream_scope scope(main_stream);
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  std::uniform_real_distribution<float> dist(0.f, 1.f);
  std::size_t reserved_after_first = 0;
  for (int round = 0; round < rounds; ++round) {
    { auto survivors = use_elsewhere(d, v); }  // (b): destroyed here, after thread and stream
    const sp::pool_statistics before = p.statistics();
    std::vector<std::vector<float>> host(arrays_per_round, std::vector<float>(elements));
    std::vector<sp::array<float>> bs;
    bs.reserve(arrays_per_round);
    for (auto& h : host) {
      for (float& x : h) x = dist(rng);
      bs.emplace_back(std::span<const float>(h), d);
    }
    const sp::pool_statistics after = p.statistics();
    // The uploads reused the other thread's blocks rather than growing the pool.
    EXPECT_GE(sp::test::reuses(after) - sp::test::reuses(before), arrays_per_round - 8)
        << "round " << round;
    if (round > 0) {
      EXPECT_LE(after.reserved_bytes, reserved_after_first) << "round " << round;
    }
    // Read every array back: the first ones one by one (Array(b) in the report), the rest
    // gathered on the device into one array and downloaded at once (fewer host round trips).
    for (std::size_t i = 0; i < 10; ++i)
      ASSERT_EQ(bs[i].download(), host[i]) << "round " << round << ", array " << i;
    sp::array<float> all(arrays_per_round * elements, d);
    for (std::size_t i = 0; i < bs.size(); ++i) all.view(i * elements, elements).copy_from(bs[i]);
    const std::vector<float> got = all.download();
    for (std::size_t i = 0; i < bs.size(); ++i) {
      ASSERT_TRUE(std::equal(host[i].begin(), host[i].end(),
                             got.begin() + static_cast<std::ptrdiff_t>(i * elements)))
          << "round " << round << ", array " << i;
    }
    if (round == 0) reserved_after_first = p.statistics().reserved_bytes;
    EXPECT_LE(p.statistics().reserved_bytes, reserved_after_first) << "round " << round;
  }
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
  EXPECT_EQ(p.statistics().live_bytes, 0u);
}

}  // namespace

TEST(OriginReproducer, ArraysDestroyedInsideTheThread) {
  run_reproducer(variant::inside_thread, 1);
}

TEST(OriginReproducer, ArraysDestroyedAfterThreadAndStreamAreGone) {
  run_reproducer(variant::after_thread, 2);
}

TEST(OriginReproducer, ArraysDestroyedConcurrentlyWithTheStream) {
  run_reproducer(variant::concurrently, 3);
}
