// graph_arena (src/torch/graph_arena.hpp) on the host backend: random allocations and frees on two
// streams keep its invariants (validate()) and never hand out overlapping blocks; a saved layout
// put back after more work is the saved one, block for block.
#include "torch/graph_arena.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "streampool.h"

namespace streampool::torch_native {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

struct host_source {
  sp_device_t device = nullptr;
  sp_pool_t pool = nullptr;
  std::vector<sp_stream_t> streams;
  std::vector<cudaStream_t> natives;

  host_source() {
    EXPECT_EQ(sp_device_create_host(nullptr, &device), STREAMPOOL_STATUS_SUCCESS);
    sp_pool_options_t o;
    sp_pool_options_init(&o);
    o.keep_memory = 1;
    o.virtual_memory = 0;
    EXPECT_EQ(sp_pool_create(device, &o, &pool), STREAMPOOL_STATUS_SUCCESS);
    for (int i = 0; i < 2; ++i) {
      sp_stream_t s = nullptr;
      void* native = nullptr;
      EXPECT_EQ(sp_stream_create(device, &s), STREAMPOOL_STATUS_SUCCESS);
      EXPECT_EQ(sp_stream_native(s, &native), STREAMPOOL_STATUS_SUCCESS);
      streams.push_back(s);
      natives.push_back(static_cast<cudaStream_t>(native));
    }
  }
  ~host_source() {
    for (sp_stream_t s : streams) (void)sp_stream_synchronize(s);
    (void)sp_pool_destroy(pool);
    for (sp_stream_t s : streams) (void)sp_stream_destroy(s);
    (void)sp_device_destroy(device);
  }
  host_source(const host_source&) = delete;
  host_source& operator=(const host_source&) = delete;
};

struct live_block {
  std::size_t size;
  cudaStream_t stream;
};

/// Live blocks must not overlap one another.
void expect_disjoint(const std::map<std::uintptr_t, live_block>& live) {
  std::uintptr_t end = 0;
  for (const auto& [a, b] : live) {
    EXPECT_GE(a, end) << "a block at " << a << " overlaps the one before";
    end = a + b.size;
  }
}

TEST(GraphArena, RandomWorkKeepsTheInvariantsAndACheckpointComesBackExactly) {
  host_source src;
  std::mt19937_64 rng(44);
  const std::size_t sizes[] = {1, 512, 1000, 4096, 300000, mib, mib + 1, 3 * mib, 9 * mib};
  for (int round = 0; round < 4; ++round) {
    graph_arena arena(0, src.pool);
    std::map<std::uintptr_t, live_block> live;
    std::vector<graph_arena::saved_segment> saved;
    std::map<std::uintptr_t, live_block> live_at_save;
    for (int step = 0; step < 600; ++step) {
      if (step == 300) {
        saved = arena.save();
        live_at_save = live;
      }
      const bool allocate = live.empty() || rng() % 100 < 55;
      if (allocate) {
        const std::size_t n = sizes[rng() % std::size(sizes)] + rng() % 64;
        cudaStream_t s = src.natives[rng() % 2];
        std::size_t size = 0;
        void* p = arena.allocate(n, s, /*capturing=*/true, size);
        ASSERT_NE(p, nullptr);
        EXPECT_GE(size, n);
        EXPECT_EQ(size % 512, 0u);
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        ASSERT_EQ(live.count(a), 0u) << "handed out twice";
        live[a] = {size, s};
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
        arena.free(reinterpret_cast<void*>(it->first), /*capturing=*/true);
        live.erase(it);
      }
      if (step % 50 == 0) {
        ASSERT_NO_THROW(arena.validate());
        expect_disjoint(live);
      }
      ASSERT_EQ(arena.live(), live.size());
    }
    const graph_arena::restored r = arena.restore(saved);
    ASSERT_NO_THROW(arena.validate());
    EXPECT_EQ(r.freed.size(), live.size()) << "every block live at the restore is freed";
    std::map<std::uintptr_t, live_block> back;
    for (const auto& e : r.allocated) back[e.block.address] = {e.block.size, e.stream};
    ASSERT_EQ(back.size(), live_at_save.size());
    for (const auto& [a, b] : live_at_save) {
      ASSERT_EQ(back.count(a), 1u);
      EXPECT_EQ(back[a].size, b.size);
      EXPECT_EQ(back[a].stream, b.stream);
    }
    EXPECT_EQ(arena.live(), live_at_save.size());
    // The layout is the saved one: saving again gives the same blocks.
    const auto again = arena.save();
    ASSERT_EQ(again.size() >= saved.size(), true);
    for (const auto& s : saved) {
      const auto it =
          std::find_if(again.begin(), again.end(), [&](const auto& x) { return x.base == s.base; });
      ASSERT_NE(it, again.end());
      ASSERT_EQ(it->blocks.size(), s.blocks.size());
      for (std::size_t i = 0; i < s.blocks.size(); ++i) {
        EXPECT_EQ(it->blocks[i].address, s.blocks[i].address);
        EXPECT_EQ(it->blocks[i].size, s.blocks[i].size);
        EXPECT_EQ(it->blocks[i].allocated, s.blocks[i].allocated);
      }
    }
    // Everything freed: every segment is one free block again, and all of it goes back.
    for (const auto& [a, b] : back) arena.free(reinterpret_cast<void*>(a), /*capturing=*/false);
    ASSERT_NO_THROW(arena.validate());
    EXPECT_EQ(arena.count().inactive_split[0] + arena.count().inactive_split[1], 0);
    EXPECT_GT(arena.release_free_segments(), 0u);
    EXPECT_EQ(arena.count().segments[0] + arena.count().segments[1], 0);
  }
}

TEST(GraphArena, ARestoreOfASegmentThatIsGoneChangesNothing) {
  host_source src;
  graph_arena arena(0, src.pool);
  std::size_t size = 0;
  void* p = arena.allocate(3 * mib, src.natives[0], true, size);
  graph_arena::saved_segment ghost{
      reinterpret_cast<std::uintptr_t>(p) + 64 * mib, 4 * mib, src.natives[0], {}};
  ghost.blocks.push_back({ghost.base, 4 * mib, 0, false});
  EXPECT_THROW((void)arena.restore({ghost}), c10::Error);
  EXPECT_EQ(arena.live(), 1u) << "a failed restore leaves the arena as it was";
  ASSERT_NO_THROW(arena.validate());
  EXPECT_THROW(arena.free(static_cast<char*>(p) + 512, true), c10::Error);
  arena.free(p, true);
  EXPECT_THROW(arena.free(p, true), c10::Error) << "a double free is named";
  ASSERT_NO_THROW(arena.validate());
}

}  // namespace
}  // namespace streampool::torch_native
