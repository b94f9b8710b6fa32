// streampool C ABI: snapshots as JSON (docs/memory-picture.md).
#include <string>

#include "handles.hpp"
#include "streampool/snapshot.hpp"

using streampool::c_api::guarded;
using streampool::c_api::require;

namespace {
// The text the last call on this thread returned (the header's promise: valid until the next).
thread_local std::string snapshot_text;
}  // namespace

extern "C" {

sp_status_t sp_pool_snapshot_json(sp_pool_t pool, const char** json, size_t* length) {
  return guarded([&] {
    require(pool, "sp_pool_snapshot_json", "pool");
    require(json, "sp_pool_snapshot_json", "json");
    snapshot_text = streampool::to_json(pool->p.snapshot());
    *json = snapshot_text.c_str();
    if (length != nullptr) *length = snapshot_text.size();
  });
}

}  // extern "C"
