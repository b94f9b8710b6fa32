// streampool: the block map of a snapshot (block_map.hpp).
#include "block_map.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>

#include "svg.hpp"

namespace streampool::detail {

namespace {

constexpr int map_width = 960;
constexpr double strip_left = 212;  // the gutter left of it holds the rows' labels
constexpr double strip_width = map_width - strip_left - 12;
constexpr double line_height = 14;
constexpr double line_pitch = 18;
constexpr double row_gap = 6;  // between two rows
/// The most lines a panel may take before its scale halves: keeps the map a page tall.
constexpr std::size_t max_panel_lines = 64;
/// Above this many large ranges, they are packed side by side instead of a row each.
constexpr std::size_t max_range_rows = 8;

/// What a block is drawn as; the order indexes the merged groups' byte counts.
enum class look : std::uint8_t { live, ready, pending, unmapped };
constexpr std::array<const char*, 4> look_class = {"blk-live", "blk-ready", "blk-pending",
                                                   "blk-unmapped"};
constexpr std::array<const char*, 4> look_name = {"live", "free ready", "free pending", "unmapped"};

look look_of(const snapshot_block& b) {
  switch (b.status) {
    case block_status::live:
      return look::live;
    case block_status::unmapped:
      return look::unmapped;
    case block_status::free:
      break;
  }
  return b.pending() ? look::pending : look::ready;
}

std::string place_text(const snapshot_block& b) {
  switch (b.place) {
    case block_place::stream_cache:
      return "stream " + std::to_string(b.stream) + "'s cache";
    case block_place::shared_list:
      return "shared list";
    case block_place::never_used:
      return "never used";
    case block_place::large_free:
      return "large free blocks";
    case block_place::in_transit:
      return "between two lists";
    case block_place::none:
      break;
  }
  return {};
}

/// "live 4.0 MiB, stream 3" / "free (pending on timeline 2) 512 KiB, shared list".
std::string block_title(const snapshot_block& b, std::size_t chunk_bytes) {
  std::string size = format_bytes(b.size);
  if (chunk_bytes != 0 && b.chunks > 1)
    size = format_count(b.chunks) + " chunks of " + format_class_size(chunk_bytes) + ", " + size;
  switch (b.status) {
    case block_status::live:
      return "live " + size + (b.stream != 0 ? ", stream " + std::to_string(b.stream) : "");
    case block_status::unmapped:
      return "unmapped " + size + " (address space, no memory behind it)";
    case block_status::free:
      break;
  }
  std::string waits;
  for (const snapshot_token& t : b.tokens) {
    if (t.complete) continue;
    waits += (waits.empty() ? "" : ", ") + std::to_string(t.timeline);
  }
  const bool several = waits.find(',') != std::string::npos;
  std::string title = waits.empty() ? "free (ready) " + size
                                    : "free (pending on timeline" +
                                          std::string(several ? "s " : " ") + waits + ") " + size;
  const std::string place = place_text(b);
  if (!place.empty()) title += ", " + place;
  return title;
}

/// The smallest power of two at least `bytes` and at least `least` (itself a power of two).
std::size_t pow2_at_least(double bytes, std::size_t least) {
  std::size_t p = least;
  while (static_cast<double>(p) < bytes) p *= 2;
  return p;
}

/// Lays blocks along lines of `strip_width` px, left to right, wrapping like text, at a fixed
/// number of bytes per px. Narrow blocks are gathered and drawn as one rect (block_map.hpp).
class strip {
 public:
  strip(svg_writer& svg, double top, double bytes_per_px)
      : svg_(svg), top_(top), bytes_per_px_(bytes_per_px) {}

  /// Moves to the start of a new line, a row gap below the last one (unless nothing is drawn).
  void new_row() {
    flush();
    if (started_) {
      top_ += static_cast<double>(line_ + 1) * line_pitch + row_gap;
      line_ = 0;
      col_ = 0;
    }
    started_ = true;
  }
  /// The top of the current row's first line, and of its k-th line.
  [[nodiscard]] double row_y(std::size_t k = 0) const {
    return top_ + static_cast<double>(k) * line_pitch;
  }
  [[nodiscard]] std::size_t lines() const { return line_ + 1; }
  /// y below everything drawn.
  [[nodiscard]] double bottom() const { return started_ ? row_y(line_) + line_height : top_; }

