// streampool: one private pool's blocks (graph_arena.hpp).
#include "graph_arena.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <iterator>

namespace streampool::torch_native {
namespace {

/// PyTorch's sizes: blocks of at most 1 MiB are small, in 2 MiB segments; large segments are
/// rounded up to 2 MiB; every block is a multiple of 512 bytes.
constexpr std::size_t small_max = std::size_t{1} << 20;
constexpr std::size_t small_segment = std::size_t{2} << 20;
constexpr std::size_t segment_round = std::size_t{2} << 20;
constexpr std::size_t min_block = 512;

constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void* pointer(std::uintptr_t a) {
  return reinterpret_cast<void*>(a);  // NOLINT(performance-no-int-to-ptr): an address we handed out
}

}  // namespace

void* graph_arena::allocate(std::size_t n, cudaStream_t stream, bool capturing, std::size_t& size,
                            bool grow) {
  const std::lock_guard lock(mu_);
  if (!capturing && !pending_.empty()) process_pending_locked(/*wait=*/false);
  const kind k = n <= small_max ? kind::small : kind::large;
  const std::size_t want = round_up(std::max<std::size_t>(n, 1), min_block);
  std::uintptr_t a = 0;
  const auto list = free_.find({k, stream});
  const auto fit =
      list == free_.end() ? free_list::iterator{} : list->second.lower_bound({want, 0});
  if (list != free_.end() && fit != list->second.end()) {
    a = fit->second;
  } else {
    if (!grow) return nullptr;
    a = grow_locked(k, k == kind::small ? small_segment : round_up(want, segment_round), stream);
    if (a == 0) return nullptr;
  }
  unlist_locked(a);
  block& b = blocks_.at(a);
  // Split off the rest where it is worth a block of its own: any rest of a small block, a rest
  // of a large one above 1 MiB (below, PyTorch hands out the whole block too).
  if (const std::size_t rest = b.size - want;
      k == kind::small ? rest >= min_block : rest > small_max) {
    block tail;
    tail.size = rest;
    tail.segment = b.segment;
    b.size = want;
    blocks_.emplace(a + want, std::move(tail));
    list_locked(a + want);
  }
  b.allocated = true;
  b.requested = n;
  ++live_;
  size = b.size;
  return pointer(a);
}

void graph_arena::free(void* p, bool capturing) {
  const std::lock_guard lock(mu_);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto it = blocks_.find(a);
  TORCH_CHECK(it != blocks_.end() && it->second.allocated, "streampool: free of ", p,
              ", which memory pool of device ", static_cast<int>(device_),
              " did not hand out or has freed already");
  block& b = it->second;
  b.allocated = false;
  b.requested = 0;
  --live_;
  if (b.uses.empty()) {
    release_locked(a);
  } else if (capturing) {
    b.state = block::where::deferred;
    deferred_.push_back(a);
  } else {
    record_events_locked(a);
  }
}

void graph_arena::record_use(void* p, cudaStream_t stream) {
  const std::lock_guard lock(mu_);
  const auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(p));
  TORCH_CHECK(it != blocks_.end() && it->second.allocated, "streampool: record_stream of ", p,
              ", which is not a live block of a memory pool of device ", static_cast<int>(device_));
  block& b = it->second;
  if (stream == segments_.at(b.segment).stream) return;  // its own stream orders it already
  if (std::find(b.uses.begin(), b.uses.end(), stream) == b.uses.end()) b.uses.push_back(stream);
}

void graph_arena::reclaim() {
  const std::lock_guard lock(mu_);
  process_pending_locked(/*wait=*/false);
}

void graph_arena::end_of_captures() {
  const std::lock_guard lock(mu_);
  for (const std::uintptr_t a : deferred_) record_events_locked(a);
  deferred_.clear();
}

std::size_t graph_arena::live() const {
  const std::lock_guard lock(mu_);
  return live_;
}

std::size_t graph_arena::release_free_segments() {
  const std::lock_guard lock(mu_);
  process_pending_locked(/*wait=*/true);
  std::size_t released = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    const auto b = blocks_.find(it->first);
    if (b->second.state != block::where::listed || b->second.size != it->second.bytes) {
      ++it;
      continue;
    }
    unlist_locked(it->first);
    blocks_.erase(b);
    // Its blocks' uses on other streams are over (the events above); its own stream orders the
    // source pool's reuse.
    (void)sp_pool_deallocate_native(source_, pointer(it->first), it->second.stream);
    released += it->second.bytes;
    it = segments_.erase(it);
  }
  return released;
}

