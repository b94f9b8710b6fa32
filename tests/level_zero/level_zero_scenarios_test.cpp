// The origin report's scenarios on the Level Zero backend over the test driver (the structure of
// tests/gpu/cuda_scenarios_test.cpp, scaled for CI), the ordering test that a build without
// device-side waits (STREAMPOOL_FAULT_SKIP_DEVICE_WAIT) must fail, and the event-reuse stress: the
// Level Zero runtime of the origin report reset events that a command list was still waiting on;
// the test driver records every such reset, and here there must be none.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "conformance/accessor.hpp"
#include "level_zero/level_zero_support.hpp"

namespace sp = streampool;
namespace st = streampool::test;

namespace {

// A violation aborts the process at once (the driver reads this when the loader loads it, at the
// first Level Zero call): a backend that resets an event under a pending wait can leave that wait
// blocked for ever, and the test must fail then, not hang until CTest's timeout.
const bool abort_on_violation = setenv("SP_ZE_TEST_DRIVER_ABORT_ON_VIOLATION", "1", 1) == 0;

/// One backend per process, like a runtime's device object.
sp::device gpu() {
  static sp::device* d = nullptr;
  if (d == nullptr) d = new sp::device(sp::make_level_zero_backend(0));
  return *d;
}

/// Sets the driver's delay injection for the scope (and back to none).
class driver_delay {
 public:
  explicit driver_delay(unsigned us) { st::hooks().set_delay_us(us); }
  driver_delay(const driver_delay&) = delete;
  driver_delay& operator=(const driver_delay&) = delete;
  ~driver_delay() { st::hooks().set_delay_us(0); }
};

class LevelZeroTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(abort_on_violation);
    st::require_level_zero();
    if (HasFatalFailure()) return;
    st::hooks().reset_violations();
  }
  void TearDown() override { EXPECT_EQ(st::ze_violations(), std::vector<std::string>{}); }
};

std::uint64_t reuses(const sp::pool_statistics& s) {
  return s.same_stream_reuses + s.ready_reuses + s.waited_reuses;
}

enum class drop { inside_thread, after_thread, concurrently };

// Issue 2's origin reproducer: rounds of a thread that allocates arrays on its own stream, fills
// them, synchronises and exits; the arrays die inside it, after it, or on other threads while
// its stream is destroyed; then the main thread uploads as many arrays of random data, which
// must reuse those blocks, and reads each one back.
void origin_rounds(drop how) {
  constexpr int rounds = 6;
  constexpr int arrays = 200;
  constexpr std::size_t elems = 1024;
  sp::device d = gpu();
  sp::pool p(d);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::size_t reserved_after_first = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<sp::array<float>> handed_out;
    std::vector<std::thread> droppers;
    std::thread task([&] {
      sp::stream own(d);
      sp::stream_scope scope(own);
      std::vector<sp::array<float>> as;
      for (int i = 0; i < arrays; ++i) as.emplace_back(elems, p);
      for (auto& a : as) a.fill(1.f);
      own.synchronize();
      if (how == drop::inside_thread) return;
      if (how == drop::after_thread) {
        handed_out = std::move(as);
        return;
      }
      auto shared = std::make_shared<std::vector<sp::array<float>>>(std::move(as));
      for (int t = 0; t < 4; ++t) {
        droppers.emplace_back([shared, t] {
          for (std::size_t i = static_cast<std::size_t>(t); i < shared->size(); i += 4)
            (*shared)[i] = sp::array<float>();
        });
      }
    });
    task.join();
    for (auto& t : droppers) t.join();
    handed_out.clear();

    const auto before = p.statistics();
    std::vector<std::vector<float>> host(arrays, std::vector<float>(elems));
    std::vector<sp::array<float>> bs;
    for (auto& h : host) {
      for (auto& x : h) x = dist(rng);
      bs.emplace_back(std::span<const float>(h), p);
    }
    for (std::size_t i = 0; i < bs.size(); ++i) ASSERT_EQ(bs[i].download(), host[i]) << i;
    const auto after = p.statistics();
    EXPECT_GE(reuses(after) - reuses(before), static_cast<std::uint64_t>(arrays))
        << "round " << round;
    if (round == 0) reserved_after_first = after.reserved_bytes;
    EXPECT_EQ(after.reserved_bytes, reserved_after_first) << "the pool grew in round " << round;
  }
}

TEST_F(LevelZeroTest, OriginArraysDroppedInsideTheThread) { origin_rounds(drop::inside_thread); }
TEST_F(LevelZeroTest, OriginArraysDroppedAfterTheThreadAndItsStream) {
  origin_rounds(drop::after_thread);
}
TEST_F(LevelZeroTest, OriginArraysDroppedConcurrentlyWithTheStream) {
  origin_rounds(drop::concurrently);
}

using LevelZeroOrdering = LevelZeroTest;

