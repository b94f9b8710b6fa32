// streampool C ABI: snapshots as JSON (docs/memory-picture.md).
#include <string>

#include "handles.hpp"
#include "streampool/report.hpp"
#include "streampool/snapshot.hpp"

using streampool::c_api::guarded;
using streampool::c_api::pool_of;
using streampool::c_api::require;

namespace {
// The text the last call on this thread returned (the header's promise: valid until the next).
thread_local std::string snapshot_text;
thread_local std::string html_text;
}  // namespace

extern "C" {

sp_status_t sp_pool_snapshot_json(sp_pool_t pool, const char** json, size_t* length) {
  return guarded([&] {
    const auto p = pool_of(pool, "sp_pool_snapshot_json");
    require(json, "sp_pool_snapshot_json", "json");
    snapshot_text = streampool::to_json(p->p.snapshot());
    *json = snapshot_text.c_str();
    if (length != nullptr) *length = snapshot_text.size();
  });
}

sp_status_t sp_snapshot_html(const char* json, size_t length, const char* title, const char** html,
                             size_t* html_length) {
  return guarded([&] {
    require(json, "sp_snapshot_html", "json");
    require(html, "sp_snapshot_html", "html");
    streampool::report_page page;
    page.snapshot = streampool::snapshot_from_json(std::string_view(json, length));
    const streampool::pool_snapshot& s = *page.snapshot;
    page.title = title != nullptr && *title != '\0' ? title : "streampool: a pool's memory";
    page.subtitle = streampool::detail::format("pool %llu on device %llu (%s backend), %zu ranges",
                                               static_cast<unsigned long long>(s.pool_id),
                                               static_cast<unsigned long long>(s.device_id),
                                               s.backend.c_str(), s.ranges.size());
    page.snapshot_caption = "the snapshot";
    html_text = streampool::render_html(page);
    *html = html_text.c_str();
    if (html_length != nullptr) *html_length = html_text.size();
  });
}

}  // extern "C"
