// libFuzzer target over replay's trace reader (tools/replay/trace.hpp; docs/testing.md,
// "Fuzzing"; issue 45).
//
// The input makes a trace's text (below). The reader must either refuse it with an error that
// starts
// "<name>:<line>: " (never another exception, a crash, a hang or an allocation beyond libFuzzer's
// limit), or read it; what it reads is checked here against a second, plain reading of the same
// text, line by line: every line that is not blank or a comment has exactly four fields, a known
// action and decimal numbers in range, and the events are those lines' alloc and free_completed
// in order; every free matches a live allocation's size and stream (blocks and segments apart);
// the live bytes stay below 2^63; the text is UTF-8 without NUL or control characters but tab;
// no line is longer than the reader's bound; phases point into the events, in order.
//
// The first input byte picks the text: even, the rest of the input is the text itself; odd, the
// rest is read four bytes a line to write a trace of small ids, a few streams and sizes at the
// edges of their ranges, some lines broken on purpose, so that frees that match (or nearly match)
// their allocations are common and the cross-checks are reached.
//
// An input that starts with gzip's magic bytes is also written to a file and read through
// read_trace's gzip path (zlib builds only), which must refuse or read it the same way.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "snapshot/json.hpp"  // utf8_length
#include "trace.hpp"

namespace {

using streampool::replay::action;
using streampool::replay::trace;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "trace_fuzzer: %s\n", what.c_str());
  std::abort();
}

/// "fuzz:<digits>: ..."
void check_refusal(const std::string& message, const std::string& name) {
  std::size_t at = name.size() + 1;
  if (message.compare(0, at, name + ":") != 0) fail("an error without the file's name: " + message);
  const std::size_t digits = at;
  while (at < message.size() && message[at] >= '0' && message[at] <= '9') ++at;
  if (at == digits || message.compare(at, 2, ": ") != 0)
    fail("an error without its line number: " + message);
}

bool number(std::string_view s, std::uint64_t max, std::uint64_t& v) {
  if (s.empty()) return false;
  v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  return true;
}

struct held {
  std::uint64_t size, stream;
};

/// The plain reading: the trace the text must give, or why it must be refused.
void check_read(const trace& t, std::string_view text) {
  std::size_t e = 0, lines = 0, ignored = 0;
  std::unordered_map<std::uint64_t, held> blocks, segments;
  std::uint64_t live = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++lines;
    const std::string where = "line " + std::to_string(lines) + " ";
    if (line.size() > 65536) fail(where + "longer than the bound was read");
    for (std::size_t i = 0; i < line.size();) {
      const auto c = static_cast<unsigned char>(line[i]);
      if ((c < 0x20 && c != '\t') || c == 0x7F) fail(where + "has a control character, read");
      const std::size_t n = streampool::detail::json::utf8_length(line, i);
      if (n == 0) fail(where + "is not UTF-8, read");
      i += n;
    }
    if (!line.empty() && line[0] == '#') continue;
    std::vector<std::string_view> fields;
    for (std::size_t i = line.find_first_not_of(" \t"); i != std::string_view::npos;
         i = line.find_first_not_of(" \t", i)) {
      const std::size_t end = std::min(line.find_first_of(" \t", i), line.size());
      fields.push_back(line.substr(i, end - i));
      i = end;
    }
    if (fields.empty()) continue;
    std::uint64_t id = 0, size = 0, stream = 0;
    if (fields.size() != 4 || !number(fields[1], 0xFFFFFFFFU, id) ||
        !number(fields[2], ~std::uint64_t{0}, size) || !number(fields[3], 0xFFFFFFFFU, stream))
      fail(where + "is malformed, read");
    const std::string_view verb = fields[0];
    const bool segment = verb == "segment_alloc" || verb == "segment_free";
    auto& ids = segment ? segments : blocks;
    if (verb == "alloc" || verb == "segment_alloc") {
      if (!ids.emplace(id, held{size, stream}).second) fail(where + "allocates a live id, read");
      if (segment) {
        ++ignored;
        continue;
      }
      if (size >= (std::uint64_t{1} << 63) - live) fail(where + "reaches 2^63 live bytes, read");
      live += size;
      if (e >= t.events.size() || t.events[e].what != action::alloc || t.events[e].id != id ||
          t.events[e].size != size || t.events[e].stream != stream)
        fail(where + "is not the event read");
      ++e;
      continue;
    }
    if (verb != "free_requested" && verb != "free_completed" && verb != "segment_free")
      fail(where + "has an unknown action, read");
    auto it = ids.find(id);
    if (it == ids.end() || it->second.size != size || it->second.stream != stream)
      fail(where + "frees what is not live as that, read");
    if (verb != "free_completed") {
      ++ignored;
      if (verb == "segment_free") ids.erase(it);
      continue;
    }
    ids.erase(it);
    live -= size;
    if (e >= t.events.size() || t.events[e].what != action::free || t.events[e].id != id ||
        t.events[e].size != size || t.events[e].stream != stream)
      fail(where + "is not the event read");
    ++e;
  }
  if (e != t.events.size()) fail("more events read than the text has");
  if (lines != t.lines || ignored != t.ignored) fail("lines or ignored lines counted wrong");
  std::size_t last = 0;
  for (const auto& p : t.phases) {
    if (p.first_event < last || p.first_event > t.events.size()) fail("phases out of order");
    last = p.first_event;
  }
}

