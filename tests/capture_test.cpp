// A stream capture under way on the device (backend::begin_capture, CUDA graphs): the pool asks
// the backend nothing about completion, records no marker, waits for nothing and gives nothing
// back; it grows instead, reuses what a stream freed itself, and fails with out_of_memory where
// it would otherwise have waited. The backend refuses record and the waits meanwhile (logic_error),
// so any path of the pool that still tried one would fail these tests.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

/// Sizes of both paths: slab chunks, shelved large blocks and large blocks past the shelf.
const std::vector<std::size_t> sizes = {4 * KiB, 64 * KiB, MiB, 3 * MiB, 24 * MiB};

/// (virtual memory, share_between_streams)
class Capture : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  Capture() : d_(sp::make_host_backend(host())), p_(d_, options()), a_(d_), b_(d_) {}

  static sp::host_options host() {
    sp::host_options o;
    o.checking = true;
    o.virtual_memory = std::get<0>(GetParam());
    o.eager_markers = false;  // markers complete a moment later, as on a GPU
    return o;
  }
  static sp::pool_options options() {
    sp::pool_options o;
    o.share_between_streams = std::get<1>(GetParam());
    return o;
  }
  std::vector<void*> allocate_all(sp::stream& s) {
    std::vector<void*> out;
    for (std::size_t n : sizes) out.push_back(p_.allocate(s, n));
    return out;
  }
  void free_all(sp::stream& s, const std::vector<void*>& blocks) {
    for (void* q : blocks) p_.deallocate(s, q);
  }
  void TearDown() override { EXPECT_TRUE(sp::host_violations(d_.get_backend()).empty()); }

  sp::device d_;
  sp::pool p_;
  sp::stream a_, b_;
};

}  // namespace

TEST_P(Capture, NothingWaitsNothingGoesBackAndTheStreamsOwnMemoryIsReused) {
  // Memory that stream a freed, its work not known complete: b would reuse it behind a wait.
  free_all(a_, allocate_all(a_));
  const sp::pool_statistics before = p_.statistics();
  sp::backend& be = d_.get_backend();
  be.begin_capture();
  std::vector<void*> on_b = allocate_all(b_);  // no logic_error: nothing was recorded or waited
  sp::pool_statistics during = p_.statistics();
  EXPECT_EQ(during.device_waits, before.device_waits);
  EXPECT_EQ(during.host_waits, before.host_waits);
  EXPECT_EQ(during.waited_reuses, before.waited_reuses);
  EXPECT_EQ(p_.trim(), 0u);
  EXPECT_EQ(p_.statistics().reserved_bytes, during.reserved_bytes);
  // What b frees during the capture, b reuses during it, with no growth (same stream, in order).
  free_all(b_, on_b);
  on_b = allocate_all(b_);
  EXPECT_EQ(p_.statistics().reserved_bytes, during.reserved_bytes);
  free_all(b_, on_b);
  be.end_capture();
  // After it, everything works as before: the pool can wait and give back again.
  a_.synchronize();
  b_.synchronize();
  EXPECT_GT(p_.trim(), 0u);
  free_all(a_, allocate_all(a_));
}

TEST_P(Capture, AStreamDestroyedDuringACaptureRetiresWhenTheLastCaptureEnds) {
  // Its retirement records a marker and waits for it, neither of which a capture allows: it
  // used to end the process from the destructor. Now it waits for the capture, and so does its
  // queue, and what it cached goes back to the pool then.
  sp::backend& be = d_.get_backend();
  std::size_t reserved = 0;
  be.begin_capture();
  be.begin_capture();  // two at once: the last end_capture retires it
  {
    sp::stream c(d_);
    be.end_capture();
    be.begin_capture();
    free_all(c, allocate_all(c));  // grown during the capture, cached by c
    reserved = p_.statistics().reserved_bytes;
  }
  EXPECT_EQ(p_.trim(), 0u) << "nothing goes back during a capture";
  be.end_capture();
  EXPECT_EQ(p_.statistics().host_waits, 0u) << "not retired while one capture is still under way";
  be.end_capture();
  // Retired: its work waited for, its blocks free of pending work, reused by b at once.
  std::vector<void*> on_b = allocate_all(b_);
  EXPECT_EQ(p_.statistics().reserved_bytes, reserved);
  EXPECT_EQ(p_.statistics().waited_reuses, 0u);
  free_all(b_, on_b);
}

