// streampool: the allocation log. A pool's recorder writes every allocation and free the pool
// serves, while it is on, in the trace format that tools/replay reads (bench/traces/README.md),
// so that a live program's requests, with its own sizes and streams, can be replayed on the host
// to study the pool's policy (pool::start_recording; docs/c-api.md, docs/python.md).
//
// Glossary
//   recording    one file, from start() to stop() (or to the pool's end). A start() while one is
//                in progress closes it and begins a new one.
//   event        one `alloc <id> <size> <stream>` or `free_completed <id> <size> <stream>` line.
//                Sizes are the requested bytes (not the block's rounded size). A streampool free
//                is stream-ordered: the request is the completion as a replay sees it, so the free
//                is written once, as free_completed; free_requested is never written (the replay
//                ignores it, and writing both would only double the frees in the file).
//   block id     the smallest integer not naming a live block of this recording, recycled at its
//                free, like the traces taken from PyTorch's own allocator.
//   stream       numbered by timeline id, in order of first appearance: 0, 1, 2, ... When the
//                recording names a stream as its default stream (start()'s `zero`), that one is 0
//                and the others count from 1. A free line carries the stream that allocated the
//                block, whichever stream freed it or whether any did (deallocate(p, uses): arrays,
//                finalisers, the C layer's frees after other streams used the block): one rule,
//                the block's stream, as in PyTorch's traces; the replay frees there too.
//   phase        a `# <name>` line (pool::record_phase): tools/replay counts per phase the lines
//                `# step k begin` and one-word names.
//
// Balance: a block allocated before start() and freed while recording is not written at all (its
// free is skipped), so every free in a file follows its alloc; blocks still live at stop() have
// no free, which the replay tolerates (it frees them at the end).
//
// Cost. Off, the pool's allocate and deallocate pay one relaxed load of `on_` and a branch
// predicted not taken; `on_` sits on its own cache line, written only by start() and stop(). On,
// every event takes `mu_`: a tool for study, not for production runs.
//
// Lifetime and races. The recorder is a member of its pool's state, so it lives as long as any
// pool call can reach it: no thread can hold a pointer to a recorder that is gone. `on_` is only a
// hint; `out_`, read under `mu_`, decides. A thread that read `on_` just before a stop() finds the
// file closed and writes nothing; one that read it before a stop() and a new start() writes into
// the new recording, which is right for an allocation (the block is live) and skipped for a free
// (the new recording never saw the block). The pool writes an allocation after the block was
// handed out and a free before the block goes back, so no other thread can receive the same
// address and write its alloc before this free's line.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace streampool {
class timeline;
}

namespace streampool::detail {

class trace_recorder {
 public:
  trace_recorder() = default;
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;
  /// Closes a recording in progress (errors writing it are lost: a destructor cannot report).
  ~trace_recorder();

  /// True while recording. A relaxed load: callers take the slow path below only when it is set.
  [[nodiscard]] bool on() const noexcept { return on_.load(std::memory_order_relaxed); }

  /// Opens `path` (truncated) and starts a recording there: `header` (comment lines, each
  /// starting with '#' and ending in '\n') first. `zero`: the id of the timeline to number 0.
  /// A recording in progress is closed first, once the new file is open.
  /// @throws logic_error naming `path` and the system's reason when it cannot be opened; the
  ///         recording in progress, if any, then goes on untouched
  void start(const std::string& path, const std::string& header, std::optional<std::uint64_t> zero);
  /// Ends the recording; returns the events written (0 when there was none).
  /// @throws logic_error naming the file when writing or closing it failed, or when events are
  ///         missing (host memory ran out while recording); it is closed anyway
  std::uint64_t stop();

  /// The pool handed out p (`size` bytes requested) for first use on `line`. Never throws.
  void allocated(const void* p, std::size_t size, const timeline& line) noexcept;
  /// The pool is about to take p back. Never throws.
  void freed(const void* p) noexcept;
  /// A phase line `# <name>` (line breaks in `name` become spaces); flushes the file, so that a
  /// reader sees everything up to the phase. Nothing when not recording.
  void phase(std::string_view name) noexcept;

 private:
  struct live_block {
    std::uint32_t id;
    std::uint32_t stream;  // the stream that allocated it
    std::size_t size;      // as requested
  };

  /// The stream's number in this recording, numbering it on first appearance. Under mu_.
  std::uint32_t stream_number(std::uint64_t timeline_id);
  /// Closes out_ and forgets the recording's state. Under mu_. Returns false when writing or
  /// closing failed, with errno's text in `why`.
  bool close_locked(std::string& why) noexcept;

  // Read by every allocate and free: alone on its cache line, so that no write elsewhere in the
  // pool (counters, locks) makes the off path miss.
  alignas(64) std::atomic<bool> on_{false};

  alignas(64) std::mutex mu_;  // guards everything below
  std::FILE* out_ = nullptr;   // null when not recording
  std::string path_;
  std::uint64_t events_ = 0;
  std::uint64_t missed_ = 0;  // events not written: host memory ran out (allocated(), freed())
  std::unordered_map<const void*, live_block> live_;
  std::unordered_map<std::uint64_t, std::uint32_t> streams_;  // timeline id -> number
  std::uint32_t next_stream_ = 0;
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> free_ids_;
  std::uint32_t next_id_ = 0;
};

}  // namespace streampool::detail
