// replay: the page `replay --html OUT.html` writes: the memory charts of every allocator replayed
// and the block map of the first streampool replay at its peak (streampool/report.hpp,
// docs/memory-picture.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "streampool/report.hpp"
#include "trace.hpp"

namespace streampool::replay {

struct html_report {
  std::string trace_path;  ///< as given on the command line: the page's subtitle names it
  std::vector<memory_series> series;
  std::optional<pool_snapshot> snapshot;
  std::string snapshot_caption;
};

/// Renders the page and writes it to `out_path`.
/// @throws std::runtime_error naming the file when it cannot be written
void write_html_report(const std::string& out_path, const trace& t, html_report report);

}  // namespace streampool::replay
