# src/backend/opencl/: the OpenCL backend (include/streampool/opencl.hpp). Included by the root
# CMakeLists.txt before add_library(streampool) when STREAMPOOL_ENABLE_OPENCL is on.
#
# libOpenCL.so.1 is loaded with dlopen at run time (opencl_api.hpp), so the build needs only the
# Khronos headers, for the API's types and constants; without them the backend is left out and
# everything else still builds.
find_path(STREAMPOOL_OPENCL_INCLUDE_DIR CL/cl.h DOC "Directory holding the Khronos CL/cl.h")
if(NOT STREAMPOOL_OPENCL_INCLUDE_DIR)
  message(STATUS "streampool: no CL/cl.h found (install opencl-headers); building without the "
                 "OpenCL backend")
  return()
endif()

file(GLOB streampool_opencl_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/*.cpp")
list(APPEND streampool_sources ${streampool_opencl_sources})
# Only these files include CL/cl.h (as a system header: its code is not ours to warn about).
set_source_files_properties(${streampool_opencl_sources} PROPERTIES INCLUDE_DIRECTORIES
                                                                    "${STREAMPOOL_OPENCL_INCLUDE_DIR}")
# The kernel set and its launch plan, shared with the Level Zero backend.
include("${PROJECT_SOURCE_DIR}/src/backend/opencl_c/sources.cmake")
set(streampool_have_opencl_backend ON)
