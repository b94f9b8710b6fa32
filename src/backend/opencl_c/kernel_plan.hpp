// streampool: the launch plan of a kernel_command over the OpenCL C kernel set (kernels.cl).
//
// Backends that run kernels.cl (OpenCL, Level Zero) share this: it decides which kernels run, in
// which order, with which arguments and how many groups, so that a backend only translates each
// launch into its own API (clSetKernelArg* + clEnqueueNDRangeKernel, zeKernelSetArgumentValue +
// zeCommandListAppendLaunchKernel). Launches must run in the order given, each after the
// previous one completed (an in-order queue gives that).
//
// Glossary
//   entry        one of the five kernels of kernels.cl; with a dtype it names one kernel
//                (sp_<entry>_<dtype>, kernel_name()).
//   launch       one kernel run: entry, dtype, arguments in kernels.cl's order, G groups of L.
//   argument     a device pointer (set as an SVM/USM pointer), scalar bytes (the kernel's
//                parameter type: 4 or 8 bytes) or a local-memory size (a `local T*` parameter:
//                set with a size and no value).
//   scratch      device memory the plan may use for partials (reduce) and tile totals (scans):
//                kernel_scratch_bytes() says how much; the caller provides it, and it must stay
//                untouched by other work until the plan's launches completed (on an in-order queue:
//                a per-queue buffer is enough). 0 bytes means no scratch is needed (nullptr is
//                fine then).
//
// The plans:
//   map_unary, map_binary   one launch, G = min(ceil(n/L), max_groups) (grid-stride); n == 0: none.
//   reduce                  n <= L: one launch of one group, out = k.out (n == 0 writes id(op)).
//                           Else pass 1 with G = min(ceil(n/L), L) groups writing G partials to
//                           scratch, pass 2 of one group folding them into k.out.
//   scans                   levels c0 = n, c(j+1) = ceil(cj/L) until one tile holds the level
//                           (cj <= L). Tile passes upwards (level 0: in0 -> out, exclusive and init
//                           from k; level j >= 1: the level's totals in place, exclusive with init
//                           id(op)), then add passes downwards (level j's data += the scanned
//                           totals of level j+1). 2*levels - 1 launches; n == 0: none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "streampool/export.hpp"
#include "streampool/kernel.hpp"

namespace streampool::detail {

/// The kernels of kernels.cl, per dtype.
enum class kernel_entry : std::uint8_t { map_unary, map_binary, reduce, scan_tiles, scan_add };

/// "sp_reduce_f32": the kernel's name in kernels.cl (a static string).
[[nodiscard]] STREAMPOOL_EXPORT const char* kernel_name(kernel_entry e, dtype t) noexcept;

/// One kernel argument (see the glossary above).
struct kernel_arg {
  enum class kind : std::uint8_t { pointer, scalar, local };
  kind what = kind::scalar;
  const void* pointer = nullptr;  ///< kind::pointer: the device address
  std::uint64_t bits = 0;         ///< kind::scalar: the value's bytes, little end first
  std::size_t size = 0;           ///< kind::scalar: 4 or 8 (bytes of bits used); kind::local: bytes

  [[nodiscard]] static kernel_arg device_pointer(const void* p) noexcept {
    return {kind::pointer, p, 0, sizeof(void*)};
  }
  [[nodiscard]] static kernel_arg value(std::uint64_t bits, std::size_t size) noexcept {
    return {kind::scalar, nullptr, bits, size};
  }
  [[nodiscard]] static kernel_arg local_bytes(std::size_t bytes) noexcept {
    return {kind::local, nullptr, 0, bytes};
  }
  /// The scalar's bytes as clSetKernelArg/zeKernelSetArgumentValue take them (size bytes from
  /// here; the host is little-endian like every device these backends drive).
  [[nodiscard]] const void* value_ptr() const noexcept { return &bits; }
};

inline constexpr std::size_t max_kernel_args = 8;

/// One launch: kernel `entry` for `type`, args in kernels.cl's order, `groups` groups of
/// `group_size` work items (global size groups * group_size, one dimension).
struct kernel_launch {
  kernel_entry entry = kernel_entry::map_unary;
  dtype type = dtype::f32;
  std::array<kernel_arg, max_kernel_args> args{};
  std::size_t arg_count = 0;
  std::size_t groups = 0;
  std::size_t group_size = 0;

  [[nodiscard]] const char* name() const noexcept { return kernel_name(entry, type); }
};

/// The launch shape a backend chose for a device.
struct kernel_shape {
  /// Work items per group: a power of two >= 2 that every kernel of the set accepts on the device
  /// (min of the device's maximum and each kernel's CL_KERNEL_WORK_GROUP_SIZE, rounded down).
  std::size_t group_size = 256;
  /// Most groups of a map launch (grid-stride beyond it). >= 1.
  std::size_t max_groups = 4096;
};

struct kernel_plan {
  std::vector<kernel_launch> launches;  ///< in order; empty = nothing to run
  std::size_t scratch_bytes = 0;        ///< what the plan uses of the scratch (<= what was given)
};

/// Scratch bytes the plan of `k` needs with group size `shape.group_size` (0 for maps and small
/// inputs). Each sub-array in it starts at a multiple of 128 bytes.
/// @throws logic_error when shape is invalid (group_size not a power of two >= 2, max_groups 0).
[[nodiscard]] STREAMPOOL_EXPORT std::size_t kernel_scratch_bytes(const kernel_command& k,
                                                                 const kernel_shape& shape);

/// The launches of `k` (a command backend::submit accepted: valid kind, op, dtype and operands).
/// `scratch` points to `scratch_bytes` bytes of device memory (nullptr when 0).
/// @throws logic_error when shape is invalid or scratch_bytes < kernel_scratch_bytes(k, shape),
///         naming the values.
[[nodiscard]] STREAMPOOL_EXPORT kernel_plan make_kernel_plan(const kernel_command& k,
                                                             const kernel_shape& shape,
                                                             void* scratch,
                                                             std::size_t scratch_bytes);

}  // namespace streampool::detail
