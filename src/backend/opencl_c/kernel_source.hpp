// streampool: the text of kernels.cl, embedded into the library at build time
// (sources.cmake, embed_source.cmake), for backends that build it at run time.
#pragma once

#include <string_view>

namespace streampool::detail {

/// The OpenCL C 1.2 source of the fixed kernel set (kernels.cl documents each kernel). Build it
/// with -DSP_FP64 on devices with cl_khr_fp64 to get the f64 kernels.
[[nodiscard]] std::string_view opencl_c_kernel_source() noexcept;

}  // namespace streampool::detail
