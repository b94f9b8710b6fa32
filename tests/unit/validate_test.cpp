// pool_state::validate() (src/core/pool/pool_state.hpp): it holds on pools that did real work, also
// while other threads allocate and trim, on both large-block paths; and each kind of broken
// invariant is caught and named. The negative tests break the pool's state on purpose through
// test_access (a friend of the pool's internal types) and put it back before the pool is
// destroyed, so each fails if validate() checks nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "conformance/accessor.hpp"
#include "core/pool/pool_state.hpp"
#include "core/stream/access.hpp"
#include "streampool/host.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace streampool::detail {

// Reaches the private state the negative tests corrupt. Everything here is inline data access:
// the library exports none of these types' functions.
struct test_access {
  static pool_state& state(const sp::pool& p) { return *access::state(p); }
  static std::size_t& reserved(pool_state& s) { return s.reserved_; }
  static std::vector<native_physical>& spares(pool_state& s) { return s.spare_physical_; }
  /// Counts `bytes` more as reserved, as reserve_bytes() does (exact count, mirror, peak).
  static void add_reserved(pool_state& s, std::size_t bytes) {
    s.reserved_ += bytes;
    s.reserved_now_.store(s.reserved_);
    if (s.reserved_ > s.peak_reserved_.load()) s.peak_reserved_.store(s.reserved_);
  }
  static stream_cache& cache(pool_state& s, const sp::stream& st) {
    return access::cache_for(st.ref().get_timeline(), s, s.id());
  }
  static auto& bin_bytes(stream_cache& c, std::size_t cls) { return c.bin_bytes_[cls]; }
  static locked_count<std::size_t>& total_bytes(stream_cache& c) { return c.total_bytes_; }
  static std::atomic<std::int64_t>& live_delta(pool_state& s) {
    return sp::detail::thread_live_cell(s)->delta;
  }
  static std::vector<stream_cache::entry>& bin(stream_cache& c, std::size_t cls) {
    return c.bins_[cls];
  }
  static slab& some_slab(pool_state& s) { return *s.slabs_.begin()->second; }
  /// The first shard's arena that has a mapped free block of at least `bytes`, and that block.
  static std::pair<block_arena*, arena_block*> free_block(pool_state& s, std::size_t bytes) {
    for (auto& sh : s.shards_)
      for (arena_block* b : sh->arena.mapped_free())
        if (b->size >= bytes) return {&sh->arena, b};
    return {nullptr, nullptr};
  }
  static size_index& mapped(block_arena& a) { return a.mapped_; }
  /// The free block that starts at p, in whichever shard holds it.
  static arena_block* free_block_at(pool_state& s, const void* p) {
    arena_block* found = nullptr;
    for (auto& sh : s.shards_)
      sh->arena.for_each_mapped_free([&](arena_block* b) {
        if (b->start == to_addr(p)) found = b;
      });
    return found;
  }
};

}  // namespace streampool::detail

