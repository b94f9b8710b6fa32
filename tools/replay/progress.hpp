// replay: a progress line on the terminal while a long replay runs.
//
//   replay: streampool (host backend): 8,000 / 17,779 events, 1.2 M events/s
//
// Written to stderr, and only when stderr is a terminal: a log file or a pipe (CTest, CI) gets
// nothing, not even a carriage return. The line is rewritten in place ('\r') at most ten times a
// second; the first is written at once (a replay that takes minutes says so from the start), the
// last, with every event done, at finish(), which then clears the line so that the results table
// starts on a clean one.
//
// The cost per event is an increment and a test: the clock is read every 256 events.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace streampool::replay {

class progress {
 public:
  /// `label` names the replay ("streampool (host backend)"), `total` its events. `enabled`
  /// false: never writes (the default asks whether stderr is a terminal).
  progress(std::string label, std::size_t total, bool enabled = stderr_is_terminal());
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;
  /// Clears the line if finish() was not called (a replay that threw): no final count then.
  ~progress();

  /// `done` events are replayed.
  void update(std::size_t done) {
    if (enabled_ && done % 256 == 0) tick(done);
  }
  /// Writes the final count (every event done) and clears the line. Idempotent.
  void finish();

  [[nodiscard]] static bool stderr_is_terminal();

 private:
  void tick(std::size_t done);
  void write(std::size_t done);

  std::string label_;
  std::size_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace streampool::replay
