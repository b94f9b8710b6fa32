// The Level Zero backend end to end on the test driver, under the loader's validation layer
// (CTest sets ZE_ENABLE_VALIDATION_LAYER=1 and ZE_ENABLE_PARAMETER_VALIDATION=1): a device, memory,
// every kind of command, markers, virtual memory, a pool and arrays, and a clean shutdown; and, in
// a child process, what a program sees where the loader finds no driver at all.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "level_zero/level_zero_support.hpp"

namespace sp = streampool;
namespace st = streampool::test;

namespace {

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t mib = std::size_t{1} << 20;

/// Records a marker on q, waits for it on the host and releases it.
void sync(sp::backend& b, sp::native_queue q) {
  sp::native_marker m = b.record(q);
  b.wait_host(m);
  EXPECT_TRUE(b.query(m));
  b.release_marker(m);
}

std::vector<std::uint8_t> download(sp::backend& b, sp::native_queue q, const void* p,
                                   std::size_t n) {
  std::vector<std::uint8_t> out(n);
  b.submit(q, sp::command::make(sp::copy_command{out.data(), p, n, false, true}));
  sync(b, q);
  return out;
}

template <class T>
std::vector<T> download_as(sp::backend& b, sp::native_queue q, const void* p, std::size_t n) {
  std::vector<T> out(n);
  b.submit(q, sp::command::make(sp::copy_command{out.data(), p, n * sizeof(T), false, true}));
  sync(b, q);
  return out;
}

template <class T>
void upload(sp::backend& b, sp::native_queue q, void* p, const std::vector<T>& v) {
  b.submit(q, sp::command::make(sp::copy_command{p, v.data(), v.size() * sizeof(T), true, false}));
}

TEST(LevelZeroSmoke, BackendCapabilitiesAndCommands) {
  st::require_level_zero();
  const auto held_before = st::ze_bytes_held();
  {
    EXPECT_GE(sp::level_zero_device_count(), 1);
    std::shared_ptr<sp::backend> b = sp::make_level_zero_backend(0);
    EXPECT_EQ(b->name(), "level_zero");
    const sp::backend_caps& caps = b->caps();
    EXPECT_TRUE(caps.device_wait);
    EXPECT_FALSE(caps.host_accessible);
    EXPECT_EQ(caps.granularity, sp::min_pool_granularity);
    EXPECT_GT(caps.total_memory, 0u);
    EXPECT_TRUE(caps.virtual_memory) << "the test driver has virtual memory";

    sp::native_queue q = b->create_queue();
    const std::size_t n = 4 * mib;
    void* a = b->allocate(n);
    void* c = b->allocate(n);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % caps.granularity, 0u);

    // Fills of every element size, each checked.
    for (const std::size_t es : {1u, 2u, 4u, 8u}) {
      const std::uint64_t pattern = 0x0123456789ABCDEFull;
      b->submit(q, sp::command::make(sp::fill_command{a, pattern, es, n / es}));
      const auto h = download(*b, q, a, n);
      for (std::size_t i = 0; i < n; i += 4097) {
        std::uint8_t expect = 0;
        std::memcpy(&expect, reinterpret_cast<const std::uint8_t*>(&pattern) + i % es, 1);
        ASSERT_EQ(h[i], expect) << "element size " << es << ", byte " << i;
      }
    }

    // A staged upload whose source is overwritten at once, a device copy, a download.
    std::vector<std::uint8_t> src(n);
    std::mt19937 rng(11);
    for (auto& x : src) x = static_cast<std::uint8_t>(rng());
    std::vector<std::uint8_t> scratch = src;
    b->submit(q, sp::command::make(sp::copy_command{a, scratch.data(), n, true, false}));
    std::fill(scratch.begin(), scratch.end(), 0);  // the contract: reusable when submit returns
    b->submit(q, sp::command::make(sp::copy_command{c, a, n, false, false}));
    EXPECT_EQ(download(*b, q, c, n), src);

    // Host to host, ordered after the queue's work.
    std::vector<std::uint8_t> h2(64, 0);
    b->submit(q, sp::command::make(sp::copy_command{h2.data(), src.data(), 64, true, true}));
    EXPECT_TRUE(std::equal(h2.begin(), h2.end(), src.begin()));

    // Kernels: a map, a reduction (two passes) and a scan (several levels).
    const std::size_t count = 100000;
    std::vector<float> xs(count);
    for (std::size_t i = 0; i < count; ++i) xs[i] = static_cast<float>(i % 7);
    upload(*b, q, a, xs);
    sp::kernel_command map{};
    map.kind = sp::kernel_kind::map_unary;
    map.fn = sp::op::mul;
    map.type = sp::dtype::f32;
    map.n = count;
    map.in0 = a;
    map.out = c;
    map.has_scalar = true;
    map.a.f32 = 2.0f;
    b->submit(q, sp::command::make(map));
    const auto doubled = download_as<float>(*b, q, c, count);
    for (std::size_t i = 0; i < count; i += 97) ASSERT_EQ(doubled[i], 2.0f * xs[i]) << i;

    std::vector<std::int64_t> ints(count);
    std::iota(ints.begin(), ints.end(), 1);
    upload(*b, q, a, ints);
    sp::kernel_command red{};
    red.kind = sp::kernel_kind::reduce;
    red.fn = sp::op::add;
    red.type = sp::dtype::i64;
    red.n = count;
    red.in0 = a;
    red.out = c;
    b->submit(q, sp::command::make(red));
    EXPECT_EQ(download_as<std::int64_t>(*b, q, c, 1)[0],
              static_cast<std::int64_t>(count * (count + 1) / 2));

    sp::kernel_command scan = red;
    scan.kind = sp::kernel_kind::inclusive_scan;
    b->submit(q, sp::command::make(scan));
    const auto prefix = download_as<std::int64_t>(*b, q, c, count);
    for (std::size_t i = 0; i < count; i += 1013)
      ASSERT_EQ(prefix[i], static_cast<std::int64_t>((i + 1) * (i + 2) / 2)) << i;

    std::vector<double> ds(1000, 0.5);
    upload(*b, q, a, ds);
    red.type = sp::dtype::f64;
    red.n = ds.size();
    b->submit(q, sp::command::make(red));
    EXPECT_EQ(download_as<double>(*b, q, c, 1)[0], 500.0);

    // A marker outlives its queue.
    sp::native_queue q2 = b->create_queue();
    b->submit(q2, sp::command::make(sp::fill_command{c, 7, 1, n}));
    sp::native_marker m = b->record(q2);
    b->wait_device(q, m);
    b->wait_host(m);
    b->destroy_queue(q2);
    EXPECT_TRUE(b->query(m));
    b->wait_device(q, m);
    EXPECT_EQ(download(*b, q, c, 16), std::vector<std::uint8_t>(16, 7));
    b->release_marker(m);

    // Many fills and waits with no marker recorded in between: the backend closes the queue's
    // open batch itself every 256 entries (each fill's pattern lives until the fill has run).
    sp::native_queue q3 = b->create_queue();
    sp::native_marker other = b->record(q3);
    for (int i = 0; i < 600; ++i) {
      b->submit(q, sp::command::make(sp::fill_command{c, static_cast<std::uint64_t>(i), 4, 1024}));
      if (i % 2 == 0) b->wait_device(q, other);
    }
    b->release_marker(other);  // with waits on it still queued
    const auto last = download_as<std::uint32_t>(*b, q, c, 1024);
    EXPECT_EQ(last, std::vector<std::uint32_t>(1024, 599u));
    sync(*b, q3);
    b->destroy_queue(q3);

    // Virtual memory: two granules mapped into a reserved range, used, unmapped, released.
    const std::size_t g = caps.vm_granularity;
    void* range = b->reserve(4 * g);
    ASSERT_NE(range, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(range) % g, 0u);
    sp::native_physical ph[2] = {b->create_physical(), b->create_physical()};
    ASSERT_NE(ph[0], nullptr);
    ASSERT_NE(ph[1], nullptr);
    void* at = static_cast<char*>(range) + g;
    ASSERT_TRUE(b->map(at, ph));
    b->submit(q, sp::command::make(sp::fill_command{at, 0xA5, 1, 2 * g}));
    const auto mapped = download(*b, q, at, 2 * g);
    EXPECT_EQ(mapped, std::vector<std::uint8_t>(2 * g, 0xA5));
    b->unmap(at, 2 * g);
    b->release_physical(ph[0]);
    b->release_physical(ph[1]);
    b->unreserve(range, 4 * g);

    b->destroy_queue(q);
    b->deallocate(a, n);
    b->deallocate(c, n);
  }
  EXPECT_EQ(st::ze_violations(), std::vector<std::string>{});
  EXPECT_EQ(st::ze_bytes_held(), held_before) << "the backend leaked memory";
}

