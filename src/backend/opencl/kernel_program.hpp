// streampool: the OpenCL program of the kernel set (src/backend/opencl_c/kernels.cl), built once
// per backend, lazily.
//
// Glossary
//   program  kernels.cl compiled for the backend's device: with -DSP_FP64 where the device has
//            cl_khr_fp64 (else the f64 kernels do not exist), and with
//            -cl-fp32-correctly-rounded-divide-sqrt where the device supports it (f32 div and sqrt
//            then match the host backend bit for bit).
//   shape    the launch shape kernel_plan uses on this device: the group size is the largest power
//            of two, at most 256, that the device and every kernel of the program accept.
//
// Building compiles the whole kernel set, which is slow next to any other call, so it happens on
// the first kernel submitted, never in make_opencl_backend: programs that only allocate and copy
// never pay for it.
#pragma once

#include <mutex>
#include <string>

#include "backend/opencl_c/kernel_plan.hpp"
#include "opencl_api.hpp"

namespace streampool::detail::ocl {

/// What the program needs to know about the device.
struct device_traits {
  cl_device_id id = nullptr;
  std::string name;                       ///< CL_DEVICE_NAME, for messages
  bool fp64 = false;                      ///< cl_khr_fp64 is among CL_DEVICE_EXTENSIONS
  bool correctly_rounded_sqrt = false;    ///< CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
  std::size_t max_work_group_size = 256;  ///< CL_DEVICE_MAX_WORK_GROUP_SIZE
};

class kernel_program {
 public:
  kernel_program(const api& a, cl_context ctx, device_traits dev);
  kernel_program(const kernel_program&) = delete;
  kernel_program& operator=(const kernel_program&) = delete;
  ~kernel_program();

  /// The built program; builds it on the first call (thread-safe: concurrent callers wait for
  /// one build).
  /// @throws backend_error (runtime) "opencl: clBuildProgram(kernels.cl, '<options>') on device
  ///         '<name>' failed: <code>; build log: <log>". A failed build is not retried: later
  ///         calls throw the same error.
  [[nodiscard]] cl_program get();
  /// The launch shape (builds the program first, like get()).
  [[nodiscard]] kernel_shape shape();
  [[nodiscard]] const device_traits& device() const noexcept { return dev_; }

 private:
  void build_locked();

  const api& a_;
  const cl_context ctx_;
  const device_traits dev_;

  std::mutex mu_;                 // guards the fields below (the build)
  cl_program program_ = nullptr;  // non-null once built
  kernel_shape shape_{};
  std::string failure_;  // non-empty once a build failed: what every later call throws
  cl_int failure_code_ = CL_SUCCESS;
};

}  // namespace streampool::detail::ocl
