// streampool: PyTorch's snapshot segments from a pool's snapshot (torch_snapshot.hpp).
#include "torch_snapshot.hpp"

#include <c10/util/Exception.h>

#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "check.hpp"

namespace streampool::torch_native {
namespace {

using c10::CachingDeviceAllocator::BlockInfo;
using c10::CachingDeviceAllocator::SegmentInfo;

/// The walk's state: the segment being built, closed when its range or its mapped run ends.
struct builder {
  c10::DeviceIndex device;
  c10::MempoolId_t owner;
  const live_block_lookup& lookup;
  std::vector<SegmentInfo>& out;
  std::optional<SegmentInfo> open;
  std::exception_ptr failed;  // a throw may not cross the C callback

  void start(std::uintptr_t address, bool large, bool expandable) {
    SegmentInfo s;
    s.device = device;
    s.address = address;
    s.is_large = large;
    s.is_expandable = expandable;
    s.owner_private_pool_id = owner;
    open = std::move(s);
  }
  void close() {
    if (open && !open->blocks.empty()) out.push_back(std::move(*open));
    open.reset();
  }
  void add_live(std::uintptr_t address, std::size_t size) {
    live_block_info info;
    // An address the pool reported: a block it handed out, so a pointer again.
    const void* p = reinterpret_cast<const void*>(address);  // NOLINT(performance-no-int-to-ptr)
    if (!lookup(p, info)) info.requested = size;
    BlockInfo b;
    b.size = size;
    b.requested_size = info.requested;
    b.allocated = true;
    b.active = true;
    SegmentInfo& s = *open;
    if (s.stream == nullptr) s.stream = info.stream;
    s.total_size += size;
    s.allocated_size += size;
    s.active_size += size;
    s.requested_size += info.requested;
    s.blocks.push_back(std::move(b));
  }
  void add_free(std::size_t size) {
    BlockInfo b;
    b.size = size;
    open->total_size += size;
    open->blocks.push_back(std::move(b));
  }

  void visit(const sp_snapshot_range_t& r, std::size_t index, const sp_snapshot_block_t& b) {
    const bool last = index + 1 == r.block_count;
    if (r.kind == SP_RANGE_VIRTUAL) {
      if (b.state == SP_BLOCK_UNMAPPED) {
        close();
        return;
      }
      if (!open) start(b.address, /*large=*/true, /*expandable=*/true);
    } else if (index == 0) {
      start(r.base, /*large=*/r.kind != SP_RANGE_SLAB, /*expandable=*/false);
    }
    if (b.state == SP_BLOCK_LIVE && r.kind == SP_RANGE_SLAB) {
      // A run of live chunks: one block each, as PyTorch hands out one block per request.
      for (std::size_t c = 0; c < b.chunks; ++c)
        add_live(b.address + c * r.chunk_bytes, r.chunk_bytes);
    } else if (b.state == SP_BLOCK_LIVE) {
      add_live(b.address, b.size);
    } else {
      add_free(b.size);
    }
    if (last) close();
  }
};

int visit_block(const sp_snapshot_range_t* range, std::size_t index,
                const sp_snapshot_block_t* block, void* user) {
  auto* b = static_cast<builder*>(user);
  try {
    b->visit(*range, index, *block);
    return 0;
  } catch (...) {
    b->failed = std::current_exception();
    return 1;
  }
}

}  // namespace

void append_segments(sp_pool_t pool, c10::DeviceIndex device, c10::MempoolId_t owner,
                     const live_block_lookup& lookup, std::vector<SegmentInfo>& out) {
  builder b{device, owner, lookup, out, std::nullopt, nullptr};
  const sp_status_t st = sp_pool_snapshot_walk(pool, &visit_block, &b);
  if (b.failed) std::rethrow_exception(b.failed);
  check(st, "streampool: the memory snapshot of device ", static_cast<int>(device), " failed");
}

}  // namespace streampool::torch_native
