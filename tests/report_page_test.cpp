// render_html (streampool/report.hpp) on hand-built input: the page's charts are there with the
// ids the render test (tests/report/check_page_renders.py) looks for, the page fetches nothing and
// runs nothing, text from outside is escaped, downsampling keeps peaks, the block map gathers
// blocks too narrow to draw, and an empty report still renders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "report/chart_buckets.hpp"
#include "report/svg.hpp"
#include "streampool/error.hpp"
#include "streampool/report.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;

sp::snapshot_block block(std::size_t offset, std::size_t size, sp::block_status status,
                         sp::block_place place = sp::block_place::none, std::uint64_t stream = 0,
                         std::vector<sp::snapshot_token> tokens = {}, std::size_t chunks = 1) {
  sp::snapshot_block b;
  b.offset = offset;
  b.size = size;
  b.chunks = chunks;
  b.status = status;
  b.place = place;
  b.stream = stream;
  b.tokens = std::move(tokens);
  return b;
}

/// A pool as pool::snapshot() describes one: a virtual range with live, ready, pending and
/// unmapped blocks; a segment; a slab of 256 B chunks whose 8,192 chunks alternate live and free
/// (far too narrow to draw one by one); a slab of 64 KiB chunks.
sp::pool_snapshot sample_snapshot() {
  sp::pool_snapshot s;
  s.backend = "host";
  s.granularity = 2 * mib;
  s.vm_granularity = 8 * mib;
  s.virtual_memory = true;
  s.taken_unix_ns = 1'700'000'000'000'000'000ULL;
  s.statistics.live_bytes = 40 * mib;
  s.statistics.reserved_bytes = 64 * mib;

  sp::snapshot_range v;
  v.base = 0x7f0000000000;
  v.kind = sp::range_kind::virtual_range;
  v.bytes = 1024 * mib;
  v.reserved_bytes = 48 * mib;
  std::size_t at = 0;
  auto add = [&](sp::snapshot_range& r, sp::snapshot_block b) {
    b.offset = at;
    at += b.size;
    r.blocks.push_back(std::move(b));
  };
  add(v, block(0, 4 * mib, sp::block_status::live, sp::block_place::none, 3));
  add(v, block(0, 512 * kib, sp::block_status::free, sp::block_place::shared_list, 0,
               {{2, 57, false}, {3, 9, true}}));
  add(v, block(0, 3584 * kib, sp::block_status::free, sp::block_place::large_free, 0,
               {{3, 10, true}}));
  add(v, block(0, 32 * mib, sp::block_status::live, sp::block_place::none, 4));
  add(v,
      block(0, 8 * mib, sp::block_status::free, sp::block_place::stream_cache, 4, {{4, 11, true}}));
  add(v, block(0, v.bytes - at, sp::block_status::unmapped));
  s.ranges.push_back(v);

  sp::snapshot_range seg;
  seg.base = 0x7f1000000000;
  seg.kind = sp::range_kind::segment;
  seg.bytes = seg.reserved_bytes = 8 * mib;
  at = 0;
  add(seg, block(0, 6 * mib, sp::block_status::live, sp::block_place::none, 1));
  add(seg, block(0, 2 * mib, sp::block_status::free, sp::block_place::large_free));
  s.ranges.push_back(seg);

  sp::snapshot_range small;
  small.base = 0x7f2000000000;
  small.kind = sp::range_kind::slab;
  small.chunk_bytes = 256;
  small.bytes = small.reserved_bytes = 2 * mib;
  at = 0;
  for (std::size_t i = 0; i < small.bytes / 256; ++i) {
    add(small, block(0, 256, i % 2 == 0 ? sp::block_status::live : sp::block_status::free,
                     i % 2 == 0 ? sp::block_place::none : sp::block_place::shared_list));
  }
  s.ranges.push_back(small);

  sp::snapshot_range big;
  big.base = 0x7f3000000000;
  big.kind = sp::range_kind::slab;
  big.chunk_bytes = 64 * kib;
  big.bytes = big.reserved_bytes = 2 * mib;
  at = 0;
  add(big, block(0, 4 * 64 * kib, sp::block_status::live, sp::block_place::none, 0, {}, 4));
  add(big, block(0, 28 * 64 * kib, sp::block_status::free, sp::block_place::never_used, 0, {}, 28));
  s.ranges.push_back(big);
  return s;
}

