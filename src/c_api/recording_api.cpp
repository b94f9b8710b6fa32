// streampool C ABI: the allocation log of a pool (pool::start_recording, docs/c-api.md).
#include <string>

#include "handles.hpp"
#include "streampool/error.hpp"

using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::pool_of;
using streampool::c_api::printf_arg;
using streampool::c_api::require;
using streampool::detail::format;

extern "C" {

sp_status_t sp_pool_record_start(sp_pool_t pool, const char* path) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    require(path, entry, "path");
    if (*path == '\0') {
      throw error{
          STREAMPOOL_STATUS_INVALID_ARGUMENT,
          format("streampool: %s: path is empty (pool %llu)", entry, printf_arg(p->p.id()))};
    }
    try {
      p->p.start_recording(path);
    } catch (const streampool::logic_error& e) {
      // The pool's message names the path and the system's reason; say who asked.
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("%s (pool %llu): %s", entry, printf_arg(p->p.id()), e.what())};
    }
  });
}

sp_status_t sp_pool_record_stop(sp_pool_t pool, uint64_t* events) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    std::uint64_t n = 0;
    try {
      n = p->p.stop_recording();
    } catch (const streampool::logic_error& e) {
      // Writing the file failed (a full disk), or lines are missing (host memory ran out): no
      // broken precondition, and the recording is closed all the same.
      throw error{STREAMPOOL_STATUS_INTERNAL,
                  format("%s (pool %llu): %s", entry, printf_arg(p->p.id()), e.what())};
    }
    if (events != nullptr) *events = n;
  });
}

sp_status_t sp_pool_record_phase(sp_pool_t pool, const char* name) {
  return guarded(__func__, [&](const char* entry) {
    const auto p = pool_of(pool, entry);
    require(name, entry, "name");
    p->p.record_phase(name);
  });
}

}  // extern "C"
