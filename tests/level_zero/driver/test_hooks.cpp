// The exported test hooks (test_hooks.h).
#include "test_hooks.h"

#include <cstring>
#include <string>

#include "memory.hpp"
#include "settings.hpp"
#include "violations.hpp"

using namespace streampool::ze_test_driver;

extern "C" {

__attribute__((visibility("default"))) size_t sp_ze_test_driver_violations(char* buf, size_t len) {
  const auto all = violations();
  if (buf != nullptr && len > 0) {
    std::string text;
    for (const auto& v : all) {
      text += v;
      text += '\n';
    }
    const size_t n = text.size() < len - 1 ? text.size() : len - 1;
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return all.size();
}

__attribute__((visibility("default"))) void sp_ze_test_driver_reset_violations(void) {
  reset_violations();
}

__attribute__((visibility("default"))) size_t sp_ze_test_driver_bytes_held(void) {
  return bytes_held();
}

__attribute__((visibility("default"))) void sp_ze_test_driver_set_capacity(size_t bytes) {
  config().capacity = bytes;
}

__attribute__((visibility("default"))) void sp_ze_test_driver_set_delay_us(unsigned delay_us) {
  config().delay_us = delay_us;
}

__attribute__((visibility("default"))) void sp_ze_test_driver_set_abort_on_violation(
    int abort_on_violation) {
  config().abort_on_violation = abort_on_violation != 0;
}

__attribute__((visibility("default"))) void sp_ze_test_driver_set_reorder(int reorder) {
  config().reorder = reorder != 0;
}

}  // extern "C"
