// streampool C ABI, libstreampool_report's part: the memory picture of a snapshot's JSON
// (include/streampool.h, sp_snapshot_html; docs/memory-picture.md).
#include <string>
#include <string_view>

#include "c_api/errors.hpp"
#include "streampool.h"
#include "streampool/error.hpp"
#include "streampool/report.hpp"
#include "streampool/snapshot.hpp"

namespace {
// The page the last call on this thread returned (the header's promise: valid until the next).
thread_local std::string html_text;
}  // namespace

extern "C" {

sp_status_t sp_snapshot_html(const char* json, size_t length, const char* title, const char** html,
                             size_t* html_length) {
  using streampool::c_api::printf_arg;
  using streampool::c_api::require;
  return streampool::c_api::guarded(__func__, [&](const char* entry) {
    require(json, entry, "json");
    require(html, entry, "html");
    streampool::report_page page;
    page.snapshot = streampool::snapshot_from_json(std::string_view(json, length));
    const streampool::pool_snapshot& s = *page.snapshot;
    page.title = title != nullptr && *title != '\0' ? title : "streampool: a pool's memory";
    page.subtitle = streampool::detail::format("pool %llu on device %llu (%s backend), %zu ranges",
                                               printf_arg(s.pool_id), printf_arg(s.device_id),
                                               s.backend.c_str(), s.ranges.size());
    page.snapshot_caption = "the snapshot";
    html_text = streampool::render_html(page);
    *html = html_text.c_str();
    if (html_length != nullptr) *html_length = html_text.size();
  });
}

}  // extern "C"
