// streampool: one queue of the Level Zero backend: an immediate command list and what it keeps
// alive until the device has passed it (see level_zero_backend.hpp for batches and locks).
#pragma once

#include <level_zero/ze_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "backend/opencl_c/kernel_plan.hpp"
#include "event_registry.hpp"
#include "streampool/backend.hpp"

namespace streampool::detail::ze {

/// What a native_queue points to.
struct queue {
  /// Waits and memory that a proof event closes (level_zero_backend.hpp, "batch").
  struct batch {
    event_slot* proof = nullptr;
    std::vector<event_slot*> waits;
    std::vector<void*> memory;           // zeMemAlloc* memory, zeMemFree'd
    std::size_t memory_bytes = 0;        // the size of `memory`, in bytes
    std::deque<std::uint64_t> patterns;  // fill patterns (their addresses were appended)
  };

  std::mutex mu;  // guards everything below, and appends to cl
  ze_command_list_handle_t cl = nullptr;
  bool needs_barrier = false;  ///< a command was appended since the last barrier
  batch open;                  ///< what the next proof will cover (open.proof unused)
  std::deque<batch> closed;    ///< oldest first
  /// Kernels by entry and dtype, created on first use: each queue sets arguments on its own
  /// kernel objects, under mu, so concurrent queues never share argument state.
  std::array<std::array<ze_kernel_handle_t, kernel_dtype_count>, kernel_entry_count> kernels{};
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;

  [[nodiscard]] bool open_is_empty() const noexcept {
    return open.waits.empty() && open.memory.empty() && open.patterns.empty();
  }
};

[[nodiscard]] inline queue* as_queue(native_queue q) noexcept { return static_cast<queue*>(q); }
[[nodiscard]] inline event_slot* as_slot(native_marker m) noexcept {
  return static_cast<event_slot*>(m);
}

}  // namespace streampool::detail::ze
