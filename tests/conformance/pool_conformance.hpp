// The pool conformance suite: one set of tests every backend must pass, written against the
// public API only. A backend instantiates it with a *fixture* type (see host_conformance_test.cpp):
//
//   struct my_fixture {
//     static constexpr const char* name = "...";
//     static bool available();                                  // false: every test skips
//     static streampool::device make_device();                  // a fresh device per test
//     static std::vector<std::string> violations(const streampool::device&);  // race reports
//     static std::optional<std::size_t> upstream_bytes(const streampool::device&);  // leak check
//     static constexpr std::size_t busy_bytes = ...;            // a fill that takes a while
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(Name, PoolConformance, ::testing::Types<my_fixture>);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "conformance/accessor.hpp"
#include "streampool/streampool.hpp"

namespace streampool::test {

template <class F>
class PoolConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!F::available()) GTEST_SKIP() << F::name << ": backend not available here";
    dev_.emplace(F::make_device());
  }
  void TearDown() override {
    if (dev_) {
      EXPECT_EQ(F::violations(*dev_), std::vector<std::string>{}) << F::name;
    }
  }
  const device& dev() const { return *dev_; }

  /// live == sum of block sizes of `outstanding`.
  static void expect_balanced(const pool& p, const std::vector<void*>& outstanding) {
    std::size_t sum = 0;
    for (void* q : outstanding) sum += p.block_size(q);
    const pool_statistics st = p.statistics();
    EXPECT_EQ(st.live_bytes, sum);
    EXPECT_GE(st.reserved_bytes, st.live_bytes);
    EXPECT_EQ(st.allocations - st.deallocations, outstanding.size());
  }

  std::optional<device> dev_;
};

TYPED_TEST_SUITE_P(PoolConformance);

TYPED_TEST_P(PoolConformance, AllocateFreeSizesAndAlignment) {
  pool p(this->dev());
  stream s(this->dev());
  const std::size_t sizes[] = {
      1,        255,      256, 257, 1000, 4096, 65537, (1u << 20) - 1, 1u << 20, (1u << 20) + 1,
      3u << 20, 32u << 20};
  std::vector<void*> live;
  std::uint8_t v = 1;
  for (std::size_t n : sizes) {
    void* q = p.allocate(s, n);
    ASSERT_NE(q, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 256, 0u) << n;
    EXPECT_GE(p.block_size(q), n);
    EXPECT_EQ(p.block_size(q) % 256, 0u);
    EXPECT_TRUE(p.owns(q));
    fill_bytes(s, q, n, v++);
    live.push_back(q);
  }
  // Every block still holds its own pattern: no two live blocks overlap.
  v = 1;
  for (std::size_t i = 0; i < live.size(); ++i, ++v)
    EXPECT_EQ(first_mismatch(read_bytes(s, live[i], sizes[i]), v), -1) << sizes[i];
  this->expect_balanced(p, live);
  for (void* q : live) p.deallocate(s, q);
  for (void* q : live) EXPECT_FALSE(p.owns(q));
  this->expect_balanced(p, {});
}

TYPED_TEST_P(PoolConformance, SameStreamReuseIsImmediate) {
  pool p(this->dev());
  stream s(this->dev());
  for (std::size_t n : {std::size_t{256}, std::size_t{5000}, std::size_t{200000}}) {
    void* a = p.allocate(s, n);
    fill_bytes(s, a, n, 0x11);
    p.deallocate(s, a);
    const pool_statistics before = p.statistics();
    void* b = p.allocate(s, n);
    const pool_statistics after = p.statistics();
    EXPECT_EQ(a, b) << n;
    EXPECT_EQ(after.same_stream_reuses, before.same_stream_reuses + 1) << n;
    EXPECT_EQ(after.fresh_allocations, before.fresh_allocations);
    EXPECT_EQ(after.device_waits + after.host_waits, before.device_waits + before.host_waits);
    fill_bytes(s, b, n, 0x22);
    EXPECT_EQ(first_mismatch(read_bytes(s, b, n), 0x22), -1);
    p.deallocate(s, b);
  }
  this->expect_balanced(p, {});
}

