// streampool: how the Level Zero backend checks its calls.
#pragma once

#include <level_zero/ze_api.h>

#include "driver.hpp"

namespace streampool::detail::ze {

/// The check of every Level Zero call: throws backend_error (kind runtime, the ze_result_t as the
/// native code) "level_zero: <call> failed: <result name> (<hex>)[: <driver's text>]" when `r` is
/// not ZE_RESULT_SUCCESS; `call` is printf-formatted with the values only then. Results that are
/// not errors to the caller (out of memory where the contract returns nullptr, not ready) are
/// handled before it.
[[gnu::format(printf, 4, 5)]] void check(const driver& d, ze_driver_handle_t drv, ze_result_t r,
                                         const char* call, ...);

/// For teardown paths (noexcept operations, destructors): a failure is reported once on stderr,
/// since there is no caller to throw to; it means a broken precondition or a lost device.
void report_teardown_error(const driver& d, ze_result_t r, const char* what) noexcept;

}  // namespace streampool::detail::ze
