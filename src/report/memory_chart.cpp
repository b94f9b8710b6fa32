// streampool: the charts of live and reserved bytes over a trace (memory_chart.hpp).
#include "memory_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "chart_buckets.hpp"
#include "streampool/error.hpp"
#include "svg.hpp"

namespace streampool::detail {

namespace {

// The chart's frame, in px. The left margin holds the byte axis' labels ("7.5 GiB"), the top the
// title, the legend, a line of notes and two rows of phase names (above the plot, where the peaks'
// labels cannot cover them).
constexpr int chart_width = 960;
constexpr int chart_height = 270;
constexpr double margin_left = 72;
constexpr double margin_right = 16;
constexpr double margin_top = 68;
constexpr double phase_rows_top = 42;
constexpr double margin_bottom = 34;
constexpr double plot_left = margin_left;
constexpr double plot_right = chart_width - margin_right;
constexpr double plot_top = margin_top;
constexpr double plot_bottom = chart_height - margin_bottom;
constexpr double plot_width = plot_right - plot_left;
constexpr double plot_height = plot_bottom - plot_top;
/// Width of a character of the charts' 11 px labels, for placing labels so that they do not
/// collide (DejaVu Sans averages about 0.6 em).
constexpr double char_px = 6.6;

/// A step of 1, 2 or 5 times a power of ten, at least `raw`.
double nice_step(double raw) {
  if (raw <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  return 10 * p;
}

/// The byte axis: its unit, tick step and top, shared by every chart of the page.
struct byte_axis {
  double unit = 1;  // bytes per unit
  const char* unit_name = "B";
  double step = 1;  // in units
  double top = 1;   // in bytes: the value at the top of the plot
  int decimals = 0;

  explicit byte_axis(std::size_t max_bytes) {
    const double max = std::max(1.0, static_cast<double>(max_bytes));
    static constexpr struct {
      double bytes;
      const char* name;
    } units[] = {{1024.0 * 1024 * 1024, "GiB"}, {1024.0 * 1024, "MiB"}, {1024.0, "KiB"}};
    for (const auto& u : units) {
      if (max >= 2 * u.bytes) {
        unit = u.bytes;
        unit_name = u.name;
        break;
      }
    }
    // Room above the peak for its label: the top is the first tick at least 12% above it.
    const double headroom = max * 1.12 / unit;
    step = nice_step(headroom / 5);
    top = std::ceil(headroom / step) * step * unit;
    decimals = step >= 1 ? 0 : step >= 0.1 ? 1 : 2;
  }

  [[nodiscard]] double y(double bytes) const { return plot_bottom - bytes / top * plot_height; }
  [[nodiscard]] std::string label(double units) const {
    return format_decimal(units, decimals) + " " + unit_name;
  }
};

/// The event axis: x of the left edge of event i, for n events.
struct event_axis {
  std::size_t n;
  [[nodiscard]] double x(double i) const {
    return plot_left + plot_width * i / static_cast<double>(std::max<std::size_t>(1, n));
  }
};

/// The step line through the buckets' maxima, as path data: "M x0 y0 H x1 V y1 H x2 ...". With
/// `area`, closed down to the axis, for the fill under it.
std::string step_path(const std::vector<chart_bucket>& buckets, const event_axis& ex,
                      const byte_axis& ey, bool reserved, bool area) {
  std::string d;
  d.reserve(buckets.size() * 14 + 32);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const chart_bucket& k = buckets[b];
    const std::string y = format_px(ey.y(static_cast<double>(reserved ? k.reserved : k.live)));
    if (b == 0) {
      const std::string x0 = format_px(ex.x(static_cast<double>(k.first)));
      d += "M";
      d += x0;
      d += " ";
      if (area) {
        d += format_px(plot_bottom);
        d += "V";
      }
      d += y;
    } else {
      d += "V" + y;
    }
    d += "H" + format_px(ex.x(static_cast<double>(k.end)));
  }
  if (area && !buckets.empty()) d += "V" + format_px(plot_bottom) + "Z";
  return d;
}

struct peak {
  std::size_t value = 0;
  std::size_t event = 0;  // the first event at which the value was reached
};

peak find_peak(const std::vector<std::size_t>& v) {
  peak p;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] > p.value) p = {v[i], i};
  }
  return p;
}

void write_axes(svg_writer& svg, const byte_axis& ey, const event_axis& ex) {
  // Byte gridlines and labels.
  for (double u = 0; u * ey.unit <= ey.top * (1 + 1e-9); u += ey.step) {
    const double y = ey.y(u * ey.unit);
    svg.line(plot_left, y, plot_right, y, u == 0 ? "axis" : "grid");
    svg.text(plot_left - 6, y + 4, ey.label(u), "tick", text_anchor::end);
  }
  // Event ticks: about eight, at round numbers.
  const double step = nice_step(static_cast<double>(std::max<std::size_t>(1, ex.n)) / 8);
  for (double i = 0; i <= static_cast<double>(ex.n); i += step) {
    const double x = ex.x(i);
    svg.line(x, plot_bottom, x, plot_bottom + 4, "axis");
    svg.text(x, plot_bottom + 16, format_count(static_cast<std::uint64_t>(i)), "tick",
             text_anchor::middle);
  }
  svg.text(plot_right, chart_height - 4, "events", "tick", text_anchor::end);
}

