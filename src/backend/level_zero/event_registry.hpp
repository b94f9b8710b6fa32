// streampool: the Level Zero backend's events, and when one may be reused.
//
// Glossary
//   slot      one event of an event pool owned by the registry (host-visible pools, signal and
//             wait scope host), with the counts below. A marker (native_marker) is a slot*; a slot
//             lives as long as the registry, so a marker stays valid after its queue is destroyed.
//   waiter    a command list that appended a wait on the slot's event (zeCommandListAppendWait-
//             OnEvents) and is not yet known to have passed it.
//   proof     an event signalled on a command list by a barrier appended *after* some waits: once
//             it is signalled, the list has passed every wait appended before it. The backend
//             groups each list's waits under the proof that follows them (a batch, see
//             queue.hpp); a batch holds a reference on its proof's slot.
//   idle      reset (zeEventHostReset) and ready to be signalled again.
//   draining  released by everyone, but its signal may still be ahead in a command list: it is
//             reset only once zeEventQueryStatus says it was signalled.
//
// The reuse rule (why it matters: docs/backends.md, "Markers and the event-reuse rule"; the test
// driver's detector checks it):
//
//   A slot is reset and handed out again only when
//     (1) its marker was released (release_marker, or the end of an internal use), and
//     (2) waiters == 0: every command list that waited on it has passed that wait, shown by the
//         completion of a proof recorded after the wait on that list, or by the list's
//         destruction (destroy_queue requires all of its work to be complete), and
//     (3) refs == 0: no batch still needs it as its proof, and
//     (4) its own signal has happened (queried), so that no barrier still in flight signals the
//         reset event early.
//
// Resetting an event while a wait on it is still pending would let that wait see the *next* use
// of the event: a list could run ahead of work it must follow, or block on a signal that belongs
// to someone else. (1)-(4) make the reset happen strictly after every use of the previous one.
//
// Thread safety: every member takes mu_; the counts of a slot are guarded by it. The registry
// never calls back into queues, so it may be called with a queue's lock held (lock order: queue,
// then registry).
#pragma once

#include <level_zero/ze_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "check.hpp"
#include "driver.hpp"

namespace streampool::detail::ze {

struct event_slot {
  ze_event_handle_t event = nullptr;
  // Guarded by event_registry::mu_.
  bool released = false;      ///< (1) of the reuse rule
  std::uint32_t waiters = 0;  ///< (2)
  std::uint32_t refs = 0;     ///< (3)
};

class event_registry {
 public:
  event_registry(const driver& d, ze_context_handle_t ctx, ze_driver_handle_t drv);
  event_registry(const event_registry&) = delete;
  event_registry& operator=(const event_registry&) = delete;
  /// Destroys every event and pool. Every command list is gone by then.
  ~event_registry();

  /// An idle slot (reset, not signalled), reusing one when the rule allows, else a new event
  /// (growing the pools). Its counts start at zero and released false.
  /// @throws backend_error when an event or a pool cannot be created.
  [[nodiscard]] event_slot* acquire();
  /// Like acquire(), but nullptr instead of creating an event when none may be reused yet.
  [[nodiscard]] event_slot* try_reuse();

  /// (1): the owner will not use s again.
  void release(event_slot* s) noexcept;
  /// (2): a command list appended a wait on s / has passed it.
  void add_waiter(event_slot* s) noexcept;
  void remove_waiter(event_slot* s) noexcept;
  /// (3): a batch uses s as its proof / no longer does.
  void add_ref(event_slot* s) noexcept;
  void remove_ref(event_slot* s) noexcept;

 private:
  /// Moves s to draining_ when (1)-(3) hold. Caller holds mu_.
  void maybe_retire(event_slot* s) noexcept;
  /// Resets draining slots whose signal has happened and moves them to idle_. Caller holds mu_.
  void reset_drained() noexcept;
  event_slot* create();  // caller holds mu_

  const driver& d_;
  const ze_context_handle_t ctx_;
  const driver_errors errors_;  // for check(): names drv's results

  std::mutex mu_;  // guards everything below and every slot's counts
  std::vector<ze_event_pool_handle_t> pools_;
  std::uint32_t pool_capacity_ = 0;                 ///< events in pools_.back()
  std::uint32_t pool_used_ = 0;                     ///< of them created so far
  std::vector<std::unique_ptr<event_slot>> slots_;  ///< every slot, for destruction
  std::vector<event_slot*> idle_;
  std::vector<event_slot*> draining_;
};

}  // namespace streampool::detail::ze
