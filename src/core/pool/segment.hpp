// streampool: segments, the pool's upstream allocations.
//
// Glossary
//   segment      one upstream allocation, registered in the page map.
//   slab         a segment cut into equal chunks of one size class. Per chunk, an atomic state
//                byte says free / live / live-with-recorded-uses; freeing reads and writes it,
//                so a double free is caught without a lock (two frees of one pointer racing on
//                two threads are the caller's data race: not an exchange, see deallocate_chunk).
//   large range  memory for large blocks: a whole upstream allocation, or a reserved virtual range
//                mapped granule by granule. The blocks inside are the block arena's
//                (block_arena.hpp) of one shard (large_shard.hpp), guarded by its lock.
//
// Invariants (pool_state::validate() checks them):
//   slab         chunks == bytes / chunk_size >= 1; 1 <= carved <= chunks once registered (the
//                chunk that made it is carved); chunks are carved in address order, so
//                state(k) == chunk_free for every k >= carved.
//   large range  a virtual range's handles[i] != nullptr exactly when a live or mapped block
//                overlaps granule i; a whole-allocation range is all memory.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/stream/token_set.hpp"
#include "streampool/error.hpp"
#include "streampool/timeline.hpp"

namespace streampool::detail {

enum class segment_kind : std::uint8_t { slab, large };

enum chunk_state : std::uint8_t { chunk_free = 0, chunk_live = 1, chunk_live_with_uses = 2 };

/// What two threads' data must be apart so that one's writes never slow the other's reads: two
/// cache lines, since the L2's adjacent-line prefetcher fetches lines in aligned pairs (128 bytes
/// cost only host memory). Every thread reads a slab's header on every free, and a slab's chunks
/// (and their state bytes) go to several threads, so neither the header nor the state array may
/// share a line pair with what another thread writes (docs/performance.md, "Slabs and state
/// lines").
inline constexpr std::size_t false_sharing_span = 128;

struct alignas(false_sharing_span) segment {
  segment(segment_kind k, void* b, std::size_t n) : kind(k), base(b), bytes(n) {}
  segment_kind kind;
  void* base;
  std::size_t bytes;
};

struct slab : segment {
  slab(void* b, std::size_t n, std::size_t cls, std::size_t chunk)
      : segment(segment_kind::slab, b, n),
        chunk_size(chunk),
        chunk_inverse(inverse_of(chunk)),
        // Threads on their own streams each keep reusing their own chunk; if two of those chunks'
        // state bytes shared a cache line, every alloc and free would bounce it between cores.
        // Few chunks: each state byte has its own line (a state_line: false_sharing_span bytes,
        // of which the first 64 hold states). Many: the states are interleaved over
        // lines_for(chunks) lines (chunk i's byte is on line i mod lines), so that chunks carved
        // one after another (in address order, often by different threads) have their bytes on
        // different lines: the first 16 carves of a slab never share one.
        line_mask(n / chunk <= 128 ? ~std::size_t{0} : lines_for(n / chunk) - 1),
        states(new state_line[n / chunk <= 128 ? n / chunk : lines_for(n / chunk)]),
        size_class(static_cast<std::uint32_t>(cls)),
        line_shift(n / chunk <= 128
                       ? 63
                       : static_cast<std::uint32_t>(std::countr_zero(lines_for(n / chunk)))),
        chunks(n / chunk) {
    STREAMPOOL_ASSERT(n <= UINT64_MAX / chunk);  // index_of's multiply-high is exact
    STREAMPOOL_ASSERT_INTERNAL(reinterpret_cast<const std::byte*>(&line_shift + 1) -
                                   reinterpret_cast<const std::byte*>(this) <=
                               64);
    for (std::size_t i = 0; i < chunks; ++i) state(i).store(chunk_free, std::memory_order_relaxed);
  }
  /// Chunk i's state byte: line i & line_mask, byte i >> line_shift of it. A mask and a shift,
  /// not a division: this is on every free's path.
  [[nodiscard]] std::atomic<std::uint8_t>& state(std::size_t i) const noexcept {
    return states[i & line_mask].at[i >> line_shift];
  }
  /// Lines for more than 128 chunks: a power of two, at least 16 and enough for 64 bytes each.
  static std::size_t lines_for(std::size_t chunks) noexcept {
    return std::bit_ceil(std::max<std::size_t>(16, (chunks + 63) / 64));
  }
  [[nodiscard]] void* chunk_at(std::size_t i) const noexcept {
    return static_cast<std::byte*>(base) + i * chunk_size;
  }
  /// The chunk holding p: the offset divided by chunk_size as a multiply-high by chunk_inverse
  /// (exact, see inverse_of), since a 64-bit division is most of a free's cost on some cores.
  [[nodiscard]] std::size_t index_of(const void* p) const noexcept {
    const auto offset = static_cast<std::uint64_t>(static_cast<const std::byte*>(p) -
                                                   static_cast<const std::byte*>(base));
    return static_cast<std::size_t>((static_cast<unsigned __int128>(offset) * chunk_inverse) >> 64);
  }
  /// 2^64 / d for a power of two d (exact); else m = floor(2^64 / d) + 1. Then (n * m) >> 64 ==
  /// n / d for every n with n * d < 2^64, which holds for every offset into a slab (bytes *
  /// chunk_size < 2^64, asserted at construction): m = (2^64 + e) / d with 1 <= e <= d, so
  /// n * m / 2^64 = n / d + n * e / (d * 2^64), and the second term, under 1 / d, cannot carry
  /// the quotient past the next integer.
  static std::uint64_t inverse_of(std::size_t d) noexcept { return UINT64_MAX / d + 1; }
  // One line of state bytes, alone on its false_sharing_span (host memory: 128 bytes a chunk for
  // slabs of up to 128 chunks, e.g. 16 KiB beside a 64 KiB slab of 512 B chunks).
  struct alignas(false_sharing_span) state_line {
    std::atomic<std::uint8_t> at[64];
  };
  // Every allocation and free from a stream's cache reads the segment's kind and base and the
  // fields up to line_shift: they fill the header's first 64-byte line exactly (the constructor
  // checks), so that a free touches one line of the header, not two (docs/performance.md, "Slabs
  // and state lines").
  std::size_t chunk_size;
  std::uint64_t chunk_inverse;  // inverse_of(chunk_size), for index_of
  std::size_t line_mask;        // up to 128 chunks: all ones (one line each); else lines - 1
  std::unique_ptr<state_line[]> states;
  std::uint32_t size_class;  // an index into class_sizes (size_classes.hpp)
  std::uint32_t line_shift;  // up to 128 chunks: 63 (byte 0 of its line); else log2(lines)
  std::size_t chunks;
  std::size_t carved = 0;  // chunks [0, carved) were handed out at least once; guarded by the
                           // class list lock
};

/// Addresses as integers, which the block arena and the slab pages compute with, and back.
[[nodiscard]] inline void* to_ptr(std::uintptr_t a) noexcept {
  return reinterpret_cast<void*>(a);  // NOLINT(performance-no-int-to-ptr)
}
[[nodiscard]] inline std::uintptr_t to_addr(const void* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p);
}

struct arena_range;
struct large_shard;

/// A range of large blocks (block_arena.hpp): one whole upstream allocation, or a reserved virtual
/// range whose granules are mapped on demand. Registered in the page map for the pages that have
/// memory behind them (all of a segment; the mapped granules of a virtual range).
struct large_range : segment {
  large_range(void* b, std::size_t n, bool is_virtual)
      : segment(segment_kind::large, b, n), virtual_range(is_virtual) {}
  bool virtual_range;
  large_shard* shard = nullptr;  // the shard whose arena holds the range, for good
  arena_range* arena = nullptr;
  /// Virtual: the physical granule mapped at base + i * granularity, nullptr where none is. Grows
  /// with the highest granule mapped so far. Guarded by the shard's lock.
  std::vector<native_physical> handles;
};

}  // namespace streampool::detail
