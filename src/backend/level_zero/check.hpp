// streampool: how the Level Zero backend's checks name its results (backend/common/check.hpp).
#pragma once

#include <level_zero/ze_api.h>

#include <string>

#include "backend/common/check.hpp"
#include "driver.hpp"

namespace streampool::detail::ze {

/// Whether `r` is out of memory, which the contract answers with nullptr or false: the device's,
/// or the host's, which a driver that keeps device memory in host memory (the test driver) may
/// report for the same condition.
[[nodiscard]] constexpr bool is_out_of_memory(ze_result_t r) noexcept {
  return r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
}

/// The results of calls into one driver, as check() names them: with the driver's own words for
/// its last error on this thread (driver::describe), which needs the driver's handle.
class driver_errors final : public runtime_errors {
 public:
  /// `drv` may be nullptr (calls into the loader before a driver is chosen): no driver's words.
  driver_errors(const driver& d, ze_driver_handle_t drv) noexcept : d_(d), drv_(drv) {}

  [[nodiscard]] const char* backend() const noexcept override { return d_.backend(); }
  [[nodiscard]] std::string describe(long code) const override {
    return d_.describe(static_cast<ze_result_t>(code), drv_);
  }

 private:
  const driver& d_;
  const ze_driver_handle_t drv_;
};

}  // namespace streampool::detail::ze
