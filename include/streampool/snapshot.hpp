// streampool: a pool's snapshot: where its memory sits, block by block (docs/memory-picture.md).
//
// Glossary
//   range   one piece of the pool's address space: a slab (one size class cut into chunks), a
//           segment (one upstream allocation of large blocks) or a virtual range (reserved
//           address space whose granules are mapped on demand).
//   block   a run of one range, in address order: live (handed out), free (memory behind it, in a
//           stream cache, a shared list or never handed out) or unmapped (address space only).
//           In a slab, consecutive chunks that agree in everything are one block of `chunks`
//           chunks, so that a slab of 8,192 chunks of 256 B is a handful of blocks, not 8,192.
//   token   what a free block waits for before another stream may reuse it: (timeline, point),
//           and whether that point was complete when the snapshot looked.
//
// Invariants of a snapshot pool pool::snapshot() returns (tests/snapshot_test.cpp checks them):
//   - ranges are in address order and do not overlap; each range's blocks tile [0, bytes) of it
//     in address order, with size > 0;
//   - a slab's block sizes are multiples of its chunk size (size == chunks * chunk_bytes);
//   - only virtual ranges have unmapped blocks; unmapped blocks have no tokens.
// A snapshot is not one instant: the pool is read one lock at a time (a stream cache, a size
// class, a large shard), so that no thread waits longer than one of those holds. A block that
// moves meanwhile is seen where each read found it; the statistics are read first. A range given
// back and its address reused between two reads is kept as the later read found it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "streampool/export.hpp"
#include "streampool/pool.hpp"

namespace streampool {

/// The version of the JSON schema (docs/snapshot.schema.json) that to_json writes. A reader
/// accepts this version only; a change that renames or removes a field raises it.
inline constexpr int snapshot_schema_version = 1;

struct snapshot_token {
  std::uint64_t timeline = 0;  ///< the stream's timeline id (stream_statistics::timeline_id)
  std::uint64_t point = 0;     ///< the point on it
  bool complete = false;       ///< known complete when the snapshot looked
};

enum class block_status : std::uint8_t {
  live,     ///< handed out
  free,     ///< free, with memory behind it
  unmapped  ///< free address space with no memory behind it (virtual ranges)
};

/// Where a free block is, which decides who may reuse it and how.
enum class block_place : std::uint8_t {
  none,          ///< live or unmapped blocks
  stream_cache,  ///< a stream's cache: reused by that stream with no wait (`stream`)
  shared_list,   ///< a size class's shared list: any stream, after its tokens
  never_used,    ///< chunks of a slab never handed out yet: ready for any stream
  large_free,    ///< a free large block: any stream, after its tokens
  in_transit     ///< free, but between two lists while the snapshot looked
};

struct snapshot_block {
  std::size_t offset = 0;  ///< from the range's base
  std::size_t size = 0;    ///< bytes
  /// Slabs: chunks in this run; 0 for a slab's tail, too small for a chunk (slack, never handed
  /// out, not counted as free). 1 for large blocks.
  std::size_t chunks = 1;
  block_status status = block_status::free;
  block_place place = block_place::none;
  /// The stream (timeline id) a block belongs to, 0 where none is known: live large blocks, the
  /// stream they were handed to; free blocks in a stream cache, that stream. (Live chunks of a
  /// slab do not record their stream: that would cost the fast path a store.)
  std::uint64_t stream = 0;
  /// Free blocks: what reuse by another stream waits for (one per timeline). Live large blocks:
  /// the uses recorded on them (pool::record_use).
  std::vector<snapshot_token> tokens;

  /// A free block whose reuse by another stream must wait for work not known complete.
  [[nodiscard]] bool pending() const noexcept {
    for (const snapshot_token& t : tokens)
      if (!t.complete) return true;
    return false;
  }
};

enum class range_kind : std::uint8_t { slab, segment, virtual_range };

struct snapshot_range {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;           ///< the address span
  std::size_t reserved_bytes = 0;  ///< memory behind it (virtual ranges: the mapped granules)
  range_kind kind = range_kind::segment;
  std::size_t chunk_bytes = 0;         ///< slabs: the size of its class; 0 otherwise
  std::size_t shard = 0;               ///< segments and virtual ranges: the large shard holding it
  std::vector<snapshot_block> blocks;  ///< address order, tiling [0, bytes)
};

/// One stream's cache of small chunks (pool.hpp, "stream cache").
struct snapshot_cache {
  struct bin {
    std::size_t chunk_bytes = 0;
    std::size_t chunks = 0;
  };
  std::uint64_t timeline = 0;
  std::size_t shard = 0;  ///< the stream's large shard
  bool stream_gone = false;
  std::size_t bytes = 0;
  std::vector<bin> bins;  ///< non-empty bins, smallest chunks first
};

/// What a snapshot says about free space, computed from it (summarize()).
struct snapshot_summary {
  struct by_size {
    std::size_t chunk_bytes = 0;  ///< a slab class; 0 for large blocks
    std::size_t live_bytes = 0;
    std::size_t free_bytes = 0;
  };
  std::size_t live_bytes = 0;
  std::size_t free_bytes =
      0;  ///< free with memory behind it (not slabs' tails: reserved - live - free)
  std::size_t free_ready_bytes = 0;  ///< of those, reusable by any stream with no wait
  std::size_t free_pending_bytes = 0;
  std::size_t largest_free_block = 0;  ///< the largest free block with memory behind it
  std::size_t reserved_bytes = 0;      ///< sum of the ranges' reserved bytes
  std::size_t address_bytes = 0;       ///< sum of the ranges' spans
  std::vector<by_size> classes;        ///< slab classes, smallest first, then large blocks
};

struct pool_snapshot {
  int schema_version = snapshot_schema_version;
  std::uint64_t pool_id = 0;
  std::uint64_t device_id = 0;
  std::string backend;  ///< the backend's name (backend::name())
  std::size_t granularity = 0;
  std::size_t vm_granularity = 0;      ///< 0 without virtual memory
  bool virtual_memory = false;         ///< large blocks on virtual memory
  std::uint64_t taken_unix_ns = 0;     ///< wall clock when taken
  pool_statistics statistics;          ///< read before the ranges
  std::vector<snapshot_range> ranges;  ///< address order
  std::vector<snapshot_cache> caches;  ///< by timeline id
};

/// Totals and free space by size, from a snapshot.
[[nodiscard]] STREAMPOOL_EXPORT snapshot_summary summarize(const pool_snapshot& s);

/// The snapshot as JSON, schema docs/snapshot.schema.json (its version: snapshot_schema_version),
/// with summarize()'s result under "summary". Numbers are exact (64-bit integers in decimal).
[[nodiscard]] STREAMPOOL_EXPORT std::string to_json(const pool_snapshot& s);

/// Reads what to_json wrote, strictly (docs/memory-picture.md, "Snapshots"): every member the
/// schema requires and no other, values in range, the invariants above and the summary equal to
/// summarize()'s. Its memory is about the size of the text. Throws logic_error naming the JSON
/// path (or, for text that is not JSON or not UTF-8, the byte offset) and what was wrong there.
[[nodiscard]] STREAMPOOL_EXPORT pool_snapshot snapshot_from_json(std::string_view json);

[[nodiscard]] STREAMPOOL_EXPORT const char* to_string(block_status s) noexcept;
[[nodiscard]] STREAMPOOL_EXPORT const char* to_string(block_place p) noexcept;
[[nodiscard]] STREAMPOOL_EXPORT const char* to_string(range_kind k) noexcept;

}  // namespace streampool