sp::memory_series ramp(const std::string& name, std::size_t n, std::size_t slack) {
  sp::memory_series s;
  s.name = name;
  for (std::size_t i = 0; i < n; ++i) {
    s.live.push_back((i % 100) * mib);
    s.reserved.push_back((i % 100) * mib + slack);
  }
  return s;
}

sp::report_page full_page() {
  sp::report_page page;
  page.title = "test page";
  page.subtitle = "hand-built";
  page.series.push_back(ramp("streampool", 1000, 2 * mib));
  page.series.push_back(ramp("exact fit", 1000, 0));
  page.phases = {{0, "warmup"}, {500, "step 1"}};
  page.snapshot = sample_snapshot();
  page.snapshot_caption = "at its peak";
  return page;
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1))
    ++n;
  return n;
}

/// The text of the <svg> element with this id (empty when there is none).
std::string svg_element(const std::string& html, const std::string& id) {
  const std::size_t at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return {};
  const std::size_t open = html.rfind("<svg", at);
  const std::size_t close = html.find("</svg>", at);
  return html.substr(open, close - open);
}

/// The numbers of an attribute's value in an element's text, e.g. cy="12.5".
double attribute(const std::string& element, const std::string& name) {
  const std::size_t at = element.find(" " + name + "=\"");
  EXPECT_NE(at, std::string::npos) << name << " in " << element.substr(0, 200);
  return std::strtod(element.c_str() + at + name.size() + 3, nullptr);
}

}  // namespace

