// streampool: building kernels.cl for an OpenCL device (see kernel_program.hpp).
#include "kernel_program.hpp"

#include <algorithm>
#include <bit>
#include <utility>
#include <vector>

#include "backend/common/check.hpp"
#include "backend/opencl_c/kernel_source.hpp"

namespace streampool::detail::ocl {
namespace {

/// The build log of `program` on `dev` ("" when it cannot be read).
std::string build_log(const api& a, cl_program program, cl_device_id dev) {
  std::size_t size = 0;
  if (a.get_program_build_info(program, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) !=
          CL_SUCCESS ||
      size == 0) {
    return {};
  }
  std::string log(size, '\0');
  if (a.get_program_build_info(program, dev, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr) !=
      CL_SUCCESS) {
    return {};
  }
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

constexpr std::size_t preferred_group_size = 256;

}  // namespace

kernel_program::kernel_program(const api& a, cl_context ctx, device_traits dev)
    : a_(a), ctx_(ctx), dev_(std::move(dev)) {}

kernel_program::~kernel_program() {
  if (program_ != nullptr)
    report_teardown_error(a_, a_.release_program(program_), "clReleaseProgram");
}

cl_program kernel_program::get() {
  std::lock_guard<std::mutex> lk(mu_);
  if (program_ == nullptr) build_locked();
  return program_;
}

kernel_shape kernel_program::shape() {
  std::lock_guard<std::mutex> lk(mu_);
  if (program_ == nullptr) build_locked();
  return shape_;
}

void kernel_program::build_locked() {
  if (!failure_.empty())
    raise_backend_error(backend_error_kind::runtime, "opencl", failure_code_, failure_);
  const std::string_view text = opencl_c_kernel_source();
  const char* source = text.data();
  const std::size_t length = text.size();
  cl_int r = CL_SUCCESS;
  cl_program program = a_.create_program_with_source(ctx_, 1, &source, &length, &r);
  check(a_, r, "clCreateProgramWithSource(kernels.cl, %zu bytes) on device '%s'", length,
        dev_.name.c_str());
  std::string options = "-cl-std=CL1.2";
  if (dev_.fp64) options += " -DSP_FP64";
  if (dev_.correctly_rounded_sqrt) options += " -cl-fp32-correctly-rounded-divide-sqrt";
  r = a_.build_program(program, 1, &dev_.id, options.c_str(), nullptr, nullptr);
  if (r != CL_SUCCESS) {
    // Remembered, not retried: the source and the device do not change, and a second build would
    // cost as much and fail the same way.
    failure_ = format("clBuildProgram(kernels.cl, '%s') on device '%s' failed: %s; build log: %s",
                      options.c_str(), dev_.name.c_str(), describe(r).c_str(),
                      build_log(a_, program, dev_.id).c_str());
    failure_code_ = r;
    report_teardown_error(a_, a_.release_program(program), "clReleaseProgram");
    raise_backend_error(backend_error_kind::runtime, "opencl", r, failure_);
  }
  // The group size every kernel accepts: kernels with barriers may allow less than the device. Max
  // groups of a map launch: enough to keep any device busy; more only adds scheduling.
  std::size_t limit = std::min(preferred_group_size, dev_.max_work_group_size);
  try {
    for (int e = 0; e <= static_cast<int>(kernel_entry::scan_add); ++e) {
      for (int t = 0; t <= static_cast<int>(dtype::u64); ++t) {
        const auto type = static_cast<dtype>(t);
        if (type == dtype::f64 && !dev_.fp64) continue;
        const char* name = kernel_name(static_cast<kernel_entry>(e), type);
        cl_kernel k = a_.create_kernel(program, name, &r);
        check(a_, r, "clCreateKernel(%s) on device '%s'", name, dev_.name.c_str());
        std::size_t wg = 0;
        r = a_.get_kernel_work_group_info(k, dev_.id, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg,
                                          nullptr);
        report_teardown_error(a_, a_.release_kernel(k), "clReleaseKernel");
        check(a_, r, "clGetKernelWorkGroupInfo(%s, CL_KERNEL_WORK_GROUP_SIZE) on device '%s'", name,
              dev_.name.c_str());
        limit = std::min(limit, wg);
      }
    }
    if (limit < 2) {
      raise_backend_error(backend_error_kind::runtime, "opencl", CL_INVALID_WORK_GROUP_SIZE,
                          format("device '%s' accepts work groups of %zu items; the kernels need "
                                 "at least 2",
                                 dev_.name.c_str(), limit));
    }
  } catch (...) {
    report_teardown_error(a_, a_.release_program(program), "clReleaseProgram");
    throw;
  }
  shape_.group_size = std::bit_floor(limit);
  shape_.max_groups = 1024;
  program_ = program;
}

}  // namespace streampool::detail::ocl
