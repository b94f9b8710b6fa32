#include "module.hpp"

#include <cstring>

namespace streampool::ze_test_driver {

ze_result_t kernel::set_arg(std::uint32_t index, std::size_t size, const void* value) {
  std::lock_guard lock(mu_);
  if (index >= state_.args.size()) {
    return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
  }
  const std::size_t expected = def_->arg_sizes[index];
  kernel_arg& arg = state_.args[index];
  if (expected == 0) {  // local memory of `size` bytes
    if (value != nullptr || size == 0) {
      return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    arg.value.clear();
    arg.local_bytes = size;
  } else {
    if (size != expected) {
      return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE;
    }
    arg.value.assign(size, 0);
    if (value != nullptr) {
      std::memcpy(arg.value.data(), value, size);
    }
    arg.local_bytes = 0;
  }
  arg.set = true;
  return ZE_RESULT_SUCCESS;
}

ze_result_t kernel::set_group_size(std::uint32_t x, std::uint32_t y, std::uint32_t z) {
  if (x == 0 || y == 0 || z == 0 || std::uint64_t{x} * y * z > 1024) {
    return ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
  }
  std::lock_guard lock(mu_);
  state_.group_size = {x, y, z};
  return ZE_RESULT_SUCCESS;
}

ze_result_t kernel::snapshot(const ze_group_count_t& count, kernel_launch* out) {
  std::lock_guard lock(mu_);
  for (const kernel_arg& a : state_.args) {
    if (!a.set) {
      return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
  }
  *out = state_;
  out->group_count = {count.groupCountX, count.groupCountY, count.groupCountZ};
  return ZE_RESULT_SUCCESS;
}

}  // namespace streampool::ze_test_driver