std::vector<graph_arena::saved_segment> graph_arena::save() {
  const std::lock_guard lock(mu_);
  process_pending_locked(/*wait=*/true);
  TORCH_CHECK(deferred_.empty(), "streampool: checkpointing memory pool of device ",
              static_cast<int>(device_), " while a capture is under way");
  std::vector<saved_segment> out;
  out.reserve(segments_.size());
  for (const auto& [base, seg] : segments_) {
    saved_segment s{base, seg.bytes, seg.stream, {}};
    for (auto it = blocks_.find(base); it != blocks_.end() && it->second.segment == base; ++it)
      s.blocks.push_back({it->first, it->second.size, it->second.requested, it->second.allocated});
    out.push_back(std::move(s));
  }
  return out;
}

graph_arena::restored graph_arena::restore(const std::vector<saved_segment>& saved) {
  const std::lock_guard lock(mu_);
  process_pending_locked(/*wait=*/true);
  TORCH_CHECK(deferred_.empty(), "streampool: restoring memory pool of device ",
              static_cast<int>(device_), " while a capture is under way");
  // Checked before anything changes: a failed restore leaves the arena as it was.
  for (const saved_segment& s : saved) {
    const auto it = segments_.find(s.base);
    TORCH_CHECK(
        it != segments_.end() && it->second.bytes == s.bytes && it->second.stream == s.stream,
        "streampool: the checkpoint's segment at ", pointer(s.base), " of ", s.bytes,
        " bytes is no longer in memory pool of device ", static_cast<int>(device_));
    std::size_t at = s.base;
    for (const saved_block& b : s.blocks) {
      TORCH_CHECK(b.address == at && b.size >= min_block,
                  "streampool: the checkpoint's blocks do not tile its segment at ",
                  pointer(s.base));
      at += b.size;
    }
    TORCH_CHECK(at == s.base + s.bytes,
                "streampool: the checkpoint's blocks do not tile its segment at ", pointer(s.base));
  }
  restored out;
  for (const auto& [a, b] : blocks_) {
    if (b.allocated) out.freed.push_back(pointer(a));
  }
  // Every segment whole and free, then the saved ones split as they were.
  blocks_.clear();
  free_.clear();
  live_ = 0;
  for (const auto& [base, seg] : segments_) {
    block whole;
    whole.size = seg.bytes;
    whole.segment = base;
    blocks_.emplace(base, std::move(whole));
  }
  for (const saved_segment& s : saved) {
    blocks_.erase(s.base);
    for (const saved_block& sb : s.blocks) {
      block b;
      b.size = sb.size;
      b.segment = s.base;
      b.allocated = sb.allocated;
      b.requested = sb.allocated ? sb.requested : 0;
      blocks_.emplace(sb.address, std::move(b));
      if (sb.allocated) {
        ++live_;
        out.allocated.push_back({sb, s.stream});
      }
    }
  }
  std::vector<std::uintptr_t> free_blocks;
  for (const auto& [a, b] : blocks_) {
    if (!b.allocated) free_blocks.push_back(a);
  }
  for (const std::uintptr_t a : free_blocks) {
    if (blocks_.count(a) != 0) release_locked(a);  // absent: merged into the one before
  }
  return out;
}

void graph_arena::append_segments(
    c10::MempoolId_t owner, std::vector<c10::CachingDeviceAllocator::SegmentInfo>& out) const {
  const std::lock_guard lock(mu_);
  for (const auto& [base, seg] : segments_) {
    c10::CachingDeviceAllocator::SegmentInfo s;
    s.device = device_;
    s.address = base;
    s.total_size = seg.bytes;
    s.stream = seg.stream;
    s.is_large = seg.k == kind::large;
    s.is_expandable = false;
    s.owner_private_pool_id = owner;
    for (auto it = blocks_.find(base); it != blocks_.end() && it->second.segment == base; ++it) {
      const block& b = it->second;
      c10::CachingDeviceAllocator::BlockInfo info;
      info.size = b.size;
      info.requested_size = b.requested;
      info.allocated = b.allocated;
      info.active =
          b.allocated || b.state == block::where::deferred || b.state == block::where::pending;
      if (info.allocated) s.allocated_size += b.size;
      if (info.active) s.active_size += b.size;
      s.requested_size += b.requested;
      s.blocks.push_back(std::move(info));
    }
    out.push_back(std::move(s));
  }
}

graph_arena::counts graph_arena::count() const {
  const std::lock_guard lock(mu_);
  counts c;
  for (const auto& [base, seg] : segments_) {
    const auto k = static_cast<std::size_t>(seg.k);
    ++c.segments[k];
    for (auto it = blocks_.find(base); it != blocks_.end() && it->second.segment == base; ++it) {
      if (it->second.state != block::where::listed || it->second.size == seg.bytes) continue;
      ++c.inactive_split[k];
      c.inactive_split_bytes[k] += static_cast<std::int64_t>(it->second.size);
    }
  }
  return c;
}

