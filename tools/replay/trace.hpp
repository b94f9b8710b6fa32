// replay: an allocation trace in memory, and reading one from a file (bench/traces/README.md).
//
// Only what a replay acts on is kept: `alloc` and `free_completed` become events; segment_alloc,
// segment_free and free_requested are counted and dropped (the allocator under test makes its own
// upstream requests). Short '#' comment lines ('# model_to_cuda', '# step 2 begin') mark phases;
// the header's sentences do not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace streampool::replay {

enum class action : std::uint8_t { alloc, free };

struct event {
  action what;
  std::uint32_t id;
  std::uint32_t stream;
  std::uint64_t size;
};

struct phase {
  std::size_t first_event;  // index of the phase's first event
  std::string name;
};

struct trace {
  std::vector<event> events;
  std::vector<phase> phases;  // from '# model_to_cuda', '# step k begin' lines, in order
  std::size_t lines = 0;
  std::size_t ignored = 0;  // segment_* and free_requested
};
/// Reads a trace, gzip-compressed when the name ends in .gz (through zlib where the build found
/// it, else `gzip -dc`). Strict: what it refuses is listed in docs/benchmarks.md ("Traces the
/// reader refuses"); every free it keeps matches a live allocation's id, size and stream. Memory:
/// one 64 KiB block and one line of at most 64 KiB besides the trace, whatever the input.
/// @throws std::runtime_error "FILE:LINE: what" naming the field and value, or the gzip stream
///         that ends early
trace read_trace(const std::string& path);
/// The same from memory; `name` stands for the file in errors (the test's and fuzzer's entry).
trace parse_trace(std::string_view text, const std::string& name);

}  // namespace streampool::replay
