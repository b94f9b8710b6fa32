// streampool: summarize(), a snapshot's totals and free space by size (snapshot.hpp).
#include <algorithm>
#include <map>

#include "streampool/snapshot.hpp"

namespace streampool {

snapshot_summary summarize(const pool_snapshot& s) {
  snapshot_summary sum;
  // Slab classes by chunk size; large blocks under 0, listed last.
  std::map<std::size_t, snapshot_summary::by_size> classes;
  for (const snapshot_range& r : s.ranges) {
    sum.reserved_bytes += r.reserved_bytes;
    sum.address_bytes += r.bytes;
    snapshot_summary::by_size& c = classes[r.kind == range_kind::slab ? r.chunk_bytes : 0];
    c.chunk_bytes = r.kind == range_kind::slab ? r.chunk_bytes : 0;
    for (const snapshot_block& b : r.blocks) {
      if (b.status == block_status::live) {
        sum.live_bytes += b.size;
        c.live_bytes += b.size;
      } else if (b.status == block_status::free && b.chunks != 0) {  // (0: a slab's tail)
        sum.free_bytes += b.size;
        c.free_bytes += b.size;
        (b.pending() ? sum.free_pending_bytes : sum.free_ready_bytes) += b.size;
        // A run of chunks is that many blocks of one chunk each.
        sum.largest_free_block = std::max(sum.largest_free_block, b.size / b.chunks);
      }
    }
  }
  for (const auto& [bytes, c] : classes)
    if (bytes != 0) sum.classes.push_back(c);
  if (auto large = classes.find(0); large != classes.end()) sum.classes.push_back(large->second);
  return sum;
}

const char* to_string(block_status s) noexcept {
  switch (s) {
    case block_status::live:
      return "live";
    case block_status::free:
      return "free";
    case block_status::unmapped:
      return "unmapped";
  }
  return "?";
}

const char* to_string(block_place p) noexcept {
  switch (p) {
    case block_place::none:
      return "none";
    case block_place::stream_cache:
      return "stream_cache";
    case block_place::shared_list:
      return "shared_list";
    case block_place::never_used:
      return "never_used";
    case block_place::large_free:
      return "large_free";
    case block_place::in_transit:
      return "in_transit";
  }
  return "?";
}

const char* to_string(range_kind k) noexcept {
  switch (k) {
    case range_kind::slab:
      return "slab";
    case range_kind::segment:
      return "segment";
    case range_kind::virtual_range:
      return "virtual_range";
  }
  return "?";
}

}  // namespace streampool
