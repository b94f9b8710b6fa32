// The driver's knobs: environment variables read once, overridable by the test hooks
// (test_hooks.h lists them).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace streampool::ze_test_driver {

struct settings {
  std::atomic<bool> abort_on_violation{false};
  std::atomic<unsigned> delay_us{0};
  std::atomic<std::uint64_t> seed{1};
  std::atomic<std::size_t> capacity{0};  ///< 0 = unlimited
  std::atomic<bool> reorder{false};      ///< command_list: run unordered runs in reverse
  /// zeDeviceGetMemoryAccessProperties reports shared system allocation support (default: none)
  std::atomic<bool> shared_system{false};
};

/// The process-wide settings, read from the environment on first use.
[[nodiscard]] settings& config() noexcept;

}  // namespace streampool::ze_test_driver
