// libFuzzer target over the snapshot reader, snapshot_from_json (src/snapshot/snapshot_json.cpp;
// docs/memory-picture.md, "Snapshots"; docs/testing.md, "Fuzzing"; issue 45).
//
// The first input byte picks the text: even, the rest of the input is the document itself; odd,
// the rest is a list of edits (replace, insert or delete a byte, insert a number the schema's
// ranges care about) applied to a real snapshot's JSON, taken once from a host pool with slabs,
// virtual-memory large blocks, free blocks and stream caches, so that the fuzzer reaches the
// schema's members and cross-checks, not only the syntax.
//
// The reader must refuse with logic_error "snapshot JSON: ..." (valid UTF-8, so that any caller
// can print it), or read a snapshot. What it reads must be a fixed point of writing and reading
// (to_json of it reads back to the same text), must summarize, and must draw: render_html's page
// is valid UTF-8 with no script. Any other outcome aborts, so libFuzzer keeps the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "snapshot/json.hpp"  // utf8_length
#include "streampool/report.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

[[noreturn]] void fail(const std::string& what, std::string_view text) {
  std::fprintf(stderr, "snapshot_fuzzer: %s\ninput (%zu bytes): %.*s\n", what.c_str(), text.size(),
               static_cast<int>(std::min<std::size_t>(text.size(), 4000)), text.data());
  std::abort();
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = sp::detail::json::utf8_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

/// A real snapshot's JSON: slabs of two classes with live and free runs, a stream's cache, large
/// blocks on virtual memory (live, free and unmapped), two streams.
std::string base_snapshot() {
  sp::device d(sp::make_host_backend({.granularity = 64 << 10, .virtual_memory = true}));
  sp::pool p(d);
  sp::stream a(d), b(d);
  std::vector<void*> held;
  for (const std::size_t n : {256U, 256U, 4000U, 300U, 5U << 20, 3U << 20})
    held.push_back(p.allocate(a, n));
  held.push_back(p.allocate(b, 700));
  p.deallocate(a, held[1]);
  p.deallocate(a, held[5]);
  const std::string text = sp::to_json(p.snapshot());
  for (std::size_t i = 0; i < held.size(); ++i)
    if (i != 1 && i != 5) p.deallocate(i + 1 == held.size() ? b : a, held[i]);
  return text;
}

std::string edited(const std::uint8_t* data, std::size_t size) {
  static const std::string base = base_snapshot();
  std::string text = base;
  static constexpr const char* numbers[] = {"0",
                                            "1",
                                            "-1",
                                            "1.5",
                                            "1e3",
                                            "4096",
                                            "18446744073709551615",
                                            "18446744073709551616",
                                            "9223372036854775808",
                                            "\"x\"",
                                            "true",
                                            "null"};
  for (std::size_t i = 0; i + 4 <= size; i += 4) {
    const std::size_t at =
        (static_cast<std::size_t>(data[i]) << 8 | data[i + 1]) % (text.size() + 1);
    const std::uint8_t payload = data[i + 3];
    switch (data[i + 2] % 4) {
      case 0:
        if (at < text.size()) text[at] = static_cast<char>(payload);
        break;
      case 1:
        text.insert(at, 1, static_cast<char>(payload));
        break;
      case 2:
        if (at < text.size()) text.erase(at, 1 + payload % 8);
        break;
      default:
        text.insert(at, numbers[payload % std::size(numbers)]);
        break;
    }
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text = data[0] % 2 == 0
                               ? std::string(reinterpret_cast<const char*>(data) + 1, size - 1)
                               : edited(data + 1, size - 1);
  sp::pool_snapshot s;
  try {
    s = sp::snapshot_from_json(text);
  } catch (const sp::logic_error& e) {
    const std::string_view why = e.what();
    if (why.rfind("snapshot JSON: ", 0) != 0)
      fail("an error not naming the snapshot: " + std::string(why), text);
    if (!valid_utf8(why)) fail("an error that is not UTF-8", text);
    return 0;
  }
  const std::string again = sp::to_json(s);
  try {
    if (sp::to_json(sp::snapshot_from_json(again)) != again)
      fail("to_json(snapshot_from_json(to_json(s))) differs from to_json(s)", text);
  } catch (const sp::logic_error& e) {
    fail(std::string("what it read does not read back: ") + e.what(), text);
  }
  (void)sp::summarize(s);
  sp::report_page page;
  page.title = "fuzz";
  page.snapshot = std::move(s);
  const std::string html = sp::render_html(page);
  if (!valid_utf8(html)) fail("a page that is not UTF-8", text);
  if (html.find("<script") != std::string::npos) fail("a page with a script", text);
  return 0;
}