namespace {

using sp::detail::arena_block;
using sp::detail::block_state;
using sp::detail::test_access;

/// validate()'s message, or "" when every invariant holds.
std::string broken(const sp::pool& p) {
  try {
    sp::detail::access::state(p)->validate();
    return {};
  } catch (const sp::logic_error& e) {
    return e.what();
  }
}

sp::pool_options options(bool virtual_memory) {
  sp::pool_options o;
  o.virtual_memory = virtual_memory;
  o.stream_cache_bytes = 64u << 10;  // spills often
  return o;
}

/// Small and large blocks on three streams, freed on their own stream, on another, with tokens
/// and with recorded uses; some streams die with blocks in their caches. validate() after each
/// step.
void churn(sp::device& d, sp::pool& p, std::uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  std::vector<sp::stream> streams;
  streams.reserve(3);
  for (int i = 0; i < 3; ++i) streams.emplace_back(d);
  std::vector<std::pair<void*, std::size_t>> live;  // block, stream index
  for (int step = 0; step < steps; ++step) {
    const auto op = rng() % 10;
    if (op < 5 || live.empty()) {
      const std::size_t k = rng() % streams.size();
      const std::size_t n =
          rng() % 4 == 0 ? (256u << 10) + rng() % (6u << 20) : 1 + rng() % (64u << 10);
      live.emplace_back(p.allocate(streams[k], n), k);
    } else if (op < 9) {
      const std::size_t i = rng() % live.size();
      auto [q, k] = live[i];
      live[i] = live.back();
      live.pop_back();
      switch (rng() % 4) {
        case 0:
          p.deallocate(streams[k], q);
          break;
        case 1:
          p.deallocate(streams[(k + 1) % streams.size()], q);
          break;
        case 2: {
          const sp::token t = streams[k].ref().now();
          p.deallocate(q, std::span<const sp::token>(&t, 1));
          break;
        }
        default:
          p.record_use(q, streams[(k + 2) % streams.size()]);
          p.deallocate(streams[k], q);
          break;
      }
    } else if (rng() % 4 == 0) {
      (void)p.trim();
    } else {
      // A stream dies with its cache full; its blocks still live are freed with no stream.
      const std::size_t k = rng() % streams.size();
      for (auto& [q, owner] : live) {
        if (owner != k) continue;
        p.deallocate(q, {});
        q = nullptr;
      }
      std::erase_if(live, [](const auto& e) { return e.first == nullptr; });
      streams[k] = sp::stream(d);
    }
    ASSERT_EQ(broken(p), "") << "after step " << step;
  }
  for (auto& [q, k] : live) p.deallocate(streams[k], q);
  ASSERT_EQ(broken(p), "");
  (void)p.trim();
  ASSERT_EQ(broken(p), "");
}

// NOLINTNEXTLINE(readability-identifier-naming): GoogleTest's names
class ValidateOn : public ::testing::TestWithParam<bool> {};

TEST_P(ValidateOn, HoldsThroughSmallAndLargeWorkOnSeveralStreams) {
  sp::device d(sp::make_host_backend({.granularity = 64u << 10, .vm_granularity = 1u << 20}));
  sp::pool p(d, options(GetParam()));
  EXPECT_EQ(broken(p), "");
  churn(d, p, 1, 2000);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
}

TEST_P(ValidateOn, HoldsWhileOtherThreadsAllocateFreeAndTrim) {
  // validate() sees the pool between two operations of every other thread, including growths
  // and releases that span two lock sections (unpublished_): no false alarm.
  sp::device d(sp::make_host_backend({.granularity = 64u << 10, .vm_granularity = 1u << 20}));
  sp::pool p(d, options(GetParam()));
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  workers.reserve(3);
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      sp::stream s(d);
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 40);
      std::vector<void*> mine;
      for (int i = 0; i < 3000 && !stop.load(); ++i) {
        if (mine.size() < 64 && (mine.empty() || rng() % 2 == 0)) {
          const std::size_t n = rng() % 8 == 0 ? (1u << 20) + rng() % (3u << 20) : 1 + rng() % 9000;
          mine.push_back(p.allocate(s, n));
        } else {
          const std::size_t k = rng() % mine.size();
          p.deallocate(s, mine[k]);
          mine[k] = mine.back();
          mine.pop_back();
        }
        if (rng() % 200 == 0) (void)p.trim();
      }
      for (void* q : mine) p.deallocate(s, q);
    });
  }
  std::string first_broken;
  for (int i = 0; i < 300 && first_broken.empty(); ++i) {
    first_broken = broken(p);
    std::this_thread::yield();
  }
  stop = true;
  for (auto& w : workers) w.join();
  EXPECT_EQ(first_broken, "");
  EXPECT_EQ(broken(p), "");
}

