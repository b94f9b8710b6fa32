// Shared by the Level Zero backend's tests: the device under test and the test driver's hooks.
//
// The tests run on the project's host-semantics Level Zero test driver (tests/level_zero/driver/),
// which CTest names to the loader with ZE_ENABLE_ALT_DRIVERS. Where that variable names a driver,
// Level Zero must be available: a test that cannot get a device fails instead of skipping, so
// that a broken driver or backend never passes as "skipped".
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "level_zero/ze_test_driver_hooks.hpp"
#include "streampool/level_zero.hpp"
#include "streampool/streampool.hpp"

namespace streampool::test {

/// The test driver's hooks (ze_test_driver_hooks.hpp), found once Level Zero was initialised.
/// @throws std::runtime_error when the driver is not loaded or lacks them.
inline const ze_test_driver_hooks& hooks() {
  static const ze_test_driver_hooks h = [] {
    (void)level_zero_available();  // zeInit: the loader loads the driver
    return ze_test_driver_hooks::find();
  }();
  return h;
}

/// The event-reuse violations the test driver recorded so far, one string each.
inline std::vector<std::string> ze_violations() {
  const ze_test_driver_hooks& h = hooks();
  const std::size_t n = h.violations(nullptr, 0);
  if (n == 0) return {};
  const std::string text = h.violation_text();
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out.push_back(line);
  if (out.empty()) out.emplace_back(std::to_string(n) + " violations");
  return out;
}

/// Bytes the test driver holds (allocations and physical memory).
inline std::optional<std::size_t> ze_bytes_held() { return hooks().bytes_held(); }

/// Fails the current test unless Level Zero (the test driver) is available, with the reason.
inline void require_level_zero() {
  if (level_zero_available()) {
    try {
      (void)hooks();
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
    return;
  }
  try {
    (void)make_level_zero_backend(0);
    FAIL() << "level_zero_available() is false, yet make_level_zero_backend(0) succeeded";
  } catch (const backend_error& e) {
    FAIL() << "Level Zero is not available (ZE_ENABLE_ALT_DRIVERS="
           << (std::getenv("ZE_ENABLE_ALT_DRIVERS") != nullptr
                   ? std::getenv("ZE_ENABLE_ALT_DRIVERS")
                   : "<unset>")
           << "): " << e.what();
  }
}

}  // namespace streampool::test
