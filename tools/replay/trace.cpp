// replay: reading a trace (trace.hpp; what it refuses and why: docs/benchmarks.md, "Traces the
// reader refuses").
//
// The input is read in blocks and cut into lines here, so that memory is bounded whatever the
// input: one block, one line of at most max_line bytes, and the trace itself: 24 bytes an event
// (of a line of at least 12 bytes) and a record of about 56 per live block, at most about ten
// times the input, and at most max_phases phases. A source that fails (a gzip stream cut
// short, corrupt data, `gzip -dc` failing) is reported as such before the line it cut is parsed.
#include "trace.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "snapshot/json.hpp"  // utf8_length (header-only)

#ifdef STREAMPOOL_REPLAY_ZLIB
#include <zlib.h>
#else
#include <sys/wait.h>
#endif

namespace streampool::replay {

namespace {

// ---- sources: the bytes of a trace --------------------------------------------------------------

class source {
 public:
  source() = default;
  source(const source&) = delete;
  source& operator=(const source&) = delete;
  virtual ~source() = default;
  /// Up to `n` bytes into `buf`; 0 at the end.
  /// @throws std::runtime_error naming what failed (the caller adds the file and line)
  virtual std::size_t read(char* buf, std::size_t n) = 0;
};

class memory_source final : public source {
 public:
  explicit memory_source(std::string_view text) : text_(text) {}
  std::size_t read(char* buf, std::size_t n) override {
    n = std::min(n, text_.size());
    if (n == 0) return 0;  // (an empty view's data() may be null, which memcpy may not get)
    std::memcpy(buf, text_.data(), n);
    text_.remove_prefix(n);
    return n;
  }

 private:
  std::string_view text_;
};

class file_source final : public source {
 public:
  explicit file_source(const std::string& path) : file_(std::fopen(path.c_str(), "rb")) {
    if (file_ == nullptr)
      throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  }
  ~file_source() override { std::fclose(file_); }
  std::size_t read(char* buf, std::size_t n) override {
    const std::size_t got = std::fread(buf, 1, n, file_);
    if (got == 0 && std::ferror(file_) != 0) throw std::runtime_error("read error");
    return got;
  }

 private:
  std::FILE* file_;
};

#ifdef STREAMPOOL_REPLAY_ZLIB
class gzip_source final : public source {
 public:
  explicit gzip_source(const std::string& path) : gz_(gzopen(path.c_str(), "rb")) {
    if (gz_ == nullptr)
      throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  }
  ~gzip_source() override { gzclose(gz_); }
  std::size_t read(char* buf, std::size_t n) override {
    const int got = gzread(gz_, buf, static_cast<unsigned>(std::min<std::size_t>(n, 1U << 30)));
    int err = Z_OK;
    const char* message = gzerror(gz_, &err);
    // zlib hands out what it decoded before it saw the end of its input, and says Z_BUF_ERROR
    // ("unexpected end of file") on this call or the next: a file cut short. Its cut line is never
    // parsed, since it has no newline until the next read, which throws.
    if (got > 0) return static_cast<std::size_t>(got);
    if (err == Z_BUF_ERROR) {
      throw std::runtime_error("gzip stream ends early (the file is truncated) after " +
                               std::to_string(gzoffset(gz_)) + " compressed bytes");
    }
    if (got < 0 || (err != Z_OK && err != Z_STREAM_END))
      throw std::runtime_error(std::string("gzip data is corrupt: ") + message);
    return 0;
  }

 private:
  gzFile gz_;
};
#else
/// `gzip -dc`: its exit status is known only at the end, so a stream it could not finish is
/// reported then, before the last (cut) line is parsed.
class gzip_source final : public source {
 public:
  explicit gzip_source(const std::string& path) {
    std::string quoted = "'";
    for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    pipe_ = popen(("gzip -dc " + quoted).c_str(), "r");
    if (pipe_ == nullptr) throw std::runtime_error("cannot run gzip -dc on " + path);
  }
  ~gzip_source() override {
    if (pipe_ != nullptr) pclose(pipe_);
  }
  std::size_t read(char* buf, std::size_t n) override {
    if (pipe_ == nullptr) return 0;
    const std::size_t got = std::fread(buf, 1, n, pipe_);
    if (got != 0) return got;
    const int status = pclose(pipe_);
    pipe_ = nullptr;
    if (status != 0) {
      throw std::runtime_error("gzip stream ends early or is corrupt (gzip -dc " +
                               (WIFEXITED(status)
                                    ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                    : std::string("failed")) +
                               ")");
    }
    return 0;
  }

 private:
  std::FILE* pipe_ = nullptr;
};
#endif

// ---- lines --------------------------------------------------------------------------------------

/// The longest line read: a trace's lines are tens of bytes, its header sentences hundreds.
constexpr std::size_t max_line = std::size_t{64} << 10;

/// Cuts a source into lines (without their '\n'), none longer than max_line.
class line_reader {
 public:
  explicit line_reader(source& in) : in_(in), block_(std::make_unique<char[]>(block_size)) {}

