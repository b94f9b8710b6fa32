// What only the OpenCL backend has to show (PoCL's CPU device on CI): markers that outlive their
// queue, staged uploads, misaligned pattern fills, concurrent submits to one queue, and out of
// memory through the pool's limit (PoCL never reports it). The origin report's scenarios and the
// ordering test are the scenario conformance suite, run by opencl_conformance_test. Skips where no
// OpenCL device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "opencl/opencl_fixture.hpp"
#include "streampool/opencl.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

sp::device ocl() {
  static sp::device* d = nullptr;  // one backend per process, like a runtime's device object
  if (d == nullptr) d = new sp::device(sp::make_opencl_backend(0));
  return *d;
}

#define SKIP_WITHOUT_OPENCL() \
  if (!sp::opencl_available()) GTEST_SKIP() << "no OpenCL device"

std::vector<unsigned char> download(sp::backend& b, sp::native_queue q, const void* p,
                                    std::size_t bytes) {
  std::vector<unsigned char> h(bytes);
  b.submit(q, sp::command::make(sp::copy_command{h.data(), p, bytes, false, true}));
  sp::native_marker m = b.record(q);
  b.wait_host(m);
  b.release_marker(m);
  return h;
}

void fill(sp::backend& b, sp::native_queue q, void* p, std::size_t bytes, unsigned char v) {
  b.submit(q, sp::command::make(sp::fill_command{p, v, 1, bytes}));
}

// The backend contract: a marker may be queried, waited on (on the host and by another queue) and
// released after its queue was destroyed. OpenCL events hold their own reference, so this is the
// backend relying on the API, checked.
TEST(OpenclMarkers, MarkerOutlivesItsQueue) {
  SKIP_WITHOUT_OPENCL();
  std::shared_ptr<sp::backend> b = sp::make_opencl_backend(0);
  constexpr std::size_t bytes = std::size_t{16} << 20;
  void* p = b->allocate(bytes);
  ASSERT_NE(p, nullptr);
  sp::native_queue q = b->create_queue();
  fill(*b, q, p, bytes, 0x11);
  sp::native_marker early = b->record(q);
  fill(*b, q, p, bytes, 0x22);
  sp::native_marker last = b->record(q);
  b->wait_host(last);
  b->destroy_queue(q);  // the contract: its work is complete; `early` and `last` live on
  EXPECT_TRUE(b->query(early));
  EXPECT_TRUE(b->query(last));
  b->wait_host(early);
  // Another queue waits for the dead queue's marker on the device, then works on.
  sp::native_queue other = b->create_queue();
  b->wait_device(other, early);
  fill(*b, other, p, bytes, 0x33);
  const std::vector<unsigned char> h = download(*b, other, p, bytes);
  EXPECT_EQ(std::count(h.begin(), h.end(), 0x33), static_cast<std::ptrdiff_t>(bytes));
  b->release_marker(early);
  b->release_marker(last);
  sp::native_marker end = b->record(other);
  b->wait_host(end);
  b->release_marker(end);
  b->destroy_queue(other);
  b->deallocate(p, bytes);
  EXPECT_EQ(sp::opencl_allocated_bytes(*b), 0u);
}

// Through the public API: tokens taken on a stream stay valid, and make memory reusable, after the
// stream is gone.
TEST(OpenclMarkers, TokensOfADestroyedStreamStayUsable) {
  SKIP_WITHOUT_OPENCL();
  sp::device d = ocl();
  sp::pool p(d);
  sp::token t;
  void* x = nullptr;
  {
    sp::stream s(d);
    x = p.allocate(s, 4096);
    s.ref().submit(sp::command::make(sp::fill_command{x, 1, 1, 4096}));
    t = s.ref().now();
    p.deallocate(s, x);
  }
  EXPECT_TRUE(t.ready_for(nullptr));
  sp::stream other(d);
  void* y = p.allocate(other, 4096);
  EXPECT_NE(y, nullptr);
  p.deallocate(other, y);
}

