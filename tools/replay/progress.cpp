// replay: the progress line (progress.hpp).
#include "progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "numbers.hpp"

namespace streampool::replay {

namespace {

/// At most this often: a terminal repainted faster is only flicker.
constexpr auto interval = std::chrono::milliseconds(100);

}  // namespace

bool progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

progress::progress(std::string label, std::size_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {
  if (enabled_) write(0);
}

progress::~progress() {
  if (enabled_) std::fputs("\r\033[K", stderr);
}

void progress::tick(std::size_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < interval) return;
  last_ = now;
  write(done);
}

void progress::write(std::size_t done) {
  std::string line =
      "\rreplay: " + label_ + ": " + with_commas(done) + " / " + with_commas(total_) + " events";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (done > 0 && seconds > 0) {
    const double rate = static_cast<double>(done) / seconds;
    char buf[48];
    if (rate >= 1e6) {
      std::snprintf(buf, sizeof buf, ", %.1f M events/s", rate / 1e6);
    } else if (rate >= 1e3) {
      std::snprintf(buf, sizeof buf, ", %.1f k events/s", rate / 1e3);
    } else {
      std::snprintf(buf, sizeof buf, ", %.0f events/s", rate);
    }
    line += buf;
  }
  line += "\033[K";  // erase what a longer earlier line left to the right
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void progress::finish() {
  if (!enabled_) return;
  write(total_);
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  enabled_ = false;
}

}  // namespace streampool::replay
