// streampool: devices.
//
// Glossary
//   device        one backend instance plus its default pool. A cheap shared handle: copies refer
//                 to the same device, and the device's state lives until the last handle, stream,
//                 pool, array or token that needs it is gone, so handles may be dropped in any order.
//   default pool  created on first use with options from the environment
//                 (STREAMPOOL_MEMORY_LIMIT, see pool.hpp).
#pragma once

#include <cstdint>
#include <memory>

#include "streampool/backend.hpp"

namespace streampool {

class pool;
namespace detail {
struct device_state;
}

class STREAMPOOL_EXPORT device {
 public:
  /// A new device over `b`.
  explicit device(std::shared_ptr<backend> b);

  /// The process-wide host device (the CPU as a device, checking mode off).
  static device host();

  [[nodiscard]] backend& get_backend() const noexcept;
  [[nodiscard]] const std::shared_ptr<backend>& backend_ptr() const noexcept;
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// The device's default pool, created on first use.
  [[nodiscard]] pool default_pool() const;

  friend bool operator==(const device& a, const device& b) noexcept { return a.state_ == b.state_; }

  [[nodiscard]] const std::shared_ptr<detail::device_state>& state() const noexcept {
    return state_;
  }
  explicit device(std::shared_ptr<detail::device_state> s);

 private:
  std::shared_ptr<detail::device_state> state_;
  std::uint64_t id_ = 0;  // copy of the state's id, read on every allocation
};

}  // namespace streampool
