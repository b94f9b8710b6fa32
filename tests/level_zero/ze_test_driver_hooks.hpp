// Finds the Level Zero test driver's hooks (driver/test_hooks.h) from a test.
//
// The loader loads the driver from ZE_ENABLE_ALT_DRIVERS during zeInit; dlopen of that same path
// with RTLD_NOLOAD then returns the loaded driver without loading a second copy. So: call zeInit
// first, then ze_test_driver_hooks::find().
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "level_zero/driver/test_hooks.h"

namespace streampool::test {

struct ze_test_driver_hooks {
  sp_ze_test_driver_violations_fn violations = nullptr;
  sp_ze_test_driver_reset_violations_fn reset_violations = nullptr;
  sp_ze_test_driver_bytes_held_fn bytes_held = nullptr;
  sp_ze_test_driver_set_capacity_fn set_capacity = nullptr;
  sp_ze_test_driver_set_delay_us_fn set_delay_us = nullptr;
  sp_ze_test_driver_set_abort_on_violation_fn set_abort_on_violation = nullptr;
  sp_ze_test_driver_set_reorder_fn set_reorder = nullptr;

  /// @throws std::runtime_error when the driver is not loaded (no zeInit yet, or the loader was
  ///         not pointed at it).
  static ze_test_driver_hooks find() {
    const char* path = std::getenv("ZE_ENABLE_ALT_DRIVERS");
    if (path == nullptr) {
      throw std::runtime_error("ZE_ENABLE_ALT_DRIVERS is not set: the test driver is not in use");
    }
    void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) {
      throw std::runtime_error(std::string("the test driver is not loaded (call zeInit first): ") +
                               path);
    }
    ze_test_driver_hooks h;
    h.violations = reinterpret_cast<sp_ze_test_driver_violations_fn>(
        dlsym(lib, "sp_ze_test_driver_violations"));
    h.reset_violations = reinterpret_cast<sp_ze_test_driver_reset_violations_fn>(
        dlsym(lib, "sp_ze_test_driver_reset_violations"));
    h.bytes_held = reinterpret_cast<sp_ze_test_driver_bytes_held_fn>(
        dlsym(lib, "sp_ze_test_driver_bytes_held"));
    h.set_capacity = reinterpret_cast<sp_ze_test_driver_set_capacity_fn>(
        dlsym(lib, "sp_ze_test_driver_set_capacity"));
    h.set_delay_us = reinterpret_cast<sp_ze_test_driver_set_delay_us_fn>(
        dlsym(lib, "sp_ze_test_driver_set_delay_us"));
    h.set_abort_on_violation = reinterpret_cast<sp_ze_test_driver_set_abort_on_violation_fn>(
        dlsym(lib, "sp_ze_test_driver_set_abort_on_violation"));
    h.set_reorder = reinterpret_cast<sp_ze_test_driver_set_reorder_fn>(
        dlsym(lib, "sp_ze_test_driver_set_reorder"));
    dlclose(lib);  // drops only the reference taken above; the loader keeps the driver loaded
    if (h.violations == nullptr || h.reset_violations == nullptr || h.bytes_held == nullptr ||
        h.set_capacity == nullptr || h.set_delay_us == nullptr ||
        h.set_abort_on_violation == nullptr || h.set_reorder == nullptr) {
      throw std::runtime_error(std::string("the test driver lacks its hooks: ") + path);
    }
    return h;
  }

  /// The recorded violations' messages, one per line.
  [[nodiscard]] std::string violation_text() const {
    std::string text(violations(nullptr, 0) * 512 + 1, '\0');
    violations(text.data(), text.size());
    text.resize(text.find('\0'));
    return text;
  }
};

}  // namespace streampool::test
