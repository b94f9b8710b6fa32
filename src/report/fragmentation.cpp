// streampool: the fragmentation summary of a snapshot (fragmentation.hpp).
#include "fragmentation.hpp"

#include <cmath>

#include "svg.hpp"

namespace streampool::detail {

namespace {

constexpr int frag_width = 960;
constexpr double bar_left = 150;  // the gutter left of the bars holds the rows' labels
constexpr double bar_width = 460;
constexpr double text_left = bar_left + bar_width + 12;
constexpr double bar_height = 16;
constexpr double row_pitch = 24;

std::string percent(std::size_t part, std::size_t whole) {
  if (whole == 0) return "0%";
  const double p = 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  return format_decimal(p, p < 10 && p > 0 ? 1 : 0) + "%";
}

/// A bar of `parts` (bytes, class, name) scaled so that their sum spans the bar's width.
struct part {
  std::size_t bytes;
  const char* cls;
  std::string name;
};

void write_bar(svg_writer& svg, double y, const std::vector<part>& parts) {
  std::size_t total = 0;
  for (const part& p : parts) total += p.bytes;
  svg.rect(bar_left, y, bar_width, bar_height, "bar-frame");
  if (total == 0) return;
  double x = bar_left;
  for (const part& p : parts) {
    if (p.bytes == 0) continue;
    const double w = bar_width * static_cast<double>(p.bytes) / static_cast<double>(total);
    // A part under a pixel is still drawn one pixel wide: "some" must not read as "none".
    svg.rect(x, y, std::max(w, 1.0), bar_height, p.cls,
             p.name + " " + format_bytes(p.bytes) + " (" + percent(p.bytes, total) + ")");
    x += w;
  }
}

}  // namespace

void write_fragmentation(std::string& out, const snapshot_summary& sum) {
  std::string body;
  svg_writer svg(body);
  double y = 8;
  const std::size_t held = sum.live_bytes + sum.free_bytes;
  svg.text(8, y + 12, "Free space", "panel-title");
  y += 24;
  if (held == 0) {
    svg.text(8, y + 12, "The pool holds no memory.", "note");
    y += row_pitch;
  } else {
    svg.text(8, y + 12, "all memory", "row-label");
    write_bar(svg, y,
              {{sum.live_bytes, "blk-live", "live"},
               {sum.free_ready_bytes, "blk-ready", "free, ready for any stream"},
               {sum.free_pending_bytes, "blk-pending", "free, pending"}});
    svg.text(text_left, y + 12,
             "live " + format_bytes(sum.live_bytes) + ", free " + format_bytes(sum.free_bytes) +
                 " (" + percent(sum.free_bytes, held) + ")",
             "bar-text");
    y += row_pitch;
    svg.text(8, y + 12, "free memory", "row-label");
    if (sum.free_bytes == 0) {
      svg.text(bar_left, y + 12, "none: every byte with memory behind it is live", "note");
    } else {
      write_bar(svg, y,
                {{sum.largest_free_block, "frag-largest", "the largest free block"},
                 {sum.free_bytes - std::min(sum.free_bytes, sum.largest_free_block), "frag-free",
                  "the other free blocks"}});
      svg.text(text_left, y + 12,
               "largest free block " + format_bytes(sum.largest_free_block) + " = " +
                   percent(sum.largest_free_block, sum.free_bytes) + " of the free bytes",
               "bar-text");
    }
    y += row_pitch + 12;
    svg.text(8, y + 12, "Live and free bytes per size class (bars: shares of the class)",
             "panel-title");
    y += 24;
    for (const snapshot_summary::by_size& c : sum.classes) {
      const std::size_t total = c.live_bytes + c.free_bytes;
      const std::string name =
          c.chunk_bytes == 0 ? "large blocks" : format_class_size(c.chunk_bytes) + " chunks";
      svg.text(8, y + 12, name, "row-label");
      write_bar(svg, y,
                {{c.live_bytes, "blk-live", name + ": live"},
                 {c.free_bytes, "frag-free", name + ": free"}});
      svg.text(text_left, y + 12,
               "live " + format_bytes(c.live_bytes) + ", free " + format_bytes(c.free_bytes) +
                   " (" + percent(c.free_bytes, total) + " free)",
               "bar-text");
      y += row_pitch;
    }
  }
  const int height = static_cast<int>(std::ceil(y + 4));
  write_chart(out, "fragmentation", frag_width, height, "fragmentation summary", body);
}

}  // namespace streampool::detail
