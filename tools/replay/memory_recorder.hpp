// replay: live and reserved bytes after every event of one replay, for the charts --html draws
// (streampool/report.hpp, memory_series).
//
// Live is the trace's own measure, the sum of its live blocks' sizes, the same for every allocator
// and the one the results table divides by; reserved is what the allocator holds from its
// upstream. Two 8-byte values per event: 17,779 events are 280 KiB, a million 16 MiB.
//
// A recorder that is not enabled (no --html) stores nothing, so that a replay without --html
// costs no memory and its timings nothing.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "streampool/report.hpp"

namespace streampool::replay {

class memory_recorder {
 public:
  memory_recorder(bool enabled, std::size_t events) : enabled_(enabled) {
    if (enabled_) {
      live_.reserve(events);
      reserved_.reserve(events);
    }
  }

  [[nodiscard]] bool enabled() const noexcept { return enabled_; }

  /// The values after the next event.
  void record(std::size_t live, std::size_t reserved) {
    if (!enabled_) return;
    live_.push_back(live);
    reserved_.push_back(reserved);
  }

  /// What was recorded, as the page's series; empties the recorder.
  [[nodiscard]] memory_series take(std::string name) {
    return {std::move(name), std::exchange(live_, {}), std::exchange(reserved_, {})};
  }

 private:
  bool enabled_;
  std::vector<std::size_t> live_;
  std::vector<std::size_t> reserved_;
};

}  // namespace streampool::replay
