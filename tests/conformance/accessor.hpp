// Test helpers shared by the conformance suites and the scenario tests: a backend-neutral
// memory accessor (fill and read back through stream commands, so it works on every backend),
// a "busy" helper that keeps a stream's queue occupied for a while, and statistics checks.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "streampool/streampool.hpp"

namespace streampool::test {

/// Fills `bytes` at p with `value` on s (stream-ordered).
inline void fill_bytes(stream_ref s, void* p, std::size_t bytes, std::uint8_t value) {
  s.submit(command::make(fill_command{p, value, 1, bytes}));
}

/// Copies `bytes` at p to the host on s and waits for it.
inline std::vector<std::uint8_t> read_bytes(stream_ref s, const void* p, std::size_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  s.submit(command::make(copy_command{out.data(), p, bytes, false, true}));
  s.synchronize();
  return out;
}

/// Index of the first byte != value, or -1.
inline long first_mismatch(const std::vector<std::uint8_t>& v, std::uint8_t value) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != value) return static_cast<long>(i);
  return -1;
}

/// How a pointer appears in streampool's messages.
inline std::string ptr_text(const void* p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

/// Keeps `s` busy: a fill of `scratch` (bytes long, on s) that takes a while, especially with
/// delay injection. Returns the token of that work.
inline token make_busy(stream_ref s, void* scratch, std::size_t bytes, std::uint8_t value = 0x5A) {
  // Several commands so that delay injection applies several times.
  for (int i = 0; i < 4; ++i) fill_bytes(s, scratch, bytes, static_cast<std::uint8_t>(value + i));
  return s.now();
}

/// reuse counters summed: every allocation that did not take fresh memory.
inline std::uint64_t reuses(const pool_statistics& st) {
  return st.same_stream_reuses + st.ready_reuses + st.waited_reuses;
}

}  // namespace streampool::test
