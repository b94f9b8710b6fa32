// streampool: uploads from pageable host memory, staged so that submit can return at once.
//
// The backend contract lets the caller reuse an upload's source as soon as submit returns, while
// clEnqueueSVMMemcpy without blocking reads the source whenever the copy runs. So the bytes are
// first copied into a buffer the backend owns, and that buffer is kept until the copy's event says
// it completed. One list per queue: the queue is in order, so the copies complete in list order
// and the finished ones are always at the front.
//
// Ownership: each entry owns its buffer and one reference to its event. A buffer is freed only
// after its copy completed (reap) or after the whole queue finished (release_all, from
// destroy_queue), never earlier and never lost.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>

#include "opencl_api.hpp"

namespace streampool::detail::ocl {

/// Not thread-safe: the owning queue's mutex guards it.
class staged_uploads {
 public:
  explicit staged_uploads(const api& a) noexcept : a_(a) {}
  staged_uploads(const staged_uploads&) = delete;
  staged_uploads& operator=(const staged_uploads&) = delete;
  ~staged_uploads() { release_all(); }

  /// Copies `bytes` bytes of `src` into a new staging buffer and enqueues their copy to `dst` on
  /// `q` without blocking. Frees the buffers of copies that completed meanwhile first.
  /// @throws backend_error when clEnqueueSVMMemcpy fails (nothing is kept then), std::bad_alloc
  ///         when there is no host memory for the staging buffer.
  void upload(cl_command_queue q, void* dst, const void* src, std::size_t bytes);

  /// Frees the buffers of the copies that completed (or failed: they will not read any more).
  void reap() noexcept;

  /// Frees every buffer. Only when every copy completed (the queue was finished).
  void release_all() noexcept;

  /// Bytes held in staging buffers now.
  [[nodiscard]] std::size_t held_bytes() const noexcept { return held_; }

 private:
  struct entry {
    cl_event done;
    std::unique_ptr<std::byte[]> bytes;
    std::size_t size;
  };

  const api& a_;
  std::deque<entry> entries_;  // in submission order, so in completion order
  std::size_t held_ = 0;
};

}  // namespace streampool::detail::ocl
