// tools/replay's trace reader (tools/replay/trace.hpp; the format: bench/traces/README.md, what it
// refuses: docs/benchmarks.md, "Traces the reader refuses"). Issue 45 found it accepting malformed
// traces and exiting 0: negative numbers wrapped, ids of 2^32 and more truncated (a free could
// release another block), a free's size and stream unchecked, extra fields ignored, a NUL byte
// dropping the next line, a file of NULs read as "0 events", /dev/zero read forever, a truncated
// gzip reported as a parse error of the cut line, and a 200 MB comment line costing 600 MB. Each
// is refused here with its line, field and value.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "trace.hpp"

namespace rp = streampool::replay;

namespace {

/// The reader's error for `text`, or "(no error)".
std::string refusal(const std::string& text) {
  try {
    (void)rp::parse_trace(text, "t.txt");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string refusal_of_file(const std::string& path) {
  try {
    (void)rp::read_trace(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + name; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

#define EXPECT_REFUSED(text, ...)                                                             \
  do {                                                                                        \
    const std::string why_ = refusal(text);                                                   \
    for (const char* part_ : {__VA_ARGS__})                                                   \
      EXPECT_NE(why_.find(part_), std::string::npos) << "'" << part_ << "' not in: " << why_; \
  } while (0)

}  // namespace

TEST(TraceReader, ReadsAWellFormedTrace) {
  const rp::trace t = rp::parse_trace(
      "# a header sentence, not a phase\n"
      "# step 0 begin\n"
      "segment_alloc 0 4194304 0\n"
      "alloc 0 512 0\n"
      "alloc 1 1000\t 1\n"
      "\n"
      "free_requested 0 512 0\n"
      "free_completed 0 512 0\n"
      "# step 1 begin\n"
      "alloc 0 4294967296 4294967295\n"
      "free_completed 1 1000 1\n"
      "segment_free 0 4194304 0",
      "t.txt");
  EXPECT_EQ(t.lines, 12u);
  EXPECT_EQ(t.ignored, 3u);
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.events[3].size, 4294967296u);
  EXPECT_EQ(t.events[3].stream, 4294967295u);
  ASSERT_EQ(t.phases.size(), 2u);
  EXPECT_EQ(t.phases[0].name, "step 0");
  EXPECT_EQ(t.phases[1].first_event, 3u);
}

TEST(TraceReader, ReadsTheBenchTraces) {
  struct expected {
    const char* file;
    std::size_t lines, events, ignored, phases;
  };
  for (const expected& e : {expected{"gpt2-train.txt.gz", 17788, 11910, 5869, 5},
                            expected{"gpt2-train-plugin.txt.gz", 45458, 45441, 0, 15},
                            expected{"resnet50-train-plugin.txt.gz", 26962, 26945, 0, 15},
                            expected{"server-plugin.txt.gz", 71225, 71198, 0, 25}}) {
    const rp::trace t = rp::read_trace(std::string(STREAMPOOL_TRACES_DIR) + "/" + e.file);
    EXPECT_EQ(t.lines, e.lines) << e.file;
    EXPECT_EQ(t.events.size(), e.events) << e.file;
    EXPECT_EQ(t.ignored, e.ignored) << e.file;
    EXPECT_EQ(t.phases.size(), e.phases) << e.file;
  }
}

TEST(TraceReader, RefusesNumbersOutOfRange) {
  // Negative numbers wrapped to huge ones; ids and streams of 2^32 and more were truncated.
  EXPECT_REFUSED("alloc -1 512 0\n", "t.txt:1:", "id", "'-1'");
  EXPECT_REFUSED("alloc 0 -512 0\n", "t.txt:1:", "size", "'-512'");
  EXPECT_REFUSED("alloc 0 512 -1\n", "t.txt:1:", "stream", "'-1'");
  EXPECT_REFUSED("alloc 0 512 0\nalloc 4294967296 512 0\n", "t.txt:2:", "id", "'4294967296'",
                 "4294967295");
  EXPECT_REFUSED("alloc 0 512 4294967296\n", "t.txt:1:", "stream", "'4294967296'");
  EXPECT_REFUSED("alloc 0 18446744073709551616 0\n", "t.txt:1:", "size", "'18446744073709551616'");
  EXPECT_REFUSED("alloc +1 512 0\n", "t.txt:1:", "id", "'+1'");
  EXPECT_REFUSED("alloc 0x10 512 0\n", "t.txt:1:", "id", "'0x10'");
  EXPECT_REFUSED("alloc 1e3 512 0\n", "t.txt:1:", "id", "'1e3'");
  // Live bytes beyond 2^63: the replay's sums would wrap.
  EXPECT_REFUSED("alloc 0 9223372036854775807 0\nalloc 1 9223372036854775807 0\n",
                 "t.txt:2:", "live");
}

TEST(TraceReader, RefusesAFreeThatDoesNotMatchItsAllocation) {
  // A free names its block's size and stream: a different one is a trace that is not what it says.
  EXPECT_REFUSED("alloc 0 512 0\nfree_completed 0 1024 0\n", "t.txt:2:", "size 1024", "512",
                 "line 1");
  EXPECT_REFUSED("alloc 0 512 0\nfree_completed 0 512 1\n", "t.txt:2:", "stream 1", "stream 0",
                 "line 1");
  EXPECT_REFUSED("alloc 0 512 0\nfree_requested 0 512 2\n", "t.txt:2:", "stream 2");
  EXPECT_REFUSED("free_completed 7 512 0\n", "t.txt:1:", "id 7", "not live");
  EXPECT_REFUSED("alloc 3 512 0\nalloc 3 512 0\n", "t.txt:2:", "id 3", "line 1");
  EXPECT_REFUSED("alloc 0 512 0\nfree_requested 0 512 0\nfree_requested 0 512 0\n",
                 "t.txt:3:", "twice");
  EXPECT_REFUSED("segment_alloc 0 2097152 0\nsegment_free 0 4194304 0\n",
                 "t.txt:2:", "size 4194304");
  EXPECT_REFUSED("segment_free 1 2097152 0\n", "t.txt:1:", "segment 1", "not live");
  // Blocks and segments have separate id spaces.
  EXPECT_EQ(refusal("segment_alloc 0 2097152 0\nalloc 0 512 0\nfree_completed 0 512 0\n"
                    "segment_free 0 2097152 0\n"),
            "(no error)");
}

TEST(TraceReader, RefusesExtraOrMissingFields) {
  EXPECT_REFUSED("alloc 0 512 0 9\n", "t.txt:1:", "5 fields", "expected 4");
  EXPECT_REFUSED("alloc 0 512\n", "t.txt:1:", "3 fields", "expected 4");
  EXPECT_REFUSED("alloc\n", "t.txt:1:", "1 field", "expected 4");
  EXPECT_REFUSED("malloc 0 512 0\n", "t.txt:1:", "unknown action", "'malloc'");
}

TEST(TraceReader, RefusesNulBytesAndControlCharacters) {
  // A NUL byte dropped the rest of its line and the next line; a file of NULs was "0 events".
  EXPECT_REFUSED(std::string("alloc 0 512 0\n\0alloc 1 512 0\nfree_completed 1 512 0\n", 52),
                 "t.txt:2:", "NUL");
  EXPECT_REFUSED(std::string("alloc 0 5\0"
                             "12 0\n",
                             15),
                 "t.txt:1:", "NUL", "column 10");
  EXPECT_REFUSED(std::string(4096, '\0'), "t.txt:1:", "NUL");
  EXPECT_REFUSED(std::string("# step 0\0 begin\n", 16), "t.txt:1:", "NUL");
  EXPECT_REFUSED("alloc 0 512 0\r\n", "t.txt:1:", "carriage return");
  EXPECT_REFUSED("alloc 0 512\x1b 0\n", "t.txt:1:", "control character");
  // Invalid UTF-8 (a phase name reaches the --html page).
  EXPECT_REFUSED("# step \xff begin\n", "t.txt:1:", "UTF-8");
  EXPECT_REFUSED("# step \xc0\xaf begin\n", "t.txt:1:", "UTF-8");
  EXPECT_EQ(refusal("# step \xc3\xa9t\xc3\xa9 begin\n"), "(no error)");
}

TEST(TraceReader, DevZeroEnds) {
  // /dev/zero spun forever; its first byte is a NUL.
  const std::string why = refusal_of_file("/dev/zero");
  EXPECT_NE(why.find("/dev/zero:1:"), std::string::npos) << why;
  EXPECT_NE(why.find("NUL"), std::string::npos) << why;
}

TEST(TraceReader, BoundsTheLineLength) {
  // A 200 MB comment line cost 600 MB: a line longer than the bound is refused when the bound is
  // reached, so the reader holds at most that much of one line.
  const std::string long_comment = "# " + std::string(std::size_t{1} << 20, 'x') + "\n";
  EXPECT_REFUSED("alloc 0 512 0\n" + long_comment, "t.txt:2:", "longer than 65536 bytes");
  const std::string path = temp_path("long-line.txt");
  write_file(path, "alloc 0 512 0\n" + long_comment);
  const std::string why = refusal_of_file(path);
  EXPECT_NE(why.find(":2: line longer than 65536 bytes"), std::string::npos) << why;
  std::remove(path.c_str());
  EXPECT_EQ(refusal("# " + std::string(65000, 'x') + "\n"), "(no error)");
}

TEST(TraceReader, NamesATruncatedGzipAsTruncation) {
  // A gzip file cut short was reported as a parse error of its cut line.
  const std::string whole = slurp(std::string(STREAMPOOL_TRACES_DIR) + "/gpt2-train.txt.gz");
  ASSERT_GT(whole.size(), 1000u);
  for (const std::size_t keep : {whole.size() / 2, whole.size() - 4, std::size_t{20}}) {
    const std::string path = temp_path("cut.txt.gz");
    write_file(path, whole.substr(0, keep));
    const std::string why = refusal_of_file(path);
    EXPECT_NE(why.find("gzip stream ends early"), std::string::npos)
        << "kept " << keep << " bytes: " << why;
    EXPECT_EQ(why.find("cannot parse"), std::string::npos) << why;
    std::remove(path.c_str());
  }
  // Bytes that are not gzip at all, under a .gz name.
  const std::string path = temp_path("not.txt.gz");
  write_file(path, std::string("\x1f\x8b\x08\x00garbage garbage garbage", 27));
  const std::string why = refusal_of_file(path);
  EXPECT_NE(why.find("gzip"), std::string::npos) << why;
  std::remove(path.c_str());
}

TEST(TraceReader, BoundsThePhases) {
  // A phase costs 40 bytes and a marker line can be 3 ("#a\n"): their number is bounded.
  std::string markers;
  for (std::size_t i = 0; i <= (std::size_t{1} << 20); ++i) markers += "#a\n";
  EXPECT_REFUSED(markers, "t.txt:1048577:", "more than 1048576 phase markers");
  markers.resize(markers.size() - 3);
  EXPECT_EQ(refusal(markers), "(no error)");
}