  void add(std::size_t bytes, look l, const std::string& title) {
    const double w = static_cast<double>(bytes) / bytes_per_px_;
    if (w >= 1) {
      flush();
      draw(w, look_class[static_cast<std::size_t>(l)], title, w >= 3);
      return;
    }
    merged_.bytes += bytes;
    merged_.by_look[static_cast<std::size_t>(l)] += bytes;
    if (++merged_.blocks == 1) merged_.title = title;
    if (static_cast<double>(merged_.bytes) / bytes_per_px_ >= 1) flush();
  }

  /// Leaves `px` empty (between two slabs), unless at the start of a line.
  void gap(double px) {
    flush();
    if (col_ > 0) col_ = std::min(strip_width, col_ + px);
  }

  /// Draws what is gathered.
  void flush() {
    if (merged_.blocks == 0) return;
    const auto most = static_cast<std::size_t>(
        std::max_element(merged_.by_look.begin(), merged_.by_look.end()) - merged_.by_look.begin());
    std::string title = merged_.title;
    if (merged_.blocks > 1) {
      title = format_count(merged_.blocks) + " blocks too narrow to draw apart, " +
              format_bytes(merged_.bytes) + ":";
      const char* sep = " ";
      for (std::size_t k = 0; k < merged_.by_look.size(); ++k) {
        if (merged_.by_look[k] == 0) continue;
        title += sep + std::string(look_name[k]) + " " + format_bytes(merged_.by_look[k]);
        sep = ", ";
      }
    }
    draw(static_cast<double>(merged_.bytes) / bytes_per_px_, look_class[most], title, false);
    merged_ = {};
  }

 private:
  /// Draws w px from the cursor on, continuing on the next lines; each piece carries the title.
  /// `separate`: leave the block's last pixel empty, so that neighbours of one colour read as
  /// two blocks. A piece under a pixel is drawn 1 px wide (the cursor still moves by its width).
  void draw(double w, const char* cls, const std::string& title, bool separate) {
    double left = w;
    while (left > 1e-9) {
      if (col_ >= strip_width - 1e-9) {
        ++line_;
        col_ = 0;
      }
      const double piece = std::min(left, strip_width - col_);
      const bool last = piece >= left - 1e-9;
      const double drawn = last && separate && piece >= 3 ? piece - 1 : std::max(piece, 1.0);
      // A sliver at the end of a line is drawn over the line's last pixel, not past it.
      const double x = std::min(strip_left + col_, strip_left + strip_width - drawn);
      svg_.rect(x, row_y(line_), drawn, line_height, cls, title);
      col_ += piece;
      left -= piece;
    }
  }

  struct gathered {
    std::size_t blocks = 0;
    std::size_t bytes = 0;
    std::array<std::size_t, 4> by_look{};
    std::string title;  // the first block's: the group's title when it stays alone
  };