TEST(Validate, AllowsNeighboursKeptApartWhoseTokensAMergeDropped) {
  // The exemption in block_arena.hpp's "merged" invariant, on the pool. W X Y Z adjacent; Y is
  // freed with no tokens, X behind two streams' pending work (kept apart from Y: two timelines),
  // the work completes, then W is freed: it merges with X, whose tokens are complete and dropped.
  // W+X and Y are now free neighbours with no token between them, yet legitimately apart (W's
  // far boundary was not looked at again): validate() must accept them, and does so only
  // because W+X is marked absorbed_complete.
  sp::device d(sp::make_host_backend({.granularity = 64u << 10, .vm_granularity = 1u << 20}));
  sp::pool p(d);
  sp::stream s(d), s1(d), s2(d);
  constexpr std::size_t mib = 1u << 20, busy = 64u << 20;
  void* w = p.allocate(s, mib);
  void* x = p.allocate(s, mib);
  void* y = p.allocate(s, mib);
  void* z = p.allocate(s, mib);
  ASSERT_EQ(static_cast<char*>(x), static_cast<char*>(w) + mib);
  ASSERT_EQ(static_cast<char*>(y), static_cast<char*>(x) + mib);
  void* scratch1 = p.allocate(s1, busy);
  void* scratch2 = p.allocate(s2, busy);
  p.deallocate(y, {});
  const sp::token pending[] = {sp::test::make_busy(s1, scratch1, busy),
                               sp::test::make_busy(s2, scratch2, busy)};
  p.deallocate(x, pending);
  sp::detail::pool_state& state = test_access::state(p);
  arena_block* bx = test_access::free_block_at(state, x);
  ASSERT_NE(bx, nullptr);
  if (bx->tokens.size() < 2) GTEST_SKIP() << "the two streams' work completed before the free";
  ASSERT_EQ(broken(p), "");
  s1.synchronize();
  s2.synchronize();
  p.deallocate(w, {});
  arena_block* bw = test_access::free_block_at(state, w);
  ASSERT_NE(bw, nullptr);
  ASSERT_EQ(bw->size, 2 * mib);
  ASSERT_NE(bw->next, nullptr);
  EXPECT_EQ(bw->next->start, sp::detail::to_addr(y));
  EXPECT_EQ(bw->next->state, block_state::mapped);
  EXPECT_TRUE(bw->tokens.empty() && bw->next->tokens.empty());  // the check before issue 10 failed
  EXPECT_TRUE(bw->absorbed_complete);
  EXPECT_EQ(broken(p), "");
  for (void* q : {z, scratch1, scratch2}) p.deallocate(s, q);
  EXPECT_EQ(broken(p), "");
}

INSTANTIATE_TEST_SUITE_P(Validate, ValidateOn, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("VirtualMemory") : std::string("Segments");
                         });

// ---- each invariant, broken on purpose ----

class ValidateCatches : public ::testing::Test {  // NOLINT(readability-identifier-naming)
 protected:
  ValidateCatches()
      : d_(sp::make_host_backend({.granularity = 64u << 10, .vm_granularity = 1u << 20})),
        // No shelf: the large block freed below must be a free block of the arena.
        p_(d_, {.large_cache_bytes = 0}),
        s_(d_),
        state_(test_access::state(p_)) {
    // A block in s's stream cache, a free large block, a live large block after it.
    void* small = p_.allocate(s_, 1000);
    big_ = p_.allocate(s_, 4u << 20);
    after_ = p_.allocate(s_, 4u << 20);
    p_.deallocate(s_, small);
    p_.deallocate(s_, big_);
    EXPECT_EQ(broken(p_), "");
  }
  ~ValidateCatches() override {
    EXPECT_EQ(broken(p_), "") << "the test did not put the pool back";
    p_.deallocate(s_, after_);
  }
  /// validate() must throw, naming `invariant`.
  void expect_broken(const std::string& invariant) {
    const std::string what = broken(p_);
    EXPECT_NE(what.find("invariant broken"), std::string::npos) << what;
    EXPECT_NE(what.find(invariant), std::string::npos) << what;
  }

