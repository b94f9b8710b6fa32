// streampool: loading the OpenCL API (see opencl_api.hpp).
#include "opencl_api.hpp"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>

#include "streampool/error.hpp"

namespace streampool::detail::ocl {
namespace {

struct loaded {
  api table{};
  bool ok = false;
  std::string why;
};

// Resolves `name` into `slot`; false (and a reason) when the symbol is missing.
template <class Fn>
bool resolve(void* lib, const char* name, Fn& slot, std::string& why) {
  slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (slot == nullptr) {
    why = std::string("libOpenCL.so.1 has no symbol ") + name + " (an OpenCL 2.0 loader is needed)";
    return false;
  }
  return true;
}

loaded load_once() {
  loaded l;
  // RTLD_LOCAL: a program that links libOpenCL itself gets the same library, loaded once.
  void* lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    l.why = std::string("dlopen(libOpenCL.so.1) failed: ") + (e != nullptr ? e : "unknown error");
    return l;
  }
  // Never dlclose: queues, events and memory may be released from static destructors, after any
  // unload point we could choose.
  api& a = l.table;
  l.ok = resolve(lib, "clGetPlatformIDs", a.get_platform_ids, l.why) &&
         resolve(lib, "clGetPlatformInfo", a.get_platform_info, l.why) &&
         resolve(lib, "clGetDeviceIDs", a.get_device_ids, l.why) &&
         resolve(lib, "clGetDeviceInfo", a.get_device_info, l.why) &&
         resolve(lib, "clCreateContext", a.create_context, l.why) &&
         resolve(lib, "clReleaseContext", a.release_context, l.why) &&
         resolve(lib, "clCreateCommandQueueWithProperties", a.create_command_queue_with_properties,
                 l.why) &&
         resolve(lib, "clReleaseCommandQueue", a.release_command_queue, l.why) &&
         resolve(lib, "clFlush", a.flush, l.why) && resolve(lib, "clFinish", a.finish, l.why) &&
         resolve(lib, "clSVMAlloc", a.svm_alloc, l.why) &&
         resolve(lib, "clSVMFree", a.svm_free, l.why) &&
         resolve(lib, "clEnqueueSVMFree", a.enqueue_svm_free, l.why) &&
         resolve(lib, "clEnqueueSVMMemcpy", a.enqueue_svm_memcpy, l.why) &&
         resolve(lib, "clEnqueueSVMMemFill", a.enqueue_svm_mem_fill, l.why) &&
         resolve(lib, "clEnqueueMarkerWithWaitList", a.enqueue_marker_with_wait_list, l.why) &&
         resolve(lib, "clEnqueueBarrierWithWaitList", a.enqueue_barrier_with_wait_list, l.why) &&
         resolve(lib, "clWaitForEvents", a.wait_for_events, l.why) &&
         resolve(lib, "clGetEventInfo", a.get_event_info, l.why) &&
         resolve(lib, "clReleaseEvent", a.release_event, l.why) &&
         resolve(lib, "clCreateProgramWithSource", a.create_program_with_source, l.why) &&
         resolve(lib, "clBuildProgram", a.build_program, l.why) &&
         resolve(lib, "clGetProgramBuildInfo", a.get_program_build_info, l.why) &&
         resolve(lib, "clReleaseProgram", a.release_program, l.why) &&
         resolve(lib, "clCreateKernel", a.create_kernel, l.why) &&
         resolve(lib, "clReleaseKernel", a.release_kernel, l.why) &&
         resolve(lib, "clSetKernelArg", a.set_kernel_arg, l.why) &&
         resolve(lib, "clSetKernelArgSVMPointer", a.set_kernel_arg_svm_pointer, l.why) &&
         resolve(lib, "clGetKernelWorkGroupInfo", a.get_kernel_work_group_info, l.why) &&
         resolve(lib, "clEnqueueNDRangeKernel", a.enqueue_nd_range_kernel, l.why);
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

void check(cl_int r, const char* call, ...) {
  if (r == CL_SUCCESS) [[likely]]
    return;
  std::va_list args;
  va_start(args, call);
  std::string what;
  try {
    what = vformat(call, args);
  } catch (...) {  // no memory for the message; va_end must still run in this function
    va_end(args);
    throw;
  }
  va_end(args);
  throw backend_error(backend_error_kind::runtime, "opencl: " + what + " failed: " + describe(r),
                      "opencl", r);
}

void report_teardown_error(cl_int r, const char* what) noexcept {
  if (r == CL_SUCCESS) return;
  const char* name = code_name(r);
  std::fprintf(stderr, "streampool: opencl: %s failed: %s (%d)\n", what,
               name != nullptr ? name : "cl error", r);
}

const api* load(std::string* why) noexcept {
  // A function-local static: initialised once, thread-safe, and usable during static destruction
  // (deliberately leaked, like the CUDA driver table).
  static const loaded* const l = [] {
    try {
      return new loaded(load_once());
    } catch (...) {
      return static_cast<loaded*>(nullptr);
    }
  }();
  if (l != nullptr && l->ok) return &l->table;
  if (why != nullptr) {
    try {
      *why = l != nullptr ? l->why : "out of memory while loading libOpenCL.so.1";
    } catch (...) {  // the caller only loses the reason
    }
  }
  return nullptr;
}

}  // namespace streampool::detail::ocl