TEST(CaptureDeferred, WorkRunsNowOutsideACaptureElseWhenTheLastOneEnds) {
  const sp::device d(sp::make_host_backend());
  sp::backend& be = d.get_backend();
  std::vector<int> ran;
  be.run_outside_capture([&] { ran.push_back(1); });
  EXPECT_EQ(ran, std::vector<int>{1});
  be.begin_capture();
  be.begin_capture();
  be.run_outside_capture([&] {
    EXPECT_FALSE(be.capturing());
    ran.push_back(2);
  });
  be.run_outside_capture([&] { throw sp::logic_error("the first failure"); });
  be.run_outside_capture([&] { ran.push_back(3); });
  be.end_capture();
  EXPECT_EQ(ran, std::vector<int>{1});
  // Every deferred piece runs, in order; the first failure reaches end_capture's caller.
  EXPECT_THROW(be.end_capture(), sp::logic_error);
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(be.capturing());
}

TEST(CaptureDeferred, WorkWhileACaptureBeginsWaitsForItsEnd) {
  const sp::device d(sp::make_host_backend());
  sp::backend& be = d.get_backend();
  std::vector<int> ran;
  std::thread capturer;
  {
    // A scope held here keeps begin_capture from going on (it waits for every scope).
    const sp::backend::outside_capture_scope held = be.outside_capture();
    ASSERT_TRUE(held);
    capturer = std::thread([&] { be.begin_capture(); });
    // Once the capture is beginning, another thread's scope is refused.
    std::thread([&] {
      while (be.outside_capture()) std::this_thread::yield();
    }).join();
    // Work from another thread now cannot run, and must not wait for the capture to begin
    // (which waits for this thread): it is deferred to the capture's end.
    std::thread([&] { be.run_outside_capture([&] { ran.push_back(1); }); }).join();
    EXPECT_TRUE(ran.empty());
  }
  capturer.join();
  EXPECT_TRUE(be.capturing());
  EXPECT_TRUE(ran.empty());
  be.end_capture();
  EXPECT_EQ(ran, std::vector<int>{1});
}

TEST_P(Capture, WhereOnlyAWaitWouldDoItIsOutOfMemory) {
  free_all(a_, allocate_all(a_));
  // No room to grow: b could only reuse a's memory, behind a wait.
  p_.set_memory_limit(p_.statistics().reserved_bytes);
  d_.get_backend().begin_capture();
  EXPECT_THROW((void)p_.allocate(b_, 24 * MiB), sp::out_of_memory);
  d_.get_backend().end_capture();
  // The same request after the capture waits for a's work and succeeds.
  void* q = p_.allocate(b_, 24 * MiB);
  p_.deallocate(b_, q);
}

// Captures begin and end on one thread while two others allocate and free on their own streams
// (each reusing what the other freed, behind waits) and a third trims: a capture may begin
// between any decision of the pool and the driver call it leads to. No call the capture forbids
// may reach the backend then: record and the waits would throw logic_error here, and the give-backs
// fail an assertion (backend.hpp, outside_capture).
TEST_P(Capture, CapturesThatBeginWhileOtherThreadsAllocateFreeAndTrim) {
  sp::backend& be = d_.get_backend();
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::mutex first_error_mu;
  std::string first_error;
  const auto worker = [&](sp::stream& s, unsigned seed) {
    std::vector<void*> held;
    unsigned x = seed;
    try {
      for (int i = 0; !stop.load(std::memory_order_relaxed) || i < 200; ++i) {
        x = x * 1103515245u + 12345u;
        held.push_back(p_.allocate(s, sizes[(x >> 8) % sizes.size()]));
        if (held.size() > 6) {
          for (void* q : held) p_.deallocate(s, q);
          held.clear();
        }
      }
    } catch (const std::exception& e) {
      errors.fetch_add(1);
      const std::lock_guard lock(first_error_mu);
      if (first_error.empty()) first_error = e.what();
    }
    for (void* q : held) p_.deallocate(s, q);
  };
  std::thread on_a(worker, std::ref(a_), 1u);
  std::thread on_b(worker, std::ref(b_), 2u);
  std::thread trimmer([&] {
    while (!stop.load(std::memory_order_relaxed)) (void)p_.trim();
  });
  for (int i = 0; i < 300; ++i) {
    be.begin_capture();
    std::this_thread::yield();
    be.end_capture();
    std::this_thread::yield();
  }
  stop = true;
  on_a.join();
  on_b.join();
  trimmer.join();
  EXPECT_EQ(errors.load(), 0) << first_error;
}

