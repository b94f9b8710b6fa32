// Modules and kernels. A module knows which emulated kernels it has (their names are in its
// SPIR-V); a kernel is a named emulation (kernel_emulator.hpp) with its argument values and group
// size.
#pragma once

#include <level_zero/ze_api.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernel_emulator.hpp"
#include "kernel_launch.hpp"

namespace streampool::ze_test_driver {

struct module {
  std::vector<const kernel_def*> kernels;  ///< the emulated kernels named in its SPIR-V

  [[nodiscard]] bool has(const kernel_def* def) const {
    return std::find(kernels.begin(), kernels.end(), def) != kernels.end();
  }
  /// Built from kernels.cl with SP_FP64: it has f64 kernels. Its integer sqrt then goes through
  /// double (kernels.cl's SP_INT_SQRT), so the emulation must know.
  [[nodiscard]] bool defines_fp64() const {
    return std::any_of(kernels.begin(), kernels.end(),
                       [](const kernel_def* d) { return d->needs_fp64; });
  }
};

class kernel {
 public:
  kernel(const kernel_def* def, bool fp64) : def_(def) {
    state_.args.resize(def->num_args);
    state_.fp64 = fp64;
  }

  [[nodiscard]] const kernel_def& def() const noexcept { return *def_; }
  /// zeKernelSetArgumentValue: `value` points to the argument's bytes (for a pointer argument,
  /// to the pointer; nullptr sets a null pointer); for a local-memory argument `value` is nullptr
  /// and `size` the bytes. A size that does not match the kernel's parameter is refused.
  ze_result_t set_arg(std::uint32_t index, std::size_t size, const void* value);
  ze_result_t set_group_size(std::uint32_t x, std::uint32_t y, std::uint32_t z);
  /// A copy of the arguments and group size with `count` groups; ..._INVALID_ARGUMENT when an
  /// argument was never set.
  ze_result_t snapshot(const ze_group_count_t& count, kernel_launch* out);

 private:
  const kernel_def* const def_;
  std::mutex mu_;
  kernel_launch state_;  // guarded by mu_
};

[[nodiscard]] inline module* from_handle(ze_module_handle_t h) noexcept {
  return reinterpret_cast<module*>(h);
}
[[nodiscard]] inline ze_module_handle_t to_handle(module* m) noexcept {
  return reinterpret_cast<ze_module_handle_t>(m);
}
[[nodiscard]] inline kernel* from_handle(ze_kernel_handle_t h) noexcept {
  return reinterpret_cast<kernel*>(h);
}
[[nodiscard]] inline ze_kernel_handle_t to_handle(kernel* k) noexcept {
  return reinterpret_cast<ze_kernel_handle_t>(k);
}

}  // namespace streampool::ze_test_driver