  sp::device d_;
  sp::pool p_;
  sp::stream s_;
  sp::detail::pool_state& state_;
  void* big_ = nullptr;
  void* after_ = nullptr;
};

TEST_F(ValidateCatches, ABinWhoseBytesDoNotMatchItsEntries) {
  auto& bytes = test_access::bin_bytes(test_access::cache(state_, s_), sp::detail::class_of(1000));
  ASSERT_EQ(static_cast<std::size_t>(bytes), sp::detail::class_size(sp::detail::class_of(1000)));
  bytes += 256;
  expect_broken("bin bytes");
  bytes -= 256;
}

TEST_F(ValidateCatches, AChunkListedTwice) {
  const std::size_t cls = sp::detail::class_of(1000);
  sp::detail::stream_cache& c = test_access::cache(state_, s_);
  auto& bin = test_access::bin(c, cls);
  ASSERT_EQ(bin.size(), 1u);
  bin.push_back(bin.front());
  test_access::bin_bytes(c, cls) += sp::detail::class_size(cls);
  test_access::total_bytes(c) += sp::detail::class_size(cls);
  expect_broken("listed twice");
  bin.pop_back();
  test_access::bin_bytes(c, cls) -= sp::detail::class_size(cls);
  test_access::total_bytes(c) -= sp::detail::class_size(cls);
}

TEST_F(ValidateCatches, ACacheTotalThatIsNotItsBinsSum) {
  sp::detail::stream_cache& c = test_access::cache(state_, s_);
  test_access::total_bytes(c) += 256;
  expect_broken("total bytes");
  test_access::total_bytes(c) -= 256;
}

TEST_F(ValidateCatches, ALiveDeltaBeyondItsBound) {
  auto& delta = test_access::live_delta(state_);
  const std::int64_t was = delta.load();
  // The fixture's last large change was 4 MiB: the bound is the flush size.
  delta.store(sp::detail::live_cell::flush_bytes);
  expect_broken("live delta");
  delta.store(was);
}

// A stream that allocates and frees large blocks of the flush size or more keeps the change
// pending (the step is twice the block): the pool's counter, which every thread writes, is not
// written at every call. The next smaller change flushes it, and the statistics stay exact.
TEST(LiveDelta, LargeBlocksOfTheFlushSizeStayPendingAndTheNextSmallChangeFlushes) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  auto& state = test_access::state(p);
  const auto flush = static_cast<std::size_t>(sp::detail::live_cell::flush_bytes);
  void* warm = p.allocate(s, 4096);  // makes s's cache and this thread's cell
  p.deallocate(s, warm);
  auto& pending = test_access::live_delta(state);
  const std::int64_t before = pending.load();
  for (int i = 0; i < 4; ++i) {
    void* q = p.allocate(s, flush);
    EXPECT_EQ(pending.load(), before + static_cast<std::int64_t>(flush)) << "round " << i;
    EXPECT_EQ(p.statistics().live_bytes, flush);
    EXPECT_EQ(broken(p), "");
    p.deallocate(s, q);
    EXPECT_EQ(pending.load(), before);
  }
  void* big = p.allocate(s, flush);
  void* small = p.allocate(s, 4096);  // a change under the flush size: the delta goes out
  EXPECT_EQ(pending.load(), 0);
  EXPECT_EQ(p.statistics().live_bytes, flush + p.block_size(small));
  EXPECT_EQ(broken(p), "");
  p.deallocate(s, small);
  p.deallocate(s, big);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
  EXPECT_GE(p.statistics().peak_live_bytes, flush + 4096);
}

TEST_F(ValidateCatches, ReservedBytesThatNoSegmentHolds) {
  test_access::reserved(state_) += 4096;
  expect_broken("reserved");
  test_access::reserved(state_) -= 4096;
}

