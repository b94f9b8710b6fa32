// streampool: the allocation log (trace_recorder.hpp).
#include "trace_recorder.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "streampool/error.hpp"
#include "streampool/timeline.hpp"

namespace streampool::detail {
namespace {

// Larger than stdio's default: a training step writes tens of thousands of lines.
constexpr std::size_t file_buffer = std::size_t{1} << 16;

}  // namespace

trace_recorder::~trace_recorder() {
  std::lock_guard lock(mu_);
  std::string ignored;
  (void)close_locked(ignored);
}

void trace_recorder::start(const std::string& path, const std::string& header,
                           std::optional<std::uint64_t> zero) {
  // Open before touching the recording in progress: a bad path leaves it going. Opened without
  // truncating, and emptied only once the recording it replaces is closed: that one may be writing
  // the same file, and its last buffer would land at its old offset in the emptied file.
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    const int err = errno;
    STREAMPOOL_FAIL(format("start_recording: cannot open '%s' for writing: %s", path.c_str(),
                           std::strerror(err)));
  }
  (void)std::setvbuf(f, nullptr, _IOFBF, file_buffer);
  std::lock_guard lock(mu_);
  // The recording it replaces is closed; its write errors are not reported (this call succeeded).
  std::string ignored;
  (void)close_locked(ignored);
  (void)::ftruncate(::fileno(f), 0);  // fails only for what is not a regular file (a pipe)
  out_ = f;
  path_ = path;
  if (zero) streams_.emplace(*zero, next_stream_++);
  std::fputs(header.c_str(), out_);
  on_.store(true, std::memory_order_relaxed);
}

std::uint64_t trace_recorder::stop() {
  std::lock_guard lock(mu_);
  if (out_ == nullptr) return 0;
  const std::uint64_t events = events_;
  const std::uint64_t missed = missed_;
  const std::string path = path_;
  std::string why;
  if (!close_locked(why)) {
    STREAMPOOL_FAIL(format("stop_recording: writing '%s' failed after %llu events: %s",
                           path.c_str(), static_cast<unsigned long long>(events), why.c_str()));
  }
  if (missed != 0) {
    STREAMPOOL_FAIL(
        format("stop_recording: '%s' lacks %llu of its events (host memory ran out "
               "while recording); the %llu written balance",
               path.c_str(), static_cast<unsigned long long>(missed),
               static_cast<unsigned long long>(events)));
  }
  return events;
}

bool trace_recorder::close_locked(std::string& why) noexcept {
  if (out_ == nullptr) return true;
  on_.store(false, std::memory_order_relaxed);
  const bool write_failed = std::ferror(out_) != 0;
  errno = 0;
  const bool close_failed = std::fclose(out_) != 0;
  const int err = errno;
  out_ = nullptr;
  bool good = true;
  if (write_failed || close_failed) {
    good = false;
    try {
      why = err != 0 ? std::strerror(err) : "an I/O error";
    } catch (...) {  // no memory for the reason: the failure is still reported
    }
  }
  path_.clear();
  events_ = 0;
  missed_ = 0;
  live_.clear();
  streams_.clear();
  next_stream_ = 0;
  free_ids_ = {};
  next_id_ = 0;
  return good;
}

std::uint32_t trace_recorder::stream_number(std::uint64_t timeline_id) {
  auto [it, inserted] = streams_.try_emplace(timeline_id, next_stream_);
  if (inserted) ++next_stream_;
  return it->second;
}

// allocated() and freed() never throw: the pool has handed the block out (or is taking it back)
// already. Each step that may throw (a map or heap growing: host memory ran out) comes before
// anything changes, so a failure leaves the recording as it was, without that line; the block is
// then unknown to it, its free skipped, and the file still balances. stop() reports that lines
// are missing.

void trace_recorder::allocated(const void* p, std::size_t size, const timeline& line) noexcept {
  std::lock_guard lock(mu_);
  if (out_ == nullptr) return;  // stopped since the caller looked
  try {
    const std::uint32_t s = stream_number(line.id());
    const std::uint32_t id = free_ids_.empty() ? next_id_ : free_ids_.top();
    live_.insert_or_assign(p, live_block{id, s, size});
    if (free_ids_.empty()) {
      ++next_id_;
    } else {
      free_ids_.pop();
    }
    ++events_;
    std::fprintf(out_, "alloc %u %zu %u\n", id, size, s);
  } catch (...) {
    ++missed_;
  }
}

void trace_recorder::freed(const void* p) noexcept {
  std::lock_guard lock(mu_);
  if (out_ == nullptr) return;
  auto it = live_.find(p);
  // Not written: allocated before this recording began (or not a live block: the pool reports
  // that itself).
  if (it == live_.end()) return;
  const live_block b = it->second;
  try {
    free_ids_.push(b.id);
  } catch (...) {
    ++missed_;  // the block stays live in the file: the replay frees it at the end
    return;
  }
  live_.erase(it);
  ++events_;
  std::fprintf(out_, "free_completed %u %zu %u\n", b.id, b.size, b.stream);
}

void trace_recorder::phase(std::string_view name) noexcept {
  // Allocates nothing, so that nothing can throw: the plug-in's sp_torch_trace_phase returns void.
  std::lock_guard lock(mu_);
  if (out_ == nullptr) return;
  std::fputs("# ", out_);
  for (const char c : name) std::fputc(c == '\n' || c == '\r' ? ' ' : c, out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace streampool::detail
