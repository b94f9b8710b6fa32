// The kernels this driver can "run": those of streampool's shared OpenCL C source
// (src/backend/opencl_c/kernels.cl), emulated on the host by name, work-group by work-group, from
// the semantics documented in that file's header comment. zeModuleCreate checks the SPIR-V's magic
// number and finds which of these kernels the module has by their names' string literals in it
// (module_kernels); zeKernelCreate finds the emulation by the kernel's name.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernel_launch.hpp"

namespace streampool::ze_test_driver {

/// Argument sizes of a kernel: 0 marks a local-memory argument (set with a size and no value).
inline constexpr std::size_t max_kernel_args = 8;
using kernel_arg_sizes = std::array<std::uint8_t, max_kernel_args>;

struct kernel_def {
  const char* name;
  std::uint32_t num_args;
  kernel_arg_sizes arg_sizes;
  bool needs_fp64;  ///< an f64 kernel (kernels.cl has them only when built with SP_FP64)
  /// Runs the whole launch (every work-group) on the calling thread.
  void (*run)(const kernel_launch& launch);
};

/// The emulation of the kernel called `name`, or nullptr.
[[nodiscard]] const kernel_def* find_kernel(std::string_view name) noexcept;

/// The emulated kernels whose names appear in a SPIR-V module's bytes as a string literal: a
/// word-aligned, NUL-terminated string (as OpEntryPoint and OpName hold them).
[[nodiscard]] std::vector<const kernel_def*> module_kernels(const unsigned char* spirv,
                                                            std::size_t bytes);

}  // namespace streampool::ze_test_driver
