// streampool: a pool's memory as PyTorch's snapshot describes it (torch.cuda.memory._snapshot(),
// drawn by torch.cuda._memory_viz), built from the pool's own snapshot (sp_pool_snapshot_walk).
//
// How streampool's ranges become PyTorch's segments
//   slab           one small segment; each live chunk is one allocated block, each run of free
//                  chunks (and a slab's tail) one inactive block.
//   segment        one large segment, its blocks one for one.
//   virtual range  one expandable large segment per run of mapped blocks: PyTorch's segments are
//                  memory, and an unmapped run has none (its address space is not reported).
// Invariant (PyTorch's reader relies on it): each segment's blocks tile it in address order, so
// that a block's address is the segment's plus the sizes before it.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "streampool.h"

namespace streampool::torch_native {

/// What the snapshot needs to know of a live block that only the allocator knows.
struct live_block_info {
  std::size_t requested = 0;      ///< the bytes the caller asked for
  cudaStream_t stream = nullptr;  ///< the stream it was allocated on
};
/// The allocator's answer for p; false when p is not one of its live blocks (it then counts as
/// requested in full, on no stream).
using live_block_lookup = std::function<bool(const void* p, live_block_info& out)>;

/// Appends the segments of `pool` (memory of `device`, owned by PyTorch pool `owner`) to `out`.
/// @throws c10::Error naming the device when the pool's snapshot fails
void append_segments(sp_pool_t pool, c10::DeviceIndex device, c10::MempoolId_t owner,
                     const live_block_lookup& lookup,
                     std::vector<c10::CachingDeviceAllocator::SegmentInfo>& out);

}  // namespace streampool::torch_native
