// streampool C ABI: the allocation log of a pool (pool::start_recording, docs/c-api.md).
#include <string>

#include "handles.hpp"
#include "streampool/error.hpp"

using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::pool_of;
using streampool::c_api::require;
using streampool::detail::format;

extern "C" {

sp_status_t sp_pool_record_start(sp_pool_t pool, const char* path) {
  return guarded([&] {
    const auto p = pool_of(pool, "sp_pool_record_start");
    require(path, "sp_pool_record_start", "path");
    if (*path == '\0') {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: sp_pool_record_start: path is empty (pool %llu)",
                         static_cast<unsigned long long>(p->p.id()))};
    }
    try {
      p->p.start_recording(path);
    } catch (const streampool::logic_error& e) {
      // The pool's message names the path and the system's reason; say who asked.
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("sp_pool_record_start (pool %llu): %s",
                         static_cast<unsigned long long>(p->p.id()), e.what())};
    }
  });
}

sp_status_t sp_pool_record_stop(sp_pool_t pool, uint64_t* events) {
  return guarded([&] {
    const auto p = pool_of(pool, "sp_pool_record_stop");
    std::uint64_t n = 0;
    try {
      n = p->p.stop_recording();
    } catch (const streampool::logic_error& e) {
      // Writing the file failed (a full disk), or lines are missing (host memory ran out): no
      // broken precondition, and the recording is closed all the same.
      throw error{STREAMPOOL_STATUS_INTERNAL,
                  format("sp_pool_record_stop (pool %llu): %s",
                         static_cast<unsigned long long>(p->p.id()), e.what())};
    }
    if (events != nullptr) *events = n;
  });
}

sp_status_t sp_pool_record_phase(sp_pool_t pool, const char* name) {
  return guarded([&] {
    const auto p = pool_of(pool, "sp_pool_record_phase");
    require(name, "sp_pool_record_phase", "name");
    p->p.record_phase(name);
  });
}

}  // extern "C"
