// streampool: the environment variables the library reads, in one table.
//
// This is the only place under src/ that reads the environment. Each variable is read where what
// it configures is made (a backend, a pool, a stream cache), not once at load time: programs and
// tests set them after loading the library. Every variable has one parser and one error: a value
// that does not parse raises logic_error naming the variable, the value and what it must be.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace streampool::detail::environment {

/// Every variable, in the order of docs/environment.md's table.
enum class variable {
  memory_limit,               ///< STREAMPOOL_MEMORY_LIMIT: a size or a share of the device
  biased_locks,               ///< STREAMPOOL_BIASED_LOCKS: 0 turns the asymmetric fences off
  cuda_virtual_memory,        ///< STREAMPOOL_CUDA_VIRTUAL_MEMORY: 0 maps no granules
  cuda_vm_granularity,        ///< STREAMPOOL_CUDA_VM_GRANULARITY: the granule, bytes
  cuda_ipc,                   ///< STREAMPOOL_CUDA_IPC: 0 makes granules unexportable
  level_zero_virtual_memory,  ///< STREAMPOOL_LEVEL_ZERO_VIRTUAL_MEMORY: 0 maps no granules
  level_zero_vm_granularity,  ///< STREAMPOOL_LEVEL_ZERO_VM_GRANULARITY: the granule, bytes
  torch_backend,              ///< STREAMPOOL_TORCH_BACKEND: "host" runs the plug-in's pools there
  torch_per_stream,           ///< STREAMPOOL_TORCH_PER_STREAM: 0 shares large blocks
  torch_trace,                ///< STREAMPOOL_TORCH_TRACE: the plug-in's allocation log
};

/// The variable's name, "STREAMPOOL_...".
[[nodiscard]] const char* name(variable v) noexcept;

/// The value; nullopt when the variable is unset or empty.
[[nodiscard]] std::optional<std::string> text(variable v);

/// A switch: 1, true, on, yes or 0, false, off, no (any case); `fallback` when unset or empty.
[[nodiscard]] bool flag(variable v, bool fallback);

/// A size in bytes (decimal, or hex with 0x) that is a power of two of at least `min`; `fallback`
/// when unset or empty.
[[nodiscard]] std::size_t power_of_two_bytes(variable v, std::size_t fallback, std::size_t min);

/// STREAMPOOL_MEMORY_LIMIT on a device of `device_total` bytes (parse_memory_limit's forms); 0
/// when unset or empty.
[[nodiscard]] std::size_t memory_limit(std::size_t device_total);

}  // namespace streampool::detail::environment
