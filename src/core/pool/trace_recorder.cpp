// streampool: the allocation log (trace_recorder.hpp).
#include "core/pool/trace_recorder.hpp"

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
  // Fails only for what is not a regular file (a pipe), which has nothing to empty. Kept in a
  // variable: a (void) cast does not quiet glibc's warn_unused_result under _FORTIFY_SOURCE,
  // which some compilers define by default (a warning that fails a build with -Werror).
  [[maybe_unused]] const int truncated = ::ftruncate(::fileno(f), 0);
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

namespace {

// The length of the well-formed UTF-8 sequence that `s` starts with (RFC 3629: no overlong form,
// no surrogate, nothing past U+10FFFF), or 0.
std::size_t utf8_sequence_length(std::string_view s) noexcept {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  return n;
}

}  // namespace

void trace_recorder::phase(std::string_view name) noexcept {
  // Allocates nothing, so that nothing can throw: the plug-in's sp_torch_trace_phase returns void.
  std::lock_guard lock(mu_);
  if (out_ == nullptr) return;
  std::fputs("# ", out_);
  // The trace reader takes UTF-8 text with no control character but tab (docs/benchmarks.md):
  // a control character becomes a space, a byte that starts no valid UTF-8 sequence a '?'.
  for (std::size_t i = 0; i < name.size();) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x80) {
      std::fputc(c < 0x20 && c != '\t' ? ' ' : (c == 0x7F ? ' ' : c), out_);
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence_length(name.substr(i));
    if (n == 0) {
      std::fputc('?', out_);
      ++i;
      continue;
    }
    std::fwrite(name.data() + i, 1, n, out_);
    i += n;
  }
  std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace streampool::detail
