// The scenario conformance suite: the origin report's scenarios and the cross-stream ordering test
// that a build without device-side waits (STREAMPOOL_FAULT_SKIP_DEVICE_WAIT) must fail, on every
// backend. A backend instantiates it with the fixture of pool_conformance.hpp (name, available(),
// make_device(), violations(), upstream_bytes(), busy_bytes). It may add, each optional with the
// default in scenario_traits below:
//
//   struct my_fixture {
//     ...                                     // the pool_conformance.hpp contract
//     static constexpr int origin_rounds = 10;  // rounds of the origin reproducer
//     static constexpr int origin_arrays = 500; // arrays of 1024 floats allocated in each round
//     static constexpr int busy_fills = 4;      // fills of busy_bytes that keep stream A busy
//     struct busy_scope {                       // RAII, held while A's busy work, its last write,
//       busy_scope();                           // the free and B's reuse are queued (slows the
//       ~busy_scope();                          // backend down where a fill alone is too fast)
//     };
//     struct scenario_scope {                   // RAII, held through each test of this suite,
//       scenario_scope();                       // made after make_device() (a setting that only
//       ~scenario_scope();                      // these tests want)
//     };
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(Name, ScenarioConformance, ::testing::Types<my_fixture>);
//
// Select the ordering test alone (the fault preset, compute-sanitizer) with the gtest filter
// `*ScenarioConformance*.CrossStreamReuseWaitsOnTheDevice`.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "conformance/accessor.hpp"
#include "streampool/streampool.hpp"

namespace streampool::test {

/// What a fixture leaves out of the contract above: a scope that does nothing.
struct no_scope {};

template <class F>
using busy_scope_t = typename F::busy_scope;
template <class F>
using scenario_scope_t = typename F::scenario_scope;

/// Scope<F> where the fixture has that type, no_scope where it does not.
template <template <class> class Scope, class F>
struct scope_or_none {
  using type = no_scope;
};
template <template <class> class Scope, class F>
requires requires { typename Scope<F>; }
struct scope_or_none<Scope, F> {
  using type = Scope<F>;
};

/// A fixture's scenario settings, with the defaults for what it leaves out.
template <class F>
struct scenario_traits {
  static constexpr int origin_rounds = [] {
    if constexpr (requires { F::origin_rounds; }) return F::origin_rounds;
    return 10;
  }();
  static constexpr int origin_arrays = [] {
    if constexpr (requires { F::origin_arrays; }) return F::origin_arrays;
    return 500;
  }();
  static constexpr int busy_fills = [] {
    if constexpr (requires { F::busy_fills; }) return F::busy_fills;
    return 4;
  }();
  using busy_scope = typename scope_or_none<busy_scope_t, F>::type;
  using scenario_scope = typename scope_or_none<scenario_scope_t, F>::type;
};

template <class F>
class ScenarioConformance : public ::testing::Test {
 protected:
  using traits = scenario_traits<F>;

  void SetUp() override {
    if (!F::available()) GTEST_SKIP() << F::name << ": backend not available here";
    dev_.emplace(F::make_device());
    scope_.emplace();
  }
  void TearDown() override {
    if (dev_) {
      EXPECT_EQ(F::violations(*dev_), std::vector<std::string>{}) << F::name;
    }
    scope_.reset();
  }
  const device& dev() const { return *dev_; }

  enum class drop { inside_thread, after_thread, concurrently };

  // Issue 2's origin reproducer: rounds of a thread that allocates arrays of 1024 floats on its
  // own stream, fills them, synchronises and exits; the arrays die inside it, after it, or on
  // other threads while its stream is destroyed; then the main thread uploads as many arrays of
  // random data, which must reuse those blocks, and reads each one back.
  void origin_rounds(drop how) {
    constexpr std::size_t elems = 1024;
    const device d = dev();
    pool p(d);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::size_t reserved_after_first = 0;
    for (int round = 0; round < traits::origin_rounds; ++round) {
      std::vector<array<float>> handed_out;
      std::vector<std::thread> droppers;
      std::thread task([&] {
        stream own(d);
        stream_scope scope(own);
        std::vector<array<float>> as;
        for (int i = 0; i < traits::origin_arrays; ++i) as.emplace_back(elems, p);
        for (auto& a : as) a.fill(1.f);
        own.synchronize();
        if (how == drop::inside_thread) return;
        if (how == drop::after_thread) {
          handed_out = std::move(as);
          return;
        }
        // Other threads drop the arrays while this thread destroys its stream.
        auto shared = std::make_shared<std::vector<array<float>>>(std::move(as));
        for (int t = 0; t < 4; ++t) {
          droppers.emplace_back([shared, t] {
            for (std::size_t i = static_cast<std::size_t>(t); i < shared->size(); i += 4)
              (*shared)[i] = array<float>();
          });
        }
      });
      task.join();
      for (auto& t : droppers) t.join();
      handed_out.clear();

      const pool_statistics before = p.statistics();
      std::vector<std::vector<float>> host(static_cast<std::size_t>(traits::origin_arrays),
                                           std::vector<float>(elems));
      std::vector<array<float>> bs;
      for (auto& h : host) {
        for (auto& x : h) x = dist(rng);
        bs.emplace_back(std::span<const float>(h), p);
      }
      for (std::size_t i = 0; i < bs.size(); ++i) ASSERT_EQ(bs[i].download(), host[i]) << i;
      const pool_statistics after = p.statistics();
      EXPECT_GE(reuses(after) - reuses(before), static_cast<std::uint64_t>(traits::origin_arrays))
          << "round " << round;
      if (round == 0) reserved_after_first = after.reserved_bytes;
      EXPECT_EQ(after.reserved_bytes, reserved_after_first) << "the pool grew in round " << round;
    }
  }

