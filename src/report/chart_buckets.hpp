// streampool: a series of bytes over a trace's events cut into buckets for drawing (report.hpp).
//
// A trace has tens of thousands to millions of events and a chart a thousand pixels, so the
// memory charts draw buckets of consecutive events. A bucket keeps the largest live and the
// largest reserved value of its events, never an average: a peak that lasted one event is what
// the chart exists to show, and an average would shave it off. The two maxima may come from
// different events of the bucket; each line is still exact at its own peak.
//
// Header-only so that tests/report_page_test.cpp checks it directly.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace streampool::detail {

struct chart_bucket {
  std::size_t first = 0;  ///< the bucket's first event
  std::size_t end = 0;    ///< one past its last
  std::size_t live = 0;   ///< the largest live value of its events
  std::size_t reserved = 0;
};

/// Events [0, n) of live and reserved (both of size n) cut into min(n, max_buckets) buckets of
/// consecutive events whose sizes differ by at most one.
[[nodiscard]] inline std::vector<chart_bucket> max_buckets(const std::vector<std::size_t>& live,
                                                           const std::vector<std::size_t>& reserved,
                                                           std::size_t max_buckets) {
  const std::size_t n = std::min(live.size(), reserved.size());
  const std::size_t count = std::min(n, std::max<std::size_t>(1, max_buckets));
  std::vector<chart_bucket> out;
  out.reserve(count);
  for (std::size_t b = 0; b < count; ++b) {
    chart_bucket k;
    // Boundaries by multiplication, not by accumulating a fractional step: exact for any n.
    k.first = b * n / count;
    k.end = (b + 1) * n / count;
    for (std::size_t i = k.first; i < k.end; ++i) {
      k.live = std::max(k.live, live[i]);
      k.reserved = std::max(k.reserved, reserved[i]);
    }
    out.push_back(k);
  }
  return out;
}

}  // namespace streampool::detail
