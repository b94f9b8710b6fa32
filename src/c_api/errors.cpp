// streampool C ABI: status codes, the thread-local last error, the version.
#include "errors.hpp"

#include <exception>
#include <new>
#include <string>

#include "streampool/error.hpp"

namespace streampool::c_api {
namespace {
// Per thread, like errno: a failing call on one thread never clobbers another thread's message.
thread_local std::string last_error;
}  // namespace

void set_last_error(const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    // No memory for the message: keep a truncated copy of what fits in what we have.
    last_error.clear();
  }
}

sp_status_t translate_current_exception() noexcept {
  try {
    throw;
  } catch (const error& e) {
    set_last_error(e.message.c_str());
    return e.status;
  } catch (const out_of_memory& e) {
    // Before std::bad_alloc: out_of_memory derives from it, and device OOM has its own code.
    set_last_error(e.what());
    return STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY;
  } catch (const logic_error& e) {
    set_last_error(e.what());
    return STREAMPOOL_STATUS_INVALID_ARGUMENT;
  } catch (const backend_error& e) {
    set_last_error(e.what());
    // A runtime that cannot be loaded or a device that does not exist is "not available", so
    // callers can skip instead of fail; the kind says which (error.hpp), never the wording.
    switch (e.kind()) {
      case backend_error_kind::unavailable:
      case backend_error_kind::no_device:
        return STREAMPOOL_STATUS_NOT_AVAILABLE;
      case backend_error_kind::runtime:
        return STREAMPOOL_STATUS_BACKEND_ERROR;
    }
    return STREAMPOOL_STATUS_BACKEND_ERROR;
  } catch (const std::bad_alloc&) {
    set_last_error("streampool: out of host memory");
    return STREAMPOOL_STATUS_INTERNAL;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return STREAMPOOL_STATUS_INTERNAL;
  } catch (...) {
    set_last_error("streampool: unknown exception");
    return STREAMPOOL_STATUS_INTERNAL;
  }
}

}  // namespace streampool::c_api

extern "C" {

const char* sp_last_error_message(void) { return streampool::c_api::last_error.c_str(); }

const char* sp_status_string(sp_status_t status) {
  switch (status) {
    case STREAMPOOL_STATUS_SUCCESS:
      return "STREAMPOOL_STATUS_SUCCESS";
    case STREAMPOOL_STATUS_INVALID_ARGUMENT:
      return "STREAMPOOL_STATUS_INVALID_ARGUMENT";
    case STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY:
      return "STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY";
    case STREAMPOOL_STATUS_NOT_AVAILABLE:
      return "STREAMPOOL_STATUS_NOT_AVAILABLE";
    case STREAMPOOL_STATUS_BACKEND_ERROR:
      return "STREAMPOOL_STATUS_BACKEND_ERROR";
    case STREAMPOOL_STATUS_INTERNAL:
      return "STREAMPOOL_STATUS_INTERNAL";
  }
  return "STREAMPOOL_STATUS_(unknown)";
}

sp_status_t sp_get_version(int* major, int* minor, int* patch) {
  return streampool::c_api::guarded(__func__, [&](const char* entry) {
    streampool::c_api::require(major, entry, "major");
    streampool::c_api::require(minor, entry, "minor");
    streampool::c_api::require(patch, entry, "patch");
    *major = STREAMPOOL_VERSION_MAJOR;
    *minor = STREAMPOOL_VERSION_MINOR;
    *patch = STREAMPOOL_VERSION_PATCH;
  });
}

uint64_t sp_max_allocation_bytes(void) { return STREAMPOOL_MAX_ALLOCATION_BYTES; }

}  // extern "C"