// An upload's source may be reused as soon as submit returns (the contract): the backend copied
// it out. The queue is kept busy first, so the copy itself runs long after the source changed.
TEST(OpenclStaging, UploadSourceMayChangeRightAfterSubmit) {
  SKIP_WITHOUT_OPENCL();
  std::shared_ptr<sp::backend> b = sp::make_opencl_backend(0);
  const std::size_t busy = sp::test::opencl_fixture::busy_bytes;
  void* scratch = b->allocate(busy);
  constexpr std::size_t bytes = std::size_t{1} << 20;
  void* dst = b->allocate(sp::min_pool_granularity * 16);
  ASSERT_NE(scratch, nullptr);
  ASSERT_NE(dst, nullptr);
  sp::native_queue q = b->create_queue();
  std::vector<unsigned char> src(bytes);
  std::vector<std::vector<unsigned char>> expected;
  for (int i = 0; i < 4; ++i) {
    fill(*b, q, scratch, busy, static_cast<unsigned char>(i));
    std::iota(src.begin(), src.end(), static_cast<unsigned char>(i * 7));
    b->submit(q, sp::command::make(sp::copy_command{dst, src.data(), bytes, true, false}));
    expected.push_back(src);
    std::fill(src.begin(), src.end(), 0xEE);  // the caller reuses its buffer at once
    EXPECT_EQ(download(*b, q, dst, bytes), expected.back()) << "upload " << i;
  }
  sp::native_marker m = b->record(q);
  b->wait_host(m);
  b->release_marker(m);
  b->destroy_queue(q);
  b->deallocate(dst, sp::min_pool_granularity * 16);
  b->deallocate(scratch, busy);
}

// A fill whose destination is not aligned to its element size (clEnqueueSVMMemFill refuses it)
// still fills the right bytes with the right pattern.
TEST(OpenclFill, MisalignedPatternFill) {
  SKIP_WITHOUT_OPENCL();
  std::shared_ptr<sp::backend> b = sp::make_opencl_backend(0);
  const std::size_t bytes = sp::min_pool_granularity;
  auto* p = static_cast<unsigned char*>(b->allocate(bytes));
  ASSERT_NE(p, nullptr);
  sp::native_queue q = b->create_queue();
  fill(*b, q, p, bytes, 0);
  b->submit(q, sp::command::make(sp::fill_command{p + 3, 0x0807060504030201ULL, 8, 10}));
  b->submit(q, sp::command::make(sp::fill_command{p + 101, 0x4242424242424242ULL, 8, 3}));
  const std::vector<unsigned char> h = download(*b, q, p, 200);
  EXPECT_EQ(h[2], 0);
  for (std::size_t i = 0; i < 80; ++i) EXPECT_EQ(h[3 + i], (i % 8) + 1) << i;
  EXPECT_EQ(h[83], 0);
  for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(h[101 + i], 0x42) << i;
  EXPECT_EQ(h[125], 0);
  // Every element size, misalignment and a few counts: a head, an aligned body of the rotated
  // pattern and a tail, or (when shorter) only staged bytes.
  const std::uint64_t pattern = 0x8877665544332211ULL;
  for (std::size_t size : {2u, 4u, 8u}) {
    for (std::size_t offset = 1; offset < size; ++offset) {
      for (std::size_t count : {1u, 2u, 7u}) {
        fill(*b, q, p, 256, 0);
        b->submit(q, sp::command::make(sp::fill_command{p + 64 + offset, pattern, size, count}));
        const std::vector<unsigned char> got = download(*b, q, p, 256);
        const std::size_t from = 64 + offset, to = from + size * count;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const unsigned expect =
              i < from || i >= to ? 0u : static_cast<unsigned>(((i - from) % size) + 1) * 0x11u;
          ASSERT_EQ(got[i], expect)
              << "size " << size << ", offset " << offset << ", count " << count << ", byte " << i;
        }
      }
    }
  }
  sp::native_marker m = b->record(q);
  b->wait_host(m);
  b->release_marker(m);
  b->destroy_queue(q);
  b->deallocate(p, bytes);
}

