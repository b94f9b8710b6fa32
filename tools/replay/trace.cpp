// replay: reading a trace (trace.hpp).
#include "trace.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#ifdef STREAMPOOL_REPLAY_ZLIB
#include <zlib.h>
#endif

namespace streampool::replay {

namespace {

class line_reader {
 public:
  explicit line_reader(const std::string& path) {
    const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    if (!gz) {
      file_ = std::fopen(path.c_str(), "r");
      return;
    }
#ifdef STREAMPOOL_REPLAY_ZLIB
    gz_ = gzopen(path.c_str(), "rb");
#else
    std::string quoted = "'";
    for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    pipe_ = popen(("gzip -dc " + quoted).c_str(), "r");
#endif
  }
  line_reader(const line_reader&) = delete;
  line_reader& operator=(const line_reader&) = delete;
  ~line_reader() { close(); }

  [[nodiscard]] bool ok() const { return file_ != nullptr || pipe_ != nullptr || gz_ != nullptr; }

  /// Reads one line into buf (without the newline). False at the end.
  bool next(std::string& buf) {
    buf.clear();
    char chunk[4096];
    for (;;) {
      const char* got = nullptr;
#ifdef STREAMPOOL_REPLAY_ZLIB
      if (gz_ != nullptr) got = gzgets(static_cast<gzFile>(gz_), chunk, sizeof chunk);
#endif
      if (file_ != nullptr) got = std::fgets(chunk, sizeof chunk, file_);
      if (pipe_ != nullptr) got = std::fgets(chunk, sizeof chunk, pipe_);
      if (got == nullptr) return !buf.empty();
      buf += chunk;
      if (!buf.empty() && buf.back() == '\n') {
        buf.pop_back();
        return true;
      }
    }
  }

  /// Closes the source; false when it reported an error (a truncated gzip stream, say).
  bool close() {
    bool good = true;
    if (file_ != nullptr) {
      good = std::ferror(file_) == 0;
      std::fclose(file_);
      file_ = nullptr;
    }
    if (pipe_ != nullptr) {
      good = pclose(pipe_) == 0;
      pipe_ = nullptr;
    }
#ifdef STREAMPOOL_REPLAY_ZLIB
    if (gz_ != nullptr) {
      int err = Z_OK;
      gzerror(static_cast<gzFile>(gz_), &err);
      good = err == Z_OK || err == Z_STREAM_END;
      gzclose(static_cast<gzFile>(gz_));
      gz_ = nullptr;
    }
#endif
    return good;
  }

 private:
  std::FILE* file_ = nullptr;
  std::FILE* pipe_ = nullptr;
  void* gz_ = nullptr;
};

}  // namespace

namespace {
template <class NextLine>
trace parse_lines(const std::string& path, NextLine&& next) {
  trace t;
  std::string line;
  while (next(line)) {
    ++t.lines;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // Phase markers ('# model_to_cuda', '# step 2 begin') are the short comment lines; the
      // header's lines are sentences.
      std::string name = line.substr(std::min(line.size(), line.find_first_not_of("# ")));
      if (name.rfind("step ", 0) == 0 || (!name.empty() && name.find(' ') == std::string::npos &&
                                          name.find('=') == std::string::npos)) {
        if (name.size() > 6 && name.compare(name.size() - 6, 6, " begin") == 0)
          name.resize(name.size() - 6);
        t.phases.push_back({t.events.size(), name});
      }
      continue;
    }
    char name[32];
    unsigned long long id = 0, size = 0, stream = 0;
    if (std::sscanf(line.c_str(), "%31s %llu %llu %llu", name, &id, &size, &stream) != 4) {
      throw std::runtime_error(path + ":" + std::to_string(t.lines) + ": cannot parse '" + line +
                               "'");
    }
    if (std::strcmp(name, "alloc") == 0) {
      t.events.push_back({action::alloc, static_cast<std::uint32_t>(id),
                          static_cast<std::uint32_t>(stream), size});
    } else if (std::strcmp(name, "free_completed") == 0) {
      t.events.push_back(
          {action::free, static_cast<std::uint32_t>(id), static_cast<std::uint32_t>(stream), size});
    } else if (std::strcmp(name, "free_requested") == 0 ||
               std::strcmp(name, "segment_alloc") == 0 || std::strcmp(name, "segment_free") == 0) {
      ++t.ignored;
    } else {
      throw std::runtime_error(path + ":" + std::to_string(t.lines) + ": unknown action '" + name +
                               "'");
    }
  }
  return t;
}
}  // namespace

trace read_trace(const std::string& path) {
  line_reader in(path);
  if (!in.ok()) throw std::runtime_error("cannot open " + path);
  trace t = parse_lines(path, [&](std::string& line) { return in.next(line); });
  if (!in.close()) throw std::runtime_error("error while reading " + path);
  return t;
}

trace parse_trace(std::string_view text, const std::string& name) {
  return parse_lines(name, [&](std::string& line) {
    if (text.empty()) return false;
    const std::size_t end = std::min(text.find('\n'), text.size());
    line.assign(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    return true;
  });
}

}  // namespace streampool::replay
