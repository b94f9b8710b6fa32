# Writes OUTPUT, a C++ source defining streampool::detail::opencl_c_kernel_source() as the text of
# INPUT (kernels.cl), in a raw string literal. Run as `cmake -D INPUT=... -D OUTPUT=... -P` by the
# build step in sources.cmake.
if(NOT INPUT OR NOT OUTPUT)
  message(FATAL_ERROR "embed_source.cmake: INPUT and OUTPUT are required")
endif()
file(READ "${INPUT}" text)
set(delimiter "streampool_cl")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "embed_source.cmake: ${INPUT} contains the raw-string delimiter")
endif()
file(
  WRITE "${OUTPUT}.tmp"
  "// Generated from src/backend/opencl_c/kernels.cl by embed_source.cmake: do not edit.\n"
  "#include \"backend/opencl_c/kernel_source.hpp\"\n\n"
  "namespace streampool::detail {\n\n"
  "std::string_view opencl_c_kernel_source() noexcept {\n"
  "  static constexpr char text[] = R\"${delimiter}(${text})${delimiter}\";\n"
  "  return {text, sizeof text - 1};\n"
  "}\n\n"
  "}  // namespace streampool::detail\n")
# Only replace when the content changed, so that an unchanged kernels.cl rebuilds nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