  /// The next line into `line`; false at the end.
  /// @throws std::runtime_error for a NUL byte, a line longer than max_line or a failing source
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (at_ == end_) {
        at_ = 0;
        end_ = in_.read(block_.get(), block_size);
        if (end_ == 0) return !line.empty();  // a last line without '\n' counts
      }
      const char* from = block_.get() + at_;
      const auto* nl = static_cast<const char*>(std::memchr(from, '\n', end_ - at_));
      const std::size_t n = nl != nullptr ? static_cast<std::size_t>(nl - from) : end_ - at_;
      // A NUL is refused as it arrives: /dev/zero, or a file of NULs, ends at its first byte.
      if (const void* nul = std::memchr(from, '\0', n); nul != nullptr) {
        throw std::runtime_error(
            "a NUL byte at column " +
            std::to_string(line.size() +
                           static_cast<std::size_t>(static_cast<const char*>(nul) - from) + 1) +
            " (a trace is text)");
      }
      if (line.size() + n > max_line)
        throw std::runtime_error("line longer than " + std::to_string(max_line) + " bytes");
      line.append(from, n);
      at_ += n;
      if (nl != nullptr) {
        ++at_;
        return true;
      }
    }
  }

 private:
  static constexpr std::size_t block_size = std::size_t{64} << 10;
  source& in_;
  std::unique_ptr<char[]> block_;
  std::size_t at_ = 0, end_ = 0;
};

// ---- one line -----------------------------------------------------------------------------------

/// Where a byte or a value is wrong: "<file>:<line>: " is added by the caller.
[[noreturn]] void refuse(const std::string& why) { throw std::runtime_error(why); }

/// A field as errors quote it: at most 40 bytes (a line may be 64 KiB).
std::string quoted(std::string_view s) {
  return "'" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "...'" : "'");
}

/// A trace is UTF-8 text: no control character but tab (line_reader refused NUL already), no
/// byte that is not UTF-8 (phase names reach the --html page).
void check_text(std::string_view line) {
  for (std::size_t i = 0; i < line.size();) {
    const auto c = static_cast<unsigned char>(line[i]);
    const std::string column = "column " + std::to_string(i + 1);
    if (c == '\r') refuse("a carriage return at " + column + " (lines end in \\n alone)");
    if ((c < 0x20 && c != '\t') || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      refuse(std::string("a control character (") + hex + ") at " + column);
    }
    const std::size_t n = detail::json::utf8_length(line, i);
    if (n == 0) refuse("a byte that is not UTF-8 at " + column + " (a trace is UTF-8 text)");
    i += n;
  }
}

/// A decimal number from 0 to `max`, digits only: a sign, a fraction or an exponent is refused,
/// as is a value that does not fit (no wrapping, no truncation).
std::uint64_t number(std::string_view field, const char* name, std::uint64_t max) {
  const auto bad = [&] {
    refuse("field " + std::string(name) + ": " + quoted(field) + " is not a number from 0 to " +
           std::to_string(max));
  };
  std::uint64_t v = 0;
  for (const char ch : field) {
    if (ch < '0' || ch > '9') bad();
    const auto digit = static_cast<std::uint64_t>(ch - '0');
    if (v > (max - digit) / 10) bad();
    v = v * 10 + digit;
  }
  return v;
}

enum class verb : std::uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free
};

constexpr std::array<std::pair<std::string_view, verb>, 5> verbs{{
    {"alloc", verb::alloc},
    {"free_requested", verb::free_requested},
    {"free_completed", verb::free_completed},
    {"segment_alloc", verb::segment_alloc},
    {"segment_free", verb::segment_free},
}};

/// Bytes live at once stay below 2^63, so that every sum and rounding the replay makes is exact.
constexpr std::uint64_t max_live = std::uint64_t{1} << 63;

/// Phase markers kept: far more than any recording has (one a training step), few enough that a
/// file of "#a" lines cannot cost 27 times its size.
constexpr std::size_t max_phases = std::size_t{1} << 20;

/// What a block or segment was allocated as, for its frees to be checked against.
struct allocation {
  std::uint64_t size;
  std::uint32_t stream;
  bool free_requested;
  std::size_t line;
};

