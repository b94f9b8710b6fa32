// streampool: the memory picture's block map of a snapshot (report.hpp, snapshot.hpp).
//
// Where the pool's memory sits, block by block, coloured live, free and ready for any stream,
// free and pending (another stream's work on it is not known complete), or unmapped address
// space; each block's hover title gives its size, its stream and where a free block waits.
//
// Layout. A pool has two kinds of ranges whose sizes differ by three orders of magnitude: a few
// large ones (virtual ranges of several GiB mapped, segments of tens of MiB) and many slabs of
// small chunks (64 KiB to 2 MiB). Drawn on one scale the slabs would vanish; drawn one row each
// they would run to hundreds of rows. So the map has two panels, each on its own linear scale
// stated in its heading ("one line = 1 GiB"):
//   - large blocks: one row per segment or virtual range, in address order, wrapping onto further
//     lines like text when the range is longer than a line; a virtual range is drawn up to the end
//     of its last mapped block (its address space beyond is said in the label, not drawn: it is
//     twice the device). More than 8 ranges (the segment path makes one per large request) are
//     packed side by side with a gap between two, each block's title naming its range;
//   - small blocks: one row per size class, that class's slabs side by side in address order.
// Blocks narrower than a pixel are drawn together as one rect, in the colour of most of their
// bytes, whose title counts them; a group that stays under a pixel is still drawn 1 px wide, so
// that a lone live chunk in free space shows.
#pragma once

#include <string>

#include "streampool/snapshot.hpp"

namespace streampool::detail {

/// Appends a <figure> holding <svg id="block-map">.
void write_block_map(std::string& out, const pool_snapshot& s);

}  // namespace streampool::detail