/// The same bytes through the file reader's gzip path.
void check_gzip(std::string_view data) {
#ifdef STREAMPOOL_REPLAY_ZLIB
  static const std::string path =
      "/tmp/streampool-trace-fuzzer-" + std::to_string(::getpid()) + ".txt.gz";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot write " + path);
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  try {
    (void)streampool::replay::read_trace(path);
  } catch (const std::runtime_error& e) {
    check_refusal(e.what(), path);
  }
  std::remove(path.c_str());
#else
  (void)data;
#endif
}

/// Four bytes a line: an action, an id, a size, a stream, and now and then a broken line.
std::string generated(const std::uint8_t* data, std::size_t size) {
  static constexpr const char* actions[] = {
      "alloc",         "free_completed", "alloc",          "free_requested",
      "segment_alloc", "segment_free",   "# step 1 begin", "#"};
  static constexpr const char* sizes[] = {"0",
                                          "1",
                                          "512",
                                          "4096",
                                          "4294967296",
                                          "9223372036854775807",
                                          "18446744073709551615",
                                          "18446744073709551616",
                                          "-1",
                                          "1.5",
                                          "+7",
                                          "x"};
  static constexpr const char* streams[] = {"0", "1", "2", "4294967295", "4294967296"};
  std::string text;
  for (std::size_t i = 0; i + 4 <= size; i += 4) {
    const std::uint8_t* b = data + i;
    text += actions[b[0] % std::size(actions)];
    if (text.back() != '#' && text.back() != 'n') {
      text += ' ' + std::to_string(b[1] % 6) + ' ' + sizes[(b[2] & 0x7F) % std::size(sizes)] +
              (b[3] & 0x10 ? "\t" : " ") + streams[b[3] % std::size(streams)];
    }
    switch (b[3] >> 5) {  // mostly nothing; else one way to break the line
      case 1:
        text += " 9";  // an extra field
        break;
      case 2:
        if (b[2] & 0x80) text += '\r';
        break;
      case 3:
        if (b[2] & 0x80) text += std::string(1, '\0');
        break;
      case 4:
        if (b[2] & 0x80) text += "\xC3";  // half a character
        break;
      default:
        break;
    }
    text += '\n';
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string made = data[0] % 2 == 0
                               ? std::string(reinterpret_cast<const char*>(data) + 1, size - 1)
                               : generated(data + 1, size - 1);
  const std::string_view text = made;
  try {
    check_read(streampool::replay::parse_trace(text, "fuzz"), text);
  } catch (const std::runtime_error& e) {
    check_refusal(e.what(), "fuzz");
  }
  if (text.size() >= 2 && text[0] == '\x1F' && text[1] == '\x8B') check_gzip(text);
  return 0;
}
