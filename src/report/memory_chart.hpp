// streampool: the memory picture's charts of live and reserved bytes over a trace (report.hpp).
//
// One chart per allocator replayed, one below the other, all on one byte scale and one event
// axis, so that the same moment of the trace lines up across allocators and the gap between
// reserved and live (what each allocator holds beyond what the program uses) compares by eye.
// Each chart fills the area under reserved in a pale colour and the area under live in a strong
// one, marks both peaks with a dot and a label ("peak reserved 7,832.0 MiB at event 4,321"), and
// draws the trace's phases as thin vertical rules with their names.
//
// Events are drawn in buckets of at most one pixel each (chart_buckets.hpp: the maximum of each
// bucket, so peaks survive); the peak labels are read from the series itself, not the buckets.
#pragma once

#include <string>

#include "streampool/report.hpp"

namespace streampool::detail {

/// Appends one <figure> per series of `page`, each holding an <svg id="chart-memory-K"> (K from
/// 0, in the order of page.series). Nothing when there is no series.
/// @throws logic_error when a series' live and reserved differ in length
void write_memory_charts(std::string& out, const report_page& page);

}  // namespace streampool::detail
