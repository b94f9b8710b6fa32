// streampool: the allocation history of torch.cuda.memory._record_memory_history, in PyTorch's
// form (TraceEntry), for memory._snapshot()'s device_traces and _memory_viz's timeline.
//
// What is recorded: each allocation (alloc), each free (free_requested and free_completed at once:
// a free is stream-ordered, the pool needs no deferral), each out-of-memory error (oom, with the
// device's free bytes), each snapshot (snapshot). Not recorded: segment events, which are the
// pool's own business (its snapshot and statistics show them). Stack contexts come from PyTorch's
// recorder, gathered outside every lock: for allocations when `when` is ALLOC or ALL, for frees
// when it is ALL (PyTorch's levels).
//
// Invariant: the ring holds at most max_entries entries, the oldest dropped first; everything
// below is guarded by mu_, except on_, which the allocation path reads alone.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace streampool::torch_native {

class history {
 public:
  using entry = c10::CachingDeviceAllocator::TraceEntry;
  using context = std::shared_ptr<c10::GatheredContext>;

  /// True while recording (one relaxed load: the allocation path's test).
  [[nodiscard]] bool on() const noexcept { return on_.load(std::memory_order_relaxed); }

  /// recordHistory's arguments. Turning it off, or `clear`, empties the ring.
  /// @throws c10::Error naming an action in `skip_actions` that PyTorch does not have
  void configure(bool enabled, c10::CachingDeviceAllocator::CreateContextFn recorder,
                 std::size_t max_entries, c10::CachingDeviceAllocator::RecordContext when,
                 bool clear, const std::vector<std::string>& skip_actions);

  /// The context to keep with an entry of `action`: the recorder's, when the level asks for it.
  /// Call it outside every lock (the recorder may take Python's).
  [[nodiscard]] context context_for(entry::Action action) const;

  /// Adds an entry stamped now, unless its action is skipped.
  void record(entry::Action action, c10::DeviceIndex device, std::size_t addr, std::size_t size,
              void* stream, c10::MempoolId_t pool, context ctx);

  /// The entries of each of `devices` devices, oldest first, their times in microseconds since
  /// the Unix epoch (time_.t_, which PyTorch's snapshot reads).
  [[nodiscard]] std::vector<std::vector<entry>> traces(int devices);

 private:
  std::atomic<bool> on_{false};
  mutable std::mutex mu_;
  c10::CachingDeviceAllocator::CreateContextFn recorder_ = nullptr;
  c10::CachingDeviceAllocator::RecordContext when_ =
      c10::CachingDeviceAllocator::RecordContext::NEVER;
  std::size_t max_entries_ = 1;
  std::vector<entry> ring_;  // in order from next_ (the oldest once full)
  std::size_t next_ = 0;
  std::vector<bool> skipped_ = std::vector<bool>(16, false);  // by Action
};

}  // namespace streampool::torch_native
