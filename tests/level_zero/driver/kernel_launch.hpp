// What a kernel launch carries to the worker: the arguments and sizes captured at append time
// (Level Zero semantics: changing a kernel's arguments after an append does not change the
// appended launch).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace streampool::ze_test_driver {

/// One argument as zeKernelSetArgumentValue set it.
struct kernel_arg {
  bool set = false;
  std::vector<unsigned char> value;  ///< the bytes pArgValue pointed to (empty for local memory)
  std::size_t local_bytes = 0;       ///< local memory size, when pArgValue was nullptr
};

struct kernel_launch {
  std::vector<kernel_arg> args;
  std::array<std::uint32_t, 3> group_size{1, 1, 1};
  std::array<std::uint32_t, 3> group_count{1, 1, 1};
  bool fp64 = false;  ///< the module was built with -DSP_FP64 (kernels.cl's integer sqrt differs)

  /// Argument i read as a T (a pointer, or a scalar of the kernel's type).
  template <class T>
  [[nodiscard]] T arg(std::size_t i) const {
    T v{};
    std::memcpy(&v, args[i].value.data(),
                args[i].value.size() < sizeof v ? args[i].value.size() : sizeof v);
    return v;
  }
};

}  // namespace streampool::ze_test_driver
