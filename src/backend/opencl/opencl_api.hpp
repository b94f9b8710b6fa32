// streampool: the OpenCL API, loaded at run time.
//
// Glossary
//   api table  the OpenCL entry points this backend calls, resolved once per process with
//              dlopen("libOpenCL.so.1") (the ICD loader, which dispatches to every installed
//              platform: PoCL, vendor drivers) and dlsym. The library never links OpenCL, so it
//              builds and loads on machines without it; a missing loader is "not available".
//
// The Khronos headers are included for the API's types and constants only; each table entry has
// the type of the function the header declares (decltype), so a signature cannot be mistyped.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>

#include <string>

#include "backend/common/check.hpp"

namespace streampool::detail::ocl {

/// The OpenCL entry points the backend calls. Every pointer is non-null once `load` succeeded. The
/// table also names the API's results for the checks.
struct api final : runtime_errors {
  decltype(&::clGetPlatformIDs) get_platform_ids;
  decltype(&::clGetPlatformInfo) get_platform_info;
  decltype(&::clGetDeviceIDs) get_device_ids;
  decltype(&::clGetDeviceInfo) get_device_info;
  decltype(&::clCreateContext) create_context;
  decltype(&::clReleaseContext) release_context;
  decltype(&::clCreateCommandQueueWithProperties) create_command_queue_with_properties;
  decltype(&::clReleaseCommandQueue) release_command_queue;
  decltype(&::clFlush) flush;
  decltype(&::clFinish) finish;
  decltype(&::clSVMAlloc) svm_alloc;
  decltype(&::clSVMFree) svm_free;
  decltype(&::clEnqueueSVMFree) enqueue_svm_free;
  decltype(&::clEnqueueSVMMemcpy) enqueue_svm_memcpy;
  decltype(&::clEnqueueSVMMemFill) enqueue_svm_mem_fill;
  decltype(&::clEnqueueMarkerWithWaitList) enqueue_marker_with_wait_list;
  decltype(&::clEnqueueBarrierWithWaitList) enqueue_barrier_with_wait_list;
  decltype(&::clWaitForEvents) wait_for_events;
  decltype(&::clGetEventInfo) get_event_info;
  decltype(&::clReleaseEvent) release_event;
  decltype(&::clCreateProgramWithSource) create_program_with_source;
  decltype(&::clBuildProgram) build_program;
  decltype(&::clGetProgramBuildInfo) get_program_build_info;
  decltype(&::clReleaseProgram) release_program;
  decltype(&::clCreateKernel) create_kernel;
  decltype(&::clReleaseKernel) release_kernel;
  decltype(&::clSetKernelArg) set_kernel_arg;
  decltype(&::clSetKernelArgSVMPointer) set_kernel_arg_svm_pointer;
  decltype(&::clGetKernelWorkGroupInfo) get_kernel_work_group_info;
  decltype(&::clEnqueueNDRangeKernel) enqueue_nd_range_kernel;

  [[nodiscard]] const char* backend() const noexcept override { return "opencl"; }
  [[nodiscard]] std::string describe(long code) const override;
};

/// "CL_OUT_OF_RESOURCES (-5)", or "cl error (-1234)" for a code the headers do not name.
[[nodiscard]] std::string describe(cl_int code);

/// The process-wide api table, loaded on first call (thread-safe). nullptr when libOpenCL.so.1
/// cannot be loaded or lacks an entry point (an OpenCL 1.x loader); then `*why` (if given) says
/// why.
[[nodiscard]] const api* load(std::string* why = nullptr) noexcept;

}  // namespace streampool::detail::ocl
