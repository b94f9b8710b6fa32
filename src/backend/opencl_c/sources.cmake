# src/backend/opencl_c/: the OpenCL C kernel set (kernels.cl) and its launch plan (kernel_plan),
# shared by the backends that run OpenCL C. Included by each such backend's sources.cmake
# (src/backend/opencl/, src/backend/level_zero/); include_guard makes a second include a no-op, so
# the files are compiled once whichever backends are enabled.
#
# kernels.cl is embedded into the library as text: a build step writes it into a generated .cpp
# (embed_source.cmake) that defines streampool::detail::opencl_c_kernel_source() (kernel_source.hpp).
include_guard(GLOBAL)

set(streampool_opencl_c_dir "${CMAKE_CURRENT_LIST_DIR}")
set(streampool_opencl_c_generated "${PROJECT_BINARY_DIR}/generated/opencl_c/kernel_source.cpp")
add_custom_command(
  OUTPUT "${streampool_opencl_c_generated}"
  COMMAND ${CMAKE_COMMAND} -D "INPUT=${streampool_opencl_c_dir}/kernels.cl" -D
          "OUTPUT=${streampool_opencl_c_generated}" -P "${streampool_opencl_c_dir}/embed_source.cmake"
  DEPENDS "${streampool_opencl_c_dir}/kernels.cl" "${streampool_opencl_c_dir}/embed_source.cmake"
  COMMENT "Embedding src/backend/opencl_c/kernels.cl"
  VERBATIM)

list(APPEND streampool_sources "${streampool_opencl_c_dir}/kernel_plan.cpp"
     "${streampool_opencl_c_generated}")
