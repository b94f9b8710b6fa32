// streampool: the native allocator's blocks, and the map from a block's pointer to it
// (native_allocator.hpp's glossary).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace streampool::torch_native {

struct private_pool;  // graph_pools.hpp

/// What allocate() or raw_alloc*() handed out.
struct block {
  std::size_t requested = 0;
  std::size_t size = 0;  // the block's usable size (sp_torch_malloc_sized)
  int device = 0;
  cudaStream_t stream = nullptr;
  private_pool* pool = nullptr;  // a PyTorch memory pool's (graph_pools.hpp); null: the default
};

/// pointer -> block, in shards by pointer (blocks are at least 256-byte aligned). Each shard is
/// an open-addressing table (linear probing, deletion by backward shift): a block costs no node
/// allocation and no division, on the path of every allocation and free.
class block_map {
 public:
  void insert(void* p, const block& b) {
    shard& s = shard_of(p);
    const std::lock_guard lock(s.mu);
    if ((s.used + 1) * 4 > s.slots.size() * 3) grow(s);
    std::size_t i = home(s, p);
    while (s.slots[i].key != nullptr && s.slots[i].key != p) i = (i + 1) & (s.slots.size() - 1);
    s.used += static_cast<std::size_t>(s.slots[i].key == nullptr);
    s.slots[i] = {p, b};
  }
  /// Removes p's entry into `out`; false if p is not a block of this allocator.
  bool take(void* p, block& out) {
    shard& s = shard_of(p);
    const std::lock_guard lock(s.mu);
    const std::size_t i = index_of(s, p);
    if (i == npos) return false;
    out = s.slots[i].value;
    erase(s, i);
    return true;
  }
  /// Calls f(pointer, block) for every block, one shard locked at a time.
  template <class F>
  void for_each(F&& f) {
    for (shard& s : shards_) {
      const std::lock_guard lock(s.mu);
      for (const slot& e : s.slots) {
        if (e.key != nullptr) f(e.key, e.value);
      }
    }
  }
  bool find(const void* p, block& out) {
    shard& s = shard_of(p);
    const std::lock_guard lock(s.mu);
    const std::size_t i = index_of(s, p);
    if (i == npos) return false;
    out = s.slots[i].value;
    return true;
  }

 private:
  static constexpr std::size_t shard_count = 64;
  static constexpr std::size_t npos = ~std::size_t{0};
  struct slot {
    void* key = nullptr;  // nullptr: empty
    block value;
  };
  struct alignas(64) shard {
    std::mutex mu;
    std::vector<slot> slots;  // empty, or a power of two in size and at most 3/4 used
    std::size_t used = 0;
  };
  shard& shard_of(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return shards_[((a >> 8) ^ (a >> 20)) % shard_count];
  }
  /// p's first slot: a multiplicative hash of the address above its 256-byte alignment.
  static std::size_t home(const shard& s, const void* p) {
    const std::uint64_t h = (reinterpret_cast<std::uintptr_t>(p) >> 8) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> 32) & (s.slots.size() - 1);
  }
  static std::size_t index_of(const shard& s, const void* p) {
    if (s.slots.empty()) return npos;
    for (std::size_t i = home(s, p);; i = (i + 1) & (s.slots.size() - 1)) {
      if (s.slots[i].key == p) return i;
      if (s.slots[i].key == nullptr) return npos;
    }
  }
  /// Empties slot i, then moves back each later entry of its run whose home allows it, so that
  /// no search stops early at the hole.
  static void erase(shard& s, std::size_t i) {
    const std::size_t mask = s.slots.size() - 1;
    for (std::size_t j = i;;) {
      s.slots[i].key = nullptr;
      for (;;) {
        j = (j + 1) & mask;
        if (s.slots[j].key == nullptr) {
          --s.used;
          return;
        }
        // The entry at j stays where its home lies cyclically in (i, j].
        const std::size_t k = home(s, s.slots[j].key);
        const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) break;
      }
      s.slots[i] = s.slots[j];
      i = j;
    }
  }
  static void grow(shard& s) {
    std::vector<slot> old(std::max<std::size_t>(64, s.slots.size() * 2));
    old.swap(s.slots);
    for (const slot& e : old) {
      if (e.key == nullptr) continue;
      std::size_t i = home(s, e.key);
      while (s.slots[i].key != nullptr) i = (i + 1) & (s.slots.size() - 1);
      s.slots[i] = e;
    }
  }
  std::array<shard, shard_count> shards_;
};

}  // namespace streampool::torch_native
