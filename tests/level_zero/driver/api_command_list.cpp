// Immediate command lists and their appends (command_list.hpp: one worker per list, in order).
// Regular command lists and command queues are not emulated.
#include <cstring>
#include <vector>

#include "api.hpp"
#include "command_list.hpp"
#include "module.hpp"

namespace streampool::ze_test_driver::api {

ze_result_t ZE_APICALL command_list_create_immediate(ze_context_handle_t, ze_device_handle_t,
                                                     const ze_command_queue_desc_t* desc,
                                                     ze_command_list_handle_t* list) {
  if (desc->ordinal != 0 || desc->index != 0) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // one queue group with one queue
  }
  if (desc->mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS) {
    return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;  // only asynchronous execution is emulated
  }
  *list = to_handle(new command_list);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL command_list_destroy(ze_command_list_handle_t list) {
  delete from_handle(list);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL command_list_append_barrier(ze_command_list_handle_t list,
                                                   ze_event_handle_t signal, uint32_t num_waits,
                                                   ze_event_handle_t* waits) {
  // Execution is in order already: a barrier is its waits and its signal.
  return from_handle(list)->append(signal, num_waits, waits, nullptr);
}

ze_result_t ZE_APICALL command_list_append_memory_copy(ze_command_list_handle_t list, void* dst,
                                                       const void* src, size_t size,
                                                       ze_event_handle_t signal, uint32_t num_waits,
                                                       ze_event_handle_t* waits) {
  if (size != 0 && (dst == nullptr || src == nullptr)) {
    return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  }
  return from_handle(list)->append(signal, num_waits, waits, [dst, src, size] {
    if (size != 0) {
      std::memmove(dst, src, size);
    }
  });
}

ze_result_t ZE_APICALL command_list_append_memory_fill(ze_command_list_handle_t list, void* dst,
                                                       const void* pattern, size_t pattern_size,
                                                       size_t size, ze_event_handle_t signal,
                                                       uint32_t num_waits,
                                                       ze_event_handle_t* waits) {
  if (pattern_size == 0 || pattern_size > 128 || (pattern_size & (pattern_size - 1)) != 0) {
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  if (size != 0 && (dst == nullptr || pattern == nullptr)) {
    return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  }
  // The pattern is read at append time, as the program may reuse its memory at once.
  const auto* bytes = static_cast<const unsigned char*>(pattern);
  std::vector<unsigned char> copy(bytes, bytes + pattern_size);
  return from_handle(list)->append(signal, num_waits, waits, [dst, size, copy = std::move(copy)] {
    auto* out = static_cast<unsigned char*>(dst);
    for (size_t i = 0; i < size; ++i) {
      out[i] = copy[i % copy.size()];
    }
  });
}

ze_result_t ZE_APICALL command_list_append_signal_event(ze_command_list_handle_t list,
                                                        ze_event_handle_t e) {
  return from_handle(list)->append(e, 0, nullptr, nullptr);
}

ze_result_t ZE_APICALL command_list_append_wait_on_events(ze_command_list_handle_t list,
                                                          uint32_t num_events,
                                                          ze_event_handle_t* events) {
  return from_handle(list)->append(nullptr, num_events, events, nullptr);
}

ze_result_t ZE_APICALL command_list_append_event_reset(ze_command_list_handle_t list,
                                                       ze_event_handle_t e) {
  return from_handle(list)->append(nullptr, 0, nullptr, nullptr, e);
}

ze_result_t ZE_APICALL command_list_append_launch_kernel(
    ze_command_list_handle_t list, ze_kernel_handle_t k, const ze_group_count_t* count,
    ze_event_handle_t signal, uint32_t num_waits, ze_event_handle_t* waits) {
  kernel* kern = from_handle(k);
  kernel_launch launch;
  if (ze_result_t r = kern->snapshot(*count, &launch); r != ZE_RESULT_SUCCESS) {
    return r;
  }
  auto run = kern->def().run;
  return from_handle(list)->append(signal, num_waits, waits,
                                   [run, launch = std::move(launch)] { run(launch); });
}

}  // namespace streampool::ze_test_driver::api
