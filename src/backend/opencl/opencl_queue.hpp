// streampool: what the OpenCL backend keeps per queue (a native_queue points to one).
//
// Glossary
//   kernels  this queue's cl_kernel objects, created from the program on first use. A kernel's
//            arguments are state of the kernel object, so two threads setting them for two
//            launches would mix them up; with one set per queue, and the queue's mutex held from
//            the first clSetKernelArg to the enqueue, they cannot.
//   scratch  SVM memory for the launch plans' partials and tile totals (kernel_plan.hpp). One
//            buffer per queue is enough because the queue is in order: a launch that uses it runs
//            after every earlier launch that used it finished. It grows (doubling) when a plan
//            needs more; the old buffer is freed with clEnqueueSVMFree, in queue order, so no
//            earlier launch loses it.
//   staged   the uploads waiting for their copies (staged_uploads.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <mutex>

#include "backend/opencl_c/kernel_plan.hpp"
#include "opencl_api.hpp"
#include "staged_uploads.hpp"

namespace streampool::detail::ocl {

struct opencl_queue {
  explicit opencl_queue(const api& a, cl_command_queue queue) noexcept : q(queue), staged(a) {}

  const cl_command_queue q;
  /// Held by every call that enqueues on q (submit, record, wait_device), so that a kernel's
  /// arguments, the scratch and the staging list are never touched by two threads at once, and
  /// each call's commands stay together in the queue.
  std::mutex mu;
  /// By entry * kernel_dtype_count + dtype; null = not created yet. Guarded by mu, like the rest.
  std::array<cl_kernel, kernel_entry_count * kernel_dtype_count> kernels{};
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  staged_uploads staged;
};

}  // namespace streampool::detail::ocl
