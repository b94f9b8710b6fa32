// streampool: the Level Zero backend (see include/streampool/level_zero.hpp and backend.hpp).
//
// One class over four files: level_zero_backend.cpp (making it, the kernel module),
// level_zero_memory.cpp (memory and virtual memory), level_zero_queues.cpp (queues, batches and
// markers) and level_zero_commands.cpp (copies, fills and kernels).
//
// Glossary
//   context     one ze_context per backend, on the device's driver; memory, events, command lists
//               and the module belong to it.
//   queue       an immediate command list (queue.hpp) on the first compute queue group.
//   in order    the 1.4 specification does not promise that two commands of a command list run one
//               after the other (only that a barrier runs after everything before it and before
//               everything after it); the in-order command-list flag came with a later
//               specification than the headers we build against. So every command that follows
//               another command is preceded by a barrier (needs_barrier); a marker's barrier and a
//               wait need none of their own. One barrier per command costs little next to a
//               kernel, and it is correct on every driver.
//   batch       the waits and the host/device memory appended to a queue since its previous batch,
//               closed by a proof event signalled by a barrier after them (a marker the caller
//               recorded, or an internal event after a staged upload). When the proof is
//               signalled, the queue has passed those waits and finished with that memory:
//               the waits are handed back to the event registry (its reuse rule, condition 2) and
//               the memory is freed. Batches complete in order, so only the oldest is queried.
//   staging     host memory of the context (zeMemAllocHost) that an upload from pageable memory
//               is copied into before submit returns, or that a download to pageable memory
//               lands in on a device without shared system allocation support (submit then
//               waits for it and copies it to dst); freed with its batch, after the copy.
//   scratch     a queue's device buffer for the kernel plan's partials (reduce, scans); safe to
//               share between the queue's kernels because they run in order. When it grows, the
//               old one is freed with the current batch.
//
// Locks: a queue's mu guards its command list (appends are not thread-safe in Level Zero) and its
// fields; queues_mu_ guards the set of queues; module_mu_ the module. Order: a queue's mu, then
// queues_mu_ (take_event, with the queue's mu held, polls the other queues), then other queues'
// mu, only ever with try_lock; the event registry's own lock is innermost. Deadlock-free because
// a thread never blocks on a queue's mu while holding queues_mu_ or another queue's mu (see
// do_destroy_queue).
#pragma once

#include <level_zero/ze_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backend/common/aligned_bases.hpp"
#include "backend/opencl_c/kernel_plan.hpp"
#include "check.hpp"
#include "device_query.hpp"
#include "driver.hpp"
#include "event_registry.hpp"
#include "queue.hpp"
#include "streampool/backend.hpp"

namespace streampool::detail::ze {

class level_zero_backend final : public backend {
 public:
  /// Takes ownership of `ctx` (destroyed with the backend).
  level_zero_backend(const driver& d, int ordinal, device_location loc, ze_context_handle_t ctx,
                     const device_facts& facts);
  level_zero_backend(const level_zero_backend&) = delete;
  level_zero_backend& operator=(const level_zero_backend&) = delete;
  ~level_zero_backend() override;

 private:
  void report_teardown(ze_result_t r, const char* what) const noexcept {
    report_teardown_error(d_, r, what);
  }

  // ---- memory (level_zero_memory.cpp) --------------------------------------------------------

  void* do_allocate(std::size_t bytes) override;
  void do_deallocate(void* p, std::size_t bytes) noexcept override;
  void* do_reserve(std::size_t bytes) override;
  void do_unreserve(void* p, std::size_t bytes) noexcept override;
  native_physical do_create_physical() override;
  void do_release_physical(native_physical h) noexcept override;
  bool do_map(void* p, std::span<const native_physical> handles) override;
  void do_unmap(void* p, std::size_t bytes) noexcept override;

  /// The start address zeVirtualMemReserve is asked for: just past the previous range, rounded up
  /// to the granule (ranges then tend to come aligned and next to each other), else a high,
  /// granule-aligned address. Only a hint: the driver picks another address when it is taken. Not
  /// nullptr, although the 1.4 text allows it: the 1.4 validation layer refuses a null pStart.
  [[nodiscard]] const void* reserve_hint() const noexcept;
  void note_reserved(void* p, std::size_t bytes) noexcept;

  // ---- queues, batches and markers (level_zero_queues.cpp) -----------------------------------

  native_queue do_create_queue() override;
  void do_destroy_queue(native_queue nq) noexcept override;
  native_marker do_record(native_queue nq) override;
  bool do_query(native_marker m) override;
  void do_wait_host(native_marker m) override;
  void do_wait_device(native_queue nq, native_marker m) override;
  void do_release_marker(native_marker m) noexcept override;

