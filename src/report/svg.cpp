// streampool: the memory picture's writing kit: escaping, number formats, the SVG writer (svg.hpp).
#include "svg.hpp"

#include <cmath>
#include <cstdio>

namespace streampool::detail {

std::string escape_html(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

/// Inserts a comma every three digits of the integer part of a formatted non-negative number.
std::string group_thousands(const std::string& digits) {
  const std::size_t dot = digits.find('.');
  const std::size_t int_end = dot == std::string::npos ? digits.size() : dot;
  std::string out;
  for (std::size_t i = 0; i < int_end; ++i) {
    if (i != 0 && (int_end - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  out.append(digits, int_end);
  return out;
}

}  // namespace

std::string format_count(std::uint64_t n) { return group_thousands(std::to_string(n)); }

std::string format_decimal(double v, int decimals) {
  if (!std::isfinite(v)) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::fabs(v));
  std::string s = group_thousands(buf);
  // "-0.0" reads as a sign error: a value that rounds to zero has none.
  if (v < 0 && s.find_first_not_of("0.,") != std::string::npos) s.insert(0, "-");
  return s;
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  std::size_t u = 0;
  // Checked on the rounded value, so that 1,023.97 KiB reads "1.0 MiB" and not "1,024.0 KiB".
  while (u + 1 < std::size(units) && std::round(v * 10) / 10 >= 1024) {
    v /= 1024;
    ++u;
  }
  return format_decimal(v, v >= 99.95 ? 0 : 1) + " " + units[u];
}

std::string format_class_size(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* units[] = {"KiB", "MiB", "GiB"};
  double v = static_cast<double>(bytes) / 1024;
  std::size_t u = 0;
  while (u + 1 < std::size(units) && v >= 1024) {
    v /= 1024;
    ++u;
  }
  std::string s = format_decimal(v, 2);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + " " + units[u];
}

std::string format_mib(std::uint64_t bytes) {
  return format_decimal(static_cast<double>(bytes) / (1 << 20), 1) + " MiB";
}

std::string format_px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  if (s == "-0") s = "0";
  return s;
}

void write_chart(std::string& out, std::string_view id, int width, int height,
                 std::string_view label, std::string_view body) {
  out += R"(<figure class="chart" id="figure-)";
  out += escape_html(id);
  out += "\">\n";
  const std::string w = std::to_string(width);
  const std::string h = std::to_string(height);
  // The xmlns is a name, not a fetch; inline SVG in HTML does not need it, but a chart saved
  // from the page on its own then still opens as SVG.
  out += R"(<svg xmlns="http://www.w3.org/2000/svg" id=")";
  out += escape_html(id);
  out += R"(" width=")" + w + R"(" height=")" + h + R"(" viewBox="0 0 )" + w + " " + h;
  out += R"(" role="img" aria-label=")";
  out += escape_html(label);
  out += "\">\n";
  svg_writer(out).rect(0, 0, width, height, "background");
  out += body;
  out += "</svg>\n</figure>\n";
}

void svg_writer::close_with_title(std::string_view element, std::string_view title) {
  if (title.empty()) {
    out_ += "/>\n";
    return;
  }
  out_ += "><title>";
  out_ += escape_html(title);
  out_ += "</title></";
  out_ += element;
  out_ += ">\n";
}

void svg_writer::rect(double x, double y, double w, double h, std::string_view cls,
                      std::string_view title) {
  out_ += "<rect x=\"" + format_px(x) + "\" y=\"" + format_px(y) + "\" width=\"" + format_px(w) +
          "\" height=\"" + format_px(h) + "\" class=\"";
  out_ += cls;
  out_ += '"';
  close_with_title("rect", title);
}

void svg_writer::line(double x1, double y1, double x2, double y2, std::string_view cls) {
  out_ += "<line x1=\"" + format_px(x1) + "\" y1=\"" + format_px(y1) + "\" x2=\"" + format_px(x2) +
          "\" y2=\"" + format_px(y2) + "\" class=\"";
  out_ += cls;
  out_ += "\"/>\n";
}

void svg_writer::circle(double cx, double cy, double r, std::string_view cls,
                        std::string_view title) {
  out_ += "<circle cx=\"" + format_px(cx) + "\" cy=\"" + format_px(cy) + "\" r=\"" + format_px(r) +
          "\" class=\"";
  out_ += cls;
  out_ += '"';
  close_with_title("circle", title);
}

void svg_writer::text(double x, double y, std::string_view s, std::string_view cls,
                      text_anchor anchor) {
  out_ += "<text x=\"" + format_px(x) + "\" y=\"" + format_px(y) + "\"";
  if (anchor == text_anchor::middle) out_ += " text-anchor=\"middle\"";
  if (anchor == text_anchor::end) out_ += " text-anchor=\"end\"";
  if (!cls.empty()) {
    out_ += " class=\"";
    out_ += cls;
    out_ += '"';
  }
  out_ += '>';
  out_ += escape_html(s);
  out_ += "</text>\n";
}

void svg_writer::path(std::string_view d, std::string_view cls, std::string_view title) {
  out_ += "<path d=\"";
  out_ += d;
  out_ += "\" class=\"";
  out_ += cls;
  out_ += '"';
  close_with_title("path", title);
}

void svg_writer::begin_group(std::string_view cls, std::string_view title) {
  out_ += "<g";
  if (!cls.empty()) {
    out_ += " class=\"";
    out_ += cls;
    out_ += '"';
  }
  out_ += '>';
  if (!title.empty()) out_ += "<title>" + escape_html(title) + "</title>";
  out_ += '\n';
}

void svg_writer::end_group() { out_ += "</g>\n"; }

}  // namespace streampool::detail
