// streampool: the memory picture's writing kit (report.hpp): text escaped for HTML and SVG,
// numbers as people read them, and a writer of SVG elements.
//
// Every part of the page is written through this file, so that escaping happens in one place: a
// trace's phase names, allocator names and captions come from files and programs and may hold
// '<', '&' or '"'. Colours are not written here: elements carry a CSS class (live, reserved,
// free-ready, ...) that the page's style sheet (html_page.cpp) colours, which keeps the page small
// and the palette in one place.
//
// Numbers: counts with thousands separators ("17,779"); bytes in the unit that keeps them short
// ("512 KiB", "4.0 MiB", "7.6 GiB"); coordinates with at most one decimal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace streampool::detail {

/// s with & < > " ' replaced by their character references: safe in element text and in
/// attribute values alike.
[[nodiscard]] std::string escape_html(std::string_view s);

/// 17779 -> "17,779".
[[nodiscard]] std::string format_count(std::uint64_t n);
/// v with `decimals` decimals and thousands separators: 1234.5 -> "1,234.5".
[[nodiscard]] std::string format_decimal(double v, int decimals);
/// Bytes in B, KiB, MiB or GiB, whichever keeps the number under 1,024: "512 B", "3.0 KiB",
/// "512 KiB", "7.6 GiB" (one decimal below 100 of the unit, none from there).
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);
/// A size class's chunk size, exactly: "256 B", "1.25 KiB", "3 KiB", "64 KiB" (size classes are
/// a power of two times 1, 1.25, 1.5 or 1.75, so two decimals are always enough).
[[nodiscard]] std::string format_class_size(std::uint64_t bytes);
/// Bytes in MiB with one decimal: "7,832.0 MiB". The charts' peaks use it, so that allocators
/// side by side are read in one unit.
[[nodiscard]] std::string format_mib(std::uint64_t bytes);
/// A coordinate: at most one decimal, no trailing ".0".
[[nodiscard]] std::string format_px(double v);

enum class text_anchor : std::uint8_t { start, middle, end };

/// Appends one chart: a <figure> ("figure-<id>") holding an <svg> with its id, width and height
/// (the attributes the page's render test reads to size a screenshot), a label for screen readers,
/// a background and then `body`, the chart's elements.
void write_chart(std::string& out, std::string_view id, int width, int height,
                 std::string_view label, std::string_view body);

/// Appends SVG elements to a string. `cls` arguments are CSS class names (not escaped: they are
/// literals of this library); every text and title is escaped.
class svg_writer {
 public:
  explicit svg_writer(std::string& out) : out_(out) {}

  void rect(double x, double y, double w, double h, std::string_view cls,
            std::string_view title = {});
  void line(double x1, double y1, double x2, double y2, std::string_view cls);
  void circle(double cx, double cy, double r, std::string_view cls, std::string_view title = {});
  void text(double x, double y, std::string_view s, std::string_view cls,
            text_anchor anchor = text_anchor::start);
  /// A <path> from path data the caller built (numbers and letters only, written as given).
  void path(std::string_view d, std::string_view cls, std::string_view title = {});
  /// Opens and closes a group (<g>), for a title that covers several elements.
  void begin_group(std::string_view cls, std::string_view title = {});
  void end_group();

 private:
  void close_with_title(std::string_view element, std::string_view title);

  std::string& out_;
};

}  // namespace streampool::detail
