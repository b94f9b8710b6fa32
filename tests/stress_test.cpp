// Multithreaded stress with fixed seeds: threads on their own and on shared streams allocate
// mixed sizes through the raw pool and through arrays, write a per-allocation cookie, hand the
// allocations to other threads (other streams) through a queue, verify the cookie on the
// receiving side and free in random order. Checking mode on; statistics must balance at the end
// and the race detector must have seen nothing.
//
// Scaled down under sanitizers (STREAMPOOL_TEST_UNDER_SANITIZER, set by the build) and by the
// environment variable STREAMPOOL_STRESS_SCALE (a factor, e.g. 0.25 or 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "conformance/accessor.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

double scale() {
  double s = 1.0;
#if defined(STREAMPOOL_TEST_UNDER_SANITIZER) || defined(__SANITIZE_ADDRESS__) || \
    defined(__SANITIZE_THREAD__)
  s = 0.25;
#endif
  if (const char* e = std::getenv("STREAMPOOL_STRESS_SCALE")) s = std::atof(e);
  return s > 0 ? s : 1.0;
}

int scaled(int n) { return std::max(1, static_cast<int>(n * scale())); }

// One hand-over: a raw pool block (p, bytes, written) or an array.
struct item {
  std::uint64_t cookie = 0;
  void* p = nullptr;
  std::size_t bytes = 0;
  sp::token written;  // the producer's write (raw blocks)
  bool is_array = false;
  sp::array<std::uint64_t> a;
};

// A mutex-protected hand-over queue: no sleeps; consumers take what is there.
class mailbox {
 public:
  void put(item it) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(it));
  }
  std::optional<item> take() {
    std::lock_guard lock(mu_);
    if (items_.empty()) return std::nullopt;
    item it = std::move(items_.front());
    items_.pop_front();
    return it;
  }

 private:
  std::mutex mu_;
  std::deque<item> items_;
};

std::size_t random_size(std::mt19937_64& rng) {
  // Mostly small, some large: 256 B .. 4 MiB, log-uniform.
  const int shift = 8 + static_cast<int>(rng() % 15);  // 2^8 .. 2^22
  const std::size_t base = std::size_t{1} << shift;
  return std::max<std::size_t>(256, base + rng() % base) / 8 * 8;
}

