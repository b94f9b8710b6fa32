// replay: the pool's snapshot at its peak reserved bytes, for the block map --html draws
// (streampool/snapshot.hpp).
//
// The snapshot is taken during the replay, each time reserved bytes pass their highest value so
// far; the last one taken is the peak's. The alternative, a second replay stopped at the peak
// event, costs less (one snapshot) but needs the second replay to reach the same state, which
// holds for the host backends (deterministic, lagged_backend.hpp) and not for a GPU, whose markers
// complete when the device gets there. Reserved bytes grow only when the pool calls its upstream,
// so at most one snapshot is taken per event that grows the pool (fewer than 1,000 on the GPT-2
// trace, whose replay creates 978 granules), and only the replay that draws the map takes any.
#pragma once

#include <cstddef>
#include <optional>

#include "streampool/pool.hpp"
#include "streampool/snapshot.hpp"

namespace streampool::replay {

class peak_snapshot {
 public:
  explicit peak_snapshot(bool enabled) : enabled_(enabled) {}

  /// After `event`, the pool reserves `reserved` bytes: snapshots it if that is a new peak.
  void after_event(const pool& p, std::size_t reserved, std::size_t event) {
    if (!enabled_ || (taken_ && reserved <= reserved_)) return;
    taken_ = p.snapshot();
    reserved_ = reserved;
    event_ = event;
  }

  /// The snapshot at the peak (none when disabled or no event was replayed), and its event.
  [[nodiscard]] std::optional<pool_snapshot>& taken() noexcept { return taken_; }
  [[nodiscard]] std::size_t event() const noexcept { return event_; }

 private:
  bool enabled_;
  std::optional<pool_snapshot> taken_;
  std::size_t reserved_ = 0;
  std::size_t event_ = 0;
};

}  // namespace streampool::replay
