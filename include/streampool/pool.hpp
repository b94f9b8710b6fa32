// streampool: the stream-ordered sub-allocating pool.
//
// Glossary
//   upstream      the backend's raw allocate/deallocate. Reserved memory is what the pool holds
//                 from it.
//   segment       one upstream allocation (or, for large blocks on virtual memory, one reserved
//                 address range). A slab is a segment cut into equal chunks of one size class
//                 (small requests); a large one is split into blocks and coalesced again.
//   chunk/block   what allocate() returns: a chunk of a slab (<= small_max bytes) or a large
//                 block. Every block is aligned to at least 256 bytes.
//   large blocks  on a backend with virtual memory, blocks of a reserved address range whose
//                 granules are mapped on demand (free blocks coalesce across the whole range and
//                 steady-state reuse makes no driver call); elsewhere, blocks of whole upstream
//                 allocations. They are kept in shards (each stream allocates from its own): a
//                 shard's block arena finds a free block by size (best fit), and its shelf (when
//                 on) keeps blocks of up to 16 MiB just freed for the stream's next request of
//                 their size class. docs/large-blocks.md says why and how.
//   stream cache  per (stream, pool): chunks freed on that stream, reusable on it with no wait. The
//                 fast path touches only this, under the cache's own lock: no global lock.
//   shared lists  per size class: chunks freed without a live stream (by a finaliser, with
//                 tokens), handed back by a destroyed stream, or overflowing a stream cache. Each
//                 entry carries the tokens it must wait for, as does a free large block in its
//                 shard's arena.
//   live/cached   live bytes are handed out; cached bytes are free in the pool; reserved = both,
//                 plus slab slack.
//
// The stream-ordering contract, in full:
//   * allocate(s, n) returns memory that work submitted to s after the call may use at once. If
//     the memory was last used by other streams whose work may still be running, the pool has
//     already made s wait for that work on the device (or, on a backend without device waits,
//     on the host). Same-stream reuse costs nothing.
//   * deallocate(s, p) returns p to the pool once the work submitted to s so far has finished;
//     it does not wait for it. Work on other streams that used p must be declared with
//     record_use() (or deallocate with tokens), else it is the caller's race. record_use(p, s)
//     with a stream covers what s queues until the free, also work queued after the call.
//   * deallocate(p, uses) frees p after the given tokens, needing no live stream: the form for
//     finalisers and for arrays whose streams are gone.
//   * No free ever blocks, calls user code, or needs the stream that last used the memory to
//     still exist.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "streampool/device.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"

