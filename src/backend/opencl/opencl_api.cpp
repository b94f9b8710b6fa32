// streampool: loading the OpenCL API (see opencl_api.hpp).
#include "opencl_api.hpp"

#include <array>
#include <cstdio>

#include "backend/common/dynamic_library.hpp"

namespace streampool::detail::ocl {
namespace {

// Every entry point is required: the backend needs OpenCL 2.0 (SVM), and a loader without one of
// them is older.
constexpr std::array api_symbols{
    required_symbol<&api::get_platform_ids>("clGetPlatformIDs"),
    required_symbol<&api::get_platform_info>("clGetPlatformInfo"),
    required_symbol<&api::get_device_ids>("clGetDeviceIDs"),
    required_symbol<&api::get_device_info>("clGetDeviceInfo"),
    required_symbol<&api::create_context>("clCreateContext"),
    required_symbol<&api::release_context>("clReleaseContext"),
    required_symbol<&api::create_command_queue_with_properties>(
        "clCreateCommandQueueWithProperties"),
    required_symbol<&api::release_command_queue>("clReleaseCommandQueue"),
    required_symbol<&api::flush>("clFlush"),
    required_symbol<&api::finish>("clFinish"),
    required_symbol<&api::svm_alloc>("clSVMAlloc"),
    required_symbol<&api::svm_free>("clSVMFree"),
    required_symbol<&api::enqueue_svm_free>("clEnqueueSVMFree"),
    required_symbol<&api::enqueue_svm_memcpy>("clEnqueueSVMMemcpy"),
    required_symbol<&api::enqueue_svm_mem_fill>("clEnqueueSVMMemFill"),
    required_symbol<&api::enqueue_marker_with_wait_list>("clEnqueueMarkerWithWaitList"),
    required_symbol<&api::enqueue_barrier_with_wait_list>("clEnqueueBarrierWithWaitList"),
    required_symbol<&api::wait_for_events>("clWaitForEvents"),
    required_symbol<&api::get_event_info>("clGetEventInfo"),
    required_symbol<&api::release_event>("clReleaseEvent"),
    required_symbol<&api::create_program_with_source>("clCreateProgramWithSource"),
    required_symbol<&api::build_program>("clBuildProgram"),
    required_symbol<&api::get_program_build_info>("clGetProgramBuildInfo"),
    required_symbol<&api::release_program>("clReleaseProgram"),
    required_symbol<&api::create_kernel>("clCreateKernel"),
    required_symbol<&api::release_kernel>("clReleaseKernel"),
    required_symbol<&api::set_kernel_arg>("clSetKernelArg"),
    required_symbol<&api::set_kernel_arg_svm_pointer>("clSetKernelArgSVMPointer"),
    required_symbol<&api::get_kernel_work_group_info>("clGetKernelWorkGroupInfo"),
    required_symbol<&api::enqueue_nd_range_kernel>("clEnqueueNDRangeKernel"),
};

loaded_runtime<api> load_api() {
  loaded_runtime<api> l;
  if (!l.library.open("libOpenCL.so.1", l.why)) return l;
  if (!bind_symbols(l.library, l.table, api_symbols, l.why)) {
    l.why += " (an OpenCL 2.0 loader is needed)";
    return l;
  }
  l.ok = true;
  return l;
}

const char* code_name(cl_int code) {
  switch (code) {
    case CL_SUCCESS:
      return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND:
      return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE:
      return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE:
      return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES:
      return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY:
      return "CL_OUT_OF_HOST_MEMORY";
    case CL_PROFILING_INFO_NOT_AVAILABLE:
      return "CL_PROFILING_INFO_NOT_AVAILABLE";
    case CL_MEM_COPY_OVERLAP:
      return "CL_MEM_COPY_OVERLAP";
    case CL_IMAGE_FORMAT_MISMATCH:
      return "CL_IMAGE_FORMAT_MISMATCH";
    case CL_IMAGE_FORMAT_NOT_SUPPORTED:
      return "CL_IMAGE_FORMAT_NOT_SUPPORTED";
    case CL_MAP_FAILURE:
      return "CL_MAP_FAILURE";
    case CL_MISALIGNED_SUB_BUFFER_OFFSET:
      return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST:
      return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case CL_COMPILE_PROGRAM_FAILURE:
      return "CL_COMPILE_PROGRAM_FAILURE";
    case CL_LINKER_NOT_AVAILABLE:
      return "CL_LINKER_NOT_AVAILABLE";
    case CL_LINK_PROGRAM_FAILURE:
      return "CL_LINK_PROGRAM_FAILURE";
    case CL_DEVICE_PARTITION_FAILED:
      return "CL_DEVICE_PARTITION_FAILED";
    case CL_KERNEL_ARG_INFO_NOT_AVAILABLE:
      return "CL_KERNEL_ARG_INFO_NOT_AVAILABLE";
    case CL_INVALID_VALUE:
      return "CL_INVALID_VALUE";
    case CL_INVALID_DEVICE_TYPE:
      return "CL_INVALID_DEVICE_TYPE";
    case CL_INVALID_PLATFORM:
      return "CL_INVALID_PLATFORM";
    case CL_INVALID_DEVICE:
      return "CL_INVALID_DEVICE";
    case CL_INVALID_CONTEXT:
      return "CL_INVALID_CONTEXT";
    case CL_INVALID_QUEUE_PROPERTIES:
      return "CL_INVALID_QUEUE_PROPERTIES";
    case CL_INVALID_COMMAND_QUEUE:
      return "CL_INVALID_COMMAND_QUEUE";
    case CL_INVALID_HOST_PTR:
      return "CL_INVALID_HOST_PTR";
    case CL_INVALID_MEM_OBJECT:
      return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_IMAGE_FORMAT_DESCRIPTOR:
      return "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR";
    case CL_INVALID_IMAGE_SIZE:
      return "CL_INVALID_IMAGE_SIZE";
    case CL_INVALID_SAMPLER:
      return "CL_INVALID_SAMPLER";
    case CL_INVALID_BINARY:
      return "CL_INVALID_BINARY";
    case CL_INVALID_BUILD_OPTIONS:
      return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM:
      return "CL_INVALID_PROGRAM";
    case CL_INVALID_PROGRAM_EXECUTABLE:
      return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME:
      return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL_DEFINITION:
      return "CL_INVALID_KERNEL_DEFINITION";
    case CL_INVALID_KERNEL:
      return "CL_INVALID_KERNEL";
    case CL_INVALID_ARG_INDEX:
      return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE:
      return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE:
      return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_KERNEL_ARGS:
      return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_DIMENSION:
      return "CL_INVALID_WORK_DIMENSION";
    case CL_INVALID_WORK_GROUP_SIZE:
      return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE:
      return "CL_INVALID_WORK_ITEM_SIZE";
    case CL_INVALID_GLOBAL_OFFSET:
      return "CL_INVALID_GLOBAL_OFFSET";
    case CL_INVALID_EVENT_WAIT_LIST:
      return "CL_INVALID_EVENT_WAIT_LIST";
    case CL_INVALID_EVENT:
      return "CL_INVALID_EVENT";
    case CL_INVALID_OPERATION:
      return "CL_INVALID_OPERATION";
    case CL_INVALID_GL_OBJECT:
      return "CL_INVALID_GL_OBJECT";
    case CL_INVALID_BUFFER_SIZE:
      return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_MIP_LEVEL:
      return "CL_INVALID_MIP_LEVEL";
    case CL_INVALID_GLOBAL_WORK_SIZE:
      return "CL_INVALID_GLOBAL_WORK_SIZE";
    case CL_INVALID_PROPERTY:
      return "CL_INVALID_PROPERTY";
    case CL_INVALID_IMAGE_DESCRIPTOR:
      return "CL_INVALID_IMAGE_DESCRIPTOR";
    case CL_INVALID_COMPILER_OPTIONS:
      return "CL_INVALID_COMPILER_OPTIONS";
    case CL_INVALID_LINKER_OPTIONS:
      return "CL_INVALID_LINKER_OPTIONS";
    case CL_INVALID_DEVICE_PARTITION_COUNT:
      return "CL_INVALID_DEVICE_PARTITION_COUNT";
    case CL_INVALID_PIPE_SIZE:
      return "CL_INVALID_PIPE_SIZE";
    case CL_INVALID_DEVICE_QUEUE:
      return "CL_INVALID_DEVICE_QUEUE";
    case CL_INVALID_SPEC_ID:
      return "CL_INVALID_SPEC_ID";
    case CL_MAX_SIZE_RESTRICTION_EXCEEDED:
      return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
    default:
      return nullptr;
  }
}

}  // namespace

std::string describe(cl_int code) {
  const char* name = code_name(code);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s (%d)", name != nullptr ? name : "cl error", code);
  return buf;
}

std::string api::describe(long code) const { return ocl::describe(static_cast<cl_int>(code)); }

const api* load(std::string* why) noexcept {
  return load_once<api, load_api>(why, nullptr, "libOpenCL.so.1");
}

}  // namespace streampool::detail::ocl
