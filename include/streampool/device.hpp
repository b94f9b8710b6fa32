// streampool: devices.
//
// Glossary
//   device        one backend instance plus its default pool. A cheap shared handle: copies refer
//                 to the same device, and the device's state lives until the last handle,
//                 stream, pool, array or token that needs it is gone, so handles may be dropped
//                 in any order.
//   default pool  created on first use with options from the environment
//                 (STREAMPOOL_MEMORY_LIMIT, see pool.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "streampool/backend.hpp"

namespace streampool {

class pool;
namespace detail {
struct device_state;
struct access;
}  // namespace detail

/// A moved-from handle refers to no device: id() == 0 (no device has id
/// 0). Copying, comparing, assigning and destroying it work as for any handle; every operation
/// that needs the device (get_backend, backend_ptr, default_pool, and so making a stream, pool or
/// array on it) throws logic_error "device: used after it was moved from". The device itself is
/// untouched. Self-move-assignment keeps the handle.
class STREAMPOOL_EXPORT device {
 public:
  /// A new device over `b`.
  explicit device(std::shared_ptr<backend> b);

  device(const device&) = default;
  device& operator=(const device&) = default;
  // Written out so that the id goes with the state: a moved-from handle must not keep an id.
  device(device&& other) noexcept
      : state_(std::move(other.state_)), id_(std::exchange(other.id_, 0)) {}
  device& operator=(device&& other) noexcept {
    if (this != &other) {
      state_ = std::move(other.state_);
      id_ = std::exchange(other.id_, 0);
    }
    return *this;
  }
  ~device() = default;

  /// The process-wide host device (the CPU as a device, checking mode off).
  static device host();

  /// @throws logic_error on a moved-from handle (as do backend_ptr and default_pool)
  [[nodiscard]] backend& get_backend() const;
  [[nodiscard]] const std::shared_ptr<backend>& backend_ptr() const;
  /// Unique and never reused; 0 for a moved-from handle.
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// The device's default pool, created on first use.
  [[nodiscard]] pool default_pool() const;

  friend bool operator==(const device& a, const device& b) noexcept { return a.state_ == b.state_; }

 private:
  friend struct detail::access;
  explicit device(std::shared_ptr<detail::device_state> s);

  /// *state_, or logic_error when moved from.
  [[nodiscard]] detail::device_state& checked_state() const;

  std::shared_ptr<detail::device_state> state_;  // null once moved from
  std::uint64_t id_ = 0;  // copy of the state's id, read on every allocation; 0 once moved from
};

}  // namespace streampool