namespace streampool {

struct pool_snapshot;  // streampool/snapshot.hpp

struct pool_options {
  /// Upper bound on reserved bytes. 0 = take STREAMPOOL_MEMORY_LIMIT from the environment
  /// (bytes, with optional K/M/G suffix, or a percentage of the device like "80%"), else none.
  std::size_t memory_limit = 0;
  /// Requests up to this size are sub-allocated from slabs by size class; larger ones are large
  /// blocks. A busy class's slabs of their own hold eight chunks of it (and 2 MiB; a class's
  /// first slabs are smaller, docs/design.md): above 256 KiB, a partly used slab strands
  /// megabytes, where a large block wastes at most its rounding.
  std::size_t small_max = std::size_t{256} << 10;
  /// A stream cache keeps at most this many bytes per size class, and four times this many in
  /// all, before spilling to the shared lists (so one stream cannot hoard memory another stream
  /// needs). A stream that neither allocates nor frees while the pool grows by 16 MiB of slabs
  /// is drained into them (docs/threads.md).
  std::size_t stream_cache_bytes = std::size_t{8} << 20;
  /// Large blocks of up to 16 MiB freed on a stream wait on a per-stream shelf, up to this many
  /// bytes, for the stream's next request of their size class (or of up to three classes below,
  /// from a bin with blocks to spare), which takes one back with no search, split or merge (a
  /// large allocation and free cost a few times a small one's otherwise). Such requests are
  /// rounded up to their class, eight per power of two (at most an eighth more). The oldest go back
  /// to the pool's free memory past the bound, and all of them before any growth, on trim() and
  /// when the stream goes away. 0 turns the shelf off: placement is then the tightest best fit,
  /// which the PyTorch plug-in keeps for training's memory (docs/large-blocks.md, "The shelf").
  /// Virtual memory only, and off in a pool made with a memory limit (or STREAMPOOL_MEMORY_LIMIT)
  /// or a release threshold: those ask for the tightest memory.
  std::size_t large_cache_bytes = std::size_t{96} << 20;
  /// Checking: fill freed memory with 0xDB on the freeing stream (stream-ordered), so stale reads
  /// and unordered reuse show up in the data too.
  bool poison_on_free = false;
  /// Large blocks on virtual memory when the backend has it (false: whole upstream allocations).
  bool virtual_memory = true;
  /// Virtual memory: physical memory beyond this many reserved bytes goes back to the device at
  /// the next large allocation, once its work is complete. The default keeps it (memory the pool
  /// gave back would have to be created again on the next step: driver calls in steady state);
  /// trim() and memory pressure give it back regardless.
  std::size_t release_threshold = SIZE_MAX;
  /// false (the default): each live stream keeps the memory it frees, as PyTorch's own allocator
  /// and its expandable segments do. Another live stream neither reuses nor remaps its large
  /// blocks, and takes its small chunks (spilled, or in its cache) only when no new slab can be
  /// had; it grows its own memory instead. Memory moves between streams only from streams that
  /// are gone (no live cache uses their shard) or idle (small caches, docs/threads.md), or when a
  /// growth would be refused: the memory limit, the device, or release_threshold, which then
  /// acts as a limit. Streams that each repeat their work then settle with no driver call and no
  /// device-side wait, at the sum of the streams' peaks rather than their joint peak
  /// (docs/large-blocks.md, "Per stream"), and threads on their own streams share no lock and no
  /// written cache line, so they scale (docs/threads.md). The streams are kept apart by shard,
  /// and there are 16: from the 17th live stream on, streams share a shard and its blocks. One
  /// stream's program is not affected.
  /// true: every stream reuses every stream's free memory behind device-side waits; reserved
  /// memory stays nearer the streams' joint peak, but threads that allocate at once steal from
  /// each other and do not scale.
  bool share_between_streams = false;
  /// true: memory goes back to the upstream only on trim(), and free memory is never moved to
  /// another address (no remapping of free granules into a growth, no segment given back before
  /// a growth or under pressure, no release threshold). For pools whose freed blocks are still
  /// written by work the pool cannot see: CUDA graph replays write every block a capture used,
  /// freed or not, for as long as the graph lives (the native PyTorch allocator's graph pools).
  bool keep_memory = false;
};

struct stream_statistics {
  std::uint64_t timeline_id = 0;
  std::uint64_t allocations = 0;
  std::uint64_t deallocations = 0;
  std::size_t cached_bytes = 0;  ///< held in this stream's cache
  /// Acquisitions of this stream's cache lock that found it held (two threads on the stream, or
  /// the pool's walks: steals, drains).
  std::uint64_t contended = 0;
  /// The cache's lock is still biased to the one thread that has used the stream, which takes it
  /// with no atomic read-modify-write; false once another thread allocated or freed on the
  /// stream, or where biasing is off (docs/threads.md, "Biased cache locks").
  bool biased = false;
};

/// Lock acquisitions that found the lock held, per kind of lock, since the pool was made: how often
/// threads got in each other's way. Threads on their own streams should find every lock but
/// growth's free; a count that climbs with the thread count names the lock that stops them
/// scaling. Counting costs nothing while a lock is free (a try_lock first).
struct lock_contention {
  std::uint64_t stream_caches = 0;  ///< a stream's cache (two threads on one stream, or a steal)
  std::uint64_t class_lists = 0;    ///< the shared list of a small size class
  std::uint64_t large_shards = 0;   ///< a shard of the large blocks
  std::uint64_t growth = 0;         ///< large-block growth and give-back (driver calls)
  std::uint64_t segments = 0;       ///< the segment registry and the reserved count
  std::uint64_t other = 0;          ///< the cache registry, reclaim hooks, recorded uses
  /// The same per lock where a kind has many: large_shards per shard (by shard index),
  /// class_lists per size class (by class, smallest first). Per stream cache: the streams of
  /// pool_statistics. The kind's total is their sum (stream caches: plus gone streams').
  std::vector<std::uint64_t> per_large_shard;
  std::vector<std::uint64_t> per_class_list;
  [[nodiscard]] std::uint64_t total() const noexcept {
    return stream_caches + class_lists + large_shards + growth + segments + other;
  }
};

struct pool_statistics {
  std::size_t live_bytes = 0;      ///< handed out now (block sizes, i.e. after rounding)
  std::size_t cached_bytes = 0;    ///< free in stream caches and shared lists
  std::size_t reserved_bytes = 0;  ///< held from the upstream (allocations + physical granules)
  /// The highest live_bytes ever reached: exact with one stream; while several streams allocate
  /// at once, low by at most 16 MiB per other stream (each stream adds its changes to the shared
  /// count in steps of 16 MiB, so that threads share no written cache line).
  std::size_t peak_live_bytes = 0;
  std::size_t peak_reserved_bytes = 0;  ///< exact
  std::uint64_t allocations = 0;
  std::uint64_t deallocations = 0;
  std::uint64_t fresh_allocations = 0;   ///< memory never handed out before
  std::uint64_t same_stream_reuses = 0;  ///< from the stream's own cache or shelf: no wait
  std::uint64_t ready_reuses = 0;        ///< freed elsewhere, every token already complete
  std::uint64_t waited_reuses = 0;  ///< freed elsewhere, work pending: the stream was made wait
  std::uint64_t device_waits = 0;   ///< device-side waits enqueued for those
  std::uint64_t host_waits = 0;     ///< host waits (no device-side waits, or growth/OOM paths)
  std::uint64_t upstream_allocations = 0;    ///< backend allocate() calls (slabs, segments)
  std::uint64_t upstream_deallocations = 0;  ///< backend deallocate() calls
  std::uint64_t upstream_reserves = 0;       ///< virtual ranges reserved
  std::uint64_t upstream_creates = 0;        ///< physical granules created
  std::uint64_t upstream_releases = 0;       ///< physical granules given back
  std::uint64_t upstream_maps = 0;           ///< granules mapped (a remap is an unmap and a map)
  std::uint64_t upstream_unmaps = 0;         ///< granules unmapped
  /// Every upstream call above, summed: what a steady state should not make at all.
  [[nodiscard]] std::uint64_t upstream_calls() const noexcept {
    return upstream_allocations + upstream_deallocations + upstream_reserves + upstream_creates +
           upstream_releases + upstream_maps + upstream_unmaps;
  }
  std::uint64_t reclaim_calls = 0;
  /// Allocations whose first attempt found no memory, so that the pool trimmed, ran the reclaim
  /// hooks or waited, and tried again (PyTorch's num_alloc_retries), whether or not it then
  /// succeeded.
  std::uint64_t alloc_retries = 0;
  std::size_t memory_limit = 0;  ///< 0 = none
  lock_contention contention;
  std::vector<stream_statistics> streams;
};

/// A shared handle to one pool. Copies refer to the same pool; the pool lives while any handle,
/// array or live allocation made through an array needs it.
///
/// A moved-from handle refers to no pool. Copying, comparing, assigning and
/// destroying it work as for any handle, and owns() answers false; every other operation throws
/// logic_error "pool: used after it was moved from". The pool itself is untouched: the handle
/// moved into, and arrays made from it, keep it. Self-move-assignment keeps the handle.
class STREAMPOOL_EXPORT pool {
 public:
  explicit pool(const device& d, pool_options options = {});

