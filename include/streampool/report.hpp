// streampool: the memory picture: one self-contained HTML page, inline SVG, no script, no network
// (docs/memory-picture.md). `replay --html` writes one from a trace; `python -m streampool.report`
// from a snapshot's JSON.
//
// What a page shows, each part only when its input is there:
//   - live and reserved bytes over the events of a trace, one chart per allocator replayed, side
//     by side on one scale, each peak marked;
//   - a block map of a snapshot: its ranges as rows, blocks coloured live, free-ready or
//     free-pending (unmapped space left pale), with a hover title that gives size and stream;
//   - the fragmentation summary: the largest free block against all free bytes, and live and free
//     bytes per size class.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "streampool/export.hpp"
#include "streampool/snapshot.hpp"

namespace streampool {

/// One allocator's bytes over a trace: live[i] and reserved[i] after event i.
struct memory_series {
  std::string name;
  std::vector<std::size_t> live;
  std::vector<std::size_t> reserved;
};

/// A named point of a trace ('# step 3 begin'): drawn as a vertical rule on the charts.
struct trace_phase {
  std::size_t first_event = 0;
  std::string name;
};

struct report_page {
  std::string title;     ///< the page's heading
  std::string subtitle;  ///< what it was made from (the trace, the program)
  std::vector<memory_series> series;
  std::vector<trace_phase> phases;
  std::optional<pool_snapshot> snapshot;
  std::string snapshot_caption;  ///< e.g. "streampool (host backend) at its peak, event 8,123"
};

/// The page as one HTML document.
[[nodiscard]] STREAMPOOL_EXPORT std::string render_html(const report_page& page);

}  // namespace streampool