void stress(bool device_wait, std::uint64_t seed) {
  sp::device d(sp::make_host_backend(
      {.checking = true, .max_delay_us = 10, .seed = seed, .device_wait = device_wait}));
  sp::pool p(d);
  constexpr int threads = 6;
  const int iterations = scaled(300);
  std::vector<mailbox> boxes(threads);
  std::vector<sp::stream> shared_streams;
  shared_streams.emplace_back(d);  // used by threads 4 and 5 at once
  std::vector<std::thread> ts;
  std::atomic<std::uint64_t> verified{0};
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::optional<sp::stream> own;
      if (t < 4) own.emplace(d);
      const sp::stream_ref s = own ? own->ref() : shared_streams[0].ref();
      sp::stream_scope scope(s);
      std::mt19937_64 rng(seed * 1000 + static_cast<std::uint64_t>(t));
      std::vector<item> mine;  // received, to be freed in random order
      auto verify_and_keep = [&](item it) {
        if (!it.is_array) {
          item* r = &it;
          s.wait(r->written);  // hand-over: this stream after the producer's write
          std::vector<std::uint64_t> host(r->bytes / 8);
          s.submit(sp::command::make(sp::copy_command{host.data(), r->p, r->bytes, false, true}));
          s.synchronize();
          const auto bad = std::find_if(host.begin(), host.end(),
                                        [&](std::uint64_t x) { return x != r->cookie; });
          EXPECT_TRUE(bad == host.end()) << "raw block " << r->p << " of " << r->bytes
                                         << " bytes: cookie " << r->cookie << " lost";
          p.record_use(r->p, s.now());
        } else {
          const std::vector<std::uint64_t> host = it.a.download();  // ordered by the array layer
          const auto bad = std::find_if(host.begin(), host.end(),
                                        [&](std::uint64_t x) { return x != it.cookie; });
          EXPECT_TRUE(bad == host.end())
              << "array of " << host.size() << " cookie " << it.cookie << ": element "
              << (bad - host.begin()) << " is " << (bad == host.end() ? 0 : *bad);
        }
        verified.fetch_add(1);
        mine.push_back(std::move(it));
      };
      auto free_one = [&] {
        if (mine.empty()) return;
        const std::size_t i = rng() % mine.size();
        item it = std::move(mine[i]);
        mine[i] = std::move(mine.back());
        mine.pop_back();
        if (!it.is_array) {
          item* r = &it;
          if (rng() % 2 == 0) {
            p.deallocate(s, r->p);  // stream-ordered: s is after the producer and its own read
          } else {
            const sp::token tk[2] = {r->written, s.now()};
            p.deallocate(r->p, tk);  // with tokens, like a finaliser
          }
        }  // arrays: freed by the destructor, with their tokens
      };
      for (int i = 0; i < iterations; ++i) {
        const std::uint64_t cookie = (seed << 40) ^ (static_cast<std::uint64_t>(t) << 32) ^
                                     static_cast<std::uint64_t>(i) ^ 0x0123456789ull;
        const std::size_t bytes = random_size(rng);
        const auto to =
            static_cast<std::size_t>((t + 1 + static_cast<int>(rng() % (threads - 1))) % threads);
        if (rng() % 2 == 0) {
          void* q = p.allocate(s, bytes);
          s.submit(sp::command::make(sp::fill_command{q, cookie, 8, bytes / 8}));
          boxes[to].put(item{cookie, q, bytes, s.now(), false, {}});
        } else {
          sp::array<std::uint64_t> a(bytes / 8, p);
          a.fill(cookie);
          boxes[to].put(item{cookie, nullptr, 0, {}, true, std::move(a)});
        }
        while (auto got = boxes[static_cast<std::size_t>(t)].take())
          verify_and_keep(std::move(*got));
        while (mine.size() > 8) free_one();
      }
      // Drain: everything sent to this thread before its producers finished. Producers finish
      // independently, so the leftovers are collected by the main thread below.
      while (auto got = boxes[static_cast<std::size_t>(t)].take()) verify_and_keep(std::move(*got));
      while (!mine.empty()) free_one();
    });
  }
  for (auto& th : ts) th.join();
  // Leftovers (sent after their receiver finished): verify and free on a new stream.
  {
    sp::stream s(d);
    sp::stream_scope scope(s);
    for (auto& box : boxes) {
      while (auto got = box.take()) {
        if (!got->is_array) {
          item* r = &*got;
          s.ref().wait(r->written);
          std::vector<std::uint64_t> host(r->bytes / 8);
          s.ref().submit(
              sp::command::make(sp::copy_command{host.data(), r->p, r->bytes, false, true}));
          s.synchronize();
          EXPECT_TRUE(std::all_of(host.begin(), host.end(),
                                  [&](std::uint64_t x) { return x == r->cookie; }));
          p.deallocate(s, r->p);
        } else {
          const auto host = got->a.download();
          EXPECT_TRUE(std::all_of(host.begin(), host.end(),
                                  [&](std::uint64_t x) { return x == got->cookie; }));
        }
        verified.fetch_add(1);
      }
    }
  }
  EXPECT_EQ(verified.load(), static_cast<std::uint64_t>(threads * iterations));
  shared_streams.clear();
  const sp::pool_statistics st = p.statistics();
  EXPECT_EQ(st.live_bytes, 0u);
  EXPECT_EQ(st.allocations, st.deallocations);
  EXPECT_GT(sp::test::reuses(st), 0u);
  p.trim();
  EXPECT_EQ(p.statistics().reserved_bytes, 0u);
  EXPECT_EQ(sp::host_allocated_bytes(d.get_backend()), 0u);
  EXPECT_EQ(sp::host_violations(d.get_backend()), std::vector<std::string>{});
}

}  // namespace

TEST(Stress, OwnAndSharedStreamsHandOverAndFree) { stress(true, 1); }
TEST(Stress, WithoutDeviceWaits) { stress(false, 2); }