// submit may be called concurrently for the same queue: kernels (whose arguments live in the
// kernel object) and uploads from several threads must each compute their own result.
TEST(OpenclThreads, ConcurrentSubmitsToOneQueue) {
  SKIP_WITHOUT_OPENCL();
  sp::device d = ocl();
  sp::pool p(d);
  sp::stream s(d);
  constexpr int threads = 4;
  constexpr int iterations = 20;
  std::vector<std::thread> ts;
  std::vector<int> bad(threads, 0);
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      sp::stream_scope scope(s);
      for (int i = 0; i < iterations; ++i) {
        const std::size_t n = 1000 + static_cast<std::size_t>(t * 517 + i * 31);
        std::vector<std::int64_t> h(n);
        std::iota(h.begin(), h.end(), std::int64_t{t});
        sp::array<std::int64_t> a(std::span<const std::int64_t>(h), p);
        sp::array<std::int64_t> out(n, p);
        sp::inclusive_scan(out, a);
        const std::int64_t sum = sp::reduce(a, sp::op::add);
        const std::vector<std::int64_t> scanned = out.download();
        std::int64_t acc = 0;
        bool ok = sum == std::accumulate(h.begin(), h.end(), std::int64_t{0});
        for (std::size_t k = 0; k < n && ok; ++k) ok = scanned[k] == (acc += h[k]);
        if (!ok) ++bad[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int t = 0; t < threads; ++t)
    EXPECT_EQ(bad[static_cast<std::size_t>(t)], 0) << "thread " << t;
}

// PoCL never reports out of memory (it allocates from host memory until the OOM killer steps in),
// so a memory limit on the pool is what turns exhaustion into out_of_memory; the pool must stay
// usable afterwards.
TEST(OpenclMemory, OutOfMemoryThroughThePoolLimit) {
  SKIP_WITHOUT_OPENCL();
  sp::device d = ocl();
  sp::pool_options o;
  o.memory_limit = std::size_t{64} << 20;
  sp::pool p(d, o);
  sp::stream s(d);
  std::vector<void*> held;
  bool threw = false;
  try {
    for (int i = 0; i < 100; ++i) held.push_back(p.allocate(s, std::size_t{4} << 20));
  } catch (const sp::out_of_memory& e) {
    threw = true;
    EXPECT_EQ(e.limit(), o.memory_limit) << e.what();
  }
  EXPECT_TRUE(threw);
  EXPECT_LE(p.statistics().reserved_bytes, o.memory_limit);
  EXPECT_FALSE(held.empty());
  for (void* x : held) p.deallocate(s, x);
  void* again = p.allocate(s, std::size_t{32} << 20);  // freed memory is usable again
  EXPECT_NE(again, nullptr);
  p.deallocate(s, again);
  s.synchronize();
  p.trim();
  EXPECT_EQ(p.statistics().reserved_bytes, 0u);
}

// Errors name the call or the values: an ordinal past the devices is no_device.
TEST(OpenclDevices, BadOrdinalIsNoDevice) {
  SKIP_WITHOUT_OPENCL();
  EXPECT_GE(sp::opencl_device_count(), 1);
  try {
    (void)sp::make_opencl_backend(sp::opencl_device_count());
    ADD_FAILURE() << "no error for an ordinal past the devices";
  } catch (const sp::backend_error& e) {
    EXPECT_EQ(e.kind(), sp::backend_error_kind::no_device);
    EXPECT_NE(std::string(e.what()).find("no device"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)sp::make_opencl_backend(-1), sp::backend_error);
  EXPECT_THROW((void)sp::opencl_allocated_bytes(*sp::make_host_backend()), sp::logic_error);
}

}  // namespace
