#include "settings.hpp"

#include <cstdlib>
#include <cstring>

namespace streampool::ze_test_driver {
namespace {

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    return fallback;
  }
  return std::strtoull(text, nullptr, 0);
}

}  // namespace

settings& config() noexcept {
  static settings* const instance = [] {
    auto* s = new settings;  // never destroyed: worker threads may read it during exit
    s->abort_on_violation = env_number("SP_ZE_TEST_DRIVER_ABORT_ON_VIOLATION", 0) != 0;
    s->delay_us = static_cast<unsigned>(env_number("SP_ZE_TEST_DRIVER_DELAY_US", 0));
    s->seed = env_number("SP_ZE_TEST_DRIVER_SEED", 1);
    s->capacity = static_cast<std::size_t>(env_number("SP_ZE_TEST_DRIVER_CAPACITY", 0));
    s->reorder = env_number("SP_ZE_TEST_DRIVER_REORDER", 0) != 0;
    s->shared_system = env_number("SP_ZE_TEST_DRIVER_SHARED_SYSTEM", 0) != 0;
    return s;
  }();
  return *instance;
}

}  // namespace streampool::ze_test_driver