/// Vertical rules at the phases, names on up to two rows above the plot. A rule starts at its own
/// name's row, so a name on the lower row may reach past the next phase's rule when that rule
/// starts on the upper row, and the reverse; placed left to right, a name goes on the upper row
/// when it clears the previous upper name and its rule clears the previous lower name, else on the
/// lower row when it clears the previous lower name, else it is left off and its rule starts at
/// the plot (the rule's title still names it). So no rule crosses a name, however dense the phases.
void write_phases(svg_writer& svg, const std::vector<trace_phase>& phases, const event_axis& ex) {
  struct placed {
    const trace_phase* phase;
    double x;
    int row;  // 0 upper, 1 lower, -1 no name
  };
  std::vector<placed> marks;
  double row_end[2] = {-1e9, -1e9};
  for (const trace_phase& ph : phases) {
    if (ph.first_event > ex.n) continue;
    const double x = ex.x(static_cast<double>(ph.first_event));
    const double end = x + 3 + static_cast<double>(ph.name.size()) * char_px + 4;
    int row = -1;
    if (x + 3 >= row_end[0] && x >= row_end[1]) {
      row = 0;
    } else if (x + 3 >= row_end[1]) {
      row = 1;
    }
    if (row >= 0) row_end[row] = end;
    marks.push_back({&ph, x, row});
  }
  for (const placed& m : marks) {
    svg.begin_group("phase",
                    "phase " + m.phase->name + " from event " + format_count(m.phase->first_event));
    svg.line(m.x, m.row < 0 ? plot_top : phase_rows_top + 12 * m.row, m.x, plot_bottom,
             "phase-rule");
    svg.end_group();
  }
  for (const placed& m : marks) {
    if (m.row >= 0)
      svg.text(m.x + 3, phase_rows_top + 9 + 12 * m.row, m.phase->name, "phase-label");
  }
}

/// The dot and label of a peak. Reserved labels sit above their dot, live labels below, so that
/// the two never cover each other when the peaks coincide (exact fit: reserved == live).
void write_peak(svg_writer& svg, const peak& p, const event_axis& ex, const byte_axis& ey,
                bool reserved) {
  const double x = ex.x(static_cast<double>(p.event) + 0.5);
  const double y = ey.y(static_cast<double>(p.value));
  const std::string what = reserved ? "peak reserved " : "peak live ";
  const std::string label = what + format_mib(p.value) + " at event " + format_count(p.event);
  svg.circle(x, y, 4, reserved ? "peak-reserved" : "peak-live", label);
  // Right of the dot in the chart's left part, left of it in the right part.
  const bool left = x > plot_left + plot_width * 0.6;
  svg.text(left ? x - 7 : x + 7, reserved ? y - 7 : y + 15, label,
           reserved ? "peak-label peak-label-reserved" : "peak-label peak-label-live",
           left ? text_anchor::end : text_anchor::start);
}

void write_legend(svg_writer& svg) {
  // Right-aligned on the title's line: [reserved] [live].
  double x = plot_right;
  for (const auto& [cls, name] : {std::pair{"live-area", "live"}, {"reserved-area", "reserved"}}) {
    x -= static_cast<double>(std::char_traits<char>::length(name)) * char_px;
    svg.text(x, 18, name, "legend");
    x -= 16;
    svg.rect(x, 9, 11, 11, cls);
    x -= 14;
  }
}

void write_series_chart(std::string& out, const memory_series& s, std::size_t index,
                        const std::vector<trace_phase>& phases, const byte_axis& ey) {
  const std::size_t n = s.live.size();
  const event_axis ex{n};
  const std::string id = "chart-memory-" + std::to_string(index);
  std::string body;
  svg_writer svg(body);
  svg.text(plot_left, 18, s.name, "chart-title");
  write_legend(svg);
  const peak live = find_peak(s.live);
  const peak reserved = find_peak(s.reserved);
  std::string note = format_count(n) + " events";
  if (live.value != 0) {
    note +=
        ", peak reserved / peak live " +
        format_decimal(static_cast<double>(reserved.value) / static_cast<double>(live.value), 3);
  }
  svg.text(plot_left, 35, note, "note");
  write_axes(svg, ey, ex);
  if (n == 0) {
    svg.text((plot_left + plot_right) / 2, (plot_top + plot_bottom) / 2, "no events", "note",
             text_anchor::middle);
  } else {
    // One bucket per pixel at most: more would draw nothing more, and only grow the page.
    const std::vector<chart_bucket> buckets =
        max_buckets(s.live, s.reserved, static_cast<std::size_t>(plot_width));
    svg.path(step_path(buckets, ex, ey, true, true), "reserved-area");
    svg.path(step_path(buckets, ex, ey, false, true), "live-area");
    svg.path(step_path(buckets, ex, ey, true, false), "reserved-line");
    svg.path(step_path(buckets, ex, ey, false, false), "live-line");
    write_phases(svg, phases, ex);
    write_peak(svg, reserved, ex, ey, true);
    write_peak(svg, live, ex, ey, false);
  }
  write_chart(out, id, chart_width, chart_height, s.name + ": live and reserved bytes", body);
}

}  // namespace

void write_memory_charts(std::string& out, const report_page& page) {
  std::size_t max = 0;
  for (const memory_series& s : page.series) {
    STREAMPOOL_EXPECTS(s.live.size() == s.reserved.size(),
                       format("render_html: series '%s' has %zu live values but %zu reserved",
                              s.name.c_str(), s.live.size(), s.reserved.size()));
    for (const std::size_t v : s.live) max = std::max(max, v);
    for (const std::size_t v : s.reserved) max = std::max(max, v);
  }
  const byte_axis ey(max);
  for (std::size_t i = 0; i < page.series.size(); ++i)
    write_series_chart(out, page.series[i], i, page.phases, ey);
}

}  // namespace streampool::detail