// A block freed with a token of a busy stream and reused on another stream: the pool must order
// the new stream after the old work (a device-side wait where the backend has them).
TYPED_TEST_P(PoolConformance, CrossStreamReuseIsOrdered) {
  // Shared large blocks: another live stream's free block is reusable behind a wait (the default
  // keeps them per stream, pool_options::share_between_streams).
  pool p(this->dev(), pool_options{.share_between_streams = true});
  stream s1(this->dev()), s2(this->dev()), gate(this->dev());
  constexpr std::size_t n = 4u << 20;  // large: reuse comes from the free list, deterministically
  void* busy = p.allocate(gate, TypeParam::busy_bytes);
  bool saw_wait = false;
  for (int attempt = 0; attempt < 8 && !saw_wait; ++attempt) {
    void* a = p.allocate(s1, n);
    s1.ref().wait(make_busy(gate, busy, TypeParam::busy_bytes));
    fill_bytes(s1, a, n, 0x33);
    const token t = s1.ref().now();
    p.deallocate(a, std::span<const token>(&t, 1));
    const pool_statistics before = p.statistics();
    void* b = p.allocate(s2, n);
    const pool_statistics after = p.statistics();
    EXPECT_EQ(a, b);
    EXPECT_EQ(after.fresh_allocations, before.fresh_allocations);
    EXPECT_EQ(reuses(after), reuses(before) + 1);
    // Exact both ways: the gate's work may finish between the pick and the wait, and then the
    // reuse is a ready one (a waited reuse counted at the pick was one without a wait).
    EXPECT_EQ(after.waited_reuses - before.waited_reuses,
              after.device_waits + after.host_waits - before.device_waits - before.host_waits);
    if (after.waited_reuses > before.waited_reuses) {
      saw_wait = true;
      EXPECT_EQ(after.device_waits + after.host_waits, before.device_waits + before.host_waits + 1);
      if (this->dev().get_backend().caps().device_wait) {
        EXPECT_EQ(after.device_waits, before.device_waits + 1);
      } else {
        EXPECT_EQ(after.host_waits, before.host_waits + 1);
      }
    }
    fill_bytes(s2, b, n, 0x44);
    EXPECT_EQ(first_mismatch(read_bytes(s2, b, n), 0x44), -1);
    p.deallocate(s2, b);
  }
  EXPECT_TRUE(saw_wait) << "never managed to reuse a block whose previous work was pending";
  p.deallocate(gate, busy);
  this->expect_balanced(p, {});
}

TYPED_TEST_P(PoolConformance, DeallocateWithTokensAfterStreamDestroyed) {
  pool p(this->dev());
  std::vector<std::pair<void*, token>> freed;
  for (std::size_t n : {std::size_t{512}, std::size_t{3u << 20}}) {
    stream s(this->dev());
    void* a = p.allocate(s, n);
    fill_bytes(s, a, n, 0x55);
    freed.emplace_back(a, s.ref().now());
  }  // streams destroyed, tokens remain
  for (auto& [a, t] : freed) {
    EXPECT_TRUE(t.line->retired());
    p.deallocate(a, std::span<const token>(&t, 1));
  }
  stream s2(this->dev());
  const pool_statistics before = p.statistics();
  void* b = p.allocate(s2, 3u << 20);
  const pool_statistics after = p.statistics();
  EXPECT_EQ(b, freed[1].first);
  EXPECT_EQ(after.ready_reuses, before.ready_reuses + 1);
  EXPECT_EQ(after.device_waits + after.host_waits, before.device_waits + before.host_waits);
  p.deallocate(s2, b);
  this->expect_balanced(p, {});
}

/// Allocates n bytes on s until the pool hands out `target` again (at most 64 tries), keeping
/// the blocks it passes over live in `held`. Memory that needs no wait comes first (on CUDA, the
/// rest of the 8 MiB granule behind a 2 MiB block), so the reuse under test may not be the first.
inline void* allocate_until(pool& p, stream_ref s, std::size_t n, const void* target,
                            std::vector<void*>& held) {
  for (int i = 0; i < 64; ++i) {
    void* q = p.allocate(s, n);
    if (q == target) return q;
    held.push_back(q);
  }
  return nullptr;
}

