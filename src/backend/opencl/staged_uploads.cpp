// streampool: staged uploads (see staged_uploads.hpp).
#include "staged_uploads.hpp"

#include <cstring>

namespace streampool::detail::ocl {

void staged_uploads::upload(cl_command_queue q, void* dst, const void* src, std::size_t bytes) {
  reap();
  entry e{nullptr, std::make_unique_for_overwrite<std::byte[]>(bytes), bytes};
  std::memcpy(e.bytes.get(), src, bytes);
  check(a_, a_.enqueue_svm_memcpy(q, CL_FALSE, dst, e.bytes.get(), bytes, 0, nullptr, &e.done),
        "clEnqueueSVMMemcpy(dst=%p, staged host source, %zu bytes)", dst, bytes);
  try {
    entries_.push_back(std::move(e));
  } catch (...) {
    // The copy is enqueued and reads the buffer later: wait for it before the buffer goes.
    (void)a_.wait_for_events(1, &e.done);
    report_teardown_error(a_, a_.release_event(e.done), "clReleaseEvent (staged upload)");
    throw;
  }
  held_ += bytes;
}

void staged_uploads::reap() noexcept {
  while (!entries_.empty()) {
    entry& e = entries_.front();
    cl_int status = CL_QUEUED;
    const cl_int r = a_.get_event_info(e.done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                       &status, nullptr);
    // Still queued or running: so are the ones behind it (in-order queue). A failed query keeps
    // the buffer too; release_all frees it once the queue finished.
    if (r != CL_SUCCESS || status > CL_COMPLETE) return;
    report_teardown_error(a_, a_.release_event(e.done), "clReleaseEvent (staged upload)");
    held_ -= e.size;
    entries_.pop_front();
  }
}

void staged_uploads::release_all() noexcept {
  for (entry& e : entries_)
    report_teardown_error(a_, a_.release_event(e.done), "clReleaseEvent (staged upload)");
  entries_.clear();
  held_ = 0;
}

}  // namespace streampool::detail::ocl