// Memory freed on stream A behind slow work, reused at once on stream B: B's write must land
// after A's last write. The driver's delay injection makes A's commands slow; without the
// device-side wait (the fault-injection build) B's fill runs first and A's late fill overwrites
// it, which the read-back shows.
TEST_F(LevelZeroOrdering, CrossQueueReuseWaitsOnTheDevice) {
  sp::device d = gpu();
  sp::pool p(d);
  sp::stream a(d), b(d);
  constexpr std::size_t block = std::size_t{1} << 20;
  void* busy = p.allocate(a, 8 * block);
  int failures = 0;
  for (int trial = 0; trial < 4; ++trial) {
    // A holds every chunk of its 1 MiB slab, so the pool has no other free memory of this size
    // to give B: it must reuse A's busy block (and wait for it) rather than grow.
    std::vector<void*> held;
    for (int i = 0; i < 8; ++i) held.push_back(p.allocate(a, block));
    void* x = held.back();
    held.pop_back();
    {
      driver_delay slow(4000);  // each of A's commands waits up to 4 ms before it runs
      for (int i = 0; i < 4; ++i) st::fill_bytes(a, busy, 8 * block, static_cast<std::uint8_t>(i));
      st::fill_bytes(a, x, block, 0xAA);
      p.deallocate(a, x);
      const auto before = p.statistics();
      void* y = p.allocate(b, block);
      ASSERT_EQ(y, x) << "expected the busy block to be reused across streams";
      EXPECT_EQ(p.statistics().waited_reuses, before.waited_reuses + 1);
      st::fill_bytes(b, y, block, 0x55);
    }
    a.synchronize();
    const auto h = st::read_bytes(b, x, block);
    const auto wrong = static_cast<std::size_t>(
        std::count_if(h.begin(), h.end(), [](std::uint8_t c) { return c != 0x55; }));
    if (wrong != 0) ++failures;
    EXPECT_EQ(wrong, 0u) << "trial " << trial << ": stream A's write landed after stream B's";
    p.deallocate(b, x);
    b.synchronize();
    for (void* q : held) p.deallocate(a, q);
  }
  p.deallocate(a, busy);
  EXPECT_EQ(failures, 0);
}

// The event-reuse rule under stress: threads on their own queues record markers, make other
// queues wait on them on the device and release them at once (while the waits are still pending,
// behind the driver's delays), so that the backend is asked for events again and again while
// waiters on released ones have not passed. Queues are destroyed and made anew along the way. The
// driver must have seen no reset or re-signal of an event with a pending wait.
TEST_F(LevelZeroTest, NoEventIsReusedWhileAWaitOnItIsPending) {
  std::shared_ptr<sp::backend> be = sp::make_level_zero_backend(0);
  constexpr int threads = 4;
  constexpr int queues_per_thread = 2;
  constexpr int rounds = 300;
  const std::size_t bytes = be->caps().granularity;
  void* mem = be->allocate(bytes * threads * queues_per_thread);
  ASSERT_NE(mem, nullptr);
  driver_delay slow(200);
  // Markers published for other threads to wait on; each holds a reference count so that the
  // last user releases it (a marker is released exactly once).
  class shared_marker {
   public:
    shared_marker(sp::backend& b, sp::native_marker m) : b_(b), m_(m) {}
    shared_marker(const shared_marker&) = delete;  // one release per marker
    shared_marker& operator=(const shared_marker&) = delete;
    ~shared_marker() { b_.release_marker(m_); }
    [[nodiscard]] sp::native_marker get() const { return m_; }

   private:
    sp::backend& b_;
    sp::native_marker m_;
  };
  std::mutex mu;
  std::vector<std::shared_ptr<shared_marker>> board(threads);
  std::atomic<int> waits{0};
  auto work = [&](int t) {
    std::mt19937 rng(static_cast<unsigned>(t) + 1);
    std::vector<sp::native_queue> qs;
    for (int i = 0; i < queues_per_thread; ++i) qs.push_back(be->create_queue());
    for (int r = 0; r < rounds; ++r) {
      const int i = static_cast<int>(rng() % queues_per_thread);
      sp::native_queue q = qs[static_cast<std::size_t>(i)];
      // Wait on another thread's latest marker, if any.
      std::shared_ptr<shared_marker> other;
      {
        std::lock_guard lk(mu);
        other = board[(static_cast<std::size_t>(t) + 1 + rng() % (threads - 1)) % threads];
      }
      if (other) {
        be->wait_device(q, other->get());
        ++waits;
      }
      other.reset();  // possibly the last reference: released with the wait still pending
      void* mine =
          static_cast<char*>(mem) + bytes * static_cast<std::size_t>(t * queues_per_thread + i);
      be->submit(
          q, sp::command::make(sp::fill_command{mine, static_cast<std::uint64_t>(r), 1, bytes}));
      auto published = std::make_shared<shared_marker>(*be, be->record(q));
      {
        std::lock_guard lk(mu);
        board[static_cast<std::size_t>(t)] = std::move(published);
      }
      if (rng() % 16 == 0) {  // a queue ends and a new one takes its place
        sp::native_marker last = be->record(q);
        be->wait_host(last);
        be->release_marker(last);
        be->destroy_queue(q);
        qs[static_cast<std::size_t>(i)] = be->create_queue();
      }
    }
    for (sp::native_queue q : qs) {
      sp::native_marker last = be->record(q);
      be->wait_host(last);
      be->release_marker(last);
      be->destroy_queue(q);
    }
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back(work, t);
  for (auto& t : ts) t.join();
  board.clear();
  be->deallocate(mem, bytes * threads * queues_per_thread);
  EXPECT_GT(waits.load(), rounds);  // the stress did make queues wait on each other
}

}  // namespace
