// streampool: the memory picture's fragmentation summary of a snapshot (report.hpp).
//
// Free memory helps only in pieces big enough for the next request. Two bars say how free space
// lies: the pool's bytes split into live, free and ready, free and pending; and all free bytes
// with the largest free block marked within them (a largest block that is most of the free bytes
// means free space is one piece; a sliver means it is scattered). Then one row per size class
// (summarize(): slab classes, smallest first, then large blocks) with the share of its bytes that
// is live and free, and the bytes as numbers: where free memory is stuck.
#pragma once

#include <string>

#include "streampool/snapshot.hpp"

namespace streampool::detail {

/// Appends a <figure> holding <svg id="fragmentation">.
void write_fragmentation(std::string& out, const snapshot_summary& sum);

}  // namespace streampool::detail