  /// @brief Stream-ordered allocation (see the contract above).
  /// @param s      the stream that will use the memory first
  /// @param bytes  rounded up to 256 B or the size class; 0 gives a unique smallest block (like
  ///               malloc(0)), freed like any other
  /// @return memory aligned to at least 256 bytes
  /// @throws out_of_memory after trimming and reclaiming; logic_error for an overflowing size or a
  ///         stream of another device
  [[nodiscard]] void* allocate(stream_ref s, std::size_t bytes);
  /// @brief Stream-ordered free (see the contract above). Never blocks.
  /// @throws logic_error for a pointer the pool did not hand out, or one already freed; the pool
  ///         is unchanged
  void deallocate(stream_ref s, void* p);
  /// @brief Frees p once every token in `uses` is complete. Needs no live stream.
  void deallocate(void* p, std::span<const token> uses);
  /// @brief Declares that work on another stream (up to `use`) touched p; a later deallocate
  ///        waits for it too.
  void record_use(void* p, const token& use);
  /// @brief Declares that work `s` queues until p is freed may touch p: the free waits for
  ///        everything s has queued by then (PyTorch's record_stream). May come before that
  ///        work is queued.
  void record_use(void* p, stream_ref s);
  /// The usable size of the block at p (>= the requested size).
  [[nodiscard]] std::size_t block_size(const void* p) const;
  /// True when p is a live allocation of this pool (false for a moved-from handle).
  [[nodiscard]] bool owns(const void* p) const noexcept;