TEST_F(ValidateCatches, ASlabCarvedBeyondItsChunks) {
  sp::detail::slab& sl = test_access::some_slab(state_);
  const std::size_t carved = sl.carved;
  sl.carved = sl.chunks + 1;
  expect_broken("carved");
  sl.carved = carved;
}

TEST_F(ValidateCatches, FreeNeighboursLeftUnmerged) {
  // A skipped coalesce: the free block cut in two, both halves indexed, the same tokens.
  auto [arena, b] = test_access::free_block(state_, 1u << 20);
  ASSERT_NE(b, nullptr);
  auto& mapped = test_access::mapped(*arena);
  const bool exempt = b->absorbed_complete;
  b->absorbed_complete = false;
  mapped.erase(b);
  auto* right = new arena_block;
  right->start = b->start + b->size / 2 / 256 * 256;
  right->size = b->end() - right->start;
  right->range = b->range;
  right->prev = b;
  right->next = b->next;
  right->state = block_state::mapped;
  right->tokens = b->tokens;
  if (b->next != nullptr) b->next->prev = right;
  b->next = right;
  b->size -= right->size;
  mapped.insert(b);
  mapped.insert(right);
  expect_broken("merged");
  // Put it back.
  mapped.erase(b);
  mapped.erase(right);
  b->size += right->size;
  b->next = right->next;
  if (right->next != nullptr) right->next->prev = b;
  delete right;
  mapped.insert(b);
  b->absorbed_complete = exempt;
}

TEST_F(ValidateCatches, ABlockLinkThatDoesNotPointBack) {
  auto [arena, b] = test_access::free_block(state_, 1u << 20);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(b->next, nullptr);  // the live block after it
  arena_block* const prev = b->next->prev;
  b->next->prev = b->next;
  expect_broken("tiling");
  b->next->prev = prev;
}

TEST_F(ValidateCatches, ABlockOnAGranuleWithoutMemory) {
  // The free block's first granule's memory went to the spares (so reserved bytes still add up),
  // while the arena still says the block has memory behind it.
  auto [arena, b] = test_access::free_block(state_, 1u << 20);
  ASSERT_NE(b, nullptr);
  auto* r = static_cast<sp::detail::large_range*>(b->range->owner);
  const std::size_t g = arena->granularity();
  const std::size_t i = (b->start - b->range->base) / g;
  ASSERT_LT(i, r->handles.size());
  const sp::native_physical h = r->handles[i];
  r->handles[i] = nullptr;
  test_access::spares(state_).push_back(h);
  expect_broken("no memory");
  test_access::spares(state_).pop_back();
  r->handles[i] = h;
}

// Not a negative test, but one that needs the same access: spare granules (created by a growth
// that then found memory elsewhere) go back on trim(). They did not: trim() asks for SIZE_MAX
// bytes, and rounding that up to granules wrapped to 0.
TEST_F(ValidateCatches, TrimGivesSpareGranulesBack) {
  const std::size_t g = d_.get_backend().caps().vm_granularity;
  test_access::spares(state_).push_back(d_.get_backend().create_physical());
  test_access::add_reserved(state_, g);
  ASSERT_EQ(broken(p_), "");
  const std::size_t upstream = sp::host_allocated_bytes(d_.get_backend());
  const std::size_t released = p_.trim();
  EXPECT_GE(released, g);
  EXPECT_TRUE(test_access::spares(state_).empty());
  EXPECT_EQ(sp::host_allocated_bytes(d_.get_backend()), upstream - released);
}

#if STREAMPOOL_DEBUG_LEVEL >= 3
TEST_F(ValidateCatches, TrimAbortsOnABrokenPoolAtDebugLevel3) {
  // STREAMPOOL_ASSERT_EXPENSIVE runs validate() after every trim: the process dies naming it.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        test_access::reserved(state_) += 4096;
        (void)p_.trim();
      },
      "invariant broken: reserved");
}
#endif

}  // namespace
