// streampool: the Level Zero backend's embedded SPIR-V modules.
//
// Both are built from src/backend/opencl_c/kernels.cl at build time (sources.cmake): spirv_fp32
// without the f64 kernels, spirv_fp64 with them (SP_FP64). A build without clang-15 and
// llvm-spirv-15 defines both as empty (data nullptr, size 0).
#pragma once

#include <cstddef>

namespace streampool::detail::ze {

struct spirv_module {
  const unsigned char* data;
  std::size_t size;
};

extern const spirv_module spirv_fp32;
extern const spirv_module spirv_fp64;

}  // namespace streampool::detail::ze
