// The origin report's scenarios on the real GPU, and the ordering test that a build without
// device-side waits (STREAMPOOL_FAULT_SKIP_DEVICE_WAIT) must fail. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "streampool/cuda.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

sp::device gpu() {
  static sp::device* d = nullptr;  // one backend per process, like a runtime's device object
  if (d == nullptr) d = new sp::device(sp::make_cuda_backend(0));
  return *d;
}

#define SKIP_WITHOUT_GPU() \
  if (!sp::cuda_available()) GTEST_SKIP() << "no CUDA driver or device"

std::uint64_t reuses(const sp::pool_statistics& s) {
  return s.same_stream_reuses + s.ready_reuses + s.waited_reuses;
}

enum class drop { inside_thread, after_thread, concurrently };

// Issue 2's port of the origin reproducer, on the GPU: 20 rounds of a thread that allocates 1000
// arrays of 1024 floats on its own stream, fills them, synchronises and exits; the arrays die
// inside it, after it, or on other threads while its stream is destroyed; then the main thread
// uploads 1000 arrays of random data that must reuse those blocks, and reads each one back.
void origin_rounds(drop how) {
  sp::device d = gpu();
  sp::pool p(d);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::size_t reserved_after_first = 0;
  for (int round = 0; round < 20; ++round) {
    std::vector<sp::array<float>> handed_out;
    std::vector<std::thread> droppers;
    std::thread task([&] {
      sp::stream own(d);
      sp::stream_scope scope(own);
      std::vector<sp::array<float>> as;
      for (int i = 0; i < 1000; ++i) as.emplace_back(1024, p);
      for (auto& a : as) a.fill(1.f);
      own.synchronize();
      if (how == drop::inside_thread) return;
      if (how == drop::after_thread) {
        handed_out = std::move(as);
        return;
      }
      // Other threads drop the arrays while this thread destroys its stream.
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
    std::vector<std::vector<float>> host(1000, std::vector<float>(1024));
    std::vector<sp::array<float>> bs;
    for (auto& h : host) {
      for (auto& x : h) x = dist(rng);
      bs.emplace_back(std::span<const float>(h), p);
    }
    for (std::size_t i = 0; i < bs.size(); ++i) ASSERT_EQ(bs[i].download(), host[i]) << i;
    const auto after = p.statistics();
    EXPECT_GE(reuses(after) - reuses(before), 1000u) << "round " << round;
    if (round == 0) reserved_after_first = after.reserved_bytes;
    EXPECT_EQ(after.reserved_bytes, reserved_after_first) << "the pool grew in round " << round;
  }
}

TEST(CudaOrigin, ArraysDroppedInsideTheThread) {
  SKIP_WITHOUT_GPU();
  origin_rounds(drop::inside_thread);
}
TEST(CudaOrigin, ArraysDroppedAfterTheThreadAndItsStream) {
  SKIP_WITHOUT_GPU();
  origin_rounds(drop::after_thread);
}
TEST(CudaOrigin, ArraysDroppedConcurrentlyWithTheStream) {
  SKIP_WITHOUT_GPU();
  origin_rounds(drop::concurrently);
}

// Memory freed on stream A behind long work, reused at once on stream B: B's write must land
// after A's last write. Without the device-side wait (the fault-injection build) A's late write
// overwrites B's, and the read-back shows it.
TEST(CudaOrdering, CrossStreamReuseWaitsOnTheDevice) {
  SKIP_WITHOUT_GPU();
  sp::device d = gpu();
  sp::pool p(d);
  sp::stream a(d), b(d);
  constexpr std::size_t block = std::size_t{1} << 20;
  constexpr std::size_t busy_elems = std::size_t{256} << 20;  // 1 GiB of floats
  sp::array<float> busy(busy_elems, p);
  int failures = 0;
  for (int trial = 0; trial < 5; ++trial) {
    // A holds every chunk of its 1 MiB slab, so the pool has no other free memory of this size
    // to give B: it must reuse A's busy block (and wait for it) rather than grow.
    std::vector<void*> held;
    for (int i = 0; i < 8; ++i) held.push_back(p.allocate(a, block));
    {
      sp::stream_scope on_a(a);
      for (int i = 0; i < 8; ++i) busy.fill(static_cast<float>(i));  // ~2-3 ms of work on A
    }
    void* x = held.back();
    held.pop_back();
    a.ref().submit(sp::command::make(sp::fill_command{x, 0xAA, 1, block}));
    p.deallocate(a, x);
    const auto before = p.statistics();
    void* y = p.allocate(b, block);
    ASSERT_EQ(y, x) << "expected the busy block to be reused across streams";
    EXPECT_EQ(p.statistics().waited_reuses, before.waited_reuses + 1);
    b.ref().submit(sp::command::make(sp::fill_command{y, 0x55, 1, block}));
    a.synchronize();
    b.synchronize();
    std::vector<unsigned char> h(block);
    b.ref().submit(sp::command::make(sp::copy_command{h.data(), y, block, false, true}));
    b.synchronize();
    const auto wrong = static_cast<std::size_t>(
        std::count_if(h.begin(), h.end(), [](unsigned char c) { return c != 0x55; }));
    if (wrong != 0) ++failures;
    EXPECT_EQ(wrong, 0u) << "trial " << trial << ": stream A's write landed after stream B's";
    p.deallocate(b, y);
    b.synchronize();
    for (void* h : held) p.deallocate(a, h);
  }
  EXPECT_EQ(failures, 0);
}

// A foreign stream (created by the user, wrapped) may be destroyed by its owner after streampool
// is done with it; tokens taken on it stay valid.
TEST(CudaStreams, WrappedForeignStreamTokensOutliveIt) {
  SKIP_WITHOUT_GPU();
  sp::device d = gpu();
  sp::pool p(d);
  sp::stream owner(d);  // stands in for a user's stream: we wrap its queue
  sp::token t;
  void* x = nullptr;
  {
    sp::stream wrapped = sp::stream::wrap(d, owner.ref().native());
    x = p.allocate(wrapped, 4096);
    wrapped.ref().submit(sp::command::make(sp::fill_command{x, 1, 1, 4096}));
    t = wrapped.ref().now();
    p.deallocate(wrapped, x);
  }  // the wrapper retires its timeline; the queue itself lives on with its owner
  EXPECT_TRUE(t.ready_for(nullptr));
  sp::stream other(d);
  void* y = p.allocate(other, 4096);
  EXPECT_NE(y, nullptr);
  p.deallocate(other, y);
}

}  // namespace
