// streampool: render_html(), the memory picture as one HTML page (report.hpp).
//
// The page is self-contained: inline CSS, inline SVG, no script, no font or image fetched, so that
// it opens from a CI artefact or an e-mail as it was written. Every part is optional and drawn
// only when its input is there: the memory charts (page.series), the block map, the
// fragmentation summary and the statistics (page.snapshot). The charts' colours are in the style
// sheet below and nowhere else: live is blue everywhere, reserved orange, free and ready green,
// free and pending amber.
#include <algorithm>
#include <ctime>

#include "block_map.hpp"
#include "fragmentation.hpp"
#include "memory_chart.hpp"
#include "streampool/report.hpp"
#include "svg.hpp"

namespace streampool {

namespace {

using detail::escape_html;
using detail::format_bytes;
using detail::format_count;

constexpr const char* style_sheet = R"(
body { font: 14px/1.45 "DejaVu Sans", Verdana, sans-serif; color: #1d2330; background: #fff;
       max-width: 980px; margin: 24px auto; padding: 0 12px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #ddd; }
.subtitle { color: #555; margin: 0 0 16px; }
.caption { color: #444; margin: 4px 0 10px; }
figure { margin: 0 0 16px; }
svg { display: block; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e4e4e4; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f6f9; }
.swatch.reserved { background: #fcd9b0; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
footer { color: #888; font-size: 12px; margin-top: 32px; }
svg text { font-family: "DejaVu Sans", Verdana, sans-serif; font-size: 11px; fill: #333; }
.background { fill: #fff; }
.chart-title { font-size: 14px; font-weight: bold; fill: #1d2330; }
.panel-title { font-size: 13px; font-weight: bold; fill: #1d2330; }
.note, .tick { fill: #555; }
.grid { stroke: #e8e8e8; stroke-width: 1; }
.axis { stroke: #888; stroke-width: 1; }
.reserved-area { fill: #fcd9b0; }
.reserved-line { fill: none; stroke: #e07b1a; stroke-width: 1.5; }
.live-area { fill: #9cbde3; }
.live-line { fill: none; stroke: #2b5d9b; stroke-width: 1.5; }
.phase-rule { stroke: #777; stroke-width: 1; stroke-dasharray: 3 3; }
.phase-label { fill: #555; font-size: 10px; paint-order: stroke; stroke: #fff; stroke-width: 3px;
               stroke-linejoin: round; }
.peak-reserved { fill: #b85600; stroke: #fff; stroke-width: 1.5; }
.peak-live { fill: #1f4a85; stroke: #fff; stroke-width: 1.5; }
.peak-label { font-weight: bold; paint-order: stroke; stroke: #fff; stroke-width: 3px;
              stroke-linejoin: round; }
.peak-label-reserved { fill: #a04d00; }
.peak-label-live { fill: #1f4a85; }
.blk-live, .swatch.live { fill: #2b5d9b; background: #2b5d9b; }
.blk-ready, .swatch.ready { fill: #63b158; background: #63b158; }
.blk-pending, .swatch.pending { fill: #eba43a; background: #eba43a; }
.blk-unmapped, .swatch.unmapped { fill: #e9e9e9; background: #e9e9e9; }
.frag-largest { fill: #2e7a3a; }
.frag-free { fill: #d9c9a6; }
.bar-frame { fill: #f6f6f6; stroke: #ccc; }
.row-label { fill: #1d2330; }
.row-note, .row-offset { fill: #777; font-size: 10px; }
)";

void row(std::string& out, const std::string& name, const std::string& value) {
  out += "<tr><td>" + escape_html(name) + "</td><td>" + escape_html(value) + "</td></tr>\n";
}

std::string ratio(std::size_t a, std::size_t b) {
  return b == 0 ? "-" : detail::format_decimal(static_cast<double>(a) / static_cast<double>(b), 4);
}

void write_series_table(std::string& out, const report_page& page) {
  out +=
      "<table id=\"series-table\"><tr><th>allocator</th><th>events</th><th>peak live</th>"
      "<th>peak reserved</th><th>peak reserved / peak live</th></tr>\n";
  for (const memory_series& s : page.series) {
    std::size_t live = 0;
    std::size_t reserved = 0;
    for (const std::size_t v : s.live) live = std::max(live, v);
    for (const std::size_t v : s.reserved) reserved = std::max(reserved, v);
    out += "<tr><td>" + escape_html(s.name) + "</td><td>" + format_count(s.live.size()) +
           "</td><td>" + detail::format_mib(live) + "</td><td>" + detail::format_mib(reserved) +
           "</td><td>" + ratio(reserved, live) + "</td></tr>\n";
  }
  out += "</table>\n";
}

void write_memory_section(std::string& out, const report_page& page) {
  out += "<section id=\"memory\">\n<h2>Live and reserved bytes over the trace</h2>\n";
  out +=
      "<p class=\"caption\">One chart per allocator, all on one scale. "
      "<span class=\"swatch live\"></span>Live: what the program holds. "
      "<span class=\"swatch reserved\"></span>Reserved: what the allocator "
      "holds from the device; the orange band above the blue is what it keeps beyond the "
      "program's needs. Dots mark each peak, dashed rules the trace's phases; each pixel shows "
      "the highest value of the events under it.</p>\n";
  write_series_table(out, page);
  detail::write_memory_charts(out, page);
  out += "</section>\n";
}

std::string utc_time(std::uint64_t unix_ns) {
  const auto seconds = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  if (gmtime_r(&seconds, &tm) == nullptr) return "?";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

void write_statistics(std::string& out, const pool_snapshot& s, const snapshot_summary& sum) {
  const pool_statistics& st = s.statistics;
  out += "<table id=\"statistics\"><tr><th>statistic</th><th>value</th></tr>\n";
  row(out, "backend", s.backend);
  row(out, "pool, device", std::to_string(s.pool_id) + ", " + std::to_string(s.device_id));
  if (s.taken_unix_ns != 0) row(out, "taken at", utc_time(s.taken_unix_ns));
  row(out, "granularity", format_bytes(s.granularity));
  row(out, "large blocks on",
      s.virtual_memory ? "virtual memory, granules of " + format_bytes(s.vm_granularity)
                       : "segments (no virtual memory)");
  row(out, "live", format_bytes(st.live_bytes));
  row(out, "reserved", format_bytes(st.reserved_bytes));
  row(out, "cached (reserved - live)", format_bytes(st.cached_bytes));
  row(out, "peak live", format_bytes(st.peak_live_bytes));
  row(out, "peak reserved", format_bytes(st.peak_reserved_bytes));
  row(out, "free, ready for any stream", format_bytes(sum.free_ready_bytes));
  row(out, "free, pending", format_bytes(sum.free_pending_bytes));
  row(out, "largest free block", format_bytes(sum.largest_free_block));
  row(out, "address space of the ranges", format_bytes(sum.address_bytes));
  row(out, "ranges, stream caches",
      format_count(s.ranges.size()) + ", " + format_count(s.caches.size()));
  row(out, "allocations, deallocations",
      format_count(st.allocations) + ", " + format_count(st.deallocations));
  row(out, "fresh allocations", format_count(st.fresh_allocations));
  row(out, "reuses: same stream, ready, waited",
      format_count(st.same_stream_reuses) + ", " + format_count(st.ready_reuses) + ", " +
          format_count(st.waited_reuses));
  row(out, "device waits, host waits",
      format_count(st.device_waits) + ", " + format_count(st.host_waits));
  row(out, "upstream calls",
      format_count(st.upstream_calls()) + " (" + format_count(st.upstream_allocations) +
          " allocate, " + format_count(st.upstream_deallocations) + " free, " +
          format_count(st.upstream_reserves) + " reserve, " + format_count(st.upstream_creates) +
          " create, " + format_count(st.upstream_maps) + " map, " +
          format_count(st.upstream_unmaps) + " unmap, " + format_count(st.upstream_releases) +
          " release)");
  if (st.memory_limit != 0) row(out, "memory limit", format_bytes(st.memory_limit));
  out += "</table>\n";
}

void write_snapshot_section(std::string& out, const report_page& page) {
  const pool_snapshot& s = *page.snapshot;
  const snapshot_summary sum = summarize(s);
  out += "<section id=\"snapshot\">\n<h2>Block map</h2>\n";
  if (!page.snapshot_caption.empty())
    out += "<p class=\"caption\">" + escape_html(page.snapshot_caption) + "</p>\n";
  out +=
      "<p class=\"caption\">Every range of the pool, block by block, in address order. "
      "<span class=\"swatch live\"></span>live, <span class=\"swatch ready\"></span>free and "
      "ready for any stream, <span class=\"swatch pending\"></span>free and pending (another "
      "stream's work on it is not known complete), <span class=\"swatch unmapped\"></span>"
      "unmapped address space. Hover a block for its size and stream; blocks narrower than a "
      "pixel are drawn together in the colour of most of their bytes.</p>\n";
  detail::write_block_map(out, s);
  out += "<h2>Fragmentation</h2>\n";
  detail::write_fragmentation(out, sum);
  out += "<h2>Statistics</h2>\n";
  write_statistics(out, s, sum);
  out += "</section>\n";
}

}  // namespace

std::string render_html(const report_page& page) {
  const std::string title = page.title.empty() ? "streampool memory picture" : page.title;
  std::string out;
  out.reserve(std::size_t{64} << 10);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + escape_html(title) + "</title>\n<style>" + style_sheet + "</style>\n";
  out += "</head>\n<body>\n<header>\n<h1>" + escape_html(title) + "</h1>\n";
  if (!page.subtitle.empty())
    out += "<p class=\"subtitle\">" + escape_html(page.subtitle) + "</p>\n";
  out += "</header>\n";
  if (!page.series.empty()) write_memory_section(out, page);
  if (page.snapshot) write_snapshot_section(out, page);
  if (page.series.empty() && !page.snapshot)
    out += "<p class=\"caption\">Nothing to show: the report has no series and no snapshot.</p>\n";
  out +=
      "<footer>Written by streampool's render_html (docs/memory-picture.md): one page, no "
      "script, nothing fetched.</footer>\n</body>\n</html>\n";
  return out;
}

}  // namespace streampool
