// Event pools and events (event.hpp: the flags and the reuse detector).
#include <atomic>

#include "api.hpp"
#include "event.hpp"

namespace streampool::ze_test_driver::api {
namespace {

std::atomic<uint64_t> next_pool_id{1};

}  // namespace

ze_result_t ZE_APICALL event_pool_create(ze_context_handle_t, const ze_event_pool_desc_t* desc,
                                         uint32_t, ze_device_handle_t*,
                                         ze_event_pool_handle_t* pool) {
  // Timestamps and IPC are not emulated; every pool is host-visible whether asked or not.
  if ((desc->flags & ~static_cast<ze_event_pool_flags_t>(ZE_EVENT_POOL_FLAG_HOST_VISIBLE)) != 0) {
    return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
  }
  if (desc->count == 0) {
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  *pool = to_handle(new event_pool(desc->count, next_pool_id.fetch_add(1)));
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL event_pool_destroy(ze_event_pool_handle_t pool) {
  event_pool* p = from_handle(pool);
  if (!p->empty()) {
    return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;  // its events must be destroyed first
  }
  delete p;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL event_create(ze_event_pool_handle_t pool, const ze_event_desc_t* desc,
                                    ze_event_handle_t* e) {
  auto created = from_handle(pool)->create(desc->index);
  if (created == nullptr) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // index out of range or already in use
  }
  *e = to_handle(created.get());
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL event_destroy(ze_event_handle_t e) {
  event* ev = from_handle(e);
  ev->pool()->destroy(ev);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL event_host_signal(ze_event_handle_t e) {
  from_handle(e)->signal({"zeEventHostSignal"});
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL event_host_synchronize(ze_event_handle_t e, uint64_t timeout) {
  return from_handle(e)->host_wait(timeout) ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

ze_result_t ZE_APICALL event_query_status(ze_event_handle_t e) {
  return from_handle(e)->is_signalled() ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

ze_result_t ZE_APICALL event_host_reset(ze_event_handle_t e) {
  from_handle(e)->reset({"zeEventHostReset"});
  return ZE_RESULT_SUCCESS;
}

}  // namespace streampool::ze_test_driver::api