TEST(LevelZeroSmoke, PoolArraysAndCleanShutdown) {
  st::require_level_zero();
  const auto held_before = st::ze_bytes_held();
  {
    sp::device d(sp::make_level_zero_backend(0));
    sp::pool p(d);
    sp::stream s(d);
    sp::stream_scope scope(s);
    std::vector<float> host(10000);
    std::iota(host.begin(), host.end(), 0.0f);
    sp::array<float> a(std::span<const float>(host), p);
    sp::array<float> b(host.size(), p);
    b.fill(1.0f);
    sp::array<float> c(host.size(), p);
    sp::map(c, a, b, sp::op::add);
    const std::vector<float> back = c.download();
    for (std::size_t i = 0; i < host.size(); ++i) ASSERT_EQ(back[i], host[i] + 1.0f) << i;
    EXPECT_EQ(sp::reduce(a, sp::op::max), 9999.0f);
    void* big = p.allocate(s, 16 * mib);  // the large path, on virtual memory
    ASSERT_NE(big, nullptr);
    p.deallocate(s, big);
    s.synchronize();
  }
  EXPECT_EQ(st::ze_violations(), std::vector<std::string>{});
  EXPECT_EQ(st::ze_bytes_held(), held_before) << "the backend leaked memory";
}

TEST(LevelZeroSmoke, OutOfDeviceMemoryIsNullNotAnError) {
  st::require_level_zero();
  std::shared_ptr<sp::backend> b = sp::make_level_zero_backend(0);
  const std::size_t g = b->caps().granularity;
  const std::size_t held = st::ze_bytes_held().value_or(0);
  st::hooks().set_capacity(held + 4 * g);  // the driver refuses anything beyond 4 granules more
  void* fits = b->allocate(2 * g);
  void* too_big = b->allocate(64 * g);
  sp::native_physical ph = b->create_physical();  // a VM granule (2 MiB) is more than 4 * 64 KiB
  st::hooks().set_capacity(0);
  EXPECT_NE(fits, nullptr);
  EXPECT_EQ(too_big, nullptr);
  EXPECT_EQ(ph, nullptr);
  if (fits != nullptr) b->deallocate(fits, 2 * g);
  if (ph != nullptr) b->release_physical(ph);
}