// record_use: work on a second stream that read the block is waited for before reuse.
TYPED_TEST_P(PoolConformance, RecordUseOrdersReuse) {
  // Shared large blocks: another live stream's free block is reusable behind a wait (the default
  // keeps them per stream, pool_options::share_between_streams).
  pool p(this->dev(), pool_options{.share_between_streams = true});
  stream s1(this->dev()), s2(this->dev()), s3(this->dev());
  constexpr std::size_t n = 2u << 20;
  void* busy = p.allocate(s2, TypeParam::busy_bytes);
  void* a = p.allocate(s1, n);
  fill_bytes(s1, a, n, 0x66);
  s2.ref().wait(s1.ref().now());
  (void)make_busy(s2, busy, TypeParam::busy_bytes);
  std::vector<std::uint8_t> host(n);
  s2.ref().submit(command::make(copy_command{host.data(), a, n, false, true}));
  p.record_use(a, s2.ref().now());
  p.deallocate(s1, a);
  std::vector<void*> held;
  void* b = allocate_until(p, s3, n, a, held);
  ASSERT_EQ(a, b);
  fill_bytes(s3, b, n, 0x77);  // must not overtake s2's read
  s2.synchronize();
  EXPECT_EQ(first_mismatch(host, 0x66), -1);
  EXPECT_EQ(first_mismatch(read_bytes(s3, b, n), 0x77), -1);
  p.deallocate(s3, b);
  for (void* q : held) p.deallocate(s3, q);
  // A small block too (it may come back fresh instead; the detector checks the ordering).
  void* c = p.allocate(s1, 1024);
  fill_bytes(s1, c, 1024, 1);
  s2.ref().wait(s1.ref().now());
  fill_bytes(s2, c, 1024, 2);
  p.record_use(c, s2.ref().now());
  p.deallocate(s1, c);
  void* d = p.allocate(s3, 1024);
  fill_bytes(s3, d, 1024, 3);
  EXPECT_EQ(first_mismatch(read_bytes(s3, d, 1024), 3), -1);
  p.deallocate(s3, d);
  p.deallocate(s2, busy);
  this->expect_balanced(p, {});
}

// record_use with a stream, declared before the work that reads the block (PyTorch's
// record_stream, as data loaders call it): the free waits for what that stream queued until the
// free, not only until the declaration.
TYPED_TEST_P(PoolConformance, RecordUseAheadOfTheWorkOrdersReuse) {
  // Shared large blocks: another live stream's free block is reusable behind a wait (the default
  // keeps them per stream, pool_options::share_between_streams).
  pool p(this->dev(), pool_options{.share_between_streams = true});
  stream s1(this->dev()), s2(this->dev()), s3(this->dev());
  constexpr std::size_t n = 2u << 20;
  void* busy = p.allocate(s2, TypeParam::busy_bytes);
  for (const std::size_t bytes : {n, std::size_t{1024}}) {  // a large block, then a small one
    void* a = p.allocate(s1, bytes);
    fill_bytes(s1, a, bytes, 0x66);
    s2.ref().wait(s1.ref().now());
    p.record_use(a, s2);  // before the read is queued
    // A marker on s2 between the declaration and the read (another stream waiting for s2, or
    // the pool's own markers): the read then lies beyond the point current at the declaration.
    s1.ref().wait(s2.ref().now());
    (void)make_busy(s2, busy, TypeParam::busy_bytes);
    std::vector<std::uint8_t> host(bytes);
    s2.ref().submit(command::make(copy_command{host.data(), a, bytes, false, true}));
    p.deallocate(s1, a);
    std::vector<void*> held;
    // The small one may come back fresh instead; the detector checks the ordering.
    void* b = bytes == n ? allocate_until(p, s3, bytes, a, held) : p.allocate(s3, bytes);
    ASSERT_NE(b, nullptr);
    fill_bytes(s3, b, bytes, 0x77);  // must not overtake s2's read
    s2.synchronize();
    EXPECT_EQ(first_mismatch(host, 0x66), -1) << bytes << " bytes";
    EXPECT_EQ(first_mismatch(read_bytes(s3, b, bytes), 0x77), -1) << bytes << " bytes";
    p.deallocate(s3, b);
    for (void* q : held) p.deallocate(s3, q);
  }
  p.deallocate(s2, busy);
  this->expect_balanced(p, {});
}