  /// Hands a completed batch's waits and proof back to the registry and frees its memory.
  void finish(queue::batch& b) noexcept;
  /// Finishes q's batches whose proof has been signalled, oldest first. Caller holds q->mu.
  void collect(queue* q) noexcept;
  /// An event for `self` (whose mu the caller holds): a reusable one, else one freed by polling
  /// every queue's batches (other queues only if their lock is free), else a new one.
  event_slot* take_event(queue* self);
  /// Appends a barrier between commands where one is due. Caller holds q->mu.
  void order_next_command(queue* q);
  /// Appends a barrier that signals a new event after everything in q, closing q's open batch
  /// with it when the batch holds anything. `internal`: the event is only the batch's proof (it
  /// counts as released at once). Caller holds q->mu.
  event_slot* signal_locked(queue* q, bool internal);
  /// Appends a barrier that signals `s` (taken with take_event before anything was appended)
  /// after everything in q, closing q's open batch with it when the batch holds anything. Never
  /// throws, so that a submit whose command is already appended does not fail: on an error, `s`
  /// is released and the open batch stays open (its waits and memory go with the next proof, or
  /// with the queue), and the error is returned. `internal`: as for signal_locked. Caller holds
  /// q->mu.
  ze_result_t close_batch(queue* q, event_slot* s, bool internal) noexcept;
  /// Closes q's open batch with an internal proof after a command that was already appended:
  /// never throws. On failure the batch stays open, to be closed by a later proof.
  void close_batch_after_append(queue* q, event_slot* s) noexcept;
  /// Closes q's open batch with an internal proof once it holds max_open_batch entries or
  /// max_open_batch_bytes of memory (level_zero_queues.cpp): a queue that nobody records markers on
  /// (the pool records them lazily) must still hand back the events it waited on, the fill patterns
  /// and the old scratch buffers it keeps. Called after a command was appended, so it never throws:
  /// when no event can be had, the batch stays open and the next command tries again. Caller holds
  /// q->mu.
  void bound_open_batch(queue* q) noexcept;

  // ---- commands (level_zero_commands.cpp) ----------------------------------------------------

  void do_submit(native_queue nq, const command& c) override;
  /// Host memory of the context holding a copy of [src, src + bytes), owned by q's open batch.
  void* stage(queue* q, const void* src, std::size_t bytes);
  void append_copy(queue* q, void* dst, const void* src, std::size_t bytes);
  void submit_copy(queue* q, const copy_command& c);
  /// A download to pageable memory on a device without shared system allocation support: the
  /// device may not write pageable memory, so it copies into staging (zeMemAllocHost), and the
  /// bytes reach dst on the host. Level Zero has no host callback in a command list, so this
  /// waits on the host until the copy has run (it drains the queue) and then copies: such a
  /// download blocks submit. The contract ("the caller waits before reading dst") would allow
  /// deferring the host copy to that wait; this is the simplest correct form.
  void submit_download_staged(queue* q, const copy_command& c);
  void submit_fill(queue* q, const fill_command& f);
  /// `k` passed backend::submit's checks: a combination kernel.hpp defines, with its operands.
  void submit_kernel(queue* q, const kernel_command& k);
  /// Replaces q's scratch with one of at least `need` bytes; the old one is freed with the open
  /// batch (kernels appended before may still use it). It grows to at least twice its size, as
  /// the OpenCL backend's does, so that a queue whose kernels grow step by step replaces it
  /// O(log n) times, and the old buffers the open batch keeps add up to less than the current one.
  void grow_scratch(queue* q, std::size_t need);
  void append_launch(queue* q, ze_module_handle_t module, const kernel_launch& l,
                     const kernel_command& k);

  // ---- the kernel module (level_zero_backend.cpp) --------------------------------------------

  /// The module for kernels of `t`, built on first use. Devices with fp64 get the module with the
  /// f64 kernels; the others get the one without (an f64 kernel there is an error).
  ze_module_handle_t get_module(dtype t);

  const driver& d_;
  const driver_errors errors_;  // check()'s words for this device's driver
  const int ordinal_;
  const ze_driver_handle_t drv_;
  const ze_device_handle_t dev_;
  const ze_context_handle_t ctx_;
  const device_facts facts_;

  std::unique_ptr<event_registry> events_;  // reset before the context is destroyed

  std::mutex queues_mu_;        // guards queues_
  std::vector<queue*> queues_;  // live queues, for take_event's polling

  std::mutex module_mu_;                 // guards module_
  ze_module_handle_t module_ = nullptr;  // built on the first kernel

  std::atomic<std::uintptr_t> next_reserve_{0};  // reserve_hint(): the end of the last range
  aligned_bases unaligned_;  // over-reserved ranges: aligned -> zeVirtualMemReserve's base
};

}  // namespace streampool::detail::ze