class trace_builder {
 public:
  void line(std::string_view text) {
    ++t_.lines;
    check_text(text);
    if (!text.empty() && text[0] == '#') {
      comment(text);
      return;
    }
    std::array<std::string_view, 4> field;
    std::size_t fields = 0;
    for (std::size_t i = text.find_first_not_of(" \t"); i != std::string_view::npos;
         i = text.find_first_not_of(" \t", i)) {
      const std::size_t end = std::min(text.find_first_of(" \t", i), text.size());
      if (fields < field.size()) field[fields] = text.substr(i, end - i);
      ++fields;
      i = end;
    }
    if (fields == 0) return;  // a blank line
    if (fields != field.size()) {
      refuse(std::to_string(fields) + (fields == 1 ? " field" : " fields") +
             ", expected 4: <action> <id> <size-bytes> <stream>");
    }
    const auto* v = std::find_if(verbs.begin(), verbs.end(),
                                 [&](const auto& known) { return known.first == field[0]; });
    if (v == verbs.end()) {
      refuse("unknown action " + quoted(field[0]) +
             " (alloc, free_requested, free_completed, segment_alloc, segment_free)");
    }
    constexpr std::uint64_t max_u32 = 0xFFFFFFFFU;
    const auto id = static_cast<std::uint32_t>(number(field[1], "id", max_u32));
    const std::uint64_t size = number(field[2], "size", ~std::uint64_t{0});
    const auto stream = static_cast<std::uint32_t>(number(field[3], "stream", max_u32));
    event(v->second, id, size, stream);
  }

  trace take() { return std::move(t_); }

 private:
  void comment(std::string_view text) {
    // Phase markers ('# model_to_cuda', '# step 2 begin') are the short comment lines; the
    // header's lines are sentences.
    std::string name(text.substr(std::min(text.size(), text.find_first_not_of("# "))));
    if (name.rfind("step ", 0) == 0 || (!name.empty() && name.find(' ') == std::string::npos &&
                                        name.find('=') == std::string::npos)) {
      if (name.size() > 6 && name.compare(name.size() - 6, 6, " begin") == 0)
        name.resize(name.size() - 6);
      if (t_.phases.size() == max_phases) {
        refuse("more than " + std::to_string(max_phases) +
               " phase markers (a phase costs 40 bytes; a marker line can be 3)");
      }
      t_.phases.push_back({t_.events.size(), std::move(name)});
    }
  }

  void event(verb what, std::uint32_t id, std::uint64_t size, std::uint32_t stream) {
    const bool segment = what == verb::segment_alloc || what == verb::segment_free;
    std::unordered_map<std::uint32_t, allocation>& live = segment ? segments_ : blocks_;
    const char* noun = segment ? "segment" : "id";
    if (what == verb::alloc || what == verb::segment_alloc) {
      auto [it, fresh] = live.try_emplace(id, allocation{size, stream, false, t_.lines});
      if (!fresh) {
        refuse(std::string(noun) + " " + std::to_string(id) +
               " is already live (allocated at line " + std::to_string(it->second.line) + ")");
      }
      if (!segment) {
        if (size >= max_live - live_bytes_) {
          refuse("the live blocks' bytes reach 2^63 with this one (size " + std::to_string(size) +
                 ")");
        }
        live_bytes_ += size;
        t_.events.push_back({action::alloc, id, stream, size});
      } else {
        ++t_.ignored;
      }
      return;
    }
    auto it = live.find(id);
    if (it == live.end())
      refuse(std::string(noun) + " " + std::to_string(id) + " is freed but not live");
    const allocation& a = it->second;
    if (size != a.size || stream != a.stream) {
      refuse("a free of " + std::string(noun) + " " + std::to_string(id) + " with size " +
             std::to_string(size) + " on stream " + std::to_string(stream) +
             ", but it was allocated at line " + std::to_string(a.line) + " with size " +
             std::to_string(a.size) + " on stream " + std::to_string(a.stream));
    }
    if (what == verb::free_requested) {
      if (a.free_requested) refuse("free_requested twice for id " + std::to_string(id));
      it->second.free_requested = true;
      ++t_.ignored;
      return;
    }
    live.erase(it);
    if (what == verb::segment_free) {
      ++t_.ignored;
      return;
    }
    live_bytes_ -= size;
    t_.events.push_back({action::free, id, stream, size});
  }

  trace t_;
  std::unordered_map<std::uint32_t, allocation> blocks_, segments_;
  std::uint64_t live_bytes_ = 0;
};

trace parse(source& in, const std::string& name) {
  line_reader lines(in);
  trace_builder builder;
  std::string line;
  std::size_t number = 1;
  try {
    for (; lines.next(line); ++number) builder.line(line);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(name + ":" + std::to_string(number) + ": " + e.what());
  }
  return builder.take();
}

}  // namespace

trace read_trace(const std::string& path) {
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::unique_ptr<source> in;
  if (gz)
    in = std::make_unique<gzip_source>(path);
  else
    in = std::make_unique<file_source>(path);
  return parse(*in, path);
}

trace parse_trace(std::string_view text, const std::string& name) {
  memory_source in(text);
  return parse(in, name);
}

}  // namespace streampool::replay
