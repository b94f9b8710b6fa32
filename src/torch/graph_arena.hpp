// streampool: the memory of one PyTorch private pool (graph_pools.hpp), laid out block by block.
//
// Why a layout of its own: PyTorch's CUDA graph trees (torch.compile's "reduce-overhead") record
// a graph, save its pool's layout (getCheckpointState) and, to record another graph from that
// point later, put the pool back as it was: the same blocks live at the same addresses
// (setCheckpointPoolState), because the recorded graphs read and write those addresses.
// streampool's pools choose their addresses themselves; this arena takes whole segments from the
// private streampool pool and splits them itself, so that a layout can be saved and put back.
//
// Glossary
//   segment   one block of the private streampool pool, split here and never moved: 2 MiB for
//             requests of up to 1 MiB (small), else the request rounded up to 2 MiB (large). It
//             belongs to the stream it was made for, as PyTorch's segments do.
//   block     a run of a segment, allocated or free, at least 512 bytes.
//   free list one per (kind, stream): a free block is handed out again only to a request on its
//             segment's stream, whose work the capture or the stream orders after the free.
//   deferred  a freed block that record_stream gave uses on other streams. While a capture may be
//             under way it waits for the captures to end (the uses are graph nodes, which a
//             replay orders); then events are recorded on those streams, and it is free again
//             once they complete (pending), as PyTorch's allocator does.
//
// Invariants (validate() checks them)
//   - Each segment's blocks tile it in address order; no two adjacent blocks are both free and
//     listed (they are merged).
//   - A free block is in exactly one of: its free list, deferred_, pending_. An allocated block is
//     in none.
//   - live_ counts the allocated blocks.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "streampool.h"

namespace streampool::torch_native {

class graph_arena {
 public:
  /// A block as a checkpoint keeps it.
  struct saved_block {
    std::uintptr_t address = 0;
    std::size_t size = 0;
    std::size_t requested = 0;  ///< 0 when free
    bool allocated = false;
  };
  struct saved_segment {
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    cudaStream_t stream = nullptr;
    std::vector<saved_block> blocks;
  };
  /// What setCheckpointPoolState changed: the blocks that were freed (no deleter runs) and those
  /// now allocated again.
  struct restored {
    std::vector<void*> freed;
    struct entry {
      saved_block block;
      cudaStream_t stream = nullptr;  ///< its segment's
    };
    std::vector<entry> allocated;
  };

  graph_arena(c10::DeviceIndex device, sp_pool_t source) : device_(device), source_(source) {}
  graph_arena(const graph_arena&) = delete;
  graph_arena& operator=(const graph_arena&) = delete;
  ~graph_arena() = default;  // the segments go back with the source pool, destroyed by the owner

  /// A block of at least n bytes for work on `stream`; null when the source pool has no memory
  /// left (or, with `grow` false, when no free block fits). `capturing`: a capture may be under
  /// way (no event is queried or recorded). `size` is the block's size.
  void* allocate(std::size_t n, cudaStream_t stream, bool capturing, std::size_t& size,
                 bool grow = true);
  /// Frees p, which allocate() handed out.
  void free(void* p, bool capturing);
  /// record_stream: p's memory is used on `stream` too, until that stream's work so far is done.
  void record_use(void* p, cudaStream_t stream);
  /// Pending blocks whose events are complete are free again (no capture may be under way).
  void reclaim();
  /// Deferred blocks become pending once no capture may be under way (events recorded now).
  void end_of_captures();

  [[nodiscard]] std::size_t live() const;
  /// Gives the segments that are wholly free back to the source pool (trim is the caller's).
  /// Waits for pending blocks' events first (not while capturing: the caller's rule).
  std::size_t release_free_segments();

  /// The layout, for a checkpoint. Pending events are waited for first (PyTorch's allocator
  /// requires none outstanding; its caller synchronizes before checkpointing).
  [[nodiscard]] std::vector<saved_segment> save();
  /// Puts a saved layout back: every allocated block is freed (listed in `freed`), then each saved
  /// segment (which must still exist) gets its saved blocks; segments made since are all free.
  /// @throws c10::Error naming the segment when a saved one is gone
  restored restore(const std::vector<saved_segment>& saved);

  /// PyTorch's snapshot segments of this arena, owned by pool `owner`.
  void append_segments(c10::MempoolId_t owner,
                       std::vector<c10::CachingDeviceAllocator::SegmentInfo>& out) const;
  /// Counts for memory_stats: segments, inactive split blocks and their bytes, by kind (0 small,
  /// 1 large).
  struct counts {
    std::array<std::int64_t, 2> segments{};
    std::array<std::int64_t, 2> inactive_split{};
    std::array<std::int64_t, 2> inactive_split_bytes{};
  };
  [[nodiscard]] counts count() const;
  /// Checks the invariants above; throws c10::Error naming the first broken one.
  void validate() const;

 private:
  enum class kind : std::uint8_t { small, large };
  struct block {
    std::size_t size = 0;
    std::size_t requested = 0;
    std::uintptr_t segment = 0;  ///< its segment's base
    bool allocated = false;
    enum class where : std::uint8_t { none, listed, deferred, pending } state = where::none;
    std::vector<cudaStream_t> uses;   ///< streams other than the segment's (record_stream)
    std::vector<cudaEvent_t> events;  ///< pending: recorded on `uses` at the free
  };
  struct segment {
    std::size_t bytes = 0;
    kind k = kind::small;
    cudaStream_t stream = nullptr;
  };
  using list_key = std::pair<kind, cudaStream_t>;
  using free_list = std::set<std::pair<std::size_t, std::uintptr_t>>;  // (size, address)

  void list_locked(std::uintptr_t a);
  void unlist_locked(std::uintptr_t a);
  /// Marks the free block at a listed, merged with listed free neighbours of its segment.
  void release_locked(std::uintptr_t a);
  void record_events_locked(std::uintptr_t a);
  void process_pending_locked(bool wait);
  std::uintptr_t grow_locked(kind k, std::size_t bytes, cudaStream_t stream);

  c10::DeviceIndex device_;
  sp_pool_t source_;
  mutable std::mutex mu_;
  std::map<std::uintptr_t, block> blocks_;      // every block, by address
  std::map<std::uintptr_t, segment> segments_;  // by base
  std::map<list_key, free_list> free_;
  std::vector<std::uintptr_t> deferred_;
  std::vector<std::uintptr_t> pending_;
  std::size_t live_ = 0;
};

}  // namespace streampool::torch_native