INSTANTIATE_TEST_SUITE_P(PathsAndSharing, Capture,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Virtual" : "Segments") +
                                  (std::get<1>(info.param) ? "Shared" : "PerStream");
                         });

TEST(CaptureBackend, RefusesRecordAndWaitsAndAnswersIncompleteWhileCapturing) {
  sp::device d(sp::make_host_backend({}));
  sp::stream s(d);
  sp::backend& be = d.get_backend();
  const sp::native_marker done = be.record(s.ref().native());
  be.wait_host(done);
  ASSERT_TRUE(be.query(done));
  be.begin_capture();
  be.begin_capture();  // two captures at once nest
  EXPECT_TRUE(be.capturing());
  EXPECT_FALSE(be.query(done)) << "a capture under way: the driver is not asked";
  try {
    (void)be.record(s.ref().native());
    ADD_FAILURE() << "record during a capture";
  } catch (const sp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("record while a stream capture is under way"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(be.wait_host(done), sp::logic_error);
  EXPECT_THROW(be.wait_device(s.ref().native(), done), sp::logic_error);
  be.end_capture();
  EXPECT_TRUE(be.capturing());
  be.end_capture();
  EXPECT_FALSE(be.capturing());
  EXPECT_TRUE(be.query(done));
  EXPECT_THROW(be.end_capture(), sp::logic_error);
  be.release_marker(done);
}

// pool_options::keep_memory (graph pools: replays write freed blocks): nothing goes back and
// nothing moves, on either large path, until trim().
class KeepMemory : public ::testing::TestWithParam<bool> {};

TEST_P(KeepMemory, FreedMemoryStaysWhereItWasUntilTrim) {
  sp::host_options h;
  h.checking = true;
  h.virtual_memory = GetParam();
  sp::device d(sp::make_host_backend(h));
  sp::pool_options o;
  o.keep_memory = true;
  sp::pool p(d, o);
  sp::stream s(d);
  void* first = p.allocate(s, 24 * MiB);
  const std::uintptr_t where = reinterpret_cast<std::uintptr_t>(first);
  p.deallocate(s, first);
  s.synchronize();
  // A larger request: without keep_memory, the free 24 MiB would go back (segments) or be
  // remapped into the new block (virtual memory) before the pool grew.
  // (On virtual memory the new block may grow around the freed one in place: reuse within the
  // pool is allowed, a move is not.)
  void* second = p.allocate(s, 40 * MiB);
  const sp::pool_statistics st = p.statistics();
  EXPECT_GE(st.reserved_bytes, (GetParam() ? 40 : 64) * MiB);
  EXPECT_EQ(st.upstream_deallocations, 0u);
  EXPECT_EQ(st.upstream_unmaps, 0u);
  EXPECT_EQ(st.upstream_releases, 0u);
  // The freed block's memory is still there, at its address.
  bool backed = false;
  for (const auto& r : p.snapshot().ranges)
    for (const auto& b : r.blocks)
      if (r.base + b.offset <= where && where < r.base + b.offset + b.size)
        backed = b.status != sp::block_status::unmapped;
  EXPECT_TRUE(backed);
  // Under a limit that only a give-back could meet: out of memory, nothing given back.
  p.set_memory_limit(st.reserved_bytes);
  EXPECT_THROW((void)p.allocate(s, 48 * MiB), sp::out_of_memory);
  EXPECT_EQ(p.statistics().reserved_bytes, st.reserved_bytes);
  p.set_memory_limit(0);
  p.deallocate(s, second);
  s.synchronize();
  EXPECT_GE(p.trim(), 40 * MiB);  // trim() is the way back
  EXPECT_TRUE(sp::host_violations(d.get_backend()).empty());
}

INSTANTIATE_TEST_SUITE_P(BothLargePaths, KeepMemory, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Virtual" : "Segments"; });