  svg_writer& svg_;
  double top_;
  double bytes_per_px_;
  std::size_t line_ = 0;
  double col_ = 0;
  bool started_ = false;
  gathered merged_;
};

/// The bytes of a large range to draw: a virtual range up to the end of its last mapped block.
std::size_t drawn_extent(const snapshot_range& r) {
  if (r.kind != range_kind::virtual_range) return r.bytes;
  std::size_t end = 0;
  for (const snapshot_block& b : r.blocks)
    if (b.status != block_status::unmapped) end = b.offset + b.size;
  return end;
}

/// Bytes per line for a panel: the largest row in about `target` lines (a power of two, so that
/// "one line = 512 MiB" reads round), halving the detail until the panel fits max_panel_lines.
std::size_t bytes_per_line(const std::vector<std::size_t>& rows, double target) {
  std::size_t largest = 0;
  for (const std::size_t r : rows) largest = std::max(largest, r);
  std::size_t per_line = pow2_at_least(static_cast<double>(largest) / target, 4096);
  for (;;) {
    std::size_t lines = 0;
    for (const std::size_t r : rows)
      lines += std::max<std::size_t>(1, r / per_line + (r % per_line != 0 ? 1 : 0));
    if (lines <= max_panel_lines || per_line >= largest) return per_line;
    // A row of near 2^64 bytes: doubling once more would wrap to 0.
    if (per_line > SIZE_MAX / 2) return per_line;
    per_line *= 2;
  }
}

const char* kind_name(range_kind k) {
  return k == range_kind::virtual_range ? "virtual range" : to_string(k);
}

/// Many large ranges (the segment path: one per large request, a hundred and more) side by side,
/// in address order, a gap between two, on lines of a common scale: one row each would be a tall
/// column of mostly empty rows. Each block's title names its range.
double write_packed_ranges(svg_writer& svg, const std::vector<const snapshot_range*>& ranges,
                           double top) {
  std::size_t total = 0;
  for (const snapshot_range* r : ranges) total += r->bytes;
  const std::size_t per_line = bytes_per_line({total}, 16);
  svg.text(8, top + 12,
           "Large blocks: " + format_count(ranges.size()) +
               " ranges side by side, one line = " + format_bytes(per_line),
           "panel-title");
  strip st(svg, top + 22, static_cast<double>(per_line) / strip_width);
  st.new_row();
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const snapshot_range& r = *ranges[i];
    const std::size_t extent = drawn_extent(r);
    const std::string name = std::string(kind_name(r.kind)) + " " + std::to_string(i) + " (" +
                             format_bytes(r.bytes) + ", shard " + std::to_string(r.shard) + "): ";
    st.gap(4);
    for (const snapshot_block& b : r.blocks) {
      if (b.offset >= extent) break;
      st.add(b.size, look_of(b), name + block_title(b, 0));
    }
  }
  st.flush();
  svg.text(8, st.row_y() + 11, format_count(ranges.size()) + " ranges", "row-label");
  if (st.lines() > 1) svg.text(8, st.row_y(1) + 11, "in address order", "row-note");
  return st.bottom();
}

/// Large ranges, one row each (a few: virtual ranges, a few segments). Returns the y below the
/// panel.
double write_large_panel(svg_writer& svg, const std::vector<const snapshot_range*>& ranges,
                         double top) {
  if (ranges.size() > max_range_rows) return write_packed_ranges(svg, ranges, top);
  std::vector<std::size_t> extents;
  extents.reserve(ranges.size());
  for (const snapshot_range* r : ranges) extents.push_back(drawn_extent(*r));
  const std::size_t per_line = bytes_per_line(extents, 8);
  svg.text(8, top + 12,
           "Large blocks: " + format_count(ranges.size()) +
               (ranges.size() == 1 ? " range" : " ranges") +
               ", one line = " + format_bytes(per_line),
           "panel-title");
  strip st(svg, top + 22, static_cast<double>(per_line) / strip_width);
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const snapshot_range& r = *ranges[i];
    st.new_row();
    // Virtual ranges: memory mapped of the address space; segments are all memory.
    const std::string detail =
        r.kind == range_kind::virtual_range
            ? format_bytes(r.reserved_bytes) + " mapped of " + format_bytes(r.bytes)
            : format_bytes(r.bytes);
    const std::string name = std::string(kind_name(r.kind)) + " " + std::to_string(i) + ", shard " +
                             std::to_string(r.shard);
    std::string title = name;
    title += ": ";
    title += detail;
    if (extents[i] < r.bytes) title += " (drawn up to its last mapped block)";
    svg.begin_group("row-label", title);
    svg.text(8, st.row_y() + 11, name, "row-label");
    svg.end_group();
    if (extents[i] == 0) {
      svg.text(strip_left, st.row_y() + 11, "nothing mapped (" + detail + ")", "note");
      continue;
    }
    for (const snapshot_block& b : r.blocks) {
      if (b.offset >= extents[i]) break;
      st.add(b.size, look_of(b), block_title(b, 0));
    }
    st.flush();
    // The range's size under its name, and each further line's offset, in the gutter.
    if (st.lines() > 1) svg.text(8, st.row_y(1) + 11, detail, "row-note");
    for (std::size_t k = 1; k < st.lines(); ++k) {
      svg.text(strip_left - 6, st.row_y(k) + 11, "+" + format_bytes(k * per_line), "row-offset",
               text_anchor::end);
    }
  }
  return st.bottom();
}