TEST(LevelZeroSmoke, BadOrdinalIsNoDevice) {
  st::require_level_zero();
  try {
    (void)sp::make_level_zero_backend(sp::level_zero_device_count());
    FAIL() << "expected backend_error";
  } catch (const sp::backend_error& e) {
    EXPECT_EQ(e.kind(), sp::backend_error_kind::no_device);
    EXPECT_NE(std::string(e.what()).find("level_zero: no device"), std::string::npos) << e.what();
  }
}

// Without any driver: this process already loaded the test driver, and zeInit runs once per
// process, so the check runs in a child process (this binary, only the disabled case below) whose
// ZE_ENABLE_ALT_DRIVERS names a file that does not exist; the loader then finds no driver at all.
TEST(LevelZeroNoDriver, UnavailableWithAClearMessage) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "ZE_ENABLE_ALT_DRIVERS=", 22) != 0) env_text.emplace_back(*e);
  }
  env_text.emplace_back("ZE_ENABLE_ALT_DRIVERS=/nonexistent/streampool-no-such-ze-driver.so");
  std::vector<char*> envp;
  for (auto& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=LevelZeroNoDriver.DISABLED_InChildProcess";
  std::string also = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), also.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the no-driver checks failed in the child (output above)";
}

TEST(LevelZeroNoDriver, DISABLED_InChildProcess) {
  EXPECT_FALSE(sp::level_zero_available());
  EXPECT_EQ(sp::level_zero_device_count(), 0);
  try {
    (void)sp::make_level_zero_backend(0);
    FAIL() << "expected backend_error";
  } catch (const sp::backend_error& e) {
    EXPECT_TRUE(e.kind() == sp::backend_error_kind::unavailable ||
                e.kind() == sp::backend_error_kind::no_device)
        << static_cast<int>(e.kind());
    const std::string what = e.what();
    std::printf("no driver: %s\n", what.c_str());
    EXPECT_NE(what.find("level_zero: "), std::string::npos) << what;
    EXPECT_TRUE(what.find("not available") != std::string::npos ||
                what.find("no device") != std::string::npos)
        << what;
    EXPECT_EQ(e.backend(), "level_zero");
  }
}

}  // namespace
