// What only the Level Zero backend has to show, over the test driver: the event-reuse stress. The
// Level Zero runtime of the origin report reset events that a command list was still waiting on;
// the test driver records every such reset, and here there must be none. (The origin report's
// scenarios and the ordering test are the scenario conformance suite, run by
// level_zero_conformance_test.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "level_zero/level_zero_support.hpp"

namespace sp = streampool;
namespace st = streampool::test;

namespace {

// A violation aborts the process at once (the driver reads this when the loader loads it, at the
// first Level Zero call): a backend that resets an event under a pending wait can leave that wait
// blocked for ever, and the test must fail then, not hang until CTest's timeout.
const bool abort_on_violation = setenv("SP_ZE_TEST_DRIVER_ABORT_ON_VIOLATION", "1", 1) == 0;

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