  /// Releases cached memory whose pending work is complete back to the upstream (whole free
  /// slabs and segments; on virtual memory, every free granule). Returns bytes released. Never
  /// blocks on the device. Gives nothing back (0) while a stream capture is under way on the
  /// pool's device (device::begin_capture).
  std::size_t trim();
  void set_memory_limit(std::size_t bytes);  ///< 0 = none
  [[nodiscard]] std::size_t memory_limit() const;
  /// Registers a hook called (without pool locks held) when an allocation would fail; it may
  /// free memory (a garbage collector). Returns an id for remove_reclaim_hook.
  /// The contract: a hook may free into this pool and allocate from it (an allocation that
  /// fails inside a hook throws out_of_memory at once, without running the hooks again). A hook
  /// may throw: the exception ends that allocation and reaches its caller as it was thrown;
  /// the hooks after it in that round do not run, the pool is as the hook left it (consistent),
  /// and the hook stays registered. Through the C ABI a hook cannot throw (a C function).
  std::uint64_t add_reclaim_hook(std::function<void(std::size_t bytes_needed)> hook);
  void remove_reclaim_hook(std::uint64_t id);

  [[nodiscard]] pool_statistics statistics() const;
  /// Starts peak_live_bytes and peak_reserved_bytes again from the live and reserved bytes of
  /// now (PyTorch's reset_peak_memory_stats): the peaks read later are the highest since this
  /// call, with the exactness pool_statistics states. How the pool grows is not changed: its
  /// policy keeps the peak it had.
  void reset_peak_statistics();
  /// Every range and block of the pool, the stream caches and the statistics
  /// (streampool/snapshot.hpp). Reads one lock at a time: no thread waits for more than one
  /// cache, size class or large shard to be read.
  [[nodiscard]] pool_snapshot snapshot() const;
  /// @throws logic_error when the device was destroyed (the pool outlived it through arrays)
  [[nodiscard]] device get_device() const;
  /// The pool's process-unique id, as error messages name it.
  [[nodiscard]] std::uint64_t id() const;
  /// The id of the pool's device (device::id()). Readable after the device was destroyed, unlike
  /// get_device(): the pool keeps the number.
  [[nodiscard]] std::uint64_t device_id() const;

  /// @brief Starts the allocation log: from now on every allocation and free of this pool is
  ///        written to `path` (truncated) in the trace format of tools/replay
  ///        (bench/traces/README.md): `alloc <id> <size> <stream>` with the requested size, and
  ///        `free_completed <id> <size> <stream>` at the free (a free is stream-ordered: its
  ///        request is its completion as a replay sees it; free_requested is not written). Ids
  ///        are the smallest integer not naming a live block, recycled on free. Streams are
  ///        numbered in order of first appearance from 0; a free line carries the stream that
  ///        allocated the block (as the replay frees it), whichever stream freed it. Blocks
  ///        allocated before the start are not written, nor is their free. A recording in progress
  ///        is closed first. Off, the log costs allocate and deallocate one relaxed atomic load.
  /// @throws logic_error naming `path` and the system's reason when it cannot be opened; a
  ///         recording in progress then goes on
  void start_recording(const std::string& path);
  /// @brief The same, with `default_stream` numbered 0 in the file and the other streams from 1
  ///        (the trace format's "stream 0 is the default stream"; the PyTorch plug-in names
  ///        CUDA's legacy default stream).
  void start_recording(const std::string& path, stream_ref default_stream);
  /// @brief Ends the recording and closes its file; returns the alloc and free lines written
  ///        (0 when nothing was recording). Blocks still live have no free line.
  /// @throws logic_error naming the file when writing it failed, or when host memory ran out
  ///         while recording (lines are missing; those written balance); it is closed anyway
  std::uint64_t stop_recording();
  /// @brief Writes a phase line `# <name>` (tools/replay reports per phase the names
  ///        `step k begin` and one-word names) and flushes the file. Nothing when not recording.
  void record_phase(std::string_view name);

  friend bool operator==(const pool& a, const pool& b) noexcept { return a.state_ == b.state_; }

 private:
  friend struct detail::access;
  explicit pool(std::shared_ptr<detail::pool_state> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::pool_state> state_;
};

/// Parses a memory limit: "123", "64M", "2G", "1.5G", "80%" (of `device_total`); "0" is "no
/// limit". Throws logic_error naming the text for anything else, and for a limit that would not
/// be itself: past what size_t holds (2^64 bytes and up), or below one byte but not 0 ("0.5",
/// "0.00001%"), which would otherwise have meant "no limit".
[[nodiscard]] STREAMPOOL_EXPORT std::size_t parse_memory_limit(const char* text,
                                                               std::size_t device_total);

}  // namespace streampool
