// streampool: the native allocator's private pools (CUDA graphs, torch.cuda.MemPool) and their
// checkpoints, as PyTorch asks for them (allocator.hpp; the pools themselves: graph_pools.hpp).
#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "allocator.hpp"

namespace streampool::torch_native {
namespace {

/// A private pool's layout, as getCheckpointState saved it.
struct checkpoint final : cca::AllocatorState {
  c10::DeviceIndex device = 0;
  c10::MempoolId_t id{0, 0};
  std::vector<graph_arena::saved_segment> segments;
};

}  // namespace

void allocator::emptyCache(c10::MempoolId_t id) {
  // A private pool's memory goes back only once its graphs are gone (graph_pools.hpp).
  if (id == c10::MempoolId_t{0, 0}) sp_torch_empty_cache();
  graphs_.empty_cache(id);
}

void allocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                                    std::function<bool(cudaStream_t)> filter) {
  (void)state_of(device);  // the range check
  graphs_.begin(device, id, std::move(filter));
}

void allocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) {
  graphs_.end(device, id);
}

void allocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t id) {
  graphs_.release(device, id);
}

int allocator::getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) {
  return graphs_.use_count(device, id);
}

void allocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id,
                                   std::shared_ptr<cca::CUDAAllocator> allocator) {
  if (allocator != nullptr) not_yet("a MemPool with an allocator of its own");
  (void)state_of(device);
  graphs_.create_or_incref(device, id);
}

void allocator::setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t id, bool use) {
  (void)state_of(device);  // the range check
  graphs_.set_use_on_oom(device, id, use);
}

bool allocator::checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id,
                                         const std::unordered_set<void*>& expected) {
  private_pool* pool = graphs_.find(device, id);
  TORCH_CHECK(pool != nullptr, "streampool: checkPoolLiveAllocations: no memory pool (", id.first,
              ", ", id.second, ") on device ", static_cast<int>(device));
  std::size_t live = 0;
  bool all_expected = true;
  blocks_.for_each([&](void* p, const block& b) {
    if (b.pool != pool) return;
    ++live;
    if (expected.count(p) == 0) all_expected = false;
  });
  return all_expected && live == expected.size();
}

std::shared_ptr<cca::AllocatorState> allocator::getCheckpointState(c10::DeviceIndex device,
                                                                   c10::MempoolId_t id) {
  private_pool* pool = graphs_.find(device, id);
  TORCH_CHECK(pool != nullptr, "streampool: getCheckpointState: could not find pool of id (",
              id.first, ", ", id.second, ") on device ", static_cast<int>(device));
  TORCH_CHECK(pool->use_count > 0, "streampool: getCheckpointState: pool (", id.first, ", ",
              id.second, ") is freeable (no graph holds it); not expected to checkpoint it");
  auto out = std::make_shared<checkpoint>();
  out->device = device;
  out->id = id;
  out->segments = pool->arena->save();
  return out;
}

cca::CheckpointDelta allocator::setCheckpointPoolState(c10::DeviceIndex device,
                                                       std::shared_ptr<cca::AllocatorState> saved) {
  const auto cp = std::dynamic_pointer_cast<checkpoint>(saved);
  TORCH_CHECK(cp != nullptr,
              "streampool: setCheckpointPoolState: expected a state that "
              "streampool's getCheckpointState made");
  TORCH_CHECK(cp->device == device, "streampool: setCheckpointPoolState: a checkpoint of device ",
              static_cast<int>(cp->device), " given for device ", static_cast<int>(device));
  private_pool* pool = graphs_.find(device, cp->id);
  TORCH_CHECK(pool != nullptr, "streampool: setCheckpointPoolState: pool (", cp->id.first, ", ",
              cp->id.second, ") of device ", static_cast<int>(device), " is gone");
  graph_arena::restored r = pool->arena->restore(cp->segments);
  // The pool's blocks are now the checkpoint's: the allocator's map and statistics follow (no
  // deleter runs for the freed ones; PyTorch swaps the deleters of the tensors concerned).
  state& st = state_of(device);
  for (void* p : r.freed) {
    block b;
    if (!blocks_.take(p, b)) continue;
    const std::lock_guard lock(st.mu);
    count(st.stats, b, /*out=*/false);
  }
  cca::CheckpointDelta delta;
  delta.ptrs_freed = std::move(r.freed);
  for (const auto& e : r.allocated) {
    void* p = reinterpret_cast<void*>(e.block.address);  // NOLINT(performance-no-int-to-ptr)
    const block b{e.block.requested, e.block.size, device, e.stream, pool};
    blocks_.insert(p, b);
    {
      const std::lock_guard lock(st.mu);
      count(st.stats, b, /*out=*/true);
    }
    delta.dataptrs_allocd.emplace_back(p, p, &delete_block,
                                       c10::Device(c10::DeviceType::CUDA, device));
  }
  graphs_.set_live(pool, r.allocated.size());
  return delta;
}

}  // namespace streampool::torch_native
