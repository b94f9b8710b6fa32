// streampool: PyTorch's private memory pools on streampool (graph_pools.hpp).
#include "graph_pools.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

#include "check.hpp"

namespace streampool::torch_native {
namespace {

std::string name(c10::MempoolId_t id) {
  return "(" + std::to_string(id.first) + ", " + std::to_string(id.second) + ")";
}

}  // namespace

private_pool* graph_pools::route(c10::DeviceIndex device, cudaStream_t stream) {
  const std::lock_guard lock(mu_);
  // The newest routing first, as PyTorch's allocator tests them.
  for (std::size_t i = routings_list_.size(); i-- > 0;) {
    routing_entry& r = routings_list_[i];
    if (r.device == device && r.filter(stream)) {
      ++r.pool->live;
      return r.pool;
    }
  }
  return nullptr;
}

void graph_pools::set_live(private_pool* p, std::size_t live) {
  const std::lock_guard lock(mu_);
  p->live = live;
}

void graph_pools::freed(private_pool* p) {
  const std::lock_guard lock(mu_);
  TORCH_INTERNAL_ASSERT(p->live > 0);
  --p->live;
  if (p->use_count == 0 && p->live == 0 && routings_.load() == 0) drop_finished_locked();
}

private_pool* graph_pools::make_or_incref_locked(c10::DeviceIndex device, c10::MempoolId_t id) {
  auto& slot = pools_[{device, id}];
  if (slot) {
    TORCH_CHECK(slot->use_count > 0, "streampool: memory pool ", name(id), " of device ",
                static_cast<int>(device), " was released and cannot be used again");
    ++slot->use_count;
    return slot.get();
  }
  auto p = std::make_unique<private_pool>();
  p->device = device;
  p->id = id;
  p->use_count = 1;
  sp_pool_options_t o;
  sp_pool_options_init(&o);
  o.keep_memory = 1;     // replays write freed blocks too: nothing goes back or moves
  o.virtual_memory = 0;  // whole driver allocations: what CUDA allows during a capture
  o.large_cache_bytes = 0;
  const sp_status_t st = sp_pool_create(device_of_(device), &o, &p->pool);
  if (st != STREAMPOOL_STATUS_SUCCESS) pools_.erase({device, id});
  check(st, "streampool: making memory pool ", name(id), " of device ", static_cast<int>(device));
  p->arena = std::make_unique<graph_arena>(device, p->pool);
  slot = std::move(p);
  return slot.get();
}

void graph_pools::begin(c10::DeviceIndex device, c10::MempoolId_t id,
                        std::function<bool(cudaStream_t)> filter) {
  const std::lock_guard lock(mu_);
  for (const routing_entry& r : routings_list_) {
    TORCH_CHECK(!(r.device == device && r.id == id),
                "beginAllocateToPool: already recording to "
                "mempool_id ",
                name(id), " (streampool)");
  }
  private_pool* p = make_or_incref_locked(device, id);
  // No capture yet (PyTorch begins it after this call) and none elsewhere: the events of blocks
  // freed after record_stream may be asked about now, the last time before this routing ends.
  if (routings_.load() == 0) p->arena->reclaim();
  // The device's pools stop asking about completion before the capture begins (PyTorch begins
  // it after this call): no thread's query can fall inside it.
  check(sp_device_begin_capture(device_of_(device)), "streampool: device ",
        static_cast<int>(device));
  routings_list_.push_back({device, id, std::move(filter), p});
  routings_.fetch_add(1, std::memory_order_acq_rel);
}

void graph_pools::end(c10::DeviceIndex device, c10::MempoolId_t id) {
  const std::lock_guard lock(mu_);
  const auto it = std::find_if(routings_list_.begin(), routings_list_.end(),
                               [&](const auto& r) { return r.device == device && r.id == id; });
  TORCH_CHECK(it != routings_list_.end(), "endAllocatePool: not currently recording to mempool_id ",
              name(id), " (streampool)");
  routings_list_.erase(it);
  routings_.fetch_sub(1, std::memory_order_acq_rel);
  // The device's last routing: blocks freed with uses on other streams during it get their events.
  if (std::none_of(routings_list_.begin(), routings_list_.end(),
                   [&](const auto& r) { return r.device == device; })) {
    for (auto& [k, p] : pools_) {
      if (k.first == device) p->arena->end_of_captures();
    }
  }
  check(sp_device_end_capture(device_of_(device)), "streampool: device ", static_cast<int>(device));
}

void graph_pools::release(c10::DeviceIndex device, c10::MempoolId_t id) {
  const std::lock_guard lock(mu_);
  const auto it = pools_.find({device, id});
  TORCH_CHECK(it != pools_.end() && it->second->use_count > 0, "streampool: releasePool of ",
              name(id), " on device ", static_cast<int>(device), ", which is not in use");
  --it->second->use_count;
}

void graph_pools::create_or_incref(c10::DeviceIndex device, c10::MempoolId_t id) {
  const std::lock_guard lock(mu_);
  (void)make_or_incref_locked(device, id);
}

void graph_pools::set_use_on_oom(c10::DeviceIndex device, c10::MempoolId_t id, bool use) {
  const std::lock_guard lock(mu_);
  const auto it = pools_.find({device, id});
  if (it != pools_.end()) it->second->use_on_oom = use;
}

std::pair<private_pool*, void*> graph_pools::borrow(c10::DeviceIndex device, std::size_t n,
                                                    cudaStream_t stream, std::size_t& size) {
  const std::lock_guard lock(mu_);
  for (auto& [k, p] : pools_) {
    if (k.first != device || !p->use_on_oom || p->use_count == 0) continue;
    void* ptr = p->arena->allocate(n, stream, routings_.load() != 0, size, /*grow=*/false);
    if (ptr != nullptr) {
      ++p->live;
      return {p.get(), ptr};
    }
  }
  return {nullptr, nullptr};
}

int graph_pools::use_count(c10::DeviceIndex device, c10::MempoolId_t id) {
  const std::lock_guard lock(mu_);
  const auto it = pools_.find({device, id});
  return it == pools_.end() ? 0 : it->second->use_count;
}

void graph_pools::empty_cache(c10::MempoolId_t id) {
  const std::lock_guard lock(mu_);
  if (routings_.load() != 0) return;  // captures under way: nothing goes back (as PyTorch's)
  for (auto& [k, p] : pools_) {
    if (p->use_count != 0) continue;  // a graph may still replay: its memory stays
    if (id != c10::MempoolId_t{0, 0} && k.second != id) continue;
    if (p->arena->release_free_segments() == 0) continue;
    std::size_t released = 0;
    (void)sp_pool_trim(p->pool, &released);
  }
  drop_finished_locked();
}

void graph_pools::drop_finished_locked() {
  for (auto it = pools_.begin(); it != pools_.end();) {
    private_pool& p = *it->second;
    if (p.use_count == 0 && p.live == 0) {
      try {
        // Waits for the uses of blocks freed after record_stream: the memory goes back next.
        (void)p.arena->release_free_segments();
      } catch (const c10::Error&) {  // LCOV_EXCL_LINE: CUDA's error stays for the next call
      }
      p.arena.reset();
      (void)sp_pool_destroy(p.pool);  // nothing live: its memory goes back with it
      it = pools_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<private_pool*> graph_pools::pools(c10::DeviceIndex device, c10::MempoolId_t id) {
  const std::lock_guard lock(mu_);
  std::vector<private_pool*> out;
  for (const auto& [k, p] : pools_) {
    if (k.first == device && (id == c10::MempoolId_t{0, 0} || k.second == id))
      out.push_back(p.get());
  }
  return out;
}

private_pool* graph_pools::find(c10::DeviceIndex device, c10::MempoolId_t id) {
  const std::lock_guard lock(mu_);
  const auto it = pools_.find({device, id});
  return it == pools_.end() ? nullptr : it->second.get();
}

}  // namespace streampool::torch_native