TYPED_TEST_P(PoolConformance, TrimReturnsEverything) {
  pool p(this->dev());
  std::optional<std::size_t> upstream_before = TypeParam::upstream_bytes(this->dev());
  {
    stream s1(this->dev()), s2(this->dev());
    std::vector<std::pair<void*, stream*>> live;
    std::mt19937_64 rng(7);
    for (int i = 0; i < 200; ++i) {
      stream* s = (i % 2) != 0 ? &s1 : &s2;
      const std::size_t n = 256 + rng() % ((i % 10 == 0) ? (6u << 20) : 20000u);
      void* q = p.allocate(*s, n);
      fill_bytes(*s, q, n, static_cast<std::uint8_t>(i));
      live.emplace_back(q, s);
    }
    EXPECT_GT(p.statistics().reserved_bytes, 0u);
    std::shuffle(live.begin(), live.end(), rng);
    for (auto& [q, s] : live) p.deallocate(*s, q);
    s1.synchronize();
    s2.synchronize();
    EXPECT_GT(p.trim(), 0u);
    const pool_statistics st = p.statistics();
    EXPECT_EQ(st.live_bytes, 0u);
    EXPECT_EQ(st.reserved_bytes, 0u) << "streams alive but synchronised: everything is free";
    EXPECT_EQ(st.upstream_allocations, st.upstream_deallocations);
    EXPECT_EQ(p.trim(), 0u);
    // Still usable afterwards.
    void* q = p.allocate(s1, 1000);
    fill_bytes(s1, q, 1000, 9);
    EXPECT_EQ(first_mismatch(read_bytes(s1, q, 1000), 9), -1);
    p.deallocate(s1, q);
  }
  p.trim();
  EXPECT_EQ(p.statistics().reserved_bytes, 0u);
  if (upstream_before) {
    EXPECT_EQ(TypeParam::upstream_bytes(this->dev()), upstream_before);
  }
}

TYPED_TEST_P(PoolConformance, MemoryLimitReclaimHookAndOutOfMemory) {
  constexpr std::size_t limit = 16u << 20;
  pool p(this->dev(), pool_options{.memory_limit = limit});
  EXPECT_EQ(p.memory_limit(), limit);
  stream s(this->dev());
  constexpr std::size_t n = 4u << 20;
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(p.allocate(s, n));
  // Over the limit, no hook: throws with the numbers.
  try {
    (void)p.allocate(s, n);
    ADD_FAILURE() << "allocation beyond the memory limit succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), n);
    EXPECT_EQ(e.limit(), limit);
    EXPECT_EQ(e.live(), 4 * n);
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(n)), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(limit)), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(4 * n)), std::string::npos) << what;
  }
  this->expect_balanced(p, held);
  // A reclaim hook (a garbage collector) frees one block: the retry succeeds.
  int calls = 0;
  const std::uint64_t id = p.add_reclaim_hook([&](std::size_t needed) {
    ++calls;
    EXPECT_GE(needed, n);
    if (!held.empty()) {
      p.deallocate(s, held.back());
      held.pop_back();
    }
  });
  void* q = p.allocate(s, n);
  EXPECT_EQ(calls, 1);
  EXPECT_GE(p.statistics().reclaim_calls, 1u);
  held.push_back(q);
  this->expect_balanced(p, held);
  p.remove_reclaim_hook(id);
  EXPECT_THROW(p.remove_reclaim_hook(id), logic_error);
  // Raising the limit makes room.
  p.set_memory_limit(0);
  void* r = p.allocate(s, n);
  held.push_back(r);
  this->expect_balanced(p, held);
  for (void* x : held) p.deallocate(s, x);
  this->expect_balanced(p, {});
}

