// Large blocks on the GPU's virtual memory (cuMemAddressReserve / cuMemCreate / cuMemMap): data
// written into blocks that were assembled from remapped physical granules reads back exactly,
// steady state makes no driver call, trim gives every free granule back. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "streampool/cuda.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

#define SKIP_WITHOUT_GPU() \
  if (!sp::cuda_available()) GTEST_SKIP() << "no CUDA driver or device"

sp::device gpu() {
  static sp::device* d = nullptr;
  if (d == nullptr) d = new sp::device(sp::make_cuda_backend(0));
  return *d;
}

std::vector<std::uint32_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = seed * 2654435761u + static_cast<std::uint32_t>(i);
  return v;
}

}  // namespace

TEST(CudaVirtualMemory, TheDeviceHasIt) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(gpu().get_backend().caps().virtual_memory)
      << "the H200 supports virtual memory management; STREAMPOOL_CUDA_VIRTUAL_MEMORY=0?";
}

TEST(CudaVirtualMemory, RemappedBlocksHoldTheirData) {
  SKIP_WITHOUT_GPU();
  sp::device d = gpu();
  sp::pool p(d);
  sp::stream s(d);
  const std::size_t g = d.get_backend().caps().vm_granularity;
  // Holes of four granules between live walls of two; freed and complete, none fits twelve: the
  // twelve-granule block is built from their granules, remapped.
  std::vector<void*> holes, walls;
  for (int i = 0; i < 4; ++i) {
    holes.push_back(p.allocate(s, 4 * g));
    walls.push_back(p.allocate(s, 2 * g));
  }
  for (std::size_t i = 0; i < walls.size(); ++i) {
    auto w = pattern(2 * g / 4, static_cast<std::uint32_t>(i));
    s.ref().submit(sp::command::make(sp::copy_command{walls[i], w.data(), 2 * g, true, false}));
  }
  for (void* h : holes) p.deallocate(s, h);
  s.synchronize();
  const auto before = p.statistics();
  void* big = p.allocate(s, 12 * g);
  const auto after = p.statistics();
  EXPECT_EQ(after.upstream_creates, before.upstream_creates) << "remapped, not created";
  EXPECT_GT(after.upstream_unmaps, before.upstream_unmaps);
  auto data = pattern(12 * g / 4, 99);
  std::vector<std::uint32_t> back(data.size());
  s.ref().submit(sp::command::make(sp::copy_command{big, data.data(), 12 * g, true, false}));
  s.ref().submit(sp::command::make(sp::copy_command{back.data(), big, 12 * g, false, true}));
  s.synchronize();
  EXPECT_EQ(back, data);
  // The walls were never touched by the remapping.
  for (std::size_t i = 0; i < walls.size(); ++i) {
    std::vector<std::uint32_t> w(2 * g / 4);
    s.ref().submit(sp::command::make(sp::copy_command{w.data(), walls[i], 2 * g, false, true}));
    s.synchronize();
    EXPECT_EQ(w, pattern(2 * g / 4, static_cast<std::uint32_t>(i))) << "wall " << i;
  }
  p.deallocate(s, big);
  for (void* w : walls) p.deallocate(s, w);
  s.synchronize();
  p.trim();
  EXPECT_EQ(p.statistics().reserved_bytes, 0u);
}

TEST(CudaVirtualMemory, SteadyStateMakesNoDriverCall) {
  SKIP_WITHOUT_GPU();
  sp::device d = gpu();
  sp::pool p(d);
  sp::stream s(d);
  auto step = [&] {
    std::vector<void*> v;
    for (std::size_t i = 0; i < 16; ++i) {
      v.push_back(p.allocate(s, (2 + i % 7) * MiB + 512 * i));
      s.ref().submit(sp::command::make(sp::fill_command{v.back(), i, 1, 2 * MiB}));
    }
    for (std::size_t i = 0; i < v.size(); i += 2) p.deallocate(s, v[i]);
    void* big = p.allocate(s, 30 * MiB);
    p.deallocate(s, big);
    for (std::size_t i = 1; i < v.size(); i += 2) p.deallocate(s, v[i]);
  };
  for (int i = 0; i < 3; ++i) step();
  const auto warm = p.statistics();
  for (int i = 0; i < 20; ++i) step();
  const auto st = p.statistics();
  EXPECT_EQ(st.upstream_calls(), warm.upstream_calls());
  EXPECT_EQ(st.host_waits, 0u);
}
