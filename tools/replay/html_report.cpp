// replay: the page --html writes (html_report.hpp).
#include "html_report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "numbers.hpp"

namespace streampool::replay {

void write_html_report(const std::string& out_path, const trace& t, html_report report) {
  report_page page;
  const std::size_t slash = report.trace_path.find_last_of('/');
  page.title =
      "Memory picture: " +
      (slash == std::string::npos ? report.trace_path : report.trace_path.substr(slash + 1));
  page.subtitle = "replay of " + report.trace_path + ": " + with_commas(t.events.size()) +
                  " events (alloc, free_completed) in " + with_commas(t.phases.size()) +
                  (t.phases.size() == 1 ? " phase" : " phases");
  page.series = std::move(report.series);
  for (const phase& ph : t.phases) page.phases.push_back({ph.first_event, ph.name});
  page.snapshot = std::move(report.snapshot);
  page.snapshot_caption = std::move(report.snapshot_caption);
  const std::string html = render_html(page);

  std::FILE* f = std::fopen(out_path.c_str(), "wb");
  if (f == nullptr)
    throw std::runtime_error("cannot write " + out_path + ": " + std::strerror(errno));
  const bool written = std::fwrite(html.data(), 1, html.size(), f) == html.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !written) {
    throw std::runtime_error("cannot write " + out_path + ": " +
                             std::strerror(written ? errno : err));
  }
}

}  // namespace streampool::replay