TEST(ReportPage, HasEachChartWithItsIdAndSize) {
  const std::string html = sp::render_html(full_page());
  for (const char* id : {"chart-memory-0", "chart-memory-1", "block-map", "fragmentation"}) {
    const std::string svg = svg_element(html, id);
    ASSERT_FALSE(svg.empty()) << id;
    EXPECT_GT(attribute(svg, "width"), 100) << id;
    EXPECT_GT(attribute(svg, "height"), 50) << id;
    EXPECT_EQ(count(html, std::string("id=\"") + id + "\""), 1u) << id;
  }
  EXPECT_EQ(count(html, "<svg"), 4u);
  EXPECT_NE(html.find("<!DOCTYPE html>"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  // The statistics table and the series table.
  EXPECT_NE(html.find("id=\"statistics\""), std::string::npos);
  EXPECT_NE(html.find("id=\"series-table\""), std::string::npos);
}

TEST(ReportPage, RunsNothingAndFetchesNothing) {
  std::string html = sp::render_html(full_page());
  std::transform(html.begin(), html.end(), html.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("javascript:"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find(" href="), std::string::npos);
  // The only URL is SVG's namespace name, which nothing fetches.
  const std::string xmlns = "http://www.w3.org/2000/svg";
  for (const std::string scheme : {"http://", "https://", "//"}) {
    for (std::size_t at = html.find(scheme); at != std::string::npos;
         at = html.find(scheme, at + 1)) {
      const std::size_t start = scheme == "//" ? at - 5 : at;
      EXPECT_EQ(html.compare(start, xmlns.size(), xmlns), 0)
          << "a reference at " << at << ": " << html.substr(start, 60);
      at = start + xmlns.size();
    }
  }
}

TEST(ReportPage, EscapesTextFromOutside) {
  sp::report_page page = full_page();
  const std::string nasty = "a<b & \"c\" 'd'";
  page.title = nasty;
  page.subtitle = nasty;
  page.series[0].name = nasty;
  page.phases.push_back({700, nasty});
  page.snapshot->backend = nasty;
  page.snapshot_caption = nasty;
  const std::string html = sp::render_html(page);
  EXPECT_EQ(html.find("a<b"), std::string::npos);
  EXPECT_EQ(html.find("& \""), std::string::npos);
  EXPECT_GE(count(html, "a&lt;b &amp; &quot;c&quot; &#39;d&#39;"), 6u);
  // Hover titles too: the phase rule's title names the phase.
  EXPECT_NE(html.find("<title>phase a&lt;b &amp; &quot;c&quot;"), std::string::npos);
}

TEST(ReportPage, BucketsKeepEachBucketsMaximum) {
  const std::size_t n = 100'003;
  std::vector<std::size_t> live(n, 1);
  std::vector<std::size_t> reserved(n, 2);
  live[777] = 500;
  reserved[54'321] = 1000;
  const auto buckets = sp::detail::max_buckets(live, reserved, 864);
  ASSERT_EQ(buckets.size(), 864u);
  std::size_t max_live = 0;
  std::size_t max_reserved = 0;
  std::size_t covered = 0;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(buckets[b].first, covered);
    covered = buckets[b].end;
    max_live = std::max(max_live, buckets[b].live);
    max_reserved = std::max(max_reserved, buckets[b].reserved);
  }
  EXPECT_EQ(covered, n);
  EXPECT_EQ(max_live, 500u);
  EXPECT_EQ(max_reserved, 1000u);
  // Fewer events than buckets: one bucket each.
  EXPECT_EQ(sp::detail::max_buckets({1, 2, 3}, {4, 5, 6}, 864).size(), 3u);
  EXPECT_TRUE(sp::detail::max_buckets({}, {}, 864).empty());
}

TEST(ReportPage, TheDrawnLineReachesAOneEventPeak) {
  // 200,000 events at 1 GiB reserved and one event at 3 GiB: the reserved line, drawn in buckets
  // of hundreds of events, must still reach the peak's dot.
  sp::report_page page;
  sp::memory_series s;
  s.name = "spike";
  s.live.assign(200'000, 512 * mib);
  s.reserved.assign(200'000, 1024 * mib);
  s.reserved[123'457] = 3072 * mib;
  page.series.push_back(s);
  const std::string html = sp::render_html(page);
  EXPECT_NE(html.find("peak reserved 3,072.0 MiB at event 123,457"), std::string::npos);
  const std::string svg = svg_element(html, "chart-memory-0");
  const std::size_t dot = svg.find("class=\"peak-reserved\"");
  ASSERT_NE(dot, std::string::npos);
  const double peak_y = attribute(svg.substr(svg.rfind("<circle", dot)), "cy");
  const std::size_t line = svg.find("class=\"reserved-line\"");
  ASSERT_NE(line, std::string::npos);
  const std::size_t d = svg.rfind(" d=\"", line);
  double top = 1e9;  // the smallest y (highest point) of the line: the values after M and V
  for (std::size_t at = d; at < line; ++at) {
    if (svg[at] == 'V') top = std::min(top, std::strtod(svg.c_str() + at + 1, nullptr));
    if (svg[at] == 'M') {
      char* end = nullptr;
      std::strtod(svg.c_str() + at + 1, &end);
      top = std::min(top, std::strtod(end, nullptr));
    }
  }
  EXPECT_NEAR(top, peak_y, 0.05);
}

TEST(ReportPage, BlockTitlesGiveSizeStreamAndWait) {
  const std::string html = sp::render_html(full_page());
  const std::string map = svg_element(html, "block-map");
  EXPECT_NE(map.find("<title>live 4.0 MiB, stream 3</title>"), std::string::npos);
  EXPECT_NE(map.find("<title>free (pending on timeline 2) 512 KiB, shared list</title>"),
            std::string::npos);
  EXPECT_NE(map.find("<title>free (ready) 8.0 MiB, stream 4&#39;s cache</title>"),
            std::string::npos);
  EXPECT_NE(map.find("<title>free (ready) 28 chunks of 64 KiB, 1.8 MiB, never used</title>"),
            std::string::npos);
  for (const char* cls : {"blk-live", "blk-ready", "blk-pending", "blk-unmapped"})
    EXPECT_NE(map.find(std::string("class=\"") + cls + "\""), std::string::npos) << cls;
}

TEST(ReportPage, BlockMapGathersBlocksTooNarrowToDraw) {
  const std::string html = sp::render_html(full_page());
  const std::string map = svg_element(html, "block-map");
  // 8,192 chunks of 256 B alternate live and free: drawn one by one they would be 8,192 rects.
  EXPECT_LT(count(map, "<rect"), 2000u);
  EXPECT_NE(map.find("blocks too narrow to draw apart"), std::string::npos);
  // Every rect is at least a pixel wide, inside the SVG.
  const double width = attribute(map, "width");
  for (std::size_t at = map.find("<rect"); at != std::string::npos;
       at = map.find("<rect", at + 1)) {
    const std::string r = map.substr(at, map.find('>', at) - at);
    EXPECT_GE(attribute(r, "width"), 1.0) << r;
    EXPECT_LE(attribute(r, "x") + attribute(r, "width"), width + 0.05) << r;
  }
}

TEST(ReportPage, ManyRangesArePackedSideBySide) {
  // The segment path makes a range per large request: 120 of them are not 120 rows.
  sp::report_page page;
  page.snapshot = sp::pool_snapshot{};
  for (std::size_t i = 0; i < 120; ++i) {
    sp::snapshot_range r;
    r.base = 0x7f0000000000 + i * 64 * mib;
    r.kind = sp::range_kind::segment;
    r.bytes = r.reserved_bytes = 64 * mib;
    r.blocks.push_back(block(0, 48 * mib, sp::block_status::live, sp::block_place::none, 1));
    r.blocks.push_back(
        block(48 * mib, 16 * mib, sp::block_status::free, sp::block_place::large_free));
    page.snapshot->ranges.push_back(r);
  }
  const std::string map = svg_element(sp::render_html(page), "block-map");
  EXPECT_NE(map.find("120 ranges side by side"), std::string::npos);
  EXPECT_LT(attribute(map, "height"), 600);
  EXPECT_NE(map.find("<title>segment 57 (64.0 MiB, shard 0): live 48.0 MiB, stream 1</title>"),
            std::string::npos);
}

TEST(ReportPage, FragmentationNamesTheLargestFreeBlock) {
  const std::string html = sp::render_html(full_page());
  const std::string frag = svg_element(html, "fragmentation");
  // Free large blocks: 512 KiB + 3.5 MiB (not merged by the snapshot: they wait differently),
  // 8 MiB, 2 MiB; the largest is 8 MiB.
  EXPECT_NE(frag.find("largest free block 8.0 MiB"), std::string::npos);
  EXPECT_NE(frag.find("large blocks"), std::string::npos);
  EXPECT_NE(frag.find("256 B chunks"), std::string::npos);
  EXPECT_NE(frag.find("64 KiB chunks"), std::string::npos);
}

TEST(ReportPage, AnEmptyReportRenders) {
  const std::string html = sp::render_html(sp::report_page{});
  EXPECT_NE(html.find("<!DOCTYPE html>"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  EXPECT_NE(html.find("Nothing to show"), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);

  // An empty snapshot and a series with no events render too.
  sp::report_page page;
  page.series.push_back({"nothing", {}, {}});
  page.snapshot = sp::pool_snapshot{};
  const std::string some = sp::render_html(page);
  EXPECT_NE(svg_element(some, "chart-memory-0").find("no events"), std::string::npos);
  EXPECT_NE(svg_element(some, "block-map").find("holds no memory"), std::string::npos);
  EXPECT_NE(svg_element(some, "fragmentation").find("holds no memory"), std::string::npos);
}

TEST(ReportPage, ASeriesOfTwoLengthsIsAnError) {
  sp::report_page page;
  page.series.push_back({"odd", {1, 2, 3}, {1, 2}});
  try {
    (void)sp::render_html(page);
    FAIL() << "no error";
  } catch (const sp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("'odd' has 3 live values but 2 reserved"),
              std::string::npos)
        << e.what();
  }
}

TEST(ReportPage, NumbersReadAsPeopleWriteThem) {
  using namespace sp::detail;
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(17'779), "17,779");
  EXPECT_EQ(format_count(1'234'567), "1,234,567");
  EXPECT_EQ(format_decimal(1234.5, 1), "1,234.5");
  EXPECT_EQ(format_decimal(-0.01, 1), "0.0");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * kib), "3.0 KiB");
  EXPECT_EQ(format_bytes(512 * kib), "512 KiB");
  EXPECT_EQ(format_bytes(4 * mib), "4.0 MiB");
  EXPECT_EQ(format_bytes(1024 * mib - 1), "1.0 GiB");
  EXPECT_EQ(format_bytes(std::size_t{7832} * mib), "7.6 GiB");
  EXPECT_EQ(format_mib(std::size_t{7832} * mib), "7,832.0 MiB");
  EXPECT_EQ(format_class_size(256), "256 B");
  EXPECT_EQ(format_class_size(1280), "1.25 KiB");
  EXPECT_EQ(format_class_size(3 * kib), "3 KiB");
  EXPECT_EQ(format_class_size(2560 * kib), "2.5 MiB");
  EXPECT_EQ(format_px(12.04), "12");
  EXPECT_EQ(format_px(12.25), "12.2");
  EXPECT_EQ(escape_html("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
}