void graph_arena::validate() const {
  const std::lock_guard lock(mu_);
  std::size_t live = 0;
  std::size_t listed = 0;
  for (const auto& [base, seg] : segments_) {
    std::uintptr_t at = base;
    bool previous_listed = false;
    for (auto it = blocks_.find(base); it != blocks_.end() && it->second.segment == base; ++it) {
      const block& b = it->second;
      TORCH_CHECK(it->first == at, "graph_arena: a gap before ", pointer(it->first));
      const bool is_listed = b.state == block::where::listed;
      TORCH_CHECK(!(is_listed && previous_listed), "graph_arena: free neighbours not merged at ",
                  pointer(it->first));
      TORCH_CHECK(!b.allocated || b.state == block::where::none,
                  "graph_arena: an allocated block listed at ", pointer(it->first));
      if (is_listed) {
        const auto l = free_.find({seg.k, seg.stream});
        TORCH_CHECK(l != free_.end() && l->second.count({b.size, it->first}) == 1,
                    "graph_arena: a free block missing from its list at ", pointer(it->first));
        ++listed;
      }
      live += b.allocated ? 1 : 0;
      previous_listed = is_listed;
      at += b.size;
    }
    TORCH_CHECK(at == base + seg.bytes, "graph_arena: segment ", pointer(base), " not tiled");
  }
  std::size_t in_lists = 0;
  for (const auto& [k, l] : free_) in_lists += l.size();
  TORCH_CHECK(in_lists == listed, "graph_arena: ", in_lists, " listed blocks, ", listed, " found");
  TORCH_CHECK(live == live_, "graph_arena: ", live, " allocated blocks, live_ says ", live_);
}

void graph_arena::list_locked(std::uintptr_t a) {
  block& b = blocks_.at(a);
  const segment& s = segments_.at(b.segment);
  free_[{s.k, s.stream}].insert({b.size, a});
  b.state = block::where::listed;
}

void graph_arena::unlist_locked(std::uintptr_t a) {
  block& b = blocks_.at(a);
  const segment& s = segments_.at(b.segment);
  free_[{s.k, s.stream}].erase({b.size, a});
  b.state = block::where::none;
}

void graph_arena::release_locked(std::uintptr_t a) {
  auto it = blocks_.find(a);
  const std::uintptr_t seg = it->second.segment;
  it->second.state = block::where::none;
  if (const auto next = std::next(it); next != blocks_.end() && next->second.segment == seg &&
                                       next->second.state == block::where::listed) {
    unlist_locked(next->first);
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    if (const auto prev = std::prev(it);
        prev->second.segment == seg && prev->second.state == block::where::listed) {
      unlist_locked(prev->first);
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  list_locked(it->first);
}

void graph_arena::record_events_locked(std::uintptr_t a) {
  block& b = blocks_.at(a);
  const c10::cuda::CUDAGuard guard(device_);
  for (const cudaStream_t s : b.uses) {
    cudaEvent_t e = nullptr;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    b.events.push_back(e);
    C10_CUDA_CHECK(cudaEventRecord(e, s));
  }
  b.uses.clear();
  b.state = block::where::pending;
  pending_.push_back(a);
}

void graph_arena::process_pending_locked(bool wait) {
  std::vector<std::uintptr_t> still;
  const std::vector<std::uintptr_t> pending = std::move(pending_);
  pending_.clear();
  for (const std::uintptr_t a : pending) {
    block& b = blocks_.at(a);
    bool done = true;
    for (const cudaEvent_t e : b.events) {
      const cudaError_t r = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
      if (r == cudaErrorNotReady) {
        (void)cudaGetLastError();
        done = false;
        break;
      }
      C10_CUDA_CHECK(r);
    }
    if (!done) {
      still.push_back(a);
      continue;
    }
    for (const cudaEvent_t e : b.events) (void)cudaEventDestroy(e);
    b.events.clear();
    release_locked(a);
  }
  pending_ = std::move(still);
}

std::uintptr_t graph_arena::grow_locked(kind k, std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  if (sp_pool_allocate_native(source_, bytes, stream, &p) != STREAMPOOL_STATUS_SUCCESS) return 0;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  segments_.emplace(a, segment{bytes, k, stream});
  block whole;
  whole.size = bytes;
  whole.segment = a;
  blocks_.emplace(a, std::move(whole));
  list_locked(a);
  return a;
}

}  // namespace streampool::torch_native