TYPED_TEST_P(PoolConformance, SizeZeroGivesUniqueBlocks) {
  // Like malloc(0): a unique, freeable pointer (frameworks allocate empty tensors).
  pool p(this->dev());
  stream s(this->dev());
  void* a = p.allocate(s, 0);
  void* b = p.allocate(s, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_TRUE(p.owns(a));
  EXPECT_GE(p.block_size(a), 1u);
  this->expect_balanced(p, {a, b});
  p.deallocate(s, a);
  p.deallocate(s, b);
  this->expect_balanced(p, {});
}

TYPED_TEST_P(PoolConformance, BadInputThrowsAndLeavesPoolConsistent) {
  pool p(this->dev());
  pool other(this->dev());
  stream s(this->dev());
  std::vector<void*> live{p.allocate(s, 1024), p.allocate(s, 3u << 20)};
  void* small = live[0];
  void* large = live[1];
  auto expect_logic_error = [&](auto&& fn, const std::string& must_contain) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one naming " << must_contain;
    } catch (const logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(must_contain), std::string::npos)
          << "message: " << e.what() << "\nshould name: " << must_contain;
    }
    this->expect_balanced(p, live);
  };
  // Double free (small and large).
  void* f1 = p.allocate(s, 1024);
  p.deallocate(s, f1);
  expect_logic_error([&] { p.deallocate(s, f1); }, ptr_text(f1));
  void* f2 = p.allocate(s, 3u << 20);
  p.deallocate(s, f2);
  expect_logic_error([&] { p.deallocate(s, f2); }, ptr_text(f2));
  const token t = s.ref().now();
  expect_logic_error([&] { p.deallocate(f1, std::span<const token>(&t, 1)); }, ptr_text(f1));
  // Foreign pointer.
  int on_stack = 0;
  expect_logic_error([&] { p.deallocate(s, &on_stack); }, ptr_text(&on_stack));
  expect_logic_error([&] { p.record_use(&on_stack, t); }, ptr_text(&on_stack));
  expect_logic_error([&] { (void)p.block_size(&on_stack); }, ptr_text(&on_stack));
  // Pointer inside a block.
  void* inside_small = static_cast<char*>(small) + 256;
  void* inside_large = static_cast<char*>(large) + 4096;
  expect_logic_error([&] { p.deallocate(s, inside_small); }, ptr_text(inside_small));
  expect_logic_error([&] { p.deallocate(s, inside_large); }, ptr_text(inside_large));
  // Overflowing sizes (size 0 is valid: see SizeZeroGivesUniqueBlocks).
  const std::size_t huge = std::numeric_limits<std::size_t>::max() - 100;
  expect_logic_error([&] { (void)p.allocate(s, huge); }, std::to_string(huge));
  // Wrong pool: a pointer of another pool of the same device.
  void* theirs = other.allocate(s, 1024);
  expect_logic_error([&] { p.deallocate(s, theirs); }, ptr_text(theirs));
  EXPECT_TRUE(other.owns(theirs));
  other.deallocate(s, theirs);
  // Wrong device: a stream of another device.
  device d2 = TypeParam::make_device();
  stream s_other(d2);
  expect_logic_error([&] { (void)p.allocate(s_other, 1024); }, "device");
  // The pool still works, and every live block is intact.
  void* q = p.allocate(s, 1024);
  fill_bytes(s, q, 1024, 0x42);
  EXPECT_EQ(first_mismatch(read_bytes(s, q, 1024), 0x42), -1);
  live.push_back(q);
  this->expect_balanced(p, live);
  for (void* x : live) p.deallocate(s, x);
  this->expect_balanced(p, {});
  EXPECT_EQ(TypeParam::violations(d2), std::vector<std::string>{});
}

TYPED_TEST_P(PoolConformance, StatisticsBalance) {
  pool p(this->dev());
  stream s1(this->dev()), s2(this->dev());
  std::mt19937_64 rng(11);
  std::vector<void*> live;
  std::map<void*, stream*> where;
  for (int step = 0; step < 600; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      stream* s = (rng() % 2) != 0 ? &s1 : &s2;
      const std::size_t n = (rng() % 8 == 0) ? (1u << 20) + rng() % (3u << 20) : 1 + rng() % 70000;
      void* q = p.allocate(*s, n);
      live.push_back(q);
      where[q] = s;
    } else {
      const std::size_t i = rng() % live.size();
      void* q = live[i];
      live[i] = live.back();
      live.pop_back();
      p.deallocate(*where[q], q);
      where.erase(q);
    }
    if (step % 50 == 0) this->expect_balanced(p, live);
  }
  this->expect_balanced(p, live);
  const pool_statistics st = p.statistics();
  EXPECT_GE(st.peak_live_bytes, st.live_bytes);
  EXPECT_GE(st.peak_reserved_bytes, st.reserved_bytes);
  EXPECT_EQ(st.allocations,
            st.fresh_allocations + st.same_stream_reuses + st.ready_reuses + st.waited_reuses);
  for (void* q : live) p.deallocate(*where[q], q);
  s1.synchronize();
  s2.synchronize();
  p.trim();
  const pool_statistics end = p.statistics();
  EXPECT_EQ(end.live_bytes, 0u);
  EXPECT_EQ(end.reserved_bytes, 0u);
  EXPECT_EQ(end.allocations, end.deallocations);
}

REGISTER_TYPED_TEST_SUITE_P(PoolConformance, AllocateFreeSizesAndAlignment,
                            SameStreamReuseIsImmediate, CrossStreamReuseIsOrdered,
                            DeallocateWithTokensAfterStreamDestroyed, RecordUseOrdersReuse,
                            RecordUseAheadOfTheWorkOrdersReuse, TrimReturnsEverything,
                            MemoryLimitReclaimHookAndOutOfMemory,
                            BadInputThrowsAndLeavesPoolConsistent, StatisticsBalance,
                            SizeZeroGivesUniqueBlocks);

}  // namespace streampool::test
