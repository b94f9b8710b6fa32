// streampool C ABI: snapshots as JSON and block by block (docs/memory-picture.md).
#include <string>

#include "handles.hpp"
#include "streampool/snapshot.hpp"

using streampool::c_api::guarded;
using streampool::c_api::pool_of;
using streampool::c_api::require;

namespace {
// sp_pool_snapshot_walk hands the C++ enums over as these numbers.
static_assert(static_cast<int>(streampool::range_kind::slab) == SP_RANGE_SLAB &&
              static_cast<int>(streampool::range_kind::segment) == SP_RANGE_SEGMENT &&
              static_cast<int>(streampool::range_kind::virtual_range) == SP_RANGE_VIRTUAL);
static_assert(static_cast<int>(streampool::block_status::live) == SP_BLOCK_LIVE &&
              static_cast<int>(streampool::block_status::free) == SP_BLOCK_FREE &&
              static_cast<int>(streampool::block_status::unmapped) == SP_BLOCK_UNMAPPED);

// The text the last call on this thread returned (the header's promise: valid until the next).
thread_local std::string snapshot_text;
}  // namespace

extern "C" {

sp_status_t sp_pool_snapshot_json(sp_pool_t pool, const char** json, size_t* length) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    require(json, entry, "json");
    snapshot_text = streampool::to_json(p->p.snapshot());
    *json = snapshot_text.c_str();
    if (length != nullptr) *length = snapshot_text.size();
  });
}

sp_status_t sp_pool_snapshot_walk(sp_pool_t pool, sp_snapshot_visit_fn visit, void* user) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    if (visit == nullptr) require(nullptr, entry, "visit");
    const streampool::pool_snapshot snap = p->p.snapshot();
    for (const streampool::snapshot_range& r : snap.ranges) {
      sp_snapshot_range_t range{};
      range.struct_size = sizeof range;
      range.base = r.base;
      range.bytes = r.bytes;
      range.reserved_bytes = r.reserved_bytes;
      range.kind = static_cast<int>(r.kind);
      range.chunk_bytes = r.chunk_bytes;
      range.block_count = r.blocks.size();
      for (std::size_t i = 0; i < r.blocks.size(); ++i) {
        const streampool::snapshot_block& b = r.blocks[i];
        sp_snapshot_block_t block{};
        block.struct_size = sizeof block;
        block.address = r.base + b.offset;
        block.size = b.size;
        block.chunks = b.chunks;
        block.state = static_cast<int>(b.status);
        block.pending = b.pending() ? 1 : 0;
        block.stream = b.stream;
        if (visit(&range, i, &block, user) != 0) return;
      }
    }
  });
}

}  // extern "C"
