// streampool: the host backend, the CPU as a device.
//
// Each queue is a worker thread that runs its commands in order, asynchronously to the caller.
// Markers are shared completion flags; a device-side wait is a command that blocks the waiting
// queue's worker (not the host thread that enqueued it).
//
// Checking mode (on in tests) is a happens-before race detector at 256-byte granularity: every
// command declares what it reads and writes; each queue carries a vector clock, markers carry
// the clock of their queue, device-side waits merge them, host waits publish completion. When a
// command touches memory whose previous user (on another queue) it is not ordered after, the
// detector records a violation: exactly the failure of reusing a block before its stream was
// ordered after the earlier user. Delay injection sleeps a random time before each command so
// that such races actually overlap.
//
// Virtual memory: a range is address space reserved with mmap(PROT_NONE); mapping a granule
// makes it read-write with fresh pages, unmapping drops the pages (a physical handle is only a
// count against total_memory: its contents do not survive an unmap, which the contract allows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "streampool/backend.hpp"

namespace streampool {

struct host_options {
  bool checking = false;                ///< race detector + poisoning of released segments
  unsigned max_delay_us = 0;            ///< random delay before each command, 0 = none
  std::uint64_t seed = 1;               ///< delay injection seed
  std::size_t total_memory = 0;         ///< reported device size (for percentage limits); 0 = RAM
  std::size_t granularity = 64u << 10;  ///< upstream allocation granularity
  bool device_wait = true;              ///< false: behave like a backend without device-side waits
  /// Virtual memory (backend.hpp): ranges reserved with mmap(PROT_NONE), granules mapped and
  /// unmapped in place. false: behave like a backend without it (the pool's segment path).
  bool virtual_memory = true;
  /// Virtual memory's granule (backend_caps::vm_granularity); 0 = granularity.
  std::size_t vm_granularity = 0;
  /// A marker recorded on an idle queue is complete at once (false: the worker completes it, a
  /// moment later, like a GPU; tests that want pending work longer turn this off).
  bool eager_markers = true;
};

/// A new host backend.
[[nodiscard]] STREAMPOOL_EXPORT std::shared_ptr<backend> make_host_backend(host_options o = {});

/// Violations the checking mode has seen on `b` (a host backend), oldest first. Each names the
/// address, the queues and their clocks.
[[nodiscard]] STREAMPOOL_EXPORT std::vector<std::string> host_violations(backend& b);
/// Upstream bytes currently held by the host backend `b`: allocations plus physical granules
/// (for leak checks).
[[nodiscard]] STREAMPOOL_EXPORT std::size_t host_allocated_bytes(backend& b);

}  // namespace streampool