/// Slabs, one row per size class. Returns the y below the panel.
double write_slab_panel(svg_writer& svg, const std::vector<const snapshot_range*>& slabs,
                        double top) {
  std::map<std::size_t, std::vector<const snapshot_range*>> classes;
  for (const snapshot_range* r : slabs) classes[r->chunk_bytes].push_back(r);
  std::vector<std::size_t> totals;
  for (const auto& [chunk, rs] : classes) {
    std::size_t t = 0;
    for (const snapshot_range* r : rs) t += r->bytes;
    totals.push_back(t);
  }
  const std::size_t per_line = bytes_per_line(totals, 2);
  const double bytes_per_px = static_cast<double>(per_line) / strip_width;
  svg.text(8, top + 12,
           "Small blocks: " + format_count(slabs.size()) +
               (slabs.size() == 1 ? " slab" : " slabs") + " in " + format_count(classes.size()) +
               " size classes, one line = " + format_bytes(per_line),
           "panel-title");
  strip st(svg, top + 22, bytes_per_px);
  std::size_t k = 0;
  for (const auto& [chunk, rs] : classes) {
    st.new_row();
    const std::string name = format_class_size(chunk) + " chunks";
    svg.begin_group("row-label", name + ": " + format_count(rs.size()) +
                                     (rs.size() == 1 ? " slab, " : " slabs, ") +
                                     format_bytes(totals[k++]));
    svg.text(8, st.row_y() + 11, name, "row-label");
    svg.text(strip_left - 6, st.row_y() + 11,
             format_count(rs.size()) + (rs.size() == 1 ? " slab" : " slabs"), "row-offset",
             text_anchor::end);
    svg.end_group();
    for (const snapshot_range* r : rs) {
      // Slabs apart by a pixel where they are wide enough to spare one.
      if (static_cast<double>(r->bytes) / bytes_per_px >= 4) st.gap(1);
      for (const snapshot_block& b : r->blocks) st.add(b.size, look_of(b), block_title(b, chunk));
    }
  }
  return st.bottom();
}

void write_legend(svg_writer& svg) {
  double x = 8;
  static constexpr std::array<std::pair<const char*, const char*>, 4> items = {{
      {"blk-live", "live"},
      {"blk-ready", "free, ready for any stream"},
      {"blk-pending", "free, pending (waits for another stream's work)"},
      {"blk-unmapped", "unmapped address space"},
  }};
  for (const auto& [cls, name] : items) {
    svg.rect(x, 8, 12, 12, cls);
    svg.text(x + 17, 18, name, "legend");
    x += 17 + static_cast<double>(std::char_traits<char>::length(name)) * 6.1 + 22;
  }
}

}  // namespace

void write_block_map(std::string& out, const pool_snapshot& s) {
  std::vector<const snapshot_range*> large;
  std::vector<const snapshot_range*> slabs;
  for (const snapshot_range& r : s.ranges)
    (r.kind == range_kind::slab ? slabs : large).push_back(&r);
  // The SVG's height is known only once laid out: the elements go to a buffer first.
  std::string body;
  svg_writer svg(body);
  write_legend(svg);
  double y = 30;
  if (s.ranges.empty()) {
    svg.text(8, y + 16, "The pool holds no memory.", "note");
    y += 24;
  }
  if (!large.empty()) y = write_large_panel(svg, large, y) + 14;
  if (!slabs.empty()) y = write_slab_panel(svg, slabs, y) + 14;
  const int height = static_cast<int>(std::ceil(y));
  write_chart(out, "block-map", map_width, height, "block map of the pool's ranges", body);
}

}  // namespace streampool::detail
