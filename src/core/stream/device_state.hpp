// streampool: a device's shared state (device.hpp is the handle).
#pragma once

#include <memory>
#include <mutex>

#include "streampool/device.hpp"

namespace streampool::detail {

class pool_state;

struct device_state {
  explicit device_state(std::shared_ptr<backend> b);
  const std::shared_ptr<backend> backend_ptr;
  const std::uint64_t id;
  std::mutex mu;  // guards default_pool
  std::shared_ptr<pool_state> default_pool;
};

}  // namespace streampool::detail
