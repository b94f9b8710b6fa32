// streampool: PyTorch's private memory pools (CUDA graphs, torch.cuda.MemPool) on streampool.
//
// Glossary
//   private pool  the memory of one PyTorch pool id (MempoolId_t): a streampool pool of its own on
//                 the device, so that no allocation outside it can be handed memory that a graph's
//                 replay writes, split into blocks by its arena (graph_arena.hpp: a layout that
//                 checkpoints can save and put back). Made with keep_memory (pool.hpp): replays
//                 write the blocks a capture freed too, so nothing goes back to the device or
//                 moves while a graph may replay.
//   routing       beginAllocateToPool(device, id, filter) .. endAllocateToPool(device, id):
//                 while it lasts, a request whose stream the filter takes (a capture's streams;
//                 for use_mem_pool, the calling thread) goes to that private pool; the newest
//                 first.
//   use count     PyTorch's: +1 at each begin (made at 1) and createOrIncrefPool, -1 at
//                 releasePool. At 0 the pool is freeable: empty_cache gives its free memory
//                 back, and once nothing of it is live, the pool goes.
//
// Invariants
//   - A block goes back to the pool that handed it out (the allocator's block map keeps the
//     private pool: block_map.hpp), never to another.
//   - While any routing is under way on a device, that device is in capture mode
//     (sp_device_begin_capture): its pools ask the driver nothing about completion, wait for
//     nothing and give nothing back, as PyTorch's own allocator does while captures are under
//     way (CUDA's global capture mode fails a capture when any thread queries an event).
//   - Everything below is guarded by one mutex; the allocation path takes it only while a routing
//     is under way (an atomic count says so), so eager programs never touch it.
#pragma once

#include <c10/core/Allocator.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph_arena.hpp"
#include "streampool.h"

namespace streampool::torch_native {

struct private_pool {
  c10::DeviceIndex device = 0;
  c10::MempoolId_t id{0, 0};
  sp_pool_t pool = nullptr;
  std::unique_ptr<graph_arena> arena;  ///< the blocks, taken from `pool`
  int use_count = 0;
  bool use_on_oom = false;  ///< MemPool(use_on_oom=True): the default pool's last resort
  std::size_t live = 0;     ///< blocks handed out and not yet freed
};

class graph_pools {
 public:
  /// `device_of(d)` gives the streampool device that owns CUDA device d's pools (a handle the
  /// caller keeps).
  explicit graph_pools(std::function<sp_device_t(c10::DeviceIndex)> device_of)
      : device_of_(std::move(device_of)) {}

  /// True while any routing is under way (one relaxed load: the allocation path's test).
  [[nodiscard]] bool routing() const noexcept {
    return routings_.load(std::memory_order_acquire) != 0;
  }
  /// The private pool a request on `stream` of `device` goes to, or null (the default pool).
  /// Counts the block as live in it.
  private_pool* route(c10::DeviceIndex device, cudaStream_t stream);
  /// A block of `p` was freed (or its allocation failed after route()).
  void freed(private_pool* p);
  /// `p` has `live` blocks handed out now (a checkpoint was put back).
  void set_live(private_pool* p, std::size_t live);

  void begin(c10::DeviceIndex device, c10::MempoolId_t id,
             std::function<bool(cudaStream_t)> filter);
  void end(c10::DeviceIndex device, c10::MempoolId_t id);
  void release(c10::DeviceIndex device, c10::MempoolId_t id);
  void create_or_incref(c10::DeviceIndex device, c10::MempoolId_t id);
  [[nodiscard]] int use_count(c10::DeviceIndex device, c10::MempoolId_t id);
  /// setUseOnOOM: whether a request of the default pool that runs out of memory may take a free
  /// block of this pool (PyTorch's MemPool(use_on_oom=True); its destructor says false). A pool
  /// that is gone is left alone.
  void set_use_on_oom(c10::DeviceIndex device, c10::MempoolId_t id, bool use);
  /// The default pool ran out of memory for n bytes on `stream`: a free block of a use_on_oom pool
  /// of `device` that fits, as PyTorch's allocator tries last (no pool grows for it), counted live
  /// in that pool; null if none. `size` is the block's size.
  [[nodiscard]] std::pair<private_pool*, void*> borrow(c10::DeviceIndex device, std::size_t n,
                                                       cudaStream_t stream, std::size_t& size);
  /// empty_cache: `id` {0, 0} means every freeable pool; gives back their free memory and drops
  /// those with nothing live. Nothing while routing is under way.
  void empty_cache(c10::MempoolId_t id);
  /// The private pools of `device` (the pool id {0, 0}: all of them), for statistics and
  /// snapshots. The pools stay valid until the next empty_cache.
  [[nodiscard]] std::vector<private_pool*> pools(c10::DeviceIndex device, c10::MempoolId_t id);
  /// The private pool of (device, id), or null.
  [[nodiscard]] private_pool* find(c10::DeviceIndex device, c10::MempoolId_t id);

 private:
  using key = std::pair<c10::DeviceIndex, c10::MempoolId_t>;
  struct routing_entry {
    c10::DeviceIndex device;
    c10::MempoolId_t id;
    std::function<bool(cudaStream_t)> filter;
    private_pool* pool;
  };
  private_pool* make_or_incref_locked(c10::DeviceIndex device, c10::MempoolId_t id);
  /// Drops freeable pools with nothing live, their memory given back first. Under mu_.
  void drop_finished_locked();

  std::function<sp_device_t(c10::DeviceIndex)> device_of_;
  std::mutex mu_;
  std::map<key, std::unique_ptr<private_pool>> pools_;
  std::vector<routing_entry> routings_list_;
  std::atomic<int> routings_{0};
};

}  // namespace streampool::torch_native