  enum class stream_a { own, wrapper_released };

  // Five trials of: stream A's long work, its last write to a 1 MiB block and the block's free,
  // then stream B reuses the block at once and writes it. Returns the trials whose read-back
  // shows anything but B's write. `how`: A owns its queue, or wraps another stream's queue and
  // is released right after the free.
  int cross_stream_failures(stream_a how) {
    const device& d = dev();
    constexpr std::size_t block = std::size_t{1} << 20;
    int failures = 0;
    for (int trial = 0; trial < 5; ++trial) {
      // Fresh each trial: no free memory but what A frees. Shared large blocks, so that B may
      // reuse a block of A's while A lives (the default keeps them per stream).
      pool p(d, pool_options{.share_between_streams = true});
      stream b(d);
      std::optional<stream> owner;  // the wrapped queue's owner
      std::optional<stream> a;
      if (how == stream_a::own) {
        a.emplace(d);
      } else {
        owner.emplace(d);
        a.emplace(stream::wrap(d, owner->ref().native()));
      }
      void* busy = p.allocate(*a, F::busy_bytes);
      // A holds every other chunk of its 1 MiB slab, so the pool has no other free memory of
      // this size to give B: it must reuse A's busy block (and wait for it) rather than grow.
      std::vector<void*> held;
      for (int i = 0; i < 8; ++i) held.push_back(p.allocate(*a, block));
      void* x = held.back();
      void* y = nullptr;
      held.pop_back();
      {
        [[maybe_unused]] typename traits::busy_scope slow;
        for (int i = 0; i < traits::busy_fills; ++i)
          fill_bytes(*a, busy, F::busy_bytes, static_cast<std::uint8_t>(i));
        fill_bytes(*a, x, block, 0xAA);  // A's last write
        p.deallocate(*a, x);
        if (how == stream_a::wrapper_released) a->release();
        const pool_statistics before = p.statistics();
        y = p.allocate(b, block);
        EXPECT_EQ(y, x) << "expected the busy block to be reused across streams";
        EXPECT_EQ(p.statistics().waited_reuses, before.waited_reuses + 1);
        fill_bytes(b, y, block, 0x55);
      }
      a.reset();  // destroying an owned A waits for its work: only after B's write
      owner.reset();
      p.deallocate(b, busy);
      const std::vector<std::uint8_t> h = read_bytes(b, x, block);
      const auto wrong = static_cast<std::size_t>(
          std::count_if(h.begin(), h.end(), [](std::uint8_t c) { return c != 0x55; }));
      if (wrong != 0) ++failures;
      EXPECT_EQ(wrong, 0u) << "trial " << trial << ": stream A's write landed after stream B's";
      p.deallocate(b, y);  // x, unless the expectation above failed (then x is free already)
      for (void* q : held) p.deallocate(b, q);
      b.synchronize();
    }
    return failures;
  }

  std::optional<device> dev_;
  std::optional<typename traits::scenario_scope> scope_;
};

TYPED_TEST_SUITE_P(ScenarioConformance);

TYPED_TEST_P(ScenarioConformance, OriginArraysDroppedInsideTheThread) {
  this->origin_rounds(TestFixture::drop::inside_thread);
}
TYPED_TEST_P(ScenarioConformance, OriginArraysDroppedAfterTheThreadAndItsStream) {
  this->origin_rounds(TestFixture::drop::after_thread);
}
TYPED_TEST_P(ScenarioConformance, OriginArraysDroppedConcurrentlyWithTheStream) {
  this->origin_rounds(TestFixture::drop::concurrently);
}

// Memory freed on stream A behind long work, reused at once on stream B: B's write must land
// after A's last write. Without the device-side wait (the fault-injection build) B's write runs
// as soon as the device is free to run it, A's late write then overwrites it, and the read-back
// shows it.
TYPED_TEST_P(ScenarioConformance, CrossStreamReuseWaitsOnTheDevice) {
  EXPECT_EQ(this->cross_stream_failures(TestFixture::stream_a::own), 0);
}

// The same with A a wrapper around another queue, released without waiting (stream::release, as
// for a CuPy stream about to be destroyed) right after the free: the block leaves A's cache with
// a token that only the release's last marker covers, and B must wait for that marker. The
// queue's owner goes after B's write (its destruction waits for A's work, which would hide the
// bug if it came first).
TYPED_TEST_P(ScenarioConformance, CrossStreamReuseWaitsForAReleasedWrapper) {
  EXPECT_EQ(this->cross_stream_failures(TestFixture::stream_a::wrapper_released), 0);
}

REGISTER_TYPED_TEST_SUITE_P(ScenarioConformance, OriginArraysDroppedInsideTheThread,
                            OriginArraysDroppedAfterTheThreadAndItsStream,
                            OriginArraysDroppedConcurrentlyWithTheStream,
                            CrossStreamReuseWaitsOnTheDevice,
                            CrossStreamReuseWaitsForAReleasedWrapper);

}  // namespace streampool::test
